package store

// Cached writes a killed run cut short.
//
// A cached writer changes the host file and the store copy (rule C3), and
// the host first: each write goes to the host half, then to the store's
// (File.WriteAt); where the source's file system allows, the kernel
// writes the host file itself (HostPassthrough) and the store copy, which
// sees none of it, is made a stub of the host file at the writer's
// release (File.restub). Either way the store copy is whole and up to
// date only once the writer is released: a plugin killed before that
// (between a write's two halves, or with a passthrough writer open) left
// a copy older than the host file, which the next run served as whole. A
// sweep of the host could find the change, but not always: sftp keeps
// whole seconds, and a pwrite keeps the size, so the host's attributes
// still matched the copy's base. And a writer of the next run, writing
// both halves of that old copy, took the host's base at its release: that
// copy was never put right. (Found by the crash exerciser once it killed
// the plugin during a write: a pwrite that returned before the kill, gone
// from the mount after the restart.)
//
// So a cached writer's open gives its store file a base no host file
// matches (writerBase) before anything is written, and its release gives
// it the host's, as before. A file whose base is writerBase is one a
// writer had open. A flag file beside the tree (writersOpenFlag) says
// such files may be there: made at the run's first writer, removed at a
// clean Close. The next Open that finds the flag walks the tree and makes
// each file with a writer's base a stub of the host file as it is now
// (restubHostWritten): its content comes from the host, which has every
// write the container saw succeed. One it cannot (the share unreachable)
// keeps the writer's base, which the refresh takes for a host change when
// it next looks, and the flag, through the clean Close too, for the next
// start.
//
// The mark is one fsetxattr per cached open for writing, in place of the
// base (a separate xattr would not fit in an ext4 inode beside a stub's
// base and mark); a record file per writer cost 56 µs an open on ext4.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// writerBase is the base of a store file while a cached writer has it
// open: no host file has a size of -1, so the refresh takes the host file
// as changed should it ever look (it does not while the file is busy), and
// the next run, as a file a killed writer may have left old.
var writerBase = Base{Mode: unix.S_IFREG, Size: -1, Mtime: -1}

// isWriterBase reports whether the encoded base p is writerBase.
func isWriterBase(p []byte) bool {
	b, ok := decodeBase(p)
	return ok && b == writerBase
}

// writersOpenFlag is the flag file of a store's tree: beside it, named
// after it.
func writersOpenFlag(tree string) string {
	return filepath.Clean(tree) + ".writers-open"
}

// hostWritten keeps the flag file that says a cached writer was opened
// since the store's last clean Close.
type hostWritten struct {
	flag string
	mu   sync.Mutex
	made bool // the flag file is there
	// kept: the start found files it could not fetch again (the share
	// unreachable): the flag outlives a clean Close, for the next start.
	kept bool
}

// raise makes the flag file if it is not there yet. Without fsync: the
// flag must outlive the plugin, which the page cache does; a crash of the
// machine loses the store's other unsynced bookkeeping too.
func (h *hostWritten) raise() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.made {
		return nil
	}
	f, err := os.OpenFile(h.flag, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("flag cached writers open: %w", err)
	}
	f.Close()
	h.made = true
	return nil
}

// lower removes the flag file.
func (h *hostWritten) lower() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := os.Remove(h.flag); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the flag of cached writers: %w", err)
	}
	h.made = false
	return nil
}

// raised reports whether the flag file is there (an earlier run's).
func (h *hostWritten) raised() bool {
	_, err := os.Lstat(h.flag)
	return err == nil
}

// markWriter gives the store file of a cached writer, open as local,
// writerBase, after raising the store's flag. It is called before the
// writer's first write can reach either half. A failure is logged: the
// writer is served anyway, as before the mark (only a kill before its
// release may then leave the copy old).
func (s *Store) markWriter(rel string, local *os.File) {
	if s.queue != nil {
		// Delegated, writing through (SetWriteThrough): the store's copy
		// is the container's, and a copy left older than the host by a
		// kill meets the host's at its next writeback, which keeps the
		// host's aside (rule D7). A writer's base would make every writer
		// a kill left open such a conflict.
		return
	}
	err := s.hostWritten.raise()
	if err == nil {
		err = unix.Fsetxattr(int(local.Fd()), xattrBase, writerBase.encode(), 0)
	}
	if err != nil {
		s.log.Warn("marking a cached writer's store copy; a kill before its release may leave the copy old", "path", rel, "err", err)
	}
}

// writersOf is the number of cached writers open on the store file ino.
func (s *Store) writersOf(ino uint64) int {
	s.busyMu.Lock()
	defer s.busyMu.Unlock()
	return s.busyIno[ino]
}

// restubHostWritten makes each store file a cached writer had open when
// an earlier run stopped a stub of the host file, and lowers the flag if
// every one was. At Open, before anything is served.
func (s *Store) restubHostWritten() error {
	if !s.hostWritten.raised() {
		return nil
	}
	s.hostWritten.made = true
	left, n := 0, 0
	var walk func(dir string) error
	walk = func(dir string) error {
		ents, err := s.local.ReadDirTypes(dir)
		if err != nil {
			return fmt.Errorf("list %q: %w", dir, err)
		}
		buf := make([]byte, 64)
		for _, e := range ents {
			rel := join(dir, e.Name)
			switch e.Type {
			case unix.S_IFDIR:
				if err := walk(rel); err != nil {
					return err
				}
			case unix.S_IFREG:
				m, err := s.local.Getxattr(rel, xattrBase, buf)
				if err != nil || !isWriterBase(buf[:m]) {
					continue
				}
				n++
				if err := s.restubFromHost(rel); err != nil {
					left++
					s.log.Warn("a file a cached writer had open when the plugin stopped could not be made a stub of the host file; tried again at the next start",
						"path", rel, "err", err)
				}
			}
		}
		return nil
	}
	if err := walk(""); err != nil {
		return fmt.Errorf("store: files cached writers had open: %w", err)
	}
	if n > 0 {
		s.log.Info("files cached writers had open when the plugin stopped, fetched again from the host", "files", n-left)
	}
	if left > 0 {
		s.hostWritten.kept = true // the next start tries them again
		return nil
	}
	return s.hostWritten.lower()
}

// restubFromHost makes the store file rel a stub of the host file as it
// is now, with its mode and times: the store copy of a file a killed
// run's cached writer had open (restubHostWritten). A host file gone, or
// no longer a regular file, is left to the refresh, which finds it
// changed (the copy keeps writerBase).
//
// The host file is looked at past the share's caches (LstatFresh): the
// killed run may have written it through another name. And a file with
// several names in the store over a share served by a process (sshfs) is
// fetched now, through this name, rather than left a stub: such a share
// shows each name as a file of its own and keeps each one's size for a
// while, so a later fetch through another name, whose size the share had
// from before the killed run's writes, read the file short (the crash
// exerciser: "walk: d: stat size 141189, read 134307 bytes", d the other
// name of the file written). The look just made refreshed this name's.
func (s *Store) restubFromHost(rel string) error {
	lf, err := s.local.OpenFile(rel, unix.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open the store copy: %w", err)
	}
	defer lf.Close()
	fd := int(lf.Fd())
	var lst unix.Stat_t
	if err := unix.Fstat(fd, &lst); err != nil {
		return fmt.Errorf("stat the store copy: %w", err)
	}
	defer s.lockContentOf(lst.Ino)()
	st, err := s.host.LstatFresh(rel)
	if testHookRestubFromHost != nil {
		err = testHookRestubFromHost(rel, err)
	}
	if errors.Is(err, unix.ENOENT) || (err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat on the host: %w", err)
	}
	if byProcess, _ := s.host.ServedByProcess(); byProcess && isLinked(&lst) && st.Size > 0 {
		if err := unix.Fsetxattr(fd, xattrStub, mark, 0); err != nil {
			return fmt.Errorf("mark a stub: %w", err)
		}
		s.markedStub()
		if err := s.fetch(rel, lf); err != nil {
			return err
		}
		return unix.Fchmod(fd, st.Mode&0o7777)
	}
	if err := s.stubOfHost(fd, &st, true); err != nil {
		return fmt.Errorf("make a stub: %w", err)
	}
	return nil
}

// testHookRestubFromHost, if set (by tests), is given restubFromHost's
// look at the host and returns the error it is to have met.
var testHookRestubFromHost func(rel string, err error) error
