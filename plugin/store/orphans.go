package store

// Writers a killed run left behind (delegated).
//
// A delegated file opened for writing only is served by FUSE passthrough:
// the kernel writes the store file itself, and the plugin holds the path
// dirty in the journal while the file is open (File.BeginWrite), since it
// sees none of the writes. When the plugin dies, its FUSE connection goes
// with it, but a passthrough file's writes never went through it: a
// container process that has the file open keeps writing to the store
// file, and each write succeeds (only its fsync fails, ENOTCONN, as the
// request goes to the dead plugin). Its path is in the journal, held, so
// the next run writes back what the file holds at its first Put; but no
// hold is taken in the new run, so the path was clean after that Put, and
// what the process wrote from then on never reached the host, though the
// container saw each write succeed and the store serves it (found by
// TestD4_AWriterTheKilledPluginLeftKeepsItsWrites).
//
// So a new run asks, of each path the journal has pending from the run
// before, whether anything still has its store file open for writing: no
// one else can (the store is the plugin's), so whatever does is a
// passthrough file of the dead run. The kernel tells it without a list of
// open files: a read lease is refused while the file is open for writing
// anywhere (writtenElsewhere). Such a path is held, as the dead run's open
// held it, and asked again every orphanCheck and at the start of each
// flush, until no one has the file open for writing any more (the
// container closed it, or stopped); then its hold is released, which
// writes it back. Each flush meanwhile writes it, as for a writer of this
// run, and the hold keeps it in the journal across another crash.
//
// The hold is on a name, for the store file that name had when it was
// taken (its inode): a rename through the new mount takes it along
// (orphansRenamed); a name that no longer has that file (removed, or
// replaced by a rename) lets it go, as the file's data then goes with the
// removed file on any file system.

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// orphanCheck is how often held orphans are asked again whether anyone
// still writes them.
const orphanCheck = time.Second

// orphans are the paths held for a writer of a killed run.
type orphans struct {
	mu    sync.Mutex
	inos  map[string]uint64 // rel -> the store file's inode the hold is for
	count atomic.Int32      // len(inos), read without mu by each flush
	// unsure: a store file could not be asked (writtenElsewhere); said
	// once per run.
	unsure atomic.Bool
	stop   chan struct{} // closed by Close
	done   chan struct{} // closed when the watcher has returned
}

// watchOrphans holds the paths of pending (the journal's pending paths at
// Open) whose store files are open for writing elsewhere, before Open
// returns: no flush can come before, so none can take such a path for
// clean. (The writeback may have started on them: a Put that ends after
// the hold leaves the path dirty, as for any change during a Put.) Then,
// if it held any, it asks again every orphanCheck until none is left.
func (s *Store) watchOrphans(pending []string) {
	for _, rel := range pending {
		s.adoptOrphan(rel)
	}
	if s.orphans.count.Load() == 0 {
		return
	}
	s.orphans.stop, s.orphans.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.orphans.done)
		t := time.NewTicker(orphanCheck)
		defer t.Stop()
		for s.orphans.count.Load() > 0 {
			select {
			case <-s.orphans.stop:
				return
			case <-t.C:
				s.checkOrphans()
			}
		}
	}()
}

// stopOrphans stops the watcher (Close). The holds stay in the journal:
// the next run asks again.
func (s *Store) stopOrphans() {
	if s.orphans.stop == nil {
		return
	}
	close(s.orphans.stop)
	<-s.orphans.done
}

// adoptOrphan holds rel if its store file is open for writing elsewhere.
func (s *Store) adoptOrphan(rel string) {
	ino, writers, err := s.writtenElsewhere(rel)
	if err != nil || !writers {
		if err != nil && !errors.Is(err, unix.ENOENT) && !s.orphans.unsure.Swap(true) {
			s.log.Warn("cannot tell whether a writer of the killed run still writes this file (said once): what it writes after this run's first writeback of it may not reach the host",
				"path", rel, "err", err)
		}
		return
	}
	s.orphans.mu.Lock()
	defer s.orphans.mu.Unlock()
	if _, ok := s.orphans.inos[rel]; ok {
		return
	}
	if err := s.queue.Hold(rel); err != nil {
		s.log.Error("cannot hold a file a writer of the killed run still writes", "path", rel, "err", err)
		return
	}
	if s.orphans.inos == nil {
		s.orphans.inos = make(map[string]uint64)
	}
	s.orphans.inos[rel] = ino
	s.orphans.count.Store(int32(len(s.orphans.inos)))
	s.log.Info("a writer of the killed run still has this file open: it is held dirty until it closes, and each flush writes it back", "path", rel)
}

// checkOrphans releases each held path whose file no one writes any more,
// or whose name no longer has the file the hold was for. Each flush calls
// it first (beforeFlush), so that the exit flush after the container's
// stop leaves nothing held.
func (s *Store) checkOrphans() {
	if s.orphans.count.Load() == 0 {
		return
	}
	s.orphans.mu.Lock()
	defer s.orphans.mu.Unlock()
	for rel, ino := range s.orphans.inos {
		now, writers, err := s.writtenElsewhere(rel)
		var why string
		switch {
		case errors.Is(err, unix.ENOENT) || (err == nil && now != ino):
			why = "its name no longer has that file"
		case err == nil && !writers:
			why = "its writer closed it"
		default:
			continue // still written, or cannot tell (asked again)
		}
		s.queue.Release(rel)
		delete(s.orphans.inos, rel)
		s.log.Info("the hold for a writer of the killed run is released", "path", rel, "because", why)
	}
	s.orphans.count.Store(int32(len(s.orphans.inos)))
}

// orphansRenamed moves the holds of the orphans at or beneath oldRel to
// newRel after a rename through the mount (both ways for an exchange).
func (s *Store) orphansRenamed(oldRel, newRel string, exchange bool) error {
	if s.orphans.count.Load() == 0 {
		return nil
	}
	s.orphans.mu.Lock()
	defer s.orphans.mu.Unlock()
	moved := map[string]string{} // old name -> new
	for rel := range s.orphans.inos {
		if to, ok := renamedTo(rel, oldRel, newRel); ok {
			moved[rel] = to
		} else if to, ok := renamedTo(rel, newRel, oldRel); ok && exchange {
			moved[rel] = to
		}
	}
	inos := make(map[string]uint64, len(moved))
	for from, to := range moved {
		if err := s.queue.Hold(to); err != nil {
			return fmt.Errorf("journal %q: %w", to, err)
		}
		s.queue.Release(from)
		inos[to] = s.orphans.inos[from]
		delete(s.orphans.inos, from)
	}
	for to, ino := range inos {
		s.orphans.inos[to] = ino
	}
	s.orphans.count.Store(int32(len(s.orphans.inos)))
	return nil
}

// renamedTo is rel's name after a rename of from to to, if it moved.
func renamedTo(rel, from, to string) (string, bool) {
	if rel == from {
		return to, true
	}
	if rest, ok := strings.CutPrefix(rel, from+"/"); ok && from != "" {
		return path.Join(to, rest), true
	}
	return "", false
}

// writtenElsewhere reports the inode of rel's store file and whether a
// file of it is open for writing anywhere: the kernel refuses a read
// lease (F_RDLCK) on a file open for writing, by anyone, and grants it
// otherwise, at once (it is given back at once). The plugin runs as root,
// which may take a lease on any file (CAP_LEASE). Only a regular file can
// have a writer; anything else reports none.
func (s *Store) writtenElsewhere(rel string) (ino uint64, writers bool, err error) {
	f, err := s.local.OpenFile(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EISDIR) {
			return 0, false, nil // not a regular file
		}
		return 0, false, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, false, fmt.Errorf("fstat %q: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return st.Ino, false, nil
	}
	_, err = unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_RDLCK)
	switch {
	case errors.Is(err, unix.EAGAIN):
		return st.Ino, true, nil
	case err != nil:
		return st.Ino, false, fmt.Errorf("read lease on store file %q (to learn whether it is open for writing): %w", rel, err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_UNLCK); err != nil {
		return st.Ino, false, fmt.Errorf("give back the read lease on store file %q: %w", rel, err)
	}
	return st.Ino, false, nil
}
