package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/hostpath"
)

// How a change reaches the host is decided per operation by route:
//
//	routeLocal   host-origin: bring a host change in; local only
//	routeThrough host first, then local (cached, rule D8 special files, and
//	             delegated while it overlaps a stronger mount: SetWriteThrough)
//	routeJournal journal, local, write back later (delegated)
type route int

const (
	routeLocal route = iota
	routeThrough
	routeJournal
)

func (s *Store) routeFor(ctx context.Context) route {
	switch {
	case isHostOrigin(ctx):
		return routeLocal
	case s.queue != nil && !s.through.Load():
		return routeJournal
	default:
		return routeThrough
	}
}

// SetWriteThrough switches a delegated store to write-through (on) or back
// to the journal (off): where a delegated mount overlaps a cached or
// consistent one, container changes must reach the host before the syscall
// returns (rules C4, D5). Before switching on, everything journaled is
// written back: once without locks, then again holding off every container
// change, so no change is left behind in the journal. If that fails the
// store stays delegated and the error names the paths. Files opened before
// the switch have no host half; their writes are journaled and written back
// before the write returns (File.WriteAt). The writeback queue keeps
// running either way. A no-op for a cached store.
func (s *Store) SetWriteThrough(ctx context.Context, on bool) error {
	if s.queue == nil {
		return nil
	}
	if !on {
		if s.through.Swap(false) {
			s.log.Info("writing through ended: container changes are journaled again")
		}
		return nil
	}
	if s.through.Load() {
		return nil
	}
	if err := s.Flush(ctx); err != nil {
		return err
	}
	s.apply.Lock()
	defer s.apply.Unlock()
	if err := s.Flush(ctx); err != nil {
		return err
	}
	s.through.Store(true)
	s.log.Info("writing through: container changes reach the host before the syscall returns")
	return nil
}

// WritesThrough reports whether a delegated store currently writes through
// (SetWriteThrough).
func (s *Store) WritesThrough() bool { return s.through.Load() }

// isSpecial reports FIFOs, sockets and devices, which always live on the host
// (rule D8): every change to them goes straight through.
// isLinked reports a regular file with several names. In the delegated state
// its names are kept in step with the host's at once (Link, Unlink and
// Rename go through), while its content stays journaled: every writeback of
// any name rewrites the one host file in place, so the host's names of it
// change together, as the container's do, and a base (an xattr of the one
// store inode) holds for all of them. A name changed only in the store would
// leave the two sides with different sets of names for one file: a later
// in-place rewrite would then reach a host name the container had removed
// or given to another file.
func isLinked(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1
}

func isSpecial(mode uint32) bool {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFDIR, unix.S_IFLNK:
		return false
	}
	return true
}

// lockShared holds the apply lock for one change: shared for a container's,
// exclusive for a host-origin one (the refresh bringing a host edit in
// through the mount), so that the two never interleave on a path. Holders
// never make a syscall on the mount itself: a FUSE request waiting here holds
// kernel locks (a directory's i_rwsem) that such a syscall would need.
func (s *Store) lockShared(ctx context.Context) func() {
	if isHostOrigin(ctx) {
		s.apply.Lock()
		return s.apply.Unlock
	}
	s.apply.RLock()
	return s.apply.RUnlock
}

// markDirty journals rels before a delegated change. Called again after the
// change (see writeback's generation check): a writeback that raced with the
// change then runs once more.
func (s *Store) markDirty(rels ...string) error {
	for _, r := range rels {
		if err := s.queue.MarkDirty(r); err != nil {
			return fmt.Errorf("journal %q: %w", r, err)
		}
	}
	return nil
}

// journaled makes a delegated change: its paths are journaled before it (a
// crash in between leaves them dirty) and again after it (a Put that ran
// meanwhile runs once more: writeback's generation check); before and after
// tell the range log.
func (s *Store) journaled(rels []string, local func() error, before, after func()) error {
	if err := s.markDirty(rels...); err != nil {
		return err
	}
	before()
	err := local()
	after()
	s.markDirty(rels...)
	return err
}

// do runs one change of rels along route r: onHost (may be nil) is the host
// half of a write-through, local the store half.
func (s *Store) do(r route, rels []string, onHost, local func() error) error {
	switch r {
	case routeThrough:
		if onHost != nil {
			if err := onHost(); err != nil {
				return err
			}
		}
		if err := local(); err != nil {
			return err
		}
		for _, rel := range rels {
			if s.openForWriteThrough(rel) {
				// Rebased when its last writer closes it (File.Release);
				// meanwhile the host refresh leaves it alone. A host stat
				// per write would cost a share round trip per write.
				continue
			}
			s.rebase(rel)
		}
		return nil
	case routeJournal:
		// The range log cannot tell what this changes: the next Put
		// copies rels whole (forgotten after the change too: a Put that
		// ran meanwhile began logging anew).
		forget := func() { s.ranges.forget(rels...) }
		return s.journaled(rels, local, forget, forget)
	default:
		return s.keepingDirMtimes(rels, local)
	}
}

// keepingDirMtimes runs a host-origin change (the refresh bringing a host
// edit in through the mount) and gives the directories holding rels back
// the mtime they had: making or removing a name in the store sets it to
// now, and the container must see the host's, which the refresh sets from
// the parent's listing (before or after this change, in whichever order it
// lists them). As EnsurePopulated does for the names it makes.
func (s *Store) keepingDirMtimes(rels []string, local func() error) error {
	type kept struct {
		dir   string
		mtime unix.Timespec
	}
	var dirs []kept
	for _, rel := range rels {
		dir := dirOf(rel)
		if slices.ContainsFunc(dirs, func(k kept) bool { return k.dir == dir }) {
			continue
		}
		if st, err := s.local.Lstat(dir); err == nil {
			dirs = append(dirs, kept{dir, st.Mtim})
		}
	}
	err := local()
	for _, k := range dirs {
		if st, serr := s.local.Lstat(k.dir); serr == nil && st.Mtim != k.mtime {
			if uerr := s.local.Utimes(k.dir, nil, &k.mtime); uerr != nil {
				s.log.Debug("keep directory mtime", "path", k.dir, "err", uerr)
			}
		}
	}
	return err
}

// rebase records the host's current attributes as rel's base after a
// write-through, so the host refresh does not take our own change for a host
// edit. Only where the store still has rel: after a removal, and for a
// rename's old name, there is no entry to record a base on, and the host's
// lstat would be a round trip to the share for nothing (on sshfs, one per
// file an rm -rf removes from a cached volume: make bench W3 rm). Nor
// while a cached writer has the file open: it keeps writerBase until the
// last writer's release rebases it (rebaseReleased).
func (s *Store) rebase(rel string) { s.rebaseUnlessWriters(rel, 0) }

// rebaseReleased is rebase at the release of one of the file's cached
// writers, which still counts among them.
func (s *Store) rebaseReleased(rel string) { s.rebaseUnlessWriters(rel, 1) }

// rebaseUnlessWriters is rebase, left out where the store file has more
// than own cached writers open.
func (s *Store) rebaseUnlessWriters(rel string, own int) {
	lst, err := s.local.Lstat(rel)
	if err != nil || s.writersOf(lst.Ino) > own {
		return
	}
	st, err := s.host.Lstat(rel)
	if err != nil {
		return
	}
	s.setBase(rel, &st)
}

// Lstat returns the attributes of rel as the container sees them.
func (s *Store) Lstat(rel string) (unix.Stat_t, error) { return s.local.Lstat(rel) }

// HostLstat returns the attributes of rel on the host: what the container
// sees of a file the kernel writes on the host (File.ServeFromHost).
func (s *Store) HostLstat(rel string) (unix.Stat_t, error) { return s.host.Lstat(rel) }

// ReadDir lists dir as the container sees it: names, inode numbers and
// types (a READDIRPLUS looks each entry up for its attributes anyway).
func (s *Store) ReadDir(dir string) ([]hostpath.DirEntry, error) {
	if err := s.EnsurePopulated(dir); err != nil {
		return nil, err
	}
	entries, err := s.local.ReadDirTypes(dir)
	if err == nil {
		var subdirs []string
		for _, e := range entries {
			if e.Type == unix.S_IFDIR {
				subdirs = append(subdirs, e.Name)
			}
		}
		s.prefetch.listed(dir, subdirs)
	}
	return entries, err
}

// Owner is who a new entry belongs to (the calling container process).
type Owner struct{ Uid, Gid int }

func (s *Store) chown(rel string, o Owner) error { return s.local.Lchown(rel, o.Uid, o.Gid) }

// hostChown sets the owner on the host, best effort: many shares refuse
// chown, and the container's view (the store) is what the caller checks.
// It reports whether it tried (a chown may clear setuid and setgid: a
// caller setting the mode too sets it after).
//
// An owner the entry already has is left alone: have is what the caller
// knows the entry has, or nil, and then it looks. The callers have just
// made or written the entry, so the kernel has its attributes from that
// reply and looking costs no round trip, where a chown is one (two on
// sshfs, which looks the entry up after it): in cached, one of the 12 or so
// requests a small file of an untar makes on the share.
func (s *Store) hostChown(rel string, o Owner, have *unix.Stat_t) bool {
	if have == nil {
		if st, err := s.host.Lstat(rel); err == nil {
			have = &st
		}
	}
	if have != nil && int(have.Uid) == o.Uid && int(have.Gid) == o.Gid {
		return false
	}
	if err := s.host.Lchown(rel, o.Uid, o.Gid); err != nil {
		s.log.Debug("host refused chown", "path", rel, "err", err)
	}
	return true
}

// Mkdir creates directory rel.
func (s *Store) Mkdir(ctx context.Context, rel string, mode uint32, o Owner) error {
	defer s.lockShared(ctx)()
	r := s.routeFor(ctx)
	if r == routeLocal {
		return s.adoptFromHost(rel)
	}
	return s.do(r, []string{rel},
		func() error {
			if err := s.host.Mkdir(rel, mode); err != nil {
				return err
			}
			s.hostChown(rel, o, nil)
			return nil
		},
		func() error {
			if err := s.local.Mkdir(rel, mode); err != nil {
				return err
			}
			if err := s.chown(rel, o); err != nil {
				return err
			}
			// New and empty on the host too: nothing to list later.
			return s.local.Setxattr(rel, xattrPopulated, mark, 0)
		})
}

// Mknod creates a FIFO, socket or device node. Such nodes always go straight
// to the host (rule D8).
func (s *Store) Mknod(ctx context.Context, rel string, mode uint32, dev uint64, o Owner) error {
	defer s.lockShared(ctx)()
	r := s.routeFor(ctx)
	if r == routeLocal {
		return s.adoptFromHost(rel)
	}
	if mode&unix.S_IFMT == unix.S_IFREG || mode&unix.S_IFMT == 0 {
		// mknod(S_IFREG) is a plain create: follow the state's rule.
		return s.do(r, []string{rel},
			func() error {
				if err := s.host.Mknod(rel, mode|unix.S_IFREG, 0); err != nil {
					return err
				}
				s.hostChown(rel, o, nil)
				return nil
			},
			func() error {
				if err := s.local.Mknod(rel, mode|unix.S_IFREG, 0); err != nil {
					return err
				}
				return s.chown(rel, o)
			})
	}
	return s.do(routeThrough, []string{rel},
		func() error {
			if err := s.host.Mknod(rel, mode, dev); err != nil {
				return err
			}
			s.hostChown(rel, o, nil)
			return nil
		},
		func() error {
			if err := s.local.Mknod(rel, mode, dev); err != nil {
				return err
			}
			return s.chown(rel, o)
		})
}

// Symlink creates a symlink at rel holding target verbatim.
func (s *Store) Symlink(ctx context.Context, target, rel string, o Owner) error {
	defer s.lockShared(ctx)()
	r := s.routeFor(ctx)
	if r == routeLocal {
		return s.adoptFromHost(rel)
	}
	return s.do(r, []string{rel},
		func() error {
			if err := s.host.Symlink(target, rel); err != nil {
				return err
			}
			s.hostChown(rel, o, nil)
			return nil
		},
		func() error {
			if err := s.local.Symlink(target, rel); err != nil {
				return err
			}
			return s.chown(rel, o)
		})
}

// adoptFromHost brings the host entry at rel into the store (a host-origin
// create): whatever the request said, the host's entry is what counts.
func (s *Store) adoptFromHost(rel string) error {
	if s.Busy(rel) {
		return ErrBusy
	}
	st, err := s.host.Lstat(rel)
	if err != nil {
		return err
	}
	return s.keepingDirMtimes([]string{rel}, func() error { return s.adopt(rel, &st) })
}

// Link creates newRel as a hard link to oldRel. Hard links are kept on the
// host too, so a delegated link first writes oldRel back and then links on
// both sides.
func (s *Store) Link(ctx context.Context, oldRel, newRel string) error {
	if s.routeFor(ctx) == routeJournal {
		// newRel too: a name the container removed may still be on the host.
		if err := s.Flush(ctx, oldRel, newRel); err != nil {
			return err
		}
		// The new name's directory may exist only in the store so far.
		if err := s.ensureHostParent(ctx, newRel); err != nil {
			return err
		}
	}
	defer s.lockShared(ctx)()
	// The store's name first, then the host's, and the store's taken back
	// if the host refuses. In the other order a plugin killed between the
	// two left the host with the link and the store without it, and no
	// later look at the host could tell: the host refresh brought the new
	// name in as a file of its own (a share such as sshfs shows every name
	// as its own inode), so a write through one name no longer reached the
	// other in the container. In this order the same kill leaves a store
	// name the host lacks, which the refresh removes as a host removal: the
	// link the container saw fail (ENOTCONN) was not made. (The kernel holds
	// the new name's directory for the whole request: no lookup through the
	// mount sees the store's name before the host has it, or after it is
	// taken back.)
	// TestD4_C3_ALinkIsMadeInTheStoreFirstAndTakenBackIfTheHostRefuses,
	// TestD4_C3_ALinkCutByAKillIsNotMade.
	return s.do(routeThrough, []string{oldRel, newRel}, nil, func() error {
		if err := s.local.Link(oldRel, newRel); err != nil {
			return err
		}
		if testHookLinkHalves != nil {
			testHookLinkHalves(newRel)
		}
		if err := s.host.Link(oldRel, newRel); err != nil {
			if rerr := s.local.Remove(newRel); rerr != nil {
				s.log.Warn("link refused by the host, and its store name could not be taken back",
					"path", newRel, "err", err, "remove_err", rerr)
			}
			return err
		}
		return nil
	})
}

// testHookRenameHalves, if set (by tests), runs in a Rename made on the
// host between the host's half and the store's.
var testHookRenameHalves func(newRel string)

// testHookLinkHalves, if set (by tests), runs in Link between the store's
// name and the host's: where a kill would leave the link.
var testHookLinkHalves func(newRel string)

// Unlink removes the non-directory rel.
func (s *Store) Unlink(ctx context.Context, rel string) error {
	defer s.lockShared(ctx)()
	if isHostOrigin(ctx) && (s.Busy(rel) || s.hostStillHas(rel)) {
		return ErrBusy
	}
	r := s.routeFor(ctx)
	if st, err := s.local.Lstat(rel); err == nil && isSpecial(st.Mode) && r != routeLocal {
		r = routeThrough
	} else if err == nil && r == routeJournal && isLinked(&st) {
		// One name of a file with others (isLinked): what was written
		// through this name goes to the host first (in place, so the other
		// names have it), then the name goes on both sides.
		if err := s.Flush(ctx, rel); err != nil {
			return err
		}
		r = routeThrough
	}
	return s.do(r, []string{rel},
		func() error { return ignoreENOENT(s.host.Remove(rel)) },
		func() error {
			if r == routeJournal {
				defer s.baseLocks.Lock(rel)()
				s.entombBase(rel)
				if testHookBaseKept != nil {
					testHookBaseKept(rel)
				}
			}
			return s.local.Remove(rel)
		})
}

// testHookBaseKept, if set (by tests), runs in a delegated Unlink or local
// rename between reading the base of rel's entry and removing or moving the
// entry.
var testHookBaseKept func(rel string)

// Rmdir removes the empty directory rel. Empty as the container would see
// it: entries on the host it never listed count.
func (s *Store) Rmdir(ctx context.Context, rel string) error {
	if !isHostOrigin(ctx) {
		if err := s.EnsurePopulated(rel); err != nil {
			return err
		}
	}
	defer s.lockShared(ctx)()
	if isHostOrigin(ctx) && (s.Busy(rel) || s.hostStillHas(rel)) {
		return ErrBusy
	}
	r := s.routeFor(ctx)
	return s.do(r, []string{rel},
		func() error { return ignoreENOENT(s.removeHostDir(rel)) },
		func() error {
			if r == routeJournal {
				// As for Unlink: what the host had here stays known, so a
				// file made at this name later replaces the host's
				// directory without faking a conflict (rule D7).
				defer s.baseLocks.Lock(rel)()
				s.entombBase(rel)
			}
			return s.local.Remove(rel)
		})
}

// removeHostDir removes the empty host directory rel. One that holds only
// names a share keeps files removed while open under (isShareHidden: the
// plugin's own file of one the container just closed and removed, released
// a moment later) is tried again until they are gone, for up to 2 s:
// `rm -rf` in a cached volume of sshfs failed with ENOTEMPTY now and then.
func (s *Store) removeHostDir(rel string) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := s.host.Remove(rel)
		if !errors.Is(err, unix.ENOTEMPTY) || time.Now().After(deadline) || !s.hostHoldsOnlyHidden(rel) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hostHoldsOnlyHidden reports whether the host directory dir holds only
// names of files removed while open (isShareHidden).
func (s *Store) hostHoldsOnlyHidden(dir string) bool {
	entries, err := s.host.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if !isShareHidden(e.Name) {
			return false
		}
	}
	return true
}

func ignoreENOENT(err error) error {
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// Rename renames oldRel to newRel (renameat2 flags: 0, RENAME_NOREPLACE,
// RENAME_EXCHANGE).
//
// A delegated rename of a regular file whose content is in the store stays
// local (both names journaled). Anything else — a directory, a stub whose
// content is still only on the host, a special file — is renamed on the
// host too, after writing back what is pending beneath both names, with all
// container changes held off so nothing lands under the old name meanwhile.
func (s *Store) Rename(ctx context.Context, oldRel, newRel string, flags uint32) error {
	if flags&^(unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE) != 0 {
		return unix.EINVAL
	}
	r := s.routeFor(ctx)
	if r == routeLocal {
		return s.local.Rename(oldRel, newRel, uint(flags))
	}
	if r == routeJournal && s.renamesLocally(oldRel, newRel, flags) {
		defer s.lockShared(ctx)()
		return s.do(r, []string{oldRel, newRel}, nil,
			func() error { return s.renameLocal(oldRel, newRel, flags) })
	}
	s.apply.Lock()
	defer s.apply.Unlock()
	if r == routeJournal {
		if err := s.Flush(ctx, oldRel, newRel); err != nil {
			return err
		}
		// The new name's directory may exist only in the store so far.
		if err := s.ensureHostParent(ctx, newRel); err != nil {
			return err
		}
	}
	// No writeback may run beneath either name while the host renames: one
	// writing a file into oldRel would see its temporary file carried off
	// to newRel and its final rename fail, leaving the temporary behind.
	defer s.treeLocks.lock(oldRel, newRel)()
	// Recorded while the host has it and the store not yet: a plugin
	// killed between the two has the next run finish it (halfmade.go). An
	// exchange needs none: both names stay on each side.
	if flags&unix.RENAME_EXCHANGE == 0 {
		if end, err := s.halfMade.begin(oldRel, newRel); err != nil {
			// A full store disk, say: the rename goes on unrecorded, as
			// before records, rather than fail.
			s.halfMadeLog.Warn("a rename made without its record: a plugin killed during it leaves the refresh to bring the host's side in",
				"path", oldRel, "to", newRel, "err", err)
		} else {
			defer end()
		}
	}
	if err := s.host.Rename(oldRel, newRel, uint(flags)); err != nil {
		return err
	}
	if testHookRenameHalves != nil {
		testHookRenameHalves(newRel)
	}
	if err := s.local.Rename(oldRel, newRel, uint(flags)); err != nil {
		return err
	}
	s.moveTombs(oldRel, newRel, flags&unix.RENAME_EXCHANGE != 0)
	s.rebase(newRel)
	if flags&unix.RENAME_EXCHANGE != 0 {
		s.rebase(oldRel)
	}
	return nil
}

// renamesLocally: only fetched regular files with one name (on both sides of
// an exchange) can be renamed in the store alone and written back later. A
// file with several names (isLinked) is renamed on the host too, and so is
// one replaced by the rename: its other names live on.
func (s *Store) renamesLocally(oldRel, newRel string, flags uint32) bool {
	ok := func(rel string) bool {
		st, err := s.local.Lstat(rel)
		return err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && !isLinked(&st) && !s.IsStub(rel)
	}
	if !ok(oldRel) {
		return false
	}
	if flags&unix.RENAME_EXCHANGE != 0 {
		return ok(newRel)
	}
	// Replacing a directory must go through (the host check for emptiness).
	if st, err := s.local.Lstat(newRel); err == nil && (st.Mode&unix.S_IFMT == unix.S_IFDIR || isLinked(&st)) {
		return false
	}
	return true
}

// Attrs is a set of attribute changes; nil fields are left alone.
type Attrs struct {
	Mode         *uint32
	Uid, Gid     *int
	Size         *int64
	Atime, Mtime *unix.Timespec
}

// Setattr changes rel's attributes.
func (s *Store) Setattr(ctx context.Context, rel string, a Attrs) error {
	if isHostOrigin(ctx) {
		return nil // hostOriginTruncate
	}
	r := s.routeFor(ctx)
	var regular uint64 // the store inode of a regular file
	if st, err := s.local.Lstat(rel); err == nil {
		if isSpecial(st.Mode) {
			r = routeThrough
		} else if st.Mode&unix.S_IFMT == unix.S_IFREG {
			regular = st.Ino
		}
	}
	if a.Size != nil {
		if err := s.prepareTruncate(rel, *a.Size); err != nil {
			return err
		}
	}
	defer s.lockShared(ctx)()
	if regular != 0 && s.restubMayRunBeside(r) {
		defer s.lockContentOf(regular)()
	}
	return s.do(r, []string{rel},
		func() error { return s.keptFromHost(rel, applyAttrs(s.host, rel, a)) },
		func() error { return applyAttrs(s.local, rel, a) })
}

// keptFromHost answers err, the host's refusal of a change to rel. A
// symlink's owner or times on a share that would set them on its target
// (hostpath.ErrSymlinkAttrs: sshfs) are kept from the host, and the change
// succeeds in the container's view only: refusing it would fail an untar
// run as root (tar sets the owner of each symlink it makes), and letting
// it through would change whatever file the symlink names on the server,
// inside the source or not. Said once per volume.
func (s *Store) keptFromHost(rel string, err error) error {
	if !errors.Is(err, hostpath.ErrSymlinkAttrs) {
		return err
	}
	level, msg := slog.LevelDebug, "a symlink's owner or times kept from the host"
	if s.symlinkAttrsSeen.CompareAndSwap(false, true) {
		level, msg = slog.LevelInfo, msg+": the source's file system would set them on the symlink's target; the container's view keeps them (said once per volume)"
	}
	s.log.Log(context.Background(), level, msg, "path", rel)
	return nil
}

// hostOriginTruncate: the one change the refresh makes to an existing
// entry through the mount is a truncate of a file it has brought in, for the
// IN_MODIFY that raises (syncer's Refresher.apply). RefreshEntry has already
// made the store's entry the host's, size and times, so the store changes
// nothing more: a truncate here, even to the file's own size, would set its
// mtime to now (ftruncate always does, and the kernel sends that time too),
// and the container would see a time the host's file does not have (rule
// C2). Setattr and File.Truncate answer it so.

// prepareTruncate: truncating a stub to zero needs none of its content;
// any other size keeps a prefix of it, which must be fetched first.
func (s *Store) prepareTruncate(rel string, size int64) error {
	if !s.IsStub(rel) {
		return nil
	}
	if size == 0 {
		// Under the content lock: a fetch in progress (the container's
		// own, or read-ahead) would otherwise go on copying the host's
		// content into the file after it has been truncated.
		f, err := s.local.OpenFile(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		unlock, err := s.lockContent(f)
		if err != nil {
			return fmt.Errorf("truncate %q: %w", rel, err)
		}
		defer unlock()
		return ignoreENODATA(unix.Fremovexattr(int(f.Fd()), xattrStub))
	}
	return s.EnsureContent(rel)
}

func ignoreENODATA(err error) error {
	if errors.Is(err, unix.ENODATA) {
		return nil
	}
	return err
}

func applyAttrs(root *hostpath.Root, rel string, a Attrs) error {
	if a.Uid != nil || a.Gid != nil {
		uid, gid := -1, -1
		if a.Uid != nil {
			uid = *a.Uid
		}
		if a.Gid != nil {
			gid = *a.Gid
		}
		if err := root.Lchown(rel, uid, gid); err != nil {
			return err
		}
	}
	if a.Mode != nil {
		if err := root.Chmod(rel, *a.Mode&07777); err != nil {
			return err
		}
	}
	if a.Size != nil {
		if err := root.Truncate(rel, *a.Size); err != nil {
			return err
		}
	}
	if a.Atime != nil || a.Mtime != nil {
		if err := root.Utimes(rel, a.Atime, a.Mtime); err != nil {
			return err
		}
	}
	return nil
}

// Extended attributes. The store's own namespace is invisible to containers.
// A name in a namespace the source's file system refuses (all of them over
// one that takes none) fails as on the source (EOPNOTSUPP; see
// refusedXattrs).

// xattrRefused reports a name the source's file system would refuse.
func (s *Store) xattrRefused(name string) bool {
	if !s.HostTakesXattrs() {
		return true
	}
	for _, ns := range s.xattrsRefused {
		if strings.HasPrefix(name, ns) {
			return true
		}
	}
	return false
}

// IsPrivateXattr reports names containers may not see or touch.
func IsPrivateXattr(name string) bool {
	return len(name) >= len(XattrPrefix) && name[:len(XattrPrefix)] == XattrPrefix
}

// Setxattr sets a container-visible extended attribute.
func (s *Store) Setxattr(ctx context.Context, rel, name string, data []byte, flags int) error {
	if s.xattrRefused(name) {
		return unix.EOPNOTSUPP
	}
	if IsPrivateXattr(name) {
		return unix.EPERM
	}
	defer s.lockShared(ctx)()
	r := s.routeFor(ctx)
	return s.do(r, []string{rel},
		func() error { return s.host.Setxattr(rel, name, data, flags) },
		func() error {
			if err := s.local.Setxattr(rel, name, data, flags); err != nil || r != routeJournal {
				return err
			}
			return s.noteXattrRemoved(rel, name, false)
		})
}

// Removexattr removes a container-visible extended attribute.
func (s *Store) Removexattr(ctx context.Context, rel, name string) error {
	if s.xattrRefused(name) {
		return unix.EOPNOTSUPP
	}
	if IsPrivateXattr(name) {
		return unix.ENODATA
	}
	defer s.lockShared(ctx)()
	r := s.routeFor(ctx)
	return s.do(r, []string{rel},
		func() error { return s.host.Removexattr(rel, name) },
		func() error {
			if err := s.local.Removexattr(rel, name); err != nil || r != routeJournal {
				return err
			}
			// The host may have it from an earlier writeback: the next
			// one removes it there too (putRemovedXattrs).
			return s.noteXattrRemoved(rel, name, true)
		})
}

// Getxattr reads a container-visible extended attribute.
func (s *Store) Getxattr(rel, name string, dest []byte) (int, error) {
	if s.xattrRefused(name) {
		return 0, unix.EOPNOTSUPP
	}
	if IsPrivateXattr(name) {
		return 0, unix.ENODATA
	}
	return s.local.Getxattr(rel, name, dest)
}

// Listxattr lists container-visible extended attribute names ("\0"-separated).
func (s *Store) Listxattr(rel string) ([]byte, error) {
	if !s.HostTakesXattrs() {
		return nil, unix.EOPNOTSUPP
	}
	names, err := xattrCall(func(b []byte) (int, error) { return s.local.Listxattr(rel, b) })
	if err != nil {
		return nil, err
	}
	var out []byte
	for _, name := range splitNames(names) {
		if !IsPrivateXattr(name) {
			out = append(out, name...)
			out = append(out, 0)
		}
	}
	return out, nil
}

func splitNames(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == 0 {
			if i > start {
				out = append(out, string(b[start:i]))
			}
			start = i + 1
		}
	}
	return out
}

// Statfs reports the store's file system (where the container's writes land).
func (s *Store) Statfs(st *unix.Statfs_t) error {
	f, err := s.local.OpenFile("", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fstatfs(int(f.Fd()), st)
}

// dirOf returns the parent of rel ("" for top-level entries).
func dirOf(rel string) string {
	d := path.Dir(rel)
	if d == "." {
		return ""
	}
	return d
}

// hostStillHas reports whether the host has at rel what the store has: a
// host-origin deletion planned from a listing taken just before a container's
// write-through create must not remove what the container made. A host entry
// of another type (or a symlink with another target) is a replacement, which
// goes ahead.
func (s *Store) hostStillHas(rel string) bool {
	hst, err := s.host.Lstat(rel)
	if err != nil {
		return false
	}
	lst, err := s.local.Lstat(rel)
	if err != nil || lst.Mode&unix.S_IFMT != hst.Mode&unix.S_IFMT {
		return false
	}
	if lst.Mode&unix.S_IFMT == unix.S_IFLNK {
		// A target the share refuses to tell cannot be compared: what
		// cannot be told apart from the store's is kept.
		lt, err1 := s.local.Readlink(rel)
		ht, err2 := s.hostReadlink(rel)
		return err1 == nil && err2 == nil && (lt == ht || ht == targetRefused)
	}
	return true
}

// renameLocal renames in the store alone (delegated) and keeps bases tied to
// host paths, not to files: a base says what the host had at a path when it
// was last in sync, and the host has not changed at either name. So newRel
// keeps the base of what it replaced (or none), and oldRel's base is kept as
// a tombstone until its removal reaches the host (rule D7: the writeback
// compares against what the host had there, not against the moved file).
func (s *Store) renameLocal(oldRel, newRel string, flags uint32) error {
	first, second := oldRel, newRel // in one order, so two renames cannot deadlock
	if second < first {
		first, second = second, first
	}
	defer s.baseLocks.Lock(first)()
	if second != first {
		defer s.baseLocks.Lock(second)()
	}
	srcBase, srcKnown := s.hostBase(oldRel)
	dstBase, dstKnown := s.hostBase(newRel)
	if testHookBaseKept != nil {
		testHookBaseKept(oldRel)
	}
	if err := s.local.Rename(oldRel, newRel, uint(flags)); err != nil {
		return err
	}
	if flags&unix.RENAME_EXCHANGE != 0 {
		s.pinBase(newRel, dstBase, dstKnown)
		s.pinBase(oldRel, srcBase, srcKnown)
		return nil
	}
	s.pinBase(newRel, dstBase, dstKnown)
	if srcKnown {
		s.setTomb(oldRel, srcBase)
	}
	return nil
}
