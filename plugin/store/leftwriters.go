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
// before, whether anything still has its store file open for writing:
// nothing of this run has it open yet, and the store is the plugin's, so
// whatever does is a passthrough file of the dead run. (Asked again later,
// a file this run's containers opened for writing meanwhile counts too: it
// is held a while longer, which is as safe.) The kernel tells it without a list of
// open files: a read lease is refused while the file is open for writing
// anywhere (writtenElsewhere). Such a path is held, as the dead run's open
// held it, and asked again every leftWriterCheck and at the start of each
// flush, until no one has the file open for writing any more (the
// container closed it, or stopped); then its hold is released, which
// writes it back. Each flush meanwhile writes it, as for a writer of this
// run, and the hold keeps it in the journal across another crash.
//
// The hold is for the file (kept open for the asking), on one of its
// names: when that name no longer has the file (renamed through the new
// mount, or removed while the file has another name), the next look moves
// the hold to a name the file has, found by listing the store for its
// inode (leftName: rare, a held file renamed); a file with no name left
// lets it go, as its data goes with the removed file on any file system.
// Each flush looks first, so what it writes back is under the file's
// name of the moment.
//
// The new run's mount sees such a file change behind it: the kernel keeps
// a file's pages and attributes, and is told when the file changes through
// the mount, never when the left writer changes it. So each look that
// finds a held file changed (every leftWriterCheck, and before each
// flush), and each release, drops what the kernel keeps of it
// (OnWrittenBehind): the new mount shows a left writer's write within a
// look, as a cached mount shows a host change within its check. Without
// that it showed the file as it was when it first read it for as long as
// it kept it, and a new container's mapping of the file wrote what it had
// cached back over what the left writer had written since (found by
// TestExerciserCrash_D4_C3 once it kept writers open across kills).

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// leftWriterCheck is how often held paths are asked again whether anyone
// still writes them.
const leftWriterCheck = time.Second

// leftWriters are the paths held for writers a killed run left.
type leftWriters struct {
	mu    sync.Mutex
	files map[string]*leftFile // rel -> the store file the hold is for
	count atomic.Int32         // len(files), read without mu by each flush
	// changed, if set (OnWrittenBehind), is told of a held file its writer
	// changed since the last look, and of one whose hold is released.
	changed atomic.Pointer[func(rel string)]
	// unsure: a store file could not be asked (writtenElsewhere); said
	// once per run.
	unsure atomic.Bool
	stop   chan struct{} // closed by Close
	done   chan struct{} // closed when the watcher has returned
}

// leftFile is a held store file, open for reading (the lease is asked of
// it, and its fstat tells its inode and whether it still has a name), and
// its size and times at the last look.
type leftFile struct {
	f    *os.File
	seen [3]int64 // size, mtime and ctime (ns)
}

// saw records st as the last look at l, and reports whether the file's
// size or times moved since the one before.
func (l *leftFile) saw(st *unix.Stat_t) bool {
	now := [3]int64{st.Size, st.Mtim.Nano(), st.Ctim.Nano()}
	same := now == l.seen
	l.seen = now
	return !same
}

// OnWrittenBehind sets changed, called with the path of each held file
// whose writer changed it since the last look (every leftWriterCheck, and
// before each flush: an fsync's too, while its request is served), and of
// each whose hold is released: the mount (fsys.Mount.Invalidate) drops
// what the kernel keeps of it. It is called with no lock of the store
// held. nil stops the calls.
func (s *Store) OnWrittenBehind(changed func(rel string)) {
	if changed == nil {
		s.left.changed.Store(nil)
		return
	}
	s.left.changed.Store(&changed)
}

// tellChanged calls the OnWrittenBehind function for each of rels.
func (s *Store) tellChanged(rels []string) {
	if fn := s.left.changed.Load(); fn != nil {
		for _, rel := range rels {
			(*fn)(rel)
		}
	}
}

// watchLeftWriters holds the paths of pending (the journal's pending paths at
// Open) whose store files are open for writing elsewhere, before Open
// returns: no flush can come before, so none can take such a path for
// clean. (The writeback may have started on them: a Put that ends after
// the hold leaves the path dirty, as for any change during a Put.) Then,
// if it held any, it asks again every leftWriterCheck until none is left.
func (s *Store) watchLeftWriters(pending []string) {
	for _, rel := range pending {
		s.adoptLeftWriter(rel)
	}
	if s.left.count.Load() == 0 {
		return
	}
	s.left.stop, s.left.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.left.done)
		t := time.NewTicker(leftWriterCheck)
		defer t.Stop()
		for s.left.count.Load() > 0 {
			select {
			case <-s.left.stop:
				return
			case <-t.C:
				s.checkLeftWriters()
			}
		}
	}()
}

// stopLeftWriters stops the watcher (Close). The holds stay in the journal:
// the next run asks again.
func (s *Store) stopLeftWriters() {
	if s.left.stop == nil {
		return
	}
	close(s.left.stop)
	<-s.left.done
	s.left.mu.Lock()
	defer s.left.mu.Unlock()
	for _, l := range s.left.files {
		l.f.Close()
	}
}

// adoptLeftWriter holds rel if its store file is open for writing elsewhere.
func (s *Store) adoptLeftWriter(rel string) {
	f, err := s.local.OpenFile(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return // gone, or not a regular file (hostpath.OpenFile refuses the others)
	}
	var st unix.Stat_t
	writers, err := writtenElsewhere(f, &st)
	if err != nil || !writers {
		if err != nil && !s.left.unsure.Swap(true) {
			s.log.Warn("cannot tell whether a writer of the killed run still writes this file (said once): what it writes after this run's first writeback of it may not reach the host",
				"path", rel, "err", err)
		}
		f.Close()
		return
	}
	s.left.mu.Lock()
	defer s.left.mu.Unlock()
	if _, ok := s.left.files[rel]; ok {
		f.Close()
		return
	}
	if err := s.queue.Hold(rel); err != nil {
		s.log.Error("cannot hold a file a writer of the killed run still writes", "path", rel, "err", err)
		f.Close()
		return
	}
	if s.left.files == nil {
		s.left.files = make(map[string]*leftFile)
	}
	l := &leftFile{f: f}
	l.saw(&st)
	s.left.files[rel] = l
	s.left.count.Store(int32(len(s.left.files)))
	s.log.Info("a writer of the killed run still has this file open: it is held dirty until it closes, and each flush writes it back", "path", rel)
}

// checkLeftWriters releases each held path whose file no one writes any
// more, or whose name no longer has the file the hold was for, and tells
// the mount of those and of the files changed since the last look
// (OnWrittenBehind). Each flush calls it first (beforeFlush), so that the
// exit flush after the container's stop leaves nothing held.
func (s *Store) checkLeftWriters() {
	if s.left.count.Load() == 0 {
		return
	}
	s.tellChanged(s.lookAtLeftWriters())
}

// lookAtLeftWriters is checkLeftWriters but for the telling: it returns
// the paths to tell of.
func (s *Store) lookAtLeftWriters() (changed []string) {
	s.left.mu.Lock()
	defer s.left.mu.Unlock()
	for _, rel := range slices.Collect(maps.Keys(s.left.files)) {
		l := s.left.files[rel]
		if l == nil {
			continue // let go of by an earlier one of the loop (moveLeftHold)
		}
		var st unix.Stat_t
		writers, err := writtenElsewhere(l.f, &st)
		var why string
		switch {
		case err == nil && st.Nlink == 0:
			why = "the file was removed"
		case err == nil && !writers:
			why = "its writer closed it"
		case err != nil:
			continue // cannot tell: asked again
		}
		if why == "" {
			if now, ok := s.leftName(rel, st.Ino); !ok {
				why = "no name of the store has the file"
			} else if now != rel {
				if err := s.moveLeftHold(rel, now); err != nil {
					s.log.Error("cannot hold a file a writer of the killed run still writes", "path", now, "err", err)
					continue
				}
				rel = now
			}
		}
		if why == "" {
			if l.saw(&st) {
				changed = append(changed, rel)
			}
			continue
		}
		s.queue.Release(rel)
		l.f.Close()
		delete(s.left.files, rel)
		changed = append(changed, rel)
		s.log.Info("the hold for a writer of the killed run is released", "path", rel, "because", why)
	}
	s.left.count.Store(int32(len(s.left.files)))
	return changed
}

// leftName is a name the store file of inode ino has now: rel if it still
// has it, or else one found by listing the store for the inode (the file
// renamed, or the held one of several names removed). Rare, and the
// listing stops at the first.
func (s *Store) leftName(rel string, ino uint64) (string, bool) {
	if st, err := s.local.Lstat(rel); err == nil && st.Ino == ino {
		return rel, true
	}
	dirs := []string{""}
	for len(dirs) > 0 {
		dir := dirs[0]
		dirs = dirs[1:]
		ents, err := s.local.ReadDirTypes(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			p := join(dir, e.Name)
			switch {
			case e.Type == unix.S_IFREG && e.Ino == ino:
				return p, true
			case e.Type == unix.S_IFDIR:
				dirs = append(dirs, p)
			}
		}
	}
	return "", false
}

// moveLeftHold moves the hold of from to to: held there (journaled dirty
// first), then released on from. left.mu held.
func (s *Store) moveLeftHold(from, to string) error {
	l := s.left.files[from]
	if _, ok := s.left.files[to]; ok {
		// Held there already (another name's writer): one hold is enough.
		s.queue.Release(from)
		l.f.Close()
		delete(s.left.files, from)
		return nil
	}
	if err := s.queue.Hold(to); err != nil {
		return fmt.Errorf("journal %q: %w", to, err)
	}
	s.queue.Release(from)
	delete(s.left.files, from)
	s.left.files[to] = l
	return nil
}

// writtenElsewhere fstats f (into st) and reports whether a file of it is
// open for writing anywhere: the kernel refuses a read lease (F_RDLCK) on
// a file open for writing, by anyone, and grants it otherwise, at once
// (it is given back at once). The plugin runs as root, which may take a
// lease on any file (CAP_LEASE). Only a regular file can have a writer;
// anything else reports none.
func writtenElsewhere(f *os.File, st *unix.Stat_t) (bool, error) {
	if err := unix.Fstat(int(f.Fd()), st); err != nil {
		return false, fmt.Errorf("fstat %s: %w", f.Name(), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, nil
	}
	_, err := unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_RDLCK)
	switch {
	case errors.Is(err, unix.EAGAIN):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("read lease on %s (to learn whether it is open for writing): %w", f.Name(), err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_UNLCK); err != nil {
		return false, fmt.Errorf("give back the read lease on %s: %w", f.Name(), err)
	}
	return false, nil
}
