package hostpath

import (
	"strings"

	"golang.org/x/sys/unix"
)

// Dir is one directory beneath a Root, held open so that many entries can be
// made in it with a single path resolution: populating a store directory
// from a host listing makes one entry per host file, and resolving the
// directory again for each of them (and for each attribute set on them) was
// most of that work. Names passed to a Dir are single components: no "/",
// not "." or "..", no NUL. Entries are made with O_EXCL / mkdirat and opened
// with O_NOFOLLOW, so a symlink is never followed.
type Dir struct {
	r   *Root
	rel string
	fd  int
}

// OpenDir opens directory rel. The caller must Close it.
func (r *Root) OpenDir(rel string) (*Dir, error) {
	c, ok := cleanRel(rel)
	if !ok {
		return nil, r.pathErr("opendir", rel, ErrEscape)
	}
	fd, err := r.openDir(c)
	if err != nil {
		return nil, r.pathErr("opendir", c, err)
	}
	return &Dir{r: r, rel: c, fd: fd}, nil
}

// Close releases the directory.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// Rel is the directory's path relative to its Root.
func (d *Dir) Rel() string { return d.rel }

// Fd is the directory's own descriptor, for stat and times (valid until Close).
func (d *Dir) Fd() int { return d.fd }

func (d *Dir) err(op, name string, err error) error {
	return d.r.pathErr(op, joinRel(d.rel, name), err)
}

// validName refuses anything but one path component.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

// Create makes the regular file name, which must not exist (O_EXCL), and
// returns a descriptor open for writing. The caller must close it.
func (d *Dir) Create(name string, mode uint32) (int, error) {
	if !validName(name) {
		return -1, d.err("create", name, ErrEscape)
	}
	fd, err := openat(d.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return -1, d.err("create", name, err)
	}
	return fd, nil
}

// Mkdir makes directory name and returns a descriptor of it (read-only, for
// setting its attributes). The caller must close it.
func (d *Dir) Mkdir(name string, mode uint32) (int, error) {
	if !validName(name) {
		return -1, d.err("mkdir", name, ErrEscape)
	}
	if err := unix.Mkdirat(d.fd, name, mode); err != nil {
		return -1, d.err("mkdir", name, err)
	}
	// Replaced by a symlink or a file in between: ELOOP or ENOTDIR, and
	// nothing is followed.
	fd, err := openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, d.err("mkdir", name, err)
	}
	return fd, nil
}

// Remove unlinks the non-directory name, or removes it if an empty directory.
func (d *Dir) Remove(name string) error {
	if !validName(name) {
		return d.err("remove", name, ErrEscape)
	}
	return d.err("remove", name, d.r.removeIn(d.fd, name, joinRel(d.rel, name)))
}

// Sync fsyncs the directory itself (its entries).
func (d *Dir) Sync() error {
	for {
		err := unix.Fsync(d.fd)
		if err != unix.EINTR {
			return d.err("fsync", "", err)
		}
	}
}

// Setxattr sets an extended attribute on the directory itself.
func (d *Dir) Setxattr(attr string, data []byte, flags int) error {
	return d.err("setxattr", "", unix.Fsetxattr(d.fd, attr, data, flags))
}
