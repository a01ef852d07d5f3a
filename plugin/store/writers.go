package store

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bindstate/bindstate/plugin/writeback"
)

// heldWriters are the delegated files open for writing that hold their
// path dirty in the journal (File.BeginWrite) until their release.
//
// The hold is on the name the file had when it was taken. The kernel's
// writes by passthrough are never announced, so the hold is what makes a
// flush write such a file back (writeback.Queue.Flush: a held path takes a
// writeback that starts after the flush). A file renamed while open leaves
// its hold on the old name, and its new name, once written back, is clean:
// an fsync or a flush then wrote nothing of what the kernel wrote since, and
// the next writeback came at the file's release. (Found by a model test of
// a database file: written, renamed and fsynced at random.) So a flush
// first marks dirty the current name of every such file beneath what it
// flushes (markRenamed).
//
// Finding a file's current name walks the node tree, and an fsync of a
// database's file must not pay that for each of its other open files: the
// renames made since a file's hold are counted, and one with none since is
// not looked at.
type heldWriters struct {
	mu      sync.Mutex
	files   map[*File]struct{}
	renames atomic.Uint64 // delegated renames begun so far (renaming)
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

// renaming counts a rename about to be made.
func (w *heldWriters) renaming() { w.renames.Add(1) }

func (w *heldWriters) remove(f *File) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.files, f)
}

// markRenamed marks dirty in q the current name of each held file renamed
// since it took its hold, where that name is one of prefixes or beneath
// one ("" is everything).
func (w *heldWriters) markRenamed(q *writeback.Queue, prefixes []string) error {
	renames := w.renames.Load()
	w.mu.Lock()
	files := make([]*File, 0, len(w.files))
	for f := range w.files {
		files = append(files, f)
	}
	w.mu.Unlock()
	for _, f := range files {
		f.mu.Lock()
		held, since := f.held, f.heldRenames
		f.mu.Unlock()
		if since == renames {
			continue // no rename since its hold
		}
		cur, ok := f.rel()
		if !ok || held == "" || cur == held || !underAny(cur, prefixes) {
			continue
		}
		if err := q.MarkDirty(cur); err != nil {
			return fmt.Errorf("journal %q: %w", cur, err)
		}
	}
	return nil
}

// underAny reports whether rel is one of prefixes or beneath one.
func underAny(rel string, prefixes []string) bool {
	for _, p := range prefixes {
		if p == "" || rel == p || strings.HasPrefix(rel, p+"/") {
			return true
		}
	}
	return false
}
