package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/hostpath"
)

// join builds a store-relative path.
func join(dir, name string) string {
	if dir == "" || dir == "." {
		return name
	}
	return path.Join(dir, name)
}

// isPopulated reports whether dir's host entries have been listed into the
// store. A directory the container made itself counts as populated.
func (s *Store) isPopulated(dir string) bool { return s.hasXattr(dir, xattrPopulated) }

// IsPopulated reports whether dir has been listed from the host (only such
// directories can have host changes to bring in).
func (s *Store) IsPopulated(dir string) bool { return s.isPopulated(dir) }

// EnsurePopulated lists dir on the host into the store once, so that lookups
// and listings inside it need no host round trip afterwards. Entries already
// in the store (made by the container) are kept; nothing is overwritten but
// an entry an earlier populate left unfinished (removeUnfinished).
func (s *Store) EnsurePopulated(dir string) error {
	if s.isPopulated(dir) {
		return nil
	}
	s.shareWork()
	unlock := s.locks.Lock("populate:" + dir)
	defer unlock()
	if s.isPopulated(dir) {
		return nil
	}
	entries, err := s.host.ReadDir(dir)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		// Made by the container and not written back yet: nothing to list.
	case err != nil:
		return fmt.Errorf("populate %q: %w", dir, err)
	}
	d, err := s.local.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("populate %q: %w", dir, err)
	}
	defer d.Close()
	var before unix.Stat_t
	if err := unix.Fstat(d.Fd(), &before); err != nil {
		return fmt.Errorf("populate %q: %w", dir, err)
	}
	// Names of one host file (hard links) become names of one store file,
	// so that a write through one is seen through the others, as on the
	// host. Links across directories are not looked for.
	linked := make(map[uint64]string)
	born := birthIn(d.Fd(), &before)
	for i := range entries {
		child := join(dir, entries[i].Name)
		st := &entries[i].Stat
		if IsTemporary(entries[i].Name) {
			continue // the writeback's, or the share's, gone in a moment
		}
		if s.IsDirty(child) {
			continue // the container changed or deleted it: its version stands
		}
		hardLinked := st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1
		if first, ok := linked[st.Ino]; ok && hardLinked {
			if err := s.local.Link(first, child); err == nil || errors.Is(err, unix.EEXIST) {
				continue
			}
		}
		// An entry already in the store is kept (EEXIST), unless an earlier
		// populate made it and was cut short.
		err := s.adoptIn(d, entries[i].Name, st, born)
		if errors.Is(err, unix.EEXIST) && s.removeUnfinished(d, entries[i].Name) {
			err = s.adoptIn(d, entries[i].Name, st, born)
		}
		if err != nil {
			if errors.Is(err, unix.EEXIST) {
				continue
			}
			return fmt.Errorf("populate %q: %w", dir, err)
		}
		if hardLinked {
			if _, ok := linked[st.Ino]; !ok {
				linked[st.Ino] = child
			}
		}
	}
	// Making the entries sets the store directory's mtime to now: it gets
	// back the one it had (the host's, copied when the directory was
	// adopted), which the container saw before the listing (cached: the
	// host's view is authoritative).
	if err := futimens(d.Fd(), []unix.Timespec{{Nsec: unix.UTIME_OMIT}, before.Mtim}); err != nil {
		return fmt.Errorf("populate %q: %w", dir, err)
	}
	if err := d.Setxattr(xattrPopulated, mark, 0); err != nil {
		return err
	}
	s.populatedMu.Lock()
	s.populated = append(s.populated, dir)
	if len(s.populated) > s.populatedMax {
		// Forget the older half: a directory populated again after
		// being removed is logged again, so the log would grow without
		// end on a tree the host keeps remaking.
		half := len(s.populated) / 2
		s.populated = slices.Clone(s.populated[half:])
		s.populatedFirst += half
	}
	s.populatedMu.Unlock()
	return nil
}

// removeUnfinished removes the entry name of the store directory d, being
// populated, if an earlier populate of d made it and was cut short (the
// plugin died) before giving it the host's attributes and base: a regular
// file or directory without a base. A file left so would read empty, or
// keep the plugin's mode and owner, until the first sweep after the
// directory is populated finishes it (syncer.Plan, for the same entry in a
// populated directory): the container could look at it before that.
//
// Only a populate makes entries in a directory not marked populated: a
// container's lookup or create in it populates it first, and a container's
// change not written back yet (dirty) is skipped before this. So an entry
// here without a base is unfinished, and a directory among them empty:
// nothing in it was looked up.
func (s *Store) removeUnfinished(d *hostpath.Dir, name string) bool {
	rel := join(d.Rel(), name)
	st, err := s.local.Lstat(rel)
	if err != nil {
		return false
	}
	if k := st.Mode & unix.S_IFMT; k != unix.S_IFREG && k != unix.S_IFDIR {
		return false // a symlink's base is not in the store; a special file is the host's node (D8)
	}
	if _, ok := s.Base(rel); ok {
		return false
	}
	if err := d.Remove(name); err != nil {
		s.log.Warn("cannot remove an entry an earlier populate left unfinished; keeping it", "path", rel, "err", err)
		return false
	}
	s.log.Info("making again an entry an earlier populate left unfinished", "path", rel)
	return true
}

// populatedLogMax bounds the log of populated directories (PopulatedSince).
const populatedLogMax = 1 << 16

// PopulatedSince returns the directories populated since the n-th (counting
// from 0 when the store was opened), and the n to ask with next time: the
// host refresh watches each from the check after its populate. complete is
// false if the log no longer holds some of them (a reader that fell far
// behind): that reader must look at every directory instead. The slice is
// the log's own and must not be changed; the log only appends past it.
func (s *Store) PopulatedSince(n int) (dirs []string, next int, complete bool) {
	s.populatedMu.Lock()
	defer s.populatedMu.Unlock()
	next = s.populatedFirst + len(s.populated)
	complete = n >= s.populatedFirst
	i := min(max(n-s.populatedFirst, 0), len(s.populated))
	return s.populated[i:len(s.populated):len(s.populated)], next, complete
}

// adoptIn creates the entry name of the open store directory d as a copy of
// the host entry described by st, without content: a regular file becomes a
// stub fetched on first open. A regular file or directory is made and given
// its attributes through its own descriptor (no path lookups, which were
// most of a populate's work); a symlink or special file goes the path-based
// way (adoptNode).
func (s *Store) adoptIn(d *hostpath.Dir, name string, st *unix.Stat_t, born *birth) error {
	rel := join(d.Rel(), name)
	// Made with its permission bits and owner where creating it gives
	// them (born): a chmod and a chown fewer for most entries of a tree.
	perm := uint32(0o600)
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		perm = 0o700
	}
	setMode, setOwner := true, true
	if born.keeps(st.Mode) {
		perm, setMode = st.Mode&0o777, false
	}
	if born.owns(st) {
		setOwner = false
	}
	var fd int
	var err error
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if fd, err = d.Create(name, perm); err != nil {
			return err
		}
		if st.Size > 0 { // created empty: an empty file is its own content
			err = stubFd(fd, st.Size)
		}
	case unix.S_IFDIR:
		if fd, err = d.Mkdir(name, perm); err != nil {
			return err
		}
	default:
		return s.adoptNode(rel, st)
	}
	if err == nil {
		if testHookAdopt != nil {
			testHookAdopt(rel, setOwner, setMode)
		}
		err = setAttrsFd(fd, st, setOwner, setMode)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		d.Remove(name)
		return fmt.Errorf("adopt %q: %w", rel, err)
	}
	return nil
}

// testHookAdopt, if set (by tests), is told which attributes adoptIn sets
// after creating rel (a regular file or a directory).
var testHookAdopt func(rel string, setOwner, setMode bool)

// birth is what an entry created in one store directory gets from its
// creation alone: the permission bits it asks for less the umask, and, where
// owned, the plugin's owner. nil: not known, so every attribute is set.
type birth struct {
	umask uint32
	owned bool // entries are born the plugin's (pluginUID, pluginGID)
}

// birthIn says what entries created in the open store directory dir (whose
// attributes are st) are born with, or nil where their mode depends on more
// than the umask: a default ACL, or a set-group-ID directory (which passes
// the bit on to subdirectories). Their group is the plugin's only where the
// directory's is too: a file system mounted with grpid gives new entries the
// directory's group.
func birthIn(dir int, st *unix.Stat_t) *birth {
	umask, ok := processUmask()
	if !ok || st.Mode&unix.S_ISGID != 0 {
		return nil
	}
	if _, err := unix.Fgetxattr(dir, "system.posix_acl_default", nil); !errors.Is(err, unix.ENODATA) {
		return nil // an ACL, or no way to tell
	}
	return &birth{umask: umask, owned: st.Gid == pluginGID}
}

// The owner the plugin's creates get (a syscall each to ask).
var pluginUID, pluginGID = uint32(os.Geteuid()), uint32(os.Getegid())

// keeps reports whether an entry created with mode's permission bits keeps
// them all: no set-ID or sticky bit (those need a chmod after the chown),
// nothing the umask clears. Not bits that would keep a plugin that is not
// root from setting the entry's xattrs before its mode.
func (b *birth) keeps(mode uint32) bool {
	return b != nil && mode&0o7000 == 0 && mode&0o777&b.umask == 0 && (pluginUID == 0 || mode&0o200 != 0)
}

// owns reports whether a created entry already has st's owner.
func (b *birth) owns(st *unix.Stat_t) bool {
	return b != nil && b.owned && st.Uid == pluginUID && st.Gid == pluginGID
}

var umaskOnce = sync.OnceValues(readUmask)

// processUmask is the plugin's umask, read once (nothing in the plugin
// changes it), and whether it could be read.
func processUmask() (uint32, bool) { return umaskOnce() }

// readUmask reads the umask from /proc/self/status: umask(2) can only read
// it by setting it, which would race with creates in other goroutines.
func readUmask() (uint32, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			return uint32(m), err == nil
		}
	}
	return 0, false
}

// stubFd makes the open store file fd a stub of a host file of size bytes:
// marked first (a crash between the steps leaves a stub, fetched again,
// never a copy taken for the host's), then given the size. An empty file
// needs no fetch: its empty copy is the content, so it is truncated and
// any stub mark it had goes (in that order: a crash between leaves a stub).
// That is what empties a copy that had content (File.restub); a file just
// created empty needs no call at all (adoptIn). setAttrsFd gives it the
// rest.
func stubFd(fd int, size int64) error {
	if size == 0 {
		if err := unix.Ftruncate(fd, 0); err != nil {
			return err
		}
		if err := unix.Fremovexattr(fd, xattrStub); err != nil && !errors.Is(err, unix.ENODATA) {
			return err
		}
		return nil
	}
	if err := unix.Fsetxattr(fd, xattrStub, mark, 0); err != nil {
		return err
	}
	return unix.Ftruncate(fd, size)
}

// setAttrsFd gives the open regular file or directory fd st's times and
// base, and its owner and mode where asked to.
func setAttrsFd(fd int, st *unix.Stat_t, owner, mode bool) error {
	if owner {
		if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	// After chown, which clears set-id bits.
	if mode {
		if err := unix.Fchmod(fd, st.Mode&07777); err != nil {
			return err
		}
	}
	if err := futimens(fd, []unix.Timespec{st.Atim, st.Mtim}); err != nil {
		return err
	}
	return unix.Fsetxattr(fd, xattrBase, baseOf(st).encode(), 0)
}

// adopt is adoptIn for the store path rel.
func (s *Store) adopt(rel string, st *unix.Stat_t) error {
	d, err := s.local.OpenDir(dirOf(rel))
	if err != nil {
		return err
	}
	defer d.Close()
	return s.adoptIn(d, path.Base(rel), st, nil)
}

// adoptNode is adoptIn for a symlink (its target read from the host) or a
// FIFO, socket or device node (the node itself, rule D8).
func (s *Store) adoptNode(rel string, st *unix.Stat_t) error {
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		target, err := s.hostReadlink(rel)
		if err != nil {
			return err
		}
		if err := s.local.Symlink(target, rel); err != nil {
			return err
		}
	} else if err := s.local.Mknod(rel, st.Mode, st.Rdev); err != nil {
		return err
	}
	return s.copyAttrs(rel, st)
}

// copyAttrs gives the store entry rel the owner, mode and times of the host
// entry st, and records st as rel's base.
func (s *Store) copyAttrs(rel string, st *unix.Stat_t) error {
	if err := s.local.Lchown(rel, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		// After chown, which clears set-id bits.
		if err := s.local.Chmod(rel, st.Mode&07777); err != nil {
			return err
		}
	}
	atime, mtime := st.Atim, st.Mtim
	if err := s.local.Utimes(rel, &atime, &mtime); err != nil {
		return err
	}
	return s.setBase(rel, st)
}

// EnsureContent fetches the content of a stub from the host, once.
func (s *Store) EnsureContent(rel string) error {
	_, err := s.ensureContent(rel, nil)
	return err
}

// fetchForOpen is EnsureContent for a container's open: it counts an open
// of content already here as a cache hit, and a file it has to fetch starts
// the read-ahead of its directory's other small files.
//
// The read-ahead starts before this fetch, not after it: a container that
// reads a directory's files one after the other (go list, a compiler) asks
// for the second while the first is still on its way, and over a share of
// 2.45 ms a request a cold `go list` spent 7.5 of its 10.5 s in OPENs that
// waited for a fetch, 1,506 of them for 914 directories listed (the first
// file of each, and then a sibling whose read-ahead had not started yet).
func (s *Store) fetchForOpen(rel string) error {
	fetched, err := s.ensureContent(rel, func() { s.prefetch.fetched(dirOf(rel)) })
	if !fetched && err == nil {
		s.countHit()
	}
	return err
}

// ensureContent fetches rel's content if it is a stub, and says whether it
// did. beforeFetch, if not nil, is called once rel is known to be a stub,
// before its fetch starts.
func (s *Store) ensureContent(rel string, beforeFetch func()) (bool, error) {
	if !s.IsStub(rel) {
		return false, nil
	}
	if beforeFetch != nil {
		beforeFetch()
	}
	s.shareWork()
	dst, err := s.local.OpenFile(rel, unix.O_WRONLY, 0)
	if err != nil {
		return false, fmt.Errorf("fetch %q: %w", rel, err)
	}
	defer dst.Close()
	unlock, err := s.lockContent(dst)
	if err != nil {
		return false, fmt.Errorf("fetch %q: %w", rel, err)
	}
	defer unlock()
	if !isStubFd(dst) {
		return false, nil // fetched meanwhile, maybe through another name
	}
	return true, s.fetch(rel, dst)
}

// lockContent takes the lock of the content of the store file f is open
// on: a fetch, a truncation of a stub to nothing and a restub each change
// whether the copy holds its content, and they take turns. The lock is the
// inode's, not a name's: the names of a linked file share one copy. With a
// lock per name, a fetch through one name ran beside a fetch through the
// other, truncating under the container's writes what the first had
// fetched (a shared mapping of it faulted), and the later one failed
// (ENODATA) when it found the stub mark gone (the exerciser, cached, at
// 1000 operations: 9 runs in 232).
func (s *Store) lockContent(f *os.File) (func(), error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("stat: %w", err)
	}
	return s.lockContentOf(st.Ino), nil
}

func (s *Store) lockContentOf(ino uint64) func() {
	return s.locks.Lock("content:" + strconv.FormatUint(ino, 10))
}

// testHookFetchCopied, if set (by tests), runs in a fetch between the copy
// and the end of the fetch.
var testHookFetchCopied func(rel string)

// fetch copies rel's content from the host over its stub, dst, open for
// writing. The caller holds its content lock (lockContent).
func (s *Store) fetch(rel string, dst *os.File) error {
	// O_NOATIME: the plugin reading the host file is not the container
	// reading it (the host keeps the atime the container saw). Refused
	// (EPERM) where the plugin may not: then without.
	src, err := s.host.OpenFile(rel, unix.O_RDONLY|unix.O_NOATIME, 0)
	if errors.Is(err, unix.EPERM) {
		src, err = s.host.OpenFile(rel, unix.O_RDONLY, 0)
	}
	if err != nil {
		return fmt.Errorf("fetch %q: %w", rel, err)
	}
	defer src.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		return fmt.Errorf("fetch %q: stat: %w", rel, err)
	}
	n, err := io.Copy(dst, src)
	if testHookFetchCopied != nil {
		testHookFetchCopied(rel)
	}
	if err == nil {
		err = dst.Truncate(n)
	}
	if err != nil {
		return fmt.Errorf("fetch %q: copy: %w", rel, err)
	}
	// Through the descriptor, not the name: the name may be another
	// file's by now (a rename), the descriptor is the copy just written.
	fd := int(dst.Fd())
	st.Size = n
	if err := futimens(fd, []unix.Timespec{{Nsec: unix.UTIME_OMIT}, st.Mtim}); err != nil {
		return fmt.Errorf("fetch %q: set mtime: %w", rel, err)
	}
	if err := unix.Fsetxattr(fd, xattrBase, baseOf(&st).encode(), 0); err != nil {
		return fmt.Errorf("fetch %q: record base: %w", rel, err)
	}
	s.fetched.Add(1)
	if err := unix.Fremovexattr(fd, xattrStub); err != nil {
		return fmt.Errorf("fetch %q: unmark stub: %w", rel, err)
	}
	return nil
}
