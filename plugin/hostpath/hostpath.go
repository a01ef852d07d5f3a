// Package hostpath confines every operation on a host folder to beneath it.
//
// The plugin runs as root with the host's "/" in view, and everything a
// container writes (names, symlink targets) is hostile. So no host path is
// ever resolved by the kernel from a string: a Root holds an O_PATH fd of the
// source directory, and every operation resolves its relative path with
// openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS) to the
// parent directory, then acts on the final name with an *at syscall that does
// not follow symlinks. A symlink is only ever created, read or removed as a
// link, never followed. ".." and absolute paths are refused before any syscall.
//
// Relative paths ("rel") are slash-separated and relative to the Root; "" and
// "." name the Root itself. Errors are *os.PathError / *os.LinkError wrapping
// the errno, with Op naming the operation and Path the full host path, so that
// callers can both log them and hand the errno to the kernel.
package hostpath

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// ErrEscape is wrapped by errors for paths that would leave the Root
// ("..", absolute paths, NUL bytes, or a symlink on the way).
var ErrEscape = errors.New("path escapes the source")

// Root is an open host directory beneath which all operations are confined.
// It is safe for concurrent use.
type Root struct {
	dir string // host path of the directory, for messages
	fd  int    // O_PATH|O_DIRECTORY fd of the directory
}

// Entry is one directory entry with its lstat.
type Entry struct {
	Name string
	Stat unix.Stat_t
}

// Open opens dir (an absolute host path) as a Root. dir itself must be a real
// directory: a symlink as the last component is refused. (Symlinks in
// dir's ancestors are the caller's business: see Policy.)
func Open(dir string) (*Root, error) { return nil, errors.New("unimplemented") }

// Path is the host path the Root was opened with.
func (r *Root) Path() string { return r.dir }

// Fd is the O_PATH descriptor of the directory (valid until Close).
func (r *Root) Fd() int { return r.fd }

// Close releases the directory fd.
func (r *Root) Close() error { return nil }

// Clean validates rel and returns it in canonical form ("" for the root).
// It refuses absolute paths, ".." components and NUL bytes with ErrEscape.
func Clean(rel string) (string, error) { return "", errors.New("unimplemented") }

// Lstat returns the attributes of rel without following a final symlink.
func (r *Root) Lstat(rel string) (unix.Stat_t, error) {
	return unix.Stat_t{}, errors.New("unimplemented")
}

// OpenFile opens a regular file or directory beneath the root. O_NOFOLLOW and
// O_CLOEXEC are always added; a symlink anywhere on the way fails with ELOOP.
func (r *Root) OpenFile(rel string, flags int, mode uint32) (*os.File, error) {
	return nil, errors.New("unimplemented")
}

// ReadDir lists rel with an lstat of each entry, sorted by name.
func (r *Root) ReadDir(rel string) ([]Entry, error) { return nil, errors.New("unimplemented") }

// Mkdir creates directory rel.
func (r *Root) Mkdir(rel string, mode uint32) error { return errors.New("unimplemented") }

// Mknod creates a FIFO, socket or device node at rel (rule D8: such nodes
// always live on the host).
func (r *Root) Mknod(rel string, mode uint32, dev uint64) error { return errors.New("unimplemented") }

// Symlink creates a symlink at rel whose content is target, stored verbatim.
func (r *Root) Symlink(target, rel string) error { return errors.New("unimplemented") }

// Readlink returns the content of the symlink at rel.
func (r *Root) Readlink(rel string) (string, error) { return "", errors.New("unimplemented") }

// Link creates a hard link newRel to the existing oldRel (never following).
func (r *Root) Link(oldRel, newRel string) error { return errors.New("unimplemented") }

// Rename renames oldRel to newRel with renameat2 flags (0, RENAME_NOREPLACE,
// RENAME_EXCHANGE).
func (r *Root) Rename(oldRel, newRel string, flags uint) error { return errors.New("unimplemented") }

// Remove unlinks a non-directory or removes an empty directory at rel.
func (r *Root) Remove(rel string) error { return errors.New("unimplemented") }

// RemoveAll removes rel and everything below it without following symlinks.
// It refuses to remove the Root itself. A missing rel is not an error.
func (r *Root) RemoveAll(rel string) error { return errors.New("unimplemented") }

// Chmod sets the permission bits of rel (not following a final symlink).
func (r *Root) Chmod(rel string, mode uint32) error { return errors.New("unimplemented") }

// Lchown sets the owner of rel (not following a final symlink). -1 keeps a value.
func (r *Root) Lchown(rel string, uid, gid int) error { return errors.New("unimplemented") }

// Utimes sets access and modification times of rel (not following a final
// symlink). A nil time is left unchanged (UTIME_OMIT).
func (r *Root) Utimes(rel string, atime, mtime *unix.Timespec) error {
	return errors.New("unimplemented")
}

// Truncate sets the size of the regular file rel.
func (r *Root) Truncate(rel string, size int64) error { return errors.New("unimplemented") }

// Getxattr, Setxattr, Listxattr and Removexattr act on rel itself, never on
// a symlink's target.
func (r *Root) Getxattr(rel, name string, dest []byte) (int, error) {
	return 0, errors.New("unimplemented")
}
func (r *Root) Setxattr(rel, name string, data []byte, flags int) error {
	return errors.New("unimplemented")
}
func (r *Root) Listxattr(rel string, dest []byte) (int, error) { return 0, errors.New("unimplemented") }
func (r *Root) Removexattr(rel, name string) error             { return errors.New("unimplemented") }
