package store

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/bindstate/bindstate/plugin/writeback"
)

// heldWriters are the delegated files open for writing that hold their
// path dirty in the journal (File.BeginWrite) until their release.
//
// The kernel's writes by passthrough are never announced, so the hold is
// what keeps such a file's path in the journal (across a crash) and what
// makes a flush write it back (writeback.Queue.Flush: a held path takes a
// writeback that starts after the flush). A hold is on a name, and a file
// renamed while open left it on the old one: its new name, once written
// back, was clean, so an fsync or a flush wrote nothing the kernel wrote
// since, and a crash lost it from the journal. (Found by a model test of a
// database file: written, renamed and fsynced at random.) So holds follow
// renames (followRenames): after each rename through the mount
// (Store.Renamed), and at the start of each flush, for one that lands
// while the flush starts.
//
// Finding a file's current name walks the node tree, and an fsync of a
// database's file must not pay that for each of its other open files: the
// renames made since a file's hold are counted, and one with none since is
// not looked at.
type heldWriters struct {
	mu      sync.Mutex
	files   map[*File]struct{}
	renames atomic.Uint64 // renames through the mount done so far (Store.Renamed)
	// followed is a rename count every held file had been looked at
	// for: a flush with no rename since looks at none.
	followed atomic.Uint64
}

// add registers f, whose hold is being taken, and returns the rename
// count for f.heldRenames. f.mu held.
func (w *heldWriters) add(f *File) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.files == nil {
		w.files = make(map[*File]struct{})
	}
	w.files[f] = struct{}{}
	return w.renames.Load()
}

// remove unregisters f, whose hold is released. f.mu held.
func (w *heldWriters) remove(f *File) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.files, f)
}

// Renamed is called after a rename through the mount once the node tree
// has the new name (fsys calls it when the bridge is done with RENAME: the
// file's current name, File.rel, comes from that tree). It moves the holds
// of the files the rename moved.
func (s *Store) Renamed() error {
	if s.queue == nil {
		return nil
	}
	s.heldWriters.renames.Add(1)
	return s.heldWriters.followRenames(s.queue)
}

// followRenames moves the hold of each file renamed since it took it to
// the name it has now: held there (Hold journals it dirty first), then
// released on the old name (whose writeback takes the old name away on the
// host, as the rename does).
func (w *heldWriters) followRenames(q *writeback.Queue) error {
	renames := w.renames.Load()
	if w.followed.Load() == renames {
		return nil // and a file held since has this count (add)
	}
	w.mu.Lock()
	files := make([]*File, 0, len(w.files))
	for f := range w.files {
		files = append(files, f)
	}
	w.mu.Unlock()
	for _, f := range files {
		if err := f.followRename(q, renames); err != nil {
			return err
		}
	}
	w.followed.Store(renames)
	return nil
}

// followRename is followRenames for f; renames is the count it was called
// at.
func (f *File) followRename(q *writeback.Queue, renames uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.moveHold(q, renames)
}

// moveHold is followRename with f.mu held (File.Release moves the hold
// too, before it releases it).
func (f *File) moveHold(q *writeback.Queue, renames uint64) error {
	if f.held == "" || f.heldRenames == renames {
		return nil // released, or not renamed since its hold
	}
	cur, ok := f.rel()
	if !ok || cur == f.held {
		// Unlinked (its old name keeps the hold: the journal writes back
		// its removal), or renamed back.
		f.heldRenames = renames
		return nil
	}
	if err := q.Hold(cur); err != nil {
		return fmt.Errorf("journal %q: %w", cur, err)
	}
	q.Release(f.held)
	f.held, f.heldRenames = cur, renames
	return nil
}
