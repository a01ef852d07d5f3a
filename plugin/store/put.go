package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/hostpath"
)

// putter adapts Store to writeback.Putter.
type putter struct{ s *Store }

// Put writes one queued path back. It holds the path tree lock: shared on
// every ancestor, exclusive on rel. The queue never runs two Puts of one path
// at once, but a Put of a directory the container deleted (host RemoveAll)
// must not run beside a Put beneath it: it would remove a child just written
// and marked clean, and the host would lose it.
func (p putter) Put(ctx context.Context, rel string) error {
	p.s.shareWork()
	defer p.s.treeLocks.lock(rel)()
	p.s.removeLeftovers(rel)
	return p.s.put(ctx, rel, true)
}

// put makes the host match the store at rel: its content and attributes, or
// its absence. It is the only place delegated changes reach the host.
//
// Before overwriting a host entry it checks that the host still holds what
// the store last saw there (the entry's base). If the host changed meanwhile
// (rule D7) the host's copy is kept aside as "<name>.bindstate-conflict-<time>"
// and a warning names both paths: never a silent loss.
//
// Nothing is fsynced on the host here: the host's page cache holds what a
// Put wrote, as it would a write made on a native mount without fsync. A
// container's fsync adds the host fsync (Store.Sync).
//
// The host's parent directory is only looked at when the Put finds it
// missing: writing back a tree, every create in a directory makes the
// share's cached attributes of that directory stale, so looking at the
// parent first cost a round trip per file (sshfs: an LSTAT of the 11 or so
// requests a new file takes).
//
// removes says whether a rel gone from the store is removed from the host
// (putAbsent): only where the caller holds rel's tree lock exclusive.
func (s *Store) put(ctx context.Context, rel string, removes bool) error {
	err := s.putEntry(ctx, rel, removes)
	if err == nil || rel == "" || !parentMissing(err) {
		return err
	}
	// No directory at rel's parent on the host: never written back, or
	// removed or replaced there. Write the parents back, then try again.
	if perr := s.ensureHostParent(ctx, rel); perr != nil {
		return perr
	}
	return s.putEntry(ctx, rel, removes)
}

// parentMissing reports a Put error that a missing host parent directory
// may explain: nothing there (ENOENT), a file there (ENOTDIR) or a symlink
// there, which is never followed (ErrEscape). Trying again is safe whatever
// the first try did: a Put makes the host match the store, however far it
// got before.
func parentMissing(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, hostpath.ErrEscape)
}

// testHookPut, if set (by tests), is told of each path a Put starts on.
var testHookPut func(rel string)

// putEntry is put for a rel whose host parent is taken to exist.
func (s *Store) putEntry(ctx context.Context, rel string, removes bool) error {
	if testHookPut != nil {
		testHookPut(rel)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	held := s.held.take(rel) // what the last Put of rel kept open (heldFiles)
	defer held.close()       // unless putRanges uses it
	st, err := s.local.Lstat(rel)
	if gone(err) && !removes {
		return nil
	}
	if gone(err) {
		return s.putAbsent(rel)
	}
	if err != nil {
		return fmt.Errorf("writeback %q: %w", rel, err)
	}
	hst, herr := s.host.Lstat(rel)
	exists := herr == nil
	if herr != nil && !errors.Is(herr, unix.ENOENT) {
		return fmt.Errorf("writeback %q: %w", rel, herr)
	}
	if exists && hst.Mode&unix.S_IFMT == unix.S_IFREG && (hst.Nlink > 1 || isLinked(&st)) {
		// Another name of this host file may be written back right now
		// (in place, see putFile): one at a time, and look again.
		s.linksMu.Lock()
		defer s.linksMu.Unlock()
		if hst, herr = s.host.Lstat(rel); herr != nil {
			return fmt.Errorf("writeback %q: %w", rel, herr)
		}
	}
	if exists && rel != "" {
		if err := s.checkConflict(rel, &st, &hst); err != nil {
			return err
		}
		if hst2, err := s.host.Lstat(rel); err == nil {
			hst = hst2
		} else {
			exists = false
		}
	}
	var written *unix.Stat_t // the host's attributes, when the Put already has them
	var have *unix.Stat_t    // what the host entry has for putAttrs (nil: unknown)
	if exists {
		have = &hst
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		have, err = s.putDir(ctx, rel, &st, exists, &hst)
	case unix.S_IFREG:
		written, err = s.putFile(rel, &st, exists, &hst, held)
	case unix.S_IFLNK:
		written, err = s.putSymlink(rel, &st, exists, &hst)
	default:
		if !exists {
			err = s.host.Mknod(rel, st.Mode, st.Rdev)
		}
	}
	if err != nil {
		return fmt.Errorf("writeback %q: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR || isSpecial(st.Mode) {
		if err := s.putAttrs(rel, &st, have); err != nil {
			return fmt.Errorf("writeback %q: %w", rel, err)
		}
	}
	if k := st.Mode & unix.S_IFMT; k == unix.S_IFREG || k == unix.S_IFDIR {
		if err := s.putRemovedXattrs(rel); err != nil {
			return fmt.Errorf("writeback %q: %w", rel, err)
		}
	}
	if written == nil {
		if hst, err := s.host.Lstat(rel); err == nil {
			written = &hst
		}
	}
	s.recordWritten(rel, st.Ino, written)
	return nil
}

// recordWritten records hst, the host's attributes of what a Put just wrote
// at rel from store inode ino, as rel's base, and drops rel's tombstone: the
// host matches the store there now. If the container removed or replaced rel
// while the Put ran, the base went with the old entry (or never reached it),
// yet the host now holds the Put's version: it is kept as rel's tombstone,
// so that the next Put at rel (the removal, or the container's new file
// there) knows the host's copy for its own and does not keep it aside as a
// host edit (rule D7: a spurious conflict copy). hst nil (the host could
// not be looked at) only drops the tombstone.
//
// rel is looked at after setBase: a removal before it found no base to
// entomb. A replacement may get the base too, which is what the host has
// there now, as the tombstone says. baseLocks keep a removal or rename from
// falling in between, where it would entomb the base this Put replaces.
func (s *Store) recordWritten(rel string, ino uint64, hst *unix.Stat_t) {
	defer s.baseLocks.Lock(rel)()
	if hst == nil {
		s.dropTomb(rel)
		return
	}
	err := s.setBase(rel, hst)
	if err == nil {
		s.unmarkWriting(rel)
	}
	cur, lerr := s.local.Lstat(rel)
	switch {
	case err != nil || lerr != nil || cur.Ino != ino:
		s.setTomb(rel, baseOf(hst))
	case hst.Mode&unix.S_IFMT == unix.S_IFLNK:
		// setBase kept a symlink's base as its tombstone.
	default:
		s.dropTomb(rel)
	}
}

// checkConflict keeps the host's copy aside if the host changed rel since
// the store last saw it, or created rel while the container did too.
func (s *Store) checkConflict(rel string, st, hst *unix.Stat_t) error {
	b, known := s.hostBase(rel)
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFDIR && hst.Mode&unix.S_IFMT == unix.S_IFDIR:
		// Made by both (merge), or the directory's own attributes (the
		// container's win): its entries merge, nothing to keep aside.
		return nil
	case known && s.hostAtBase(rel, b, hst):
		return nil
	case s.hostHoldsAnUnrecordedPut(rel, hst):
		return nil
	case st.Mode&unix.S_IFMT == unix.S_IFLNK && hst.Mode&unix.S_IFMT == unix.S_IFLNK:
		if t1, err := s.local.Readlink(rel); err == nil {
			if t2, err := s.hostReadlink(rel); err == nil && t1 == t2 {
				return nil
			}
		}
	}
	aside := conflictName(rel)
	keep := s.keepAside
	if rewrittenInPlace(st, hst) {
		// The file has other names, on the host too: renamed aside, it
		// would take them along, and only rel would get the container's
		// version.
		keep = s.keepAsideCopy
	}
	if err := keep(rel, aside); err != nil {
		return fmt.Errorf("writeback %q: keep host copy aside: %w", rel, err)
	}
	s.conflicts.Add(1)
	s.log.Warn("host and container both changed a path; container's version written, host's kept aside",
		"path", rel, "host_copy", aside, "base_known", known, "base", b.String(), "host_now", baseOf(hst).String())
	return nil
}

// hostAtBase reports whether host entry rel, as a lookup saw it (hst), is
// still what base b recorded: the host has not changed it since the store
// last saw it (rule D7), so the container's change (a removal, or another
// entry in its place) may replace it. It is judged past the share's caches
// (matchesPastCaches, which leaves hst with what it saw): a stale answer
// taken for a host edit keeps a spurious conflict copy.
//
// A directory is judged by what it holds, not by its mtime: it is as the
// store saw it when it holds only what the container removed too
// (hostHoldsOnlyRemovals), nothing the host added or changed. Its mtime
// moves with every entry the writeback makes or removes in it, and stays
// put for a host edit in a subdirectory (which a removal or replacement of
// the directory would take with it; the Put of the parent may run before
// the subdirectory's, two workers taking them in either order) or within
// the timestamp tick of the last sync.
func (s *Store) hostAtBase(rel string, b Base, hst *unix.Stat_t) bool {
	if hst.Mode&unix.S_IFMT == unix.S_IFDIR {
		return b.Mode&unix.S_IFMT == unix.S_IFDIR && s.hostHoldsOnlyRemovals(rel)
	}
	at, err := s.matchesPastCaches(rel, b, hst)
	return err == nil && at // on an error, what happens next says what is wrong there
}

// matchesPastCaches reports whether host entry rel matches base b: as a
// lookup saw it (hst), or, where that does not match, as a look past the
// share's caches sees it (LstatFresh), which hst is then left with. A
// share may answer a lookup from attributes it kept from before the
// plugin's own last change there (sshfs keeps them per path for 20 s, so
// a write or chmod through one name of a linked file leaves its other
// names stale); only a mismatch pays those round trips. What a stale name
// of a linked file shows even past them may be an earlier version of the
// file the store recorded, as it did b (ownVersions): no host edit either.
func (s *Store) matchesPastCaches(rel string, b Base, hst *unix.Stat_t) (bool, error) {
	if b.Matches(hst) {
		return true, nil
	}
	fresh, err := s.host.LstatFresh(rel)
	if err != nil {
		return false, err
	}
	at := b.Matches(&fresh)
	if at {
		s.log.Debug("a share's cached attributes did not match the host's; the host is as the store last saw it",
			"path", rel, "cached", baseOf(hst).String(), "host_now", baseOf(&fresh).String())
	} else if s.ownVersions.has(b, baseOf(&fresh)) {
		at = true
		s.log.Debug("a share shows a linked file's name as the store's own earlier version; the host is as the store last saw it",
			"path", rel, "shown", baseOf(&fresh).String(), "base", b.String())
	}
	*hst = fresh
	return at, nil
}

// hostHoldsOnlyRemovals reports whether every entry of host directory dir
// is one the container removed, as the host still has it: gone from the
// store, its removal queued (dirty), and at the base the store knew it by
// (hostAtBase, which looks into a subdirectory the same way). Anything
// else, an entry the host added or changed, or one the container still
// has, is what replacing or removing the directory would lose.
func (s *Store) hostHoldsOnlyRemovals(dir string) bool {
	entries, err := s.host.ReadDir(dir)
	if err != nil {
		return false
	}
	for i := range entries {
		child := join(dir, entries[i].Name)
		if isShareHidden(entries[i].Name) {
			continue // removed already, open a moment more
		}
		if !s.IsDirty(child) {
			return false
		}
		if _, err := s.local.Lstat(child); !gone(err) {
			return false
		}
		if b, known := s.hostBase(child); !known || !s.hostAtBase(child, b, &entries[i].Stat) {
			return false
		}
	}
	return true
}

// ensureHostParent writes back missing parent directories first.
func (s *Store) ensureHostParent(ctx context.Context, rel string) error {
	parent := dirOf(rel)
	if parent == "" {
		return nil
	}
	if st, err := s.host.Lstat(parent); err == nil {
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return nil
		}
	}
	if testHookParent != nil {
		testHookParent(parent)
	}
	// Only to make the parent. The Put beneath holds it shared, and so
	// may others, one of them writing a file into it right now: if the
	// container removed the parent meanwhile, its removal is its own
	// Put's, under the tree lock that waits for those (putter.Put). Taken
	// here, it kept the host's directory aside, another Put's temporary
	// file in it, as a host edit (rule D7: a spurious conflict copy).
	return s.put(ctx, parent, false)
}

// testHookParent, if set (by tests), runs in ensureHostParent once it found
// the host's parent directory missing.
var testHookParent func(parent string)

// tmpPrefix starts the names of the writeback's temporary files on the host
// (written beside their target, then renamed over it).
const tmpPrefix = ".bindstate-tmp-"

// IsTemporary reports a name the host refresh must not bring into the
// store: one the writeback uses for a file it is writing on the host, or
// one a share gives a file removed while open (isShareHidden).
func IsTemporary(name string) bool { return strings.HasPrefix(name, tmpPrefix) || isShareHidden(name) }

// isShareHidden reports a name under which a FUSE share served by libfuse
// (sshfs) keeps a file removed while open, until its last close: nobody's
// file, gone in a moment. The plugin's own file of the share may be the
// one open: the kernel sends the RELEASE that closes it after the
// container's close has returned, so a container that writes a file,
// closes and removes it can leave one for that moment (removeHostDir).
func isShareHidden(name string) bool { return strings.HasPrefix(name, ".fuse_hidden") }

// putAbsent removes rel from the host: the container deleted it.
func (s *Store) putAbsent(rel string) error {
	if rel == "" {
		return errors.New("writeback: refusing to remove the source itself")
	}
	hst, err := s.host.Lstat(rel)
	if gone(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("writeback %q: %w", rel, err)
	}
	b, known := s.hostBase(rel)
	if testHookAbsent != nil {
		testHookAbsent(rel)
	}
	switch {
	case known && !s.hostAtBase(rel, b, &hst):
		if _, err := s.local.Lstat(rel); !gone(err) {
			// The container made rel again meanwhile (a directory with
			// entries of its own, which hostAtBase took for the host's):
			// the Put that change queued merges with what the host has.
			return nil
		}
		// The host changed what the container deleted (rule D7), or added
		// to the directory it deleted: keep it.
		aside := conflictName(rel)
		if err := s.keepAside(rel, aside); err != nil {
			return fmt.Errorf("writeback %q: keep host copy aside: %w", rel, err)
		}
		s.conflicts.Add(1)
		s.log.Warn("the container deleted a path the host changed; host's version kept aside",
			"path", rel, "host_copy", aside)
		s.dropTomb(rel)
		return nil
	case !known:
		// No record of what the host had (written before a restart): say
		// what is removed, so nothing vanishes without a trace (rule D7).
		s.log.Info("removing host entry deleted in the container", "path", rel)
	}
	if err := s.host.RemoveAll(rel); err != nil {
		return fmt.Errorf("writeback %q: remove: %w", rel, err)
	}
	s.dropTomb(rel)
	s.unmarkWritingLink(rel) // one a killed run left: the symlink is gone
	return nil
}

// testHookAbsent, if set (by tests), runs in putAbsent after it found rel
// on the host.
var testHookAbsent func(rel string)

// putDir creates the directory on the host if missing; a directory the host
// never had is written back with everything in it. It returns what the host
// directory has for putAttrs: hst if it was there, the new directory's owner
// and mode if it made one (its times change with every entry written into
// it, so they are marked unknown), nil if it cannot tell.
func (s *Store) putDir(ctx context.Context, rel string, st *unix.Stat_t, exists bool, hst *unix.Stat_t) (*unix.Stat_t, error) {
	if exists && hst.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := s.host.RemoveAll(rel); err != nil {
			return nil, err
		}
		exists = false
	}
	if exists {
		return hst, nil
	}
	if err := s.host.Mkdir(rel, st.Mode&07777); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, err
	}
	// A share answers a mkdir with the new directory's attributes, so this
	// lookup is usually served by the kernel's cache.
	var have *unix.Stat_t
	if made, err := s.host.Lstat(rel); err == nil {
		made.Mtim.Nsec = -1 // matches no time: putAttrs sets the times
		have = &made
	}
	entries, err := s.local.ReadDir(rel)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		child := join(rel, e.Name)
		if s.IsDirty(child) {
			// Queued on its own: the queue runs one Put of a path at a time,
			// and a second Put of it from here would race with that one
			// (and take our own write for a host change, rule D7).
			continue
		}
		if err := s.put(ctx, child, true); err != nil { // beneath rel, held exclusive
			return nil, err
		}
	}
	return have, nil
}

// putFile copies the store file's content to the host: into a temporary file
// beside it, then renamed over, so the host never sees a partly written
// file. A file with several hard links is rewritten in
// place to keep the links (isLinked). It returns the host's attributes of
// the file when it has them without another lookup.
func (s *Store) putFile(rel string, st *unix.Stat_t, exists bool, hst *unix.Stat_t, held *heldFile) (*unix.Stat_t, error) {
	if exists && s.IsStub(rel) { // a new file has no stub: no xattr lookup
		// Content never left the host; only attributes changed.
		return nil, s.putAttrs(rel, st, hst)
	}
	if exists && hst.Mode&unix.S_IFMT == unix.S_IFREG && hst.Nlink == 1 && !isLinked(st) {
		// The host file is what the last Put left (putEntry checked its
		// base): if the range log knows what changed since, only that goes.
		if spans, ok := s.ranges.take(rel, st.Ino); ok {
			written, err := s.putRanges(rel, st, hst, spans, held)
			if err != nil {
				s.ranges.forget(rel)
			}
			return written, err
		}
	}
	if !isLinked(st) {
		// Logged from before the copy reads the store: a write the copy
		// misses is then in the log for the next Put.
		s.ranges.start(rel, st.Ino, st.Size)
	}
	written, err := s.putWhole(rel, st, exists, hst)
	if err != nil {
		s.ranges.forget(rel)
	}
	return written, err
}

// putRanges writes the ranges of the store file at rel that the container
// wrote since the last Put (rangeLog), in place into the host file hst,
// then sets its size and attributes as fillHostFile does. It writes through
// held, the last Put's descriptor, if that is open on hst (heldFiles).
func (s *Store) putRanges(rel string, st, hst *unix.Stat_t, spans []span, held *heldFile) (*unix.Stat_t, error) {
	src, err := s.local.OpenFile(rel, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	// The size after the log was taken: every write logged before then is
	// within it (a file shrinks only by a truncate, which the log forgets).
	var now unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &now); err != nil {
		return nil, err
	}
	dst := held.reuse(hst)
	if dst == nil {
		if dst, err = s.host.OpenFile(rel, unix.O_WRONLY, 0); err != nil {
			return nil, err
		}
	}
	fd := int(dst.Fd())
	var made unix.Stat_t
	if err := unix.Fstat(fd, &made); err != nil {
		dst.Close()
		return nil, err
	}
	buf := make([]byte, min(1<<20, spanBytes(spans)))
	var n int64
	for _, sp := range spans {
		for off := sp.off; off < min(sp.end, now.Size); {
			chunk := buf[:min(int64(len(buf)), min(sp.end, now.Size)-off)]
			got, err := unix.Pread(int(src.Fd()), chunk, off)
			if err == nil && got == 0 {
				break // shorter since: the next Put has what shortened it
			}
			if err == nil {
				_, err = unix.Pwrite(fd, chunk[:got], off)
			}
			if err != nil {
				dst.Close()
				return nil, err
			}
			off += int64(got)
			n += int64(got)
		}
	}
	s.countWrittenBytes(n)
	if made.Size != now.Size {
		if err := unix.Ftruncate(fd, now.Size); err != nil {
			dst.Close()
			return nil, err
		}
	}
	return s.finishHostFile(dst, src, rel, st, &made, true)
}

// spanBytes is the bytes spans cover (at least 1).
func spanBytes(spans []span) int64 {
	var n int64 = 1
	for _, sp := range spans {
		n += sp.end - sp.off
	}
	return n
}

// rewrittenInPlace reports a store file st that putWhole writes into the
// existing host file hst rather than replacing it: one with several names
// (isLinked), which Link keeps in step on both sides.
func rewrittenInPlace(st, hst *unix.Stat_t) bool {
	return hst.Mode&unix.S_IFMT == unix.S_IFREG && isLinked(st)
}

// putWhole copies the whole store file at rel to the host (putFile).
func (s *Store) putWhole(rel string, st *unix.Stat_t, exists bool, hst *unix.Stat_t) (*unix.Stat_t, error) {
	src, err := s.local.OpenFile(rel, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	if exists && rewrittenInPlace(st, hst) {
		// The same file under several names on both sides (Link keeps them
		// in step): rewrite it in place so every host name has it. The
		// store's link count decides, not the host's: a share may show
		// attributes from before the link (sshfs shows each name as its own
		// inode, and the kernel caches its attributes), and replacing a
		// linked file would cut it from its other names. A host file linked
		// where the store's is not (linked on the host) is replaced below,
		// as the container sees it: one file per name.
		dst, err := s.host.OpenFile(rel, unix.O_WRONLY|unix.O_TRUNC, 0)
		if err != nil {
			return nil, err
		}
		written, err := s.fillHostFile(dst, src, rel, st)
		if err != nil {
			return nil, err
		}
		s.rebaseLinks(rel, hst.Ino)
		return written, nil
	}
	if exists && hst.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := s.host.RemoveAll(rel); err != nil {
			return nil, err
		}
	}
	tmp := s.tmp.name(rel)
	dst, err := s.host.OpenFile(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, st.Mode&07777)
	if err != nil {
		return nil, err
	}
	var removed []string // xattrs the container removed, which tmp never gets
	if exists && hst.Mode&unix.S_IFMT == unix.S_IFREG {
		removed = s.keepHostXattrs(rel, tmp, src)
	}
	written, err := s.fillHostFile(dst, src, rel, st)
	if err != nil {
		s.host.Remove(tmp)
		return nil, err
	}
	if testHookPutWritten != nil {
		testHookPutWritten(rel)
	}
	s.markWriting(rel, written)
	if err := s.host.Rename(tmp, rel, 0); err != nil {
		s.host.Remove(tmp)
		return nil, err
	}
	// Gone from the host with the old file: putEntry need not remove them.
	if err := s.forgetRemovedXattrs(rel, removed); err != nil {
		return nil, err
	}
	return written, nil
}

// fillHostFile writes the host file dst (open for writing and empty: just
// created, or truncated) as the store file src at rel: content, owner, mode,
// user xattrs and times, all through the open descriptor, and closes it. It returns dst's attributes as the host
// has them (for the base), or nil if they could not be read.
//
// Each call on a share is a round trip (and on sshfs every request waits in
// one queue on the server), so it makes only those that change something:
// the owner and mode the file has are read before any write, while the
// kernel still has them from the open, and the final attributes
// come back with the times' setattr reply, so the rename needs no lookup
// after it.
func (s *Store) fillHostFile(dst, src *os.File, rel string, st *unix.Stat_t) (*unix.Stat_t, error) {
	fd := int(dst.Fd())
	var made unix.Stat_t
	if err := unix.Fstat(fd, &made); err != nil {
		made.Uid, made.Gid, made.Mode = ^uint32(0), ^uint32(0), 0 // unknown: set everything
	}
	n, err := io.Copy(dst, src)
	s.countWrittenBytes(n)
	if err != nil {
		dst.Close()
		return nil, err
	}
	return s.finishHostFile(dst, src, rel, st, &made, false)
}

// finishHostFile gives the host file dst, whose content is written, the
// owner, mode, user xattrs and times of the store file src at rel, and
// closes it, or keeps it open for the next Put of a file written in place
// for an fsync (heldFiles); made is what dst had before (owner, mode: only
// what differs is set). It returns dst's attributes as fillHostFile does.
//
// A file written in place (inPlace: putRanges) for a container's fdatasync
// only keeps the host's times for now: the fdatasync asks for the content
// and size, and setting the times is a round trip more per commit (two on
// sshfs, which looks the file up again after a setattr). The path is marked
// dirty again, so a later Put, which no fdatasync waits for, sets them.
func (s *Store) finishHostFile(dst, src *os.File, rel string, st, made *unix.Stat_t, inPlace bool) (*unix.Stat_t, error) {
	fd := int(dst.Fd())
	chowned := false
	if made.Uid != st.Uid || made.Gid != st.Gid {
		// Best effort, as hostChown: many shares refuse chown.
		if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
			s.log.Debug("host refused chown", "path", rel, "err", err)
		}
		chowned = true
	}
	// A chown clears setuid and setgid: the mode goes after it.
	if chowned || made.Mode&07777 != st.Mode&07777 {
		if err := unix.Fchmod(fd, st.Mode&07777); err != nil {
			if err := s.hostChmodFailed(rel, st, made, err); err != nil {
				dst.Close()
				return nil, err
			}
		}
	}
	if err := s.putXattrs(fd, src, rel); err != nil {
		dst.Close()
		return nil, err
	}
	fsync, dataOnly := s.fsyncs.wanted(rel)
	withTimes := !(inPlace && dataOnly)
	dataSync := dataOnly // what the fsyncs waiting now ask for
	var done *unix.Stat_t
	for {
		if withTimes {
			s.putTimes(fd, rel, st)
		}
		if !fsync {
			// The host's attributes, for the base: after the times'
			// setattr the kernel has them from its reply; without it, a
			// round trip.
			done = fstatOf(fd)
			break
		}
		// A container's fsync waits for this Put: durable through this
		// descriptor, not a second open (fsyncWaits). The base's fstat
		// goes to the share beside the fsync, not before it: a database
		// commit (an fdatasync, no times set) otherwise waited for one
		// share round trip more (sshfs: an LSTAT between the WRITE and the
		// FSYNC). Both come after the writes, and an fsync changes no
		// attribute the base records.
		stat := make(chan *unix.Stat_t, 1)
		go func() { stat <- fstatOf(fd) }()
		err := fsyncHost(dst, rel, dataSync)
		done = <-stat
		if err != nil {
			dst.Close()
			return nil, err
		}
		if s.fsyncs.synced(rel, !dataSync) {
			break
		}
		// A plain fsync began waiting while this Put wrote for
		// fdatasyncs: it asks for the times too, and durable.
		withTimes, dataSync = true, false
	}
	if fsync && inPlace && done != nil {
		s.held.keep(rel, dst, done.Ino) // for the next commit's Put
	} else if err := dst.Close(); err != nil {
		return nil, err
	}
	if !withTimes { // an fdatasync waited: only a delegated store has a queue to wait on
		if err := s.queue.MarkDirty(rel); err != nil {
			return nil, fmt.Errorf("journal %q for its times: %w", rel, err)
		}
	}
	return done, nil
}

// putTimes gives the host file fd the store file's access and
// modification times (st's).
func (s *Store) putTimes(fd int, rel string, st *unix.Stat_t) {
	if err := futimens(fd, []unix.Timespec{st.Atim, st.Mtim}); err != nil {
		s.log.Debug("writeback utimes", "path", rel, "err", err)
	}
}

// fstatOf is fd's attributes, or nil if they cannot be read.
func fstatOf(fd int) *unix.Stat_t {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return nil
	}
	return &st
}

// putXattrs copies the user xattrs of the store file src (at rel) onto the
// host file fd, both read and written through the descriptors. An xattr the
// host refuses fails the Put (copyXattrs).
func (s *Store) putXattrs(fd int, src *os.File, rel string) error {
	if !s.HostTakesXattrs() {
		return nil // the store holds none a container set (Store.Setxattr)
	}
	names, err := xattrCall(func(b []byte) (int, error) { return unix.Flistxattr(int(src.Fd()), b) })
	if err != nil {
		return fmt.Errorf("list the store's xattrs: %w", err)
	}
	return copyXattrs(names, notWrittenBack,
		func(name string, buf []byte) (int, error) { return unix.Fgetxattr(int(src.Fd()), name, buf) },
		func(name string, val []byte) error { return unix.Fsetxattr(fd, name, val, 0) })
}

// copyXattrs copies the extended attributes named in names (NUL-separated,
// as listxattr gives them), all but those skip names, reading each with get
// and writing it with set. Every one is tried; the first failure to set one
// is returned. A name gone between the list and the get is skipped.
//
// The store's xattrs are changes the container saw succeed: one the host
// refuses (a value too large for it, a name it will not take) fails the
// writeback, which keeps the path and retries it, and the stop of a
// container reports it (rule D4). A namespace the source refuses as a
// whole never gets here: the store refuses it at the container's setxattr
// (refusedXattrs).
func copyXattrs(names []byte, skip func(name string) bool, get func(name string, buf []byte) (int, error), set func(name string, val []byte) error) error {
	var buf []byte
	var first error
	for _, name := range splitNames(names) {
		if skip(name) {
			continue
		}
		if buf == nil {
			buf = make([]byte, 64*1024)
		}
		n, err := get(name, buf)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err == nil {
			err = set(name, buf[:n])
		}
		if err != nil && first == nil {
			first = fmt.Errorf("copy xattr %s: %w", name, err)
		}
	}
	return first
}

// notWrittenBack names the store's xattrs a writeback does not copy to the
// host: the store's own bookkeeping, and the label a security module puts
// on every file the plugin creates in the store (SELinux, Smack). That
// label is the store directory's, not one the container chose; the host
// labels its own files. Copied, it would relabel host files, and a host
// that refused it would fail every writeback (copyXattrs). (An ACL is
// copied: the kernel passes a container's setfacl to the plugin as an
// xattr, since the FUSE mount does not take POSIX ACLs itself.)
func notWrittenBack(name string) bool {
	return IsPrivateXattr(name) || name == "security.selinux" || strings.HasPrefix(name, "security.SMACK64")
}

// futimens sets an open file's access and modification times
// (utimensat(fd, NULL, ...); x/sys/unix has no wrapper for it).
func futimens(fd int, ts []unix.Timespec) error {
	_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// testHookPutWritten, if set (by tests), runs in putFile between writing the
// temporary file and renaming it over its target, in putSymlink between
// marking it (markWriting) and renaming it.
var testHookPutWritten func(rel string)

// putSymlink replaces the host entry with a symlink of the same target. It
// returns the new symlink's attributes as the host has them (for the base;
// nil: not known, or nothing written).
func (s *Store) putSymlink(rel string, st *unix.Stat_t, exists bool, hst *unix.Stat_t) (*unix.Stat_t, error) {
	target, err := s.local.Readlink(rel)
	if err != nil {
		return nil, err
	}
	if exists && hst.Mode&unix.S_IFMT == unix.S_IFLNK {
		if cur, err := s.hostReadlink(rel); err == nil && cur == target {
			return nil, nil
		}
	}
	if target == targetRefused {
		// The container moved a link whose target the share would not
		// tell: its new name cannot get that target, so the Put fails
		// (rule D4), and the link stays in the store.
		return nil, fmt.Errorf("write back symlink %q: %w", rel, errTargetRefused)
	}
	tmp := s.tmp.name(rel)
	if err := s.host.Symlink(target, tmp); err != nil {
		return nil, err
	}
	if exists && hst.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := s.host.RemoveAll(rel); err != nil {
			s.host.Remove(tmp)
			return nil, err
		}
	}
	// Looked at before the rename, which keeps what the base compares
	// (type, size, mtime): the mark needs it, and putEntry's look after
	// the Put is then not made.
	var written *unix.Stat_t
	if wst, err := s.host.Lstat(tmp); err == nil {
		written = &wst
	}
	s.markWriting(rel, written)
	if testHookPutWritten != nil {
		testHookPutWritten(rel)
	}
	if err := s.host.Rename(tmp, rel, 0); err != nil {
		s.host.Remove(tmp)
		return nil, err
	}
	s.hostChown(rel, Owner{int(st.Uid), int(st.Gid)}, nil)
	return written, nil
}

// putAttrs copies owner, mode, times and xattrs to the host, best effort
// for owner (shares often refuse chown); an xattr the host refuses is its
// error (copyXattrs), after the rest is set. have is what the host entry
// has (nil: unknown): owner, mode and times it already has are not set
// again, because each set is a round trip on a share (two on sshfs, which
// looks the entry up after it). A directory that gained entries is written
// back each time its times change, and mostly needs only its times set.
func (s *Store) putAttrs(rel string, st *unix.Stat_t, have *unix.Stat_t) error {
	chowned := s.hostChown(rel, Owner{int(st.Uid), int(st.Gid)}, have)
	// A chown may clear setuid and setgid: the mode goes after it.
	var modeErr error // the xattrs and times still go; the error fails the Put after them
	if chowned || have == nil || have.Mode&07777 != st.Mode&07777 {
		if err := s.host.Chmod(rel, st.Mode&07777); err != nil {
			modeErr = s.hostChmodFailed(rel, st, have, err)
		}
	}
	var xattrErr error
	if names, err := s.Listxattr(rel); err == nil {
		xattrErr = copyXattrs(names, notWrittenBack,
			func(name string, buf []byte) (int, error) { return s.local.Getxattr(rel, name, buf) },
			func(name string, val []byte) error { return s.host.Setxattr(rel, name, val, 0) })
	}
	if have != nil && have.Atim == st.Atim && have.Mtim == st.Mtim {
		return cmp.Or(modeErr, xattrErr)
	}
	atime, mtime := st.Atim, st.Mtim
	if err := s.host.Utimes(rel, &atime, &mtime); err != nil {
		s.log.Debug("writeback utimes", "path", rel, "err", err)
	}
	return cmp.Or(modeErr, xattrErr)
}

// hostChmodFailed says what a chmod of rel that the host refused (err) at
// writeback means. The store entry st has a mode the host entry lacks (now:
// what the host entry had before, nil if unknown).
//
// A mode the container set (the entry's mode is not the one the host had
// at the last sync, its base) fails the Put, as a refused xattr does (rule
// D4): the path stays journaled and is retried, the Flush names it, the
// container's stop is reported failed, and it lands once the host takes the
// mode. A cached container's chmod gets the host's refusal itself (C3).
//
// Any other refusal loses no change of the container's, and is a warning,
// once per store: the mode of a new file, on a file system that keeps
// modes of its own (vfat, a share's create mask), or a chown's redo of a
// mode the host entry already has. Failing those would hold back every new
// file's content on such a host.
//
// A file the container renamed over a host file (as editors save) carries
// the base of the file it replaced, for the conflict check, so a mode it
// has that the old file had not counts as the container's change. Over a
// share that refuses a chmod because its user does not own the file, that
// refusal does not come: the writeback's new file is the share user's own.
// Only a file system that keeps no modes of the container's (vfat without
// "quiet") refuses it; there such a save fails its writeback, where a
// plain bind would have kept the file system's own mode without a word.
func (s *Store) hostChmodFailed(rel string, st, now *unix.Stat_t, err error) error {
	want := st.Mode & 07777
	if now != nil && now.Mode&07777 == want {
		return nil
	}
	if b, known := s.hostBase(rel); known && b.Mode&07777 != want {
		return fmt.Errorf("chmod %#o: %w", want, err)
	}
	level, msg := slog.LevelDebug, "the host refused a mode that changes none of its own paths' modes"
	if s.modeRefusalSeen.CompareAndSwap(false, true) {
		level, msg = slog.LevelWarn, msg+"; it keeps its own (said once per volume)"
	}
	s.log.Log(context.Background(), level, msg, "path", rel, "mode", fmt.Sprintf("%#o", want), "err", err)
	return nil
}

// conflictName is a name to keep the host's copy of rel aside under (rule
// D7): beside it, with the time in nanoseconds.
func conflictName(rel string) string {
	return rel + ".bindstate-conflict-" + strconv.FormatInt(time.Now().UnixNano(), 10)
}

// keepAside renames the host's copy of rel to aside without replacing
// anything there. Shares such as sshfs refuse renameat2 flags (EINVAL): then
// the name is checked free and a plain rename is made (aside carries a
// nanosecond timestamp, so a clash in between is all but impossible).
func (s *Store) keepAside(rel, aside string) error {
	err := s.host.Rename(rel, aside, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	if _, lerr := s.host.Lstat(aside); !errors.Is(lerr, unix.ENOENT) {
		return err
	}
	return s.host.Rename(rel, aside, 0)
}

// keepAsideCopy keeps a copy of the host file rel at aside (a new name),
// content, mode and times, and leaves rel, and so its other names, as they
// are: for a file with several names, which the writeback then rewrites in
// place (putWhole). A copy left half made is removed.
func (s *Store) keepAsideCopy(rel, aside string) (err error) {
	src, err := s.host.OpenFile(rel, unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer src.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		return err
	}
	dst, err := s.host.OpenFile(aside, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, st.Mode&0o7777)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			s.host.Remove(aside)
		}
	}()
	if _, err := io.Copy(dst, src); err != nil {
		return err
	}
	return futimens(int(dst.Fd()), []unix.Timespec{st.Atim, st.Mtim})
}

// rebaseLinks records the host's new attributes as the base of the other
// names of host inode ino in rel's directory: rewriting a hard-linked file in
// place changed them too, and without this the container's next write to one
// of them would look like a host edit (a false conflict, rule D7). Links in
// other directories are not looked for.
func (s *Store) rebaseLinks(rel string, ino uint64) {
	dir := dirOf(rel)
	entries, err := s.host.ReadDir(dir)
	if err != nil {
		return
	}
	for i := range entries {
		e := &entries[i]
		other := join(dir, e.Name)
		if other == rel || e.Stat.Ino != ino {
			continue
		}
		if _, err := s.local.Lstat(other); err == nil {
			s.setBase(other, &e.Stat)
		}
	}
}

// gone reports an lstat error that means nothing is at the path: missing, or
// a parent that is no longer a directory (a file, or a symlink, which is
// never followed). A queued path can end up so when its directory is renamed
// away and replaced: there is then nothing to write back under that name.
func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, hostpath.ErrEscape)
}
