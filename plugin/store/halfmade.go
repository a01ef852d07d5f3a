package store

// Changes made on the host and then in the store, cut between the two.
//
// A rename the store cannot make alone (a directory, a file with several
// names, one over such a file; all of them in cached) is made on the host
// first, then in the store (Rename). A plugin killed between the two left
// the host renamed and the store not, and the next run's refresh could
// only bring the host's side in as it finds it: the old name removed, the
// new one made afresh from the host. Made afresh, a file loses the names it
// shares in the store (a share such as sshfs shows every name as its own
// inode, so nothing links it back), and a directory its content: the
// crash exerciser found `rename a -> h (over existing: true), cut by a
// kill` leaving h a file of one name where a, its old name, had three.
//
// So such a rename is recorded first, in a file of its own beside the
// store's tree (written without fsync, as the journal: a plugin killed
// leaves it in the page cache), and the record removed once both halves
// are made. The next Open finishes what it finds: where the host has the
// new name and not the old one and the store still the old one, it renames
// in the store too; otherwise the host refused or was not reached, and
// the rename was not made. Either way whole, as the container, whose
// rename failed (ENOTCONN), may find it.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// halfMade records the renames made on the host and not yet in the store.
type halfMade struct {
	dir  string // one file per rename under way
	next atomic.Uint64
}

// halfMadeDir is the directory of a store's records: beside its tree,
// named after it.
func halfMadeDir(tree string) string {
	return filepath.Clean(tree) + ".renames-under-way"
}

// begin records that oldRel is being renamed to newRel; end removes the
// record, once the store has the rename too or the host refused it.
func (h *halfMade) begin(oldRel, newRel string) (end func(), err error) {
	name := filepath.Join(h.dir, strconv.FormatUint(h.next.Add(1), 10))
	if err := os.WriteFile(name, []byte(oldRel+"\x00"+newRel), 0o600); err != nil {
		return nil, fmt.Errorf("record the rename of %q to %q: %w", oldRel, newRel, err)
	}
	return func() { os.Remove(name) }, nil
}

// finishHalfMade makes in the store the renames an earlier run made on the
// host and not in the store, and forgets the records, before the store
// serves. A record it cannot read (a damaged file) is dropped: the refresh
// then brings the host's side in as it finds it, as before records.
func (s *Store) finishHalfMade() error {
	if err := os.MkdirAll(s.halfMade.dir, 0o700); err != nil {
		return fmt.Errorf("store: renames under way: %w", err)
	}
	ents, err := os.ReadDir(s.halfMade.dir)
	if err != nil {
		return fmt.Errorf("store: renames under way: %w", err)
	}
	for _, e := range ents {
		name := filepath.Join(s.halfMade.dir, e.Name())
		b, err := os.ReadFile(name)
		oldRel, newRel, ok := strings.Cut(string(b), "\x00")
		switch {
		case err != nil || !ok:
			s.log.Warn("a record of a rename under way when the plugin stopped could not be read; dropped",
				"record", name, "err", err)
		default:
			s.finishRename(oldRel, newRel)
		}
		if err := os.Remove(name); err != nil {
			return fmt.Errorf("store: renames under way: %w", err)
		}
	}
	return nil
}

// finishRename makes in the store the rename of oldRel to newRel if the
// host has made it and the store has not.
func (s *Store) finishRename(oldRel, newRel string) {
	_, herr := s.host.Lstat(oldRel)
	hostMoved := errors.Is(herr, unix.ENOENT)
	if hostMoved {
		_, herr = s.host.Lstat(newRel)
		hostMoved = herr == nil
	}
	_, lerr := s.local.Lstat(oldRel)
	if !hostMoved || lerr != nil {
		s.log.Info("a rename under way when the plugin stopped was not made", "path", oldRel, "to", newRel)
		return
	}
	if err := s.local.Rename(oldRel, newRel, 0); err != nil {
		s.log.Warn("a rename the host made when the plugin stopped could not be made in the store; the refresh brings the host's side in",
			"path", oldRel, "to", newRel, "err", err)
		return
	}
	s.moveTombs(oldRel, newRel, false)
	s.rebase(newRel)
	if s.journal != nil {
		// What the journal holds under the old names is held under the
		// new ones too: a file a killed run's writer still has open
		// (leftwriters.go) is looked for by the names it holds, and its
		// writes are written back under the name it now has.
		for _, p := range s.journal.Pending() {
			if rest, ok := beneath(p, oldRel); ok {
				if err := s.journal.MarkDirty(newRel + rest); err != nil {
					s.log.Warn("a rename the host made when the plugin stopped: journal its new name", "path", newRel, "err", err)
				}
			}
		}
	}
	s.log.Info("a rename the host made when the plugin stopped, made in the store too", "path", oldRel, "to", newRel)
}
