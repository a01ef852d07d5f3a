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
//
// These calls run on every FUSE operation of a store, so the common case is
// kept cheap: a single-component rel is acted on directly from the Root's fd
// (one syscall, no openat2), a store's Root keeps the parent directories it
// used last open (KeepParents, parents.go), a rel that is already canonical
// is not copied, and error paths are only built when there is an error.
package hostpath

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/internal/sidebyside"
)

// ErrEscape is wrapped by errors for paths that would leave the Root
// ("..", absolute paths, NUL bytes, or a symlink on the way).
var ErrEscape = errors.New("path escapes the source")

// resolveBeneath is how every intermediate directory is reached: never above
// the starting fd, never through a symlink (nor a /proc magic link).
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// Root is an open host directory beneath which all operations are confined.
// It is safe for concurrent use, Close included: an operation that began
// before Close finishes on the directory, and one that begins after it
// fails with ErrClosed.
type Root struct {
	dir     string          // host path of the directory, for messages
	fd      int             // O_PATH|O_DIRECTORY fd of the directory; closed once Close was called and no operation uses it
	parents *parents        // directories kept open between operations (nil: none; see KeepParents)
	pace    sidebyside.Pace // how its lstats go: one after the other or side by side (Stats)

	// kind is what file system the directory is on (ServedByProcess),
	// found at the first question: only attribute changes on a source
	// and the store's choice of writers ask.
	kind struct {
		once      sync.Once
		byProcess bool
		why       string
	}

	// uses is twice the number of operations using fd, plus closedBit once
	// Close was called. The fd is closed by whichever of Close and the
	// last such operation comes last, never while one uses it: a FUSE
	// request still served when its volume goes away must not reach a
	// descriptor the kernel has since given to another directory (another
	// volume's source), beneath which it would then act.
	uses      atomic.Int64
	closeOnce sync.Once
}

// closedBit is set in Root.uses by Close.
const closedBit = 1

// ErrClosed is wrapped by the errors of operations on a Root after Close.
var ErrClosed = errors.New("source closed")

// Entry is one directory entry with its lstat.
type Entry struct {
	Name string
	Stat unix.Stat_t
}

// Open opens dir (an absolute host path) as a Root. dir itself must be a real
// directory: a symlink as the last component is refused. (Symlinks in
// dir's ancestors are the caller's business: see Policy.)
func Open(dir string) (*Root, error) {
	if !filepath.IsAbs(dir) {
		return nil, &os.PathError{Op: "open root", Path: dir, Err: errors.New("not an absolute path")}
	}
	// O_PATH|O_NOFOLLOW on a symlink yields the link itself, which
	// O_DIRECTORY then refuses with ENOTDIR.
	fd, err := openat(unix.AT_FDCWD, dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open root", Path: dir, Err: err}
	}
	return &Root{dir: filepath.Clean(dir), fd: fd}, nil
}

// ServedByProcess is servedByProcess of the Root's directory, found once.
// Where it is, Lchown and Utimes go through a descriptor of the entry and
// refuse a symlink (ErrSymlinkAttrs): such a server sets attributes by
// path, following a final symlink (sshfs).
func (r *Root) ServedByProcess() (bool, string) {
	r.kind.once.Do(func() { r.kind.byProcess, r.kind.why = servedByProcess(r.fd) })
	return r.kind.byProcess, r.kind.why
}

// Path is the host path the Root was opened with.
func (r *Root) Path() string { return r.dir }

// Fd is the O_PATH descriptor of the directory, for a caller that uses it
// before Close (a bind mount of the source); -1 once Close was called, so
// that a stale Root is never mistaken for an open one.
func (r *Root) Fd() int {
	if r.uses.Load()&closedBit != 0 {
		return -1
	}
	return r.fd
}

// Close releases the directory fd, at once or when the last operation using
// it ends (see uses). Later calls return nil.
func (r *Root) Close() error {
	if old := r.uses.Or(closedBit); old == 0 {
		r.closeFd()
	}
	return nil
}

// acquire counts an operation as using fd, or reports ErrClosed.
func (r *Root) acquire() error {
	if r.uses.Add(2)&closedBit != 0 {
		r.unuse()
		// ENOTCONN, as the kernel answers for a FUSE mount whose server
		// has gone.
		return &errnoError{errno: unix.ENOTCONN, msg: ErrClosed.Error(), closed: true}
	}
	if testHookAcquired != nil {
		testHookAcquired()
	}
	return nil
}

// testHookAcquired, if set (by tests), runs when an operation has begun to
// use the Root's fd.
var testHookAcquired func()

// unuse ends an operation's use of fd (acquire).
func (r *Root) unuse() {
	if r.uses.Add(-2) == closedBit {
		r.closeFd()
	}
}

// closeFd closes the directory and the kept parents, once: Close and a last
// unuse may both get here.
func (r *Root) closeFd() {
	r.closeOnce.Do(func() {
		if r.parents != nil {
			r.parents.closeAll()
		}
		unix.Close(r.fd)
	})
}

// Clean validates rel and returns it in canonical form ("" for the root).
// It refuses absolute paths, ".." components and NUL bytes with ErrEscape.
func Clean(rel string) (string, error) {
	c, ok := cleanRel(rel)
	if !ok {
		return "", &os.PathError{Op: "clean", Path: rel, Err: ErrEscape}
	}
	return c, nil
}

// cleanRel is Clean without the error value. A rel that is already canonical
// (the common case: FUSE hands us clean names) is returned as is, unallocated.
func cleanRel(rel string) (string, bool) {
	if canonical(rel) {
		return rel, true
	}
	if rel[0] == '/' || strings.IndexByte(rel, 0) >= 0 {
		return "", false
	}
	var b strings.Builder
	b.Grow(len(rel))
	for part := range strings.SplitSeq(rel, "/") {
		switch part {
		case "", ".":
			continue
		case "..":
			return "", false
		}
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.WriteString(part)
	}
	return b.String(), true
}

// canonical reports whether rel is "" or a/b/c with every component
// non-empty and none of them ".", ".." or holding a NUL.
func canonical(rel string) bool {
	if rel == "" {
		return true
	}
	start := 0
	for i := 0; i <= len(rel); i++ {
		if i < len(rel) {
			switch rel[i] {
			case 0:
				return false
			case '/':
			default:
				continue
			}
		}
		switch rel[start:i] {
		case "", ".", "..":
			return false
		}
		start = i + 1
	}
	return true
}

// join is the host path of rel, for messages only.
func (r *Root) join(rel string) string {
	switch {
	case rel == "":
		return r.dir
	case r.dir == "/":
		return "/" + rel
	}
	return r.dir + "/" + rel
}

// pathErr wraps a failed operation on rel; nil stays nil.
func (r *Root) pathErr(op, rel string, err error) error {
	if err == nil {
		return nil
	}
	return &os.PathError{Op: op, Path: r.join(rel), Err: err}
}

// linkErr wraps a failed two-path operation; nil stays nil.
func (r *Root) linkErr(op, oldRel, newRel string, err error) error {
	if err == nil {
		return nil
	}
	return &os.LinkError{Op: op, Old: r.join(oldRel), New: r.join(newRel), Err: err}
}

// errnoError is an errno with an explanation. It matches both the errno (so
// callers hand the errno to the kernel) and, when escape is set, ErrEscape.
type errnoError struct {
	errno  unix.Errno
	msg    string
	escape bool // wraps ErrEscape too
	closed bool // wraps ErrClosed too
}

func (e *errnoError) Error() string { return e.msg + ": " + e.errno.Error() }

func (e *errnoError) Unwrap() []error {
	switch {
	case e.escape:
		return []error{e.errno, ErrEscape}
	case e.closed:
		return []error{e.errno, ErrClosed}
	}
	return []error{e.errno}
}

// parent returns a directory fd holding rel's final component and that
// component's name. A single-component rel (and "" for the Root itself,
// named ".") is acted on directly from the Root's fd with no syscall; deeper
// rels open their parent with openat2 beneath the Root, or take it from the
// directories kept open (KeepParents). The caller must release the fd,
// which also ends the operation's use of the Root (acquire). rel must be
// clean.
func (r *Root) parent(rel string) (int, string, error) {
	if err := r.acquire(); err != nil {
		return -1, "", err
	}
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		if rel == "" {
			return r.fd, ".", nil
		}
		return r.fd, rel, nil
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveBeneath}
	var fd int
	var err error
	if r.parents != nil {
		fd, err = r.parents.get(r.fd, rel[:i], &how)
	} else {
		fd, err = openat2(r.fd, rel[:i], &how)
	}
	if err != nil {
		r.unuse()
		switch err {
		case unix.ELOOP, unix.EXDEV:
			// Not "too many links": openat2 met a symlink (or, for EXDEV,
			// a way out) in a directory on the way.
			return -1, "", &errnoError{errno: err.(unix.Errno), msg: "a symlink on the way: " + ErrEscape.Error(), escape: true}
		}
		return -1, "", err
	}
	return fd, rel[i+1:], nil
}

// release closes a parent fd from parent unless it is the Root's own or
// one kept open, and ends the operation's use of the Root.
func (r *Root) release(fd int) {
	defer r.unuse()
	if fd == r.fd {
		return
	}
	if r.parents != nil && r.parents.put(fd) {
		return
	}
	unix.Close(fd)
}

// forget tells the kept directories that rels (clean) were renamed or
// removed, with everything below them.
func (r *Root) forget(rels ...string) {
	if r.parents != nil {
		r.parents.forget(rels...)
	}
}

// removeIn removes name in directory dfd like os.Remove (removeAt), and
// forgets rel, its path, if that was a directory.
func (r *Root) removeIn(dfd int, name, rel string) error {
	wasDir, err := removeAt(dfd, name)
	if wasDir {
		r.forget(rel)
	}
	return err
}

// openat retries EINTR, which slow shares (NFS, sshfs) may return.
func openat(dirfd int, name string, flags int, mode uint32) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags, mode)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// openat2 retries EINTR, and EAGAIN, which RESOLVE_BENEATH returns when a
// concurrent rename makes it unsure (a bounded number of times).
func openat2(dirfd int, name string, how *unix.OpenHow) (int, error) {
	for try := 0; ; try++ {
		fd, err := unix.Openat2(dirfd, name, how)
		if err == unix.EINTR || (err == unix.EAGAIN && try < 64) {
			continue
		}
		return fd, err
	}
}

// Lstat returns the attributes of rel without following a final symlink.
func (r *Root) Lstat(rel string) (unix.Stat_t, error) {
	var st unix.Stat_t
	c, ok := cleanRel(rel)
	if !ok {
		return st, r.pathErr("lstat", rel, ErrEscape)
	}
	dfd, name, err := r.parent(c)
	if err != nil {
		return st, r.pathErr("lstat", c, err)
	}
	err = unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	r.release(dfd)
	return st, r.pathErr("lstat", c, err)
}

// LstatFresh is Lstat past the caches between the plugin and the share's
// server, for when a cached answer would be taken for a host edit. A share
// may answer a lookup from attributes it keeps for a while: the kernel's
// (FUSE, NFS), and sshfs's own, kept per path, so that a write through one
// name of a linked file leaves the other names' sizes stale for up to 20 s.
// statx with AT_STATX_FORCE_SYNC makes the kernel ask the file system; for
// a regular file, an open first makes sshfs ask its server (its open looks
// the path up and caches the answer) and NFS revalidate (close-to-open).
// Nothing but a regular file is opened: a FIFO or device node could block
// or act on an open. It costs round trips: call it only to confirm a
// mismatch.
func (r *Root) LstatFresh(rel string) (unix.Stat_t, error) {
	c, ok := cleanRel(rel)
	if !ok {
		return unix.Stat_t{}, r.pathErr("lstat", rel, ErrEscape)
	}
	dfd, name, err := r.parent(c)
	if err != nil {
		return unix.Stat_t{}, r.pathErr("lstat", c, err)
	}
	defer r.release(dfd)
	// The forced looks refresh the kernel's copy of the attributes, which
	// the plain looks after them read (as Stat_t, whatever the platform's).
	var stx unix.Statx_t
	var st unix.Stat_t
	if err := unix.Statx(dfd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_FORCE_SYNC, unix.STATX_BASIC_STATS, &stx); err != nil {
		return st, r.pathErr("lstat", c, err)
	}
	if stx.Mode&unix.S_IFMT == unix.S_IFREG {
		fd, err := openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err == nil {
			defer unix.Close(fd)
			err = unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_FORCE_SYNC, unix.STATX_BASIC_STATS, &stx)
			if err == nil {
				err = unix.Fstat(fd, &st)
			}
			return st, r.pathErr("lstat", c, err)
		}
		// Unreadable on the share, or swapped since: the forced look is
		// the freshest there is.
	}
	err = unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, r.pathErr("lstat", c, err)
}

// OpenFile opens a regular file or directory beneath the root. O_NOFOLLOW and
// O_CLOEXEC are always added; a symlink anywhere on the way fails with ELOOP.
//
// Anything else (FIFO, socket, device node: a container can make one on the
// host, or swap one in between a caller's Lstat and this open) is refused
// with ENXIO rather than handed to a root process to read: the entry is
// opened with O_NONBLOCK (so a FIFO cannot block us) and O_NOCTTY, checked
// with fstat, and O_NONBLOCK is cleared again unless the caller asked for it.
// O_PATH opens and O_CREAT|O_EXCL (which can only make a regular file) skip
// the check.
func (r *Root) OpenFile(rel string, flags int, mode uint32) (*os.File, error) {
	c, ok := cleanRel(rel)
	if !ok {
		return nil, r.pathErr("open", rel, ErrEscape)
	}
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NOCTTY
	check := flags&unix.O_PATH == 0 && flags&(unix.O_CREAT|unix.O_EXCL) != unix.O_CREAT|unix.O_EXCL
	oflags := flags
	if check {
		oflags |= unix.O_NONBLOCK
	}
	fd, err := r.openBeneath(c, oflags, mode)
	if err != nil {
		return nil, r.pathErr("open", c, err)
	}
	if check {
		if err := checkOpened(fd, flags); err != nil {
			unix.Close(fd)
			return nil, r.pathErr("open", c, err)
		}
	}
	return os.NewFile(uintptr(fd), r.join(c)), nil
}

// checkOpened refuses what is neither a regular file nor a directory and
// restores the caller's O_NONBLOCK choice.
func checkOpened(fd, flags int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFREG && t != unix.S_IFDIR {
		return &errnoError{errno: unix.ENXIO, msg: "not a regular file or directory"}
	}
	if flags&unix.O_NONBLOCK == 0 {
		// F_SETFL only looks at O_APPEND, O_ASYNC, O_DIRECT, O_NOATIME and
		// O_NONBLOCK; the first ones are as open set them. O_ASYNC is masked
		// because open ignores it and F_SETFL would not.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags&^(unix.O_NONBLOCK|unix.O_ASYNC)); err != nil {
			return err
		}
	}
	return nil
}

// direntBufs holds getdents buffers, so a listing allocates only its result.
var direntBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// openDir opens directory rel (clean) for reading, never through a symlink.
func (r *Root) openDir(rel string) (int, error) {
	dfd, name, err := r.parent(rel)
	if err != nil {
		return -1, err
	}
	fd, err := openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	r.release(dfd)
	return fd, err
}

// readNames lists the names in the open directory fd (without "." and "..").
func readNames(fd int) ([]string, error) {
	entries, err := readDirents(fd)
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name
	}
	return names, err
}

// readDirents lists the entries of the open directory fd (without "." and
// ".."), as getdents gives them.
func readDirents(fd int) ([]DirEntry, error) {
	bp := direntBufs.Get().(*[]byte)
	defer direntBufs.Put(bp)
	buf := *bp
	var entries []DirEntry
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return entries, err
		}
		if n <= 0 {
			return entries, nil
		}
		entries = appendDirents(entries, buf[:n])
	}
}

// listing opens directory rel and reads its entries (readDirents). The
// caller closes fd; c is rel cleaned, for its errors.
func (r *Root) listing(rel string) (c string, fd int, entries []DirEntry, err error) {
	c, ok := cleanRel(rel)
	if !ok {
		return "", -1, nil, r.pathErr("readdir", rel, ErrEscape)
	}
	if fd, err = r.openDir(c); err != nil {
		return "", -1, nil, r.pathErr("readdir", c, err)
	}
	if entries, err = readDirents(fd); err != nil {
		unix.Close(fd)
		return "", -1, nil, r.pathErr("readdir", c, err)
	}
	return c, fd, entries, nil
}

// ReadDir lists rel with an lstat of each entry, sorted by name. An entry
// that disappears between the listing and its lstat is left out.
func (r *Root) ReadDir(rel string) ([]Entry, error) {
	c, fd, names, err := r.listing(rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	byName := make([]string, len(names))
	for i, n := range names {
		byName[i] = n.Name
	}
	sts, errs := r.lstatEach(fd, byName)
	entries := make([]Entry, 0, len(names))
	for i, name := range byName {
		switch err := errs[i]; {
		case err == unix.ENOENT:
		case err != nil:
			return nil, r.pathErr("lstat", joinRel(c, name), err)
		default:
			entries = append(entries, Entry{Name: name, Stat: sts[i]})
		}
	}
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return entries, nil
}

// DirEntry is one directory entry as getdents gives it: no lstat.
type DirEntry struct {
	Name string
	Ino  uint64
	Type uint32 // the S_IFMT bits of the entry's mode
}

// ReadDirTypes lists rel with each entry's inode number and type, sorted by
// name: what a listing shows, without ReadDir's lstat of every entry (one
// syscall per entry, which a listing of a tree the container then looks up
// entry by entry paid twice). An entry whose file system gives no type
// (DT_UNKNOWN) is lstat'ed; one that disappears in between is left out.
func (r *Root) ReadDirTypes(rel string) ([]DirEntry, error) {
	c, fd, entries, err := r.listing(rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	entries, failed, err := r.statUntyped(fd, entries)
	if err != nil {
		return nil, r.pathErr("lstat", joinRel(c, failed), err)
	}
	slices.SortFunc(entries, func(a, b DirEntry) int { return strings.Compare(a.Name, b.Name) })
	return entries, nil
}

// statUntyped gives the entries of the open directory fd that getdents left
// without a type (DT_UNKNOWN: some file systems never give one) their type
// and inode number from an lstat, and leaves out those gone since. On an
// error it returns the name of the entry that failed.
func (r *Root) statUntyped(fd int, entries []DirEntry) ([]DirEntry, string, error) {
	var untyped []int // indices in entries
	var names []string
	for i, e := range entries {
		if e.Type == 0 {
			untyped, names = append(untyped, i), append(names, e.Name)
		}
	}
	if len(untyped) == 0 {
		return entries, "", nil
	}
	sts, errs := r.lstatEach(fd, names)
	gone := make(map[int]bool)
	for k, i := range untyped {
		switch err := errs[k]; {
		case err == unix.ENOENT:
			gone[i] = true
		case err != nil:
			return nil, names[k], err
		default:
			entries[i].Ino, entries[i].Type = sts[k].Ino, sts[k].Mode&unix.S_IFMT
		}
	}
	if len(gone) > 0 {
		kept := entries[:0]
		for i, e := range entries {
			if !gone[i] {
				kept = append(kept, e)
			}
		}
		entries = kept
	}
	return entries, "", nil
}

// appendDirents appends the entries of the linux_dirent64 records in buf,
// without "." and "..". A record's type is left 0 where getdents gave
// DT_UNKNOWN.
func appendDirents(entries []DirEntry, buf []byte) []DirEntry {
	// struct linux_dirent64 { u64 d_ino; s64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
	const nameOff = 19
	for len(buf) >= nameOff {
		reclen := int(binary.NativeEndian.Uint16(buf[16:18]))
		if reclen < nameOff || reclen > len(buf) {
			break // a short or corrupt record: the kernel never writes one
		}
		rec := buf[:reclen]
		buf = buf[reclen:]
		name := rec[nameOff:]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		if len(name) == 0 || string(name) == "." || string(name) == ".." {
			continue
		}
		entries = append(entries, DirEntry{
			Name: string(name),
			Ino:  binary.NativeEndian.Uint64(rec[0:8]),
			Type: direntType(rec[18]),
		})
	}
	return entries
}

// direntType is the S_IFMT bits of a d_type, or 0 for DT_UNKNOWN: Linux's
// d_type is those bits shifted down (fs_umode_to_dtype).
func direntType(t byte) uint32 { return uint32(t) << 12 }

// joinRel joins a clean rel and a name.
func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// Mkdir creates directory rel.
func (r *Root) Mkdir(rel string, mode uint32) error {
	c, ok := cleanRel(rel)
	if !ok {
		return r.pathErr("mkdir", rel, ErrEscape)
	}
	dfd, name, err := r.parent(c)
	if err != nil {
		return r.pathErr("mkdir", c, err)
	}
	err = unix.Mkdirat(dfd, name, mode)
	r.release(dfd)
	return r.pathErr("mkdir", c, err)
}

// Mknod creates a FIFO, socket or device node at rel (rule D8: such nodes
// always live on the host).
func (r *Root) Mknod(rel string, mode uint32, dev uint64) error {
	c, ok := cleanRel(rel)
	if !ok {
		return r.pathErr("mknod", rel, ErrEscape)
	}
	dfd, name, err := r.parent(c)
	if err != nil {
		return r.pathErr("mknod", c, err)
	}
	err = unix.Mknodat(dfd, name, mode, int(dev))
	r.release(dfd)
	return r.pathErr("mknod", c, err)
}

// Symlink creates a symlink at rel whose content is target, stored verbatim.
func (r *Root) Symlink(target, rel string) error {
	c, ok := cleanRel(rel)
	if !ok {
		return r.pathErr("symlink", rel, ErrEscape)
	}
	dfd, name, err := r.parent(c)
	if err != nil {
		return r.pathErr("symlink", c, err)
	}
	err = unix.Symlinkat(target, dfd, name)
	r.release(dfd)
	return r.pathErr("symlink", c, err)
}

// Readlink returns the content of the symlink at rel.
func (r *Root) Readlink(rel string) (string, error) {
	c, ok := cleanRel(rel)
	if !ok {
		return "", r.pathErr("readlink", rel, ErrEscape)
	}
	dfd, name, err := r.parent(c)
	if err != nil {
		return "", r.pathErr("readlink", c, err)
	}
	defer r.release(dfd)
	var small [256]byte
	buf := small[:]
	for {
		n, err := unix.Readlinkat(dfd, name, buf)
		if err != nil {
			return "", r.pathErr("readlink", c, err)
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Link creates a hard link newRel to the existing oldRel (never following).
func (r *Root) Link(oldRel, newRel string) error {
	oc, ok1 := cleanRel(oldRel)
	nc, ok2 := cleanRel(newRel)
	if !ok1 || !ok2 {
		return r.linkErr("link", oldRel, newRel, ErrEscape)
	}
	odfd, oname, err := r.parent(oc)
	if err != nil {
		return r.linkErr("link", oc, nc, err)
	}
	defer r.release(odfd)
	ndfd, nname, err := r.parent(nc)
	if err != nil {
		return r.linkErr("link", oc, nc, err)
	}
	defer r.release(ndfd)
	// No AT_SYMLINK_FOLLOW: a symlink is linked as the link itself.
	return r.linkErr("link", oc, nc, unix.Linkat(odfd, oname, ndfd, nname, 0))
}

// Rename renames oldRel to newRel with renameat2 flags (0, RENAME_NOREPLACE,
// RENAME_EXCHANGE).
func (r *Root) Rename(oldRel, newRel string, flags uint) error {
	oc, ok1 := cleanRel(oldRel)
	nc, ok2 := cleanRel(newRel)
	if !ok1 || !ok2 {
		return r.linkErr("rename", oldRel, newRel, ErrEscape)
	}
	odfd, oname, err := r.parent(oc)
	if err != nil {
		return r.linkErr("rename", oc, nc, err)
	}
	defer r.release(odfd)
	ndfd, nname := odfd, path.Base(nc)
	if path.Dir(oc) != path.Dir(nc) {
		// Within one directory (a writeback's temporary file renamed over
		// its target) one open of it does; on a share each is a lookup.
		if ndfd, nname, err = r.parent(nc); err != nil {
			return r.linkErr("rename", oc, nc, err)
		}
		defer r.release(ndfd)
	}
	err = unix.Renameat2(odfd, oname, ndfd, nname, flags)
	if err == nil {
		r.forget(oc, nc) // nc: a directory renamed over, or the other half of an exchange
	}
	return r.linkErr("rename", oc, nc, err)
}

// Remove unlinks a non-directory or removes an empty directory at rel.
func (r *Root) Remove(rel string) error {
	c, ok := cleanRel(rel)
	if !ok {
		return r.pathErr("remove", rel, ErrEscape)
	}
	if c == "" {
		return r.pathErr("remove", c, errIsRoot)
	}
	dfd, name, err := r.parent(c)
	if err != nil {
		return r.pathErr("remove", c, err)
	}
	defer r.release(dfd)
	return r.pathErr("remove", c, r.removeIn(dfd, name, c))
}

// errIsRoot refuses to remove the Root itself (EBUSY, as for a mountpoint).
var errIsRoot = &errnoError{errno: unix.EBUSY, msg: "refusing to remove the source itself"}

// removeAt removes one entry like os.Remove: unlink, then rmdir if it is a
// directory (Linux says EISDIR; some file systems say EPERM). wasDir reports
// that a directory was removed.
func removeAt(dfd int, name string) (wasDir bool, err error) {
	err = unix.Unlinkat(dfd, name, 0)
	if err == nil || (err != unix.EISDIR && err != unix.EPERM) {
		return false, err
	}
	if err1 := unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR); err1 != unix.ENOTDIR {
		return err1 == nil, err1
	}
	return false, err
}

// RemoveAll removes rel and everything below it without following symlinks.
// It refuses to remove the Root itself. A missing rel is not an error.
//
// It walks down by directory fds (openat O_NOFOLLOW|O_DIRECTORY, unlinkat
// on names read from that fd), never by path strings, so a directory swapped
// for a symlink mid-walk is unlinked as a link, never descended through.
// It holds one fd per level of depth.
func (r *Root) RemoveAll(rel string) error {
	c, ok := cleanRel(rel)
	if !ok {
		return r.pathErr("removeall", rel, ErrEscape)
	}
	if c == "" {
		return r.pathErr("removeall", c, errIsRoot)
	}
	dfd, name, err := r.parent(c)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return r.pathErr("removeall", c, err)
	}
	defer r.release(dfd)
	err = removeAllAt(dfd, name)
	r.forget(c) // also after an error: part of it may be gone
	return r.pathErr("removeall", c, err)
}

// removeAllAt removes name in dfd and everything beneath it. Entries that
// come and go meanwhile (a container still writing) are retried a few times.
func removeAllAt(dfd int, name string) error {
	var err error
	for range 8 {
		err = unix.Unlinkat(dfd, name, 0)
		if err == nil || err == unix.ENOENT {
			return nil
		}
		if err != unix.EISDIR && err != unix.EPERM {
			return err
		}
		err = unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
		switch err {
		case nil, unix.ENOENT:
			return nil
		case unix.ENOTDIR:
			continue // swapped for a non-directory: unlink it
		case unix.ENOTEMPTY, unix.EEXIST:
		default:
			return err
		}
		openErr, err := emptyDir(dfd, name)
		switch openErr {
		case nil:
		case unix.ENOENT:
			return nil
		case unix.ELOOP, unix.ENOTDIR:
			continue // swapped for a symlink or file: unlink it
		default:
			return openErr
		}
		if err != nil {
			return err
		}
		err = unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
		switch err {
		case nil, unix.ENOENT:
			return nil
		case unix.ENOTEMPTY, unix.EEXIST, unix.ENOTDIR:
			continue // refilled meanwhile
		}
		return err
	}
	return err
}

// emptyDir removes everything inside directory name of dfd. openErr is
// set when name could not be opened as a directory (it may have been
// swapped for something else); err reports failures inside it.
func emptyDir(dfd int, name string) (openErr, err error) {
	fd, openErr := openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if openErr != nil {
		return openErr, nil
	}
	defer unix.Close(fd)
	names, err := readNames(fd)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if e := removeAllAt(fd, n); e != nil && err == nil {
			err = e
		}
	}
	return nil, err
}

// Chmod sets the permission bits of rel (not following a final symlink).
// A symlink has no mode of its own: chmod of one fails with EOPNOTSUPP.
func (r *Root) Chmod(rel string, mode uint32) error {
	c, ok := cleanRel(rel)
	if !ok {
		return r.pathErr("chmod", rel, ErrEscape)
	}
	dfd, name, err := r.parent(c)
	if err != nil {
		return r.pathErr("chmod", c, err)
	}
	defer r.release(dfd)
	// fchmodat2 (Linux 6.6) does it in one call. Without it x/sys reports
	// EOPNOTSUPP for any file, so that answer is checked the slow way.
	err = unix.Fchmodat(dfd, name, mode, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.EOPNOTSUPP {
		err = chmodByFd(dfd, name, mode)
	}
	return r.pathErr("chmod", c, err)
}

// ErrSymlinkAttrs is wrapped by the error of Lchown or Utimes of a symlink
// on a file system served by a process (ServedByProcess): there a change
// of a symlink's owner or times reaches its target instead (sshfs: the
// server's chown and utimes follow it), which may be anywhere on the
// server. It wraps EOPNOTSUPP.
var ErrSymlinkAttrs = fmt.Errorf("the source's file system sets a symlink's owner and times on its target: %w", unix.EOPNOTSUPP)

// Lchown sets the owner of rel (not following a final symlink). -1 keeps a value.
func (r *Root) Lchown(rel string, uid, gid int) error {
	c, ok := cleanRel(rel)
	if !ok {
		return r.pathErr("lchown", rel, ErrEscape)
	}
	dfd, name, err := r.parent(c)
	if err != nil {
		return r.pathErr("lchown", c, err)
	}
	defer r.release(dfd)
	if byProcess, _ := r.ServedByProcess(); byProcess {
		err = byFdNotSymlink(dfd, name, ErrSymlinkAttrs, func(p string) error { return unix.Fchownat(unix.AT_FDCWD, p, uid, gid, 0) })
	} else {
		err = unix.Fchownat(dfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
	}
	return r.pathErr("lchown", c, err)
}

// Utimes sets access and modification times of rel (not following a final
// symlink). A nil time is left unchanged (UTIME_OMIT).
func (r *Root) Utimes(rel string, atime, mtime *unix.Timespec) error {
	c, ok := cleanRel(rel)
	if !ok {
		return r.pathErr("utimes", rel, ErrEscape)
	}
	ts := [2]unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
	if atime != nil {
		ts[0] = *atime
	}
	if mtime != nil {
		ts[1] = *mtime
	}
	dfd, name, err := r.parent(c)
	if err != nil {
		return r.pathErr("utimes", c, err)
	}
	defer r.release(dfd)
	if byProcess, _ := r.ServedByProcess(); byProcess {
		err = byFdNotSymlink(dfd, name, ErrSymlinkAttrs, func(p string) error { return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts[:], 0) })
	} else {
		err = unix.UtimesNanoAt(dfd, name, ts[:], unix.AT_SYMLINK_NOFOLLOW)
	}
	return r.pathErr("utimes", c, err)
}

// chmodByFd is Chmod's slow way, through a descriptor of the entry.
func chmodByFd(dfd int, name string, mode uint32) error {
	return byFdNotSymlink(dfd, name, unix.EOPNOTSUPP, func(p string) error { return unix.Chmod(p, mode) })
}

// byFdNotSymlink runs set on the /proc/self/fd magic link of an O_PATH
// descriptor of exactly the entry name (which lands on that inode: no path
// lookup), and refuses a symlink with symlinkErr. The file system is then
// asked to change the inode the kernel holds, not whatever its path names
// when the server gets to it.
func byFdNotSymlink(dfd int, name string, symlinkErr error, set func(path string) error) error {
	fd, err := openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// An inode's type never changes, so the kernel's copy of it will do:
	// no round trip to a share whose attributes the kernel holds as stale
	// (sshfs: after every write or setattr, one in each untarred file).
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE, &stx); err != nil {
		return err
	}
	if uint32(stx.Mode)&unix.S_IFMT == unix.S_IFLNK {
		return symlinkErr
	}
	return set(procFd(fd))
}

// Truncate sets the size of the regular file rel. The open has O_NONBLOCK
// so that a FIFO swapped in cannot block it (ftruncate then says EINVAL).
func (r *Root) Truncate(rel string, size int64) error {
	c, ok := cleanRel(rel)
	if !ok {
		return r.pathErr("truncate", rel, ErrEscape)
	}
	dfd, name, err := r.parent(c)
	if err != nil {
		return r.pathErr("truncate", c, err)
	}
	fd, err := openat(dfd, name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	r.release(dfd)
	if err != nil {
		return r.pathErr("truncate", c, err)
	}
	for {
		err = unix.Ftruncate(fd, size)
		if err != unix.EINTR {
			break
		}
	}
	unix.Close(fd)
	return r.pathErr("truncate", c, err)
}

// procFd is the magic link of an open fd. Following it (chmod, or on the way
// to a name in a directory fd) lands on the very inode the fd holds, even
// when that is a symlink; an l* call on the link itself would act on the
// /proc link instead. /proc/self is the table of the process's first thread,
// which every thread shares but ownmount's (which never is the first, and
// never runs these operations); /proc/thread-self would name the caller's
// own, at 0.8 us more a call (a populate's xattrs each take one).
func procFd(fd int) string {
	var b [32]byte
	return string(strconv.AppendInt(append(b[:0], "/proc/self/fd/"...), int64(fd), 10))
}

// xattrPath names rel itself for the xattr syscalls, which have no *at form
// (getxattrat is Linux 6.13+): /proc/self/fd/<parent>/<name>. The magic link
// lands on the directory the parent fd holds, beneath the Root, and <name> is
// one component (or "." for the Root itself), which the l* calls used with
// the path do not follow: a symlink is the link. The caller releases dfd.
func (r *Root) xattrPath(rel string) (p string, dfd int, err error) {
	dfd, name, err := r.parent(rel)
	if err != nil {
		return "", -1, err
	}
	return procFd(dfd) + "/" + name, dfd, nil
}

// validOpenFlags are the open flags openat2 accepts (the kernel's
// VALID_OPEN_FLAGS).
const validOpenFlags = unix.O_ACCMODE | unix.O_CREAT | unix.O_EXCL | unix.O_NOCTTY | unix.O_TRUNC |
	unix.O_APPEND | unix.O_NONBLOCK | unix.O_SYNC | unix.O_DSYNC | unix.O_ASYNC | unix.O_DIRECT |
	unix.O_LARGEFILE | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_NOATIME | unix.O_CLOEXEC |
	unix.O_PATH | unix.O_TMPFILE

// openBeneath opens rel (clean, not "") with flags, which must include
// O_NOFOLLOW: one openat2 for the whole path, where parent-then-openat costs
// two syscalls and a close. Every component is still reached beneath the
// Root and through no symlink, and a final symlink is the link itself (with
// O_PATH) or ELOOP, as with openat. A refusal (ELOOP, EXDEV) is redone the
// long way so that the error says which it was: a symlink on the way (an
// escape) or a symlink as the final name (the caller's ELOOP).
func (r *Root) openBeneath(rel string, flags int, mode uint32) (int, error) {
	if strings.IndexByte(rel, '/') >= 0 {
		// openat2, unlike openat, refuses flag bits it does not know (the
		// kernel's open flags include __FMODE_EXEC when a file is run) and
		// a mode without O_CREAT, or mode bits beyond the permissions (a
		// create's mode carries S_IFREG): drop them as openat ignores them.
		how := unix.OpenHow{Flags: uint64(flags & validOpenFlags), Resolve: resolveBeneath}
		if flags&(unix.O_CREAT|unix.O_TMPFILE) != 0 {
			how.Mode = uint64(mode & 0o7777)
		}
		if err := r.acquire(); err != nil {
			return -1, err
		}
		fd, err := openat2(r.fd, rel, &how)
		r.unuse()
		if err != unix.ELOOP && err != unix.EXDEV {
			return fd, err
		}
	}
	dfd, name, err := r.parent(rel)
	if err != nil {
		return -1, err
	}
	fd, err := openat(dfd, name, flags, mode)
	r.release(dfd)
	return fd, err
}

// Getxattr, Setxattr, Listxattr and Removexattr act on rel itself, never on
// a symlink's target. (The kernel refuses user.* xattrs on symlinks: EPERM.)
func (r *Root) Getxattr(rel, name string, dest []byte) (int, error) {
	c, ok := cleanRel(rel)
	if !ok {
		return 0, r.pathErr("getxattr", rel, ErrEscape)
	}
	p, dfd, err := r.xattrPath(c)
	if err != nil {
		return 0, r.pathErr("getxattr", c, err)
	}
	n, err := unix.Lgetxattr(p, name, dest)
	r.release(dfd)
	return n, r.pathErr("getxattr", c, err)
}

func (r *Root) Setxattr(rel, name string, data []byte, flags int) error {
	c, ok := cleanRel(rel)
	if !ok {
		return r.pathErr("setxattr", rel, ErrEscape)
	}
	p, dfd, err := r.xattrPath(c)
	if err != nil {
		return r.pathErr("setxattr", c, err)
	}
	err = unix.Lsetxattr(p, name, data, flags)
	r.release(dfd)
	return r.pathErr("setxattr", c, err)
}

func (r *Root) Listxattr(rel string, dest []byte) (int, error) {
	c, ok := cleanRel(rel)
	if !ok {
		return 0, r.pathErr("listxattr", rel, ErrEscape)
	}
	p, dfd, err := r.xattrPath(c)
	if err != nil {
		return 0, r.pathErr("listxattr", c, err)
	}
	n, err := unix.Llistxattr(p, dest)
	r.release(dfd)
	return n, r.pathErr("listxattr", c, err)
}

func (r *Root) Removexattr(rel, name string) error {
	c, ok := cleanRel(rel)
	if !ok {
		return r.pathErr("removexattr", rel, ErrEscape)
	}
	p, dfd, err := r.xattrPath(c)
	if err != nil {
		return r.pathErr("removexattr", c, err)
	}
	err = unix.Lremovexattr(p, name)
	r.release(dfd)
	return r.pathErr("removexattr", c, err)
}
