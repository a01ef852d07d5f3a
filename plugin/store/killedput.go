package store

// What a Put killed half-way leaves on the host, and how the next run
// tells it from a host edit.
//
// Temporary files. The writeback writes a file or a symlink beside its
// target under a temporary name and renames it over the target (putFile,
// putSymlink). A plugin killed between the two leaves that file on the
// host, in the user's folder, and nothing would ever remove it: the host
// refresh ignores such names (IsTemporary), so the container never sees
// it, but the user does (`git status` lists it). So each temporary name
// says which store made it and in which run (tmpTags), and the first Put
// of a run into a directory where the run before had paths left to write
// back (the journal's pending paths at Open: a Put in flight at the kill
// is one of them, its temporary file in its directory) lists that
// directory once and removes what earlier runs of this store left there.
// The names of other stores, as another volume of the same folder makes
// them, are left alone: they may be in use.

import (
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// tagLen is the length of each of a temporary name's two tags, base 36.
const tagLen = 7

// tmpTags are the tags of the temporary names a store's run makes:
// tmpPrefix, the store's tag, the run's tag, "-", then the rest.
type tmpTags struct {
	store string // the same for every run of the store: from its tree's path
	run   string // this run's
}

func newTmpTags(tree string) tmpTags {
	h := fnv.New32a()
	h.Write([]byte(tree))
	return tmpTags{store: base36(uint64(h.Sum32())), run: base36(uint64(rand.Uint32()))}
}

// base36 is v in base 36, tagLen digits (zero-padded, or its last ones).
func base36(v uint64) string {
	s := strconv.FormatUint(v, 36)
	if len(s) < tagLen {
		s = strings.Repeat("0", tagLen-len(s)) + s
	}
	return s[len(s)-tagLen:]
}

// name is a temporary name for a writeback of rel, in rel's directory:
// with rel's own name in it where that fits.
func (g tmpTags) name(rel string) string {
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	name := tmpPrefix + g.store + g.run + "-" + path.Base(rel) + "-" + stamp
	if len(name) > 255 {
		name = tmpPrefix + g.store + g.run + "-" + stamp
	}
	return path.Join(dirOf(rel), name)
}

// leftBehind reports a temporary name of this store made by another run.
func (g tmpTags) leftBehind(name string) bool {
	rest, ok := strings.CutPrefix(name, tmpPrefix+g.store)
	return ok && len(rest) > tagLen && rest[tagLen] == '-' && rest[:tagLen] != g.run
}

// leftovers are the host directories an earlier run may have left
// temporary files in, not yet looked at by this run.
type leftovers struct {
	mu   sync.Mutex
	dirs map[string]bool
}

// expect notes the directories of the paths an earlier run left pending.
func (l *leftovers) expect(pending []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, rel := range pending {
		if l.dirs == nil {
			l.dirs = make(map[string]bool)
		}
		l.dirs[dirOf(rel)] = true
	}
}

// take reports whether dir is to be looked at, and takes it off the list.
func (l *leftovers) take(dir string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.dirs[dir] {
		return false
	}
	delete(l.dirs, dir)
	return true
}

// again puts dir back on the list: looking at it failed.
func (l *leftovers) again(dir string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dirs[dir] = true
}

// removeLeftovers removes from the host directory of rel the temporary
// files earlier runs of this store left there, the first time this run
// writes back into it. Called before each Put; it costs nothing but a map
// lookup once the directory was looked at, or if no earlier run left
// anything to write back there. A directory that cannot be listed (the
// share gone) is looked at again at the next Put into it.
func (s *Store) removeLeftovers(rel string) {
	dir := dirOf(rel)
	if !s.leftovers.take(dir) {
		return
	}
	entries, err := s.host.ReadDir(dir)
	if err != nil {
		if !gone(err) {
			s.leftovers.again(dir)
		}
		return
	}
	for _, e := range entries {
		if !s.tmp.leftBehind(e.Name) {
			continue
		}
		p := path.Join(dir, e.Name)
		if err := s.host.Remove(p); err != nil && !gone(err) {
			s.log.Warn("could not remove a temporary file an earlier run left on the host", "path", p, "err", err)
			continue
		}
		s.log.Info("removed a temporary file an earlier run left on the host (the plugin stopped in the middle of writing it back)", "path", p)
	}
}

// A Put killed after its rename. A whole-file Put renames its temporary file over the host's, then records
// what the host now has as the store file's base (recordWritten). A plugin
// killed between the two left the host with the container's version and the
// store with the base of the version before: the next run's Put of the path
// took the host's copy for a host edit and kept it aside (rule D7: a
// spurious conflict copy, found by TestExerciserCrash_D4_C3, three in 24
// runs over sshfs). So before the rename the Put marks the store file with
// the host attributes the renamed file has (xattrWriting), and removes the
// mark once the base is recorded; a host file that matches a mark left in
// place is the store's own write, not a host edit.
//
// A symlink cannot carry an xattr: its mark is kept in the journal instead
// (linkWriting), as its base is (tombs). Without it a Put of a symlink
// killed after its rename left the next run's Put comparing targets, and
// a target the share refuses to tell (sshfs: absolute, or with "..")
// compares with none: a spurious conflict copy of the container's own
// symlink (found by TestExerciserCrash_D4_C3, delegated over sshfs, once
// in two CI runs).
//
// A file rewritten in place (a linked one, or only its changed ranges) has
// no such mark: a plugin killed in the middle of that leaves a host file
// that is neither version, and its next Put keeps it aside, as for a host
// edit: nothing is lost, but a conflict copy of a half-written file is left.

// markWriting marks the store file rel with hst, the attributes of the
// version about to be renamed into place on the host (nil: not known, no
// mark). Best effort: without the mark, a kill before the base is recorded
// costs a conflict copy, as before.
func (s *Store) markWriting(rel string, hst *unix.Stat_t) {
	if hst == nil {
		return
	}
	if hst.Mode&unix.S_IFMT == unix.S_IFLNK {
		s.markWritingLink(rel, baseOf(hst))
		return
	}
	if err := s.local.Setxattr(rel, xattrWriting, baseOf(hst).encode(), 0); err != nil {
		s.log.Debug("could not mark a file being written back", "path", rel, "err", err)
		return
	}
	s.writing.Store(rel, struct{}{})
}

// unmarkWriting removes the mark markWriting made on rel, once its base is
// recorded.
func (s *Store) unmarkWriting(rel string) {
	s.unmarkWritingLink(rel)
	if _, ok := s.writing.LoadAndDelete(rel); !ok {
		return
	}
	if err := s.local.Removexattr(rel, xattrWriting); err != nil && !errors.Is(err, unix.ENODATA) {
		s.log.Debug("could not unmark a file written back", "path", rel, "err", err)
	}
}

// hostHoldsAnUnrecordedPut reports whether the host file or symlink rel,
// as a lookup saw it (hst), is the version an earlier run's Put renamed
// into place without recording it (markWriting). Asked only where the
// base does not match.
func (s *Store) hostHoldsAnUnrecordedPut(rel string, hst *unix.Stat_t) bool {
	var w Base
	var ok bool
	switch hst.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		w, ok = s.baseIn(rel, xattrWriting)
	case unix.S_IFLNK:
		s.tombMu.Lock()
		w, ok = s.linkWriting[rel]
		s.tombMu.Unlock()
	}
	if !ok {
		return false
	}
	at, err := s.matchesPastCaches(rel, w, hst)
	if err != nil || !at {
		return false
	}
	s.log.Info("the host holds what a writeback the plugin was killed in wrote: not a host edit", "path", rel)
	return true
}

// markWritingLink is markWriting for a symlink: a delegated store's journal
// keeps the mark (a store without one writes nothing back).
func (s *Store) markWritingLink(rel string, b Base) {
	if s.journal == nil {
		return
	}
	s.tombMu.Lock()
	defer s.tombMu.Unlock()
	if s.linkWriting == nil {
		s.linkWriting = make(map[string]Base)
	}
	s.linkWriting[rel] = b
	if err := s.journal.SetWriting(rel, b.encode()); err != nil {
		s.log.Debug("could not mark a symlink being written back", "path", rel, "err", err)
	}
}

// unmarkWritingLink removes rel's symlink mark, if it has one: made by
// this run or, left by a killed one, found in the journal at Open.
func (s *Store) unmarkWritingLink(rel string) {
	s.tombMu.Lock()
	defer s.tombMu.Unlock()
	if _, ok := s.linkWriting[rel]; !ok {
		return
	}
	delete(s.linkWriting, rel)
	if err := s.journal.DropWriting(rel); err != nil {
		s.log.Debug("could not unmark a symlink written back", "path", rel, "err", err)
	}
}
