// Package store is the local copy of one host source: a directory tree on
// fast disk that serves the container's view, plus the journal of what the
// host has not seen yet. It knows nothing of FUSE: package fsys translates
// kernel requests into the calls below, and package syncer brings host
// changes in.
//
// The store is filled lazily. A directory is "populated" the first time it
// is looked into: its host entries are created locally, regular files as
// sparse "stubs" of the right size and metadata whose content is fetched on
// first open. Bookkeeping lives in xattrs under user.bindstate.* on the store
// entries themselves, so it moves with renames and survives crashes
// atomically with the entry; fsys hides that namespace from containers.
//
// What a change does depends on the state (package consistency) and on who
// made it (Origin): a container change in the cached state is made on the
// host first and then locally (write-through, rule C3); in the delegated
// state it is journaled, made locally and written back later (D2, D4); a
// change that brings a host edit in (HostOrigin) is made locally only.
//
// Every path, on the host and in the store, is resolved with package
// hostpath, so neither a hostile name nor a symlink swap can leave the tree.
package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/hostpath"
	"github.com/bindstate/bindstate/plugin/internal/logrepeat"
	"github.com/bindstate/bindstate/plugin/journal"
	"github.com/bindstate/bindstate/plugin/writeback"
)

// XattrPrefix is the namespace of the store's own bookkeeping. Containers
// never see, set or remove names in it.
const XattrPrefix = "user.bindstate."

const (
	xattrStub      = XattrPrefix + "stub"      // file: content not fetched from the host yet
	xattrPopulated = XattrPrefix + "populated" // dir: host entries have been listed into it
	xattrBase      = XattrPrefix + "base"      // host attributes when last in sync (rule D7)
	xattrRemoved   = XattrPrefix + "removed"   // xattr names the container removed, not yet from the host (removedXattrs)
	xattrFormat    = XattrPrefix + "format"    // the tree's root: the store format it was last opened with (checkFormat)
	xattrWriting   = XattrPrefix + "writing"   // file: host attributes of the version a Put is renaming into place (markWriting)
)

// storeFormat is the layout of the store's bookkeeping this plugin reads
// and writes: 2 since bases are binary (Base.encode); 1, the stores before,
// had no record of it. A store records the format it was opened with, and a
// plugin refuses a store of a newer format than its own (a downgrade): it
// would misread the newer bookkeeping, and take every base for unknown.
const storeFormat = 2

// mark is the value of the stub and populated xattrs, which say what they
// say by being there: empty, so that either fits beside a base in an ext4
// inode (see Base.encode). Stores made before hold "1", read the same.
var mark = []byte{}

// Config says what a Store serves and where it keeps it.
type Config struct {
	Host      *hostpath.Root // the source; the Store does not close it
	Tree      string         // local directory holding the container's view (created)
	Journal   string         // journal file (delegated only)
	State     consistency.State
	WriteBack writeback.Options
	Log       *slog.Logger
	// PopulatedLog bounds the log of populated directories the host
	// refresh reads (PopulatedSince); 0: 65,536.
	PopulatedLog int
	// ShareWork, if set, is called as the store starts work on the share
	// that may overlap other work: listing a directory into the store,
	// fetching a file's content, writing a path back. The plugin raises
	// GOMAXPROCS meanwhile (package cpus).
	ShareWork func()
	// ReadOnly: the store serves a read-only volume, which nothing writes
	// but the host changes brought in: there are no writers to serve.
	ReadOnly bool
}

// Store serves one (source, state). It is safe for concurrent use.
//
// Lock order: Store.apply before Store.locks' per-path mutexes. Container
// operations hold apply shared; bringing one host change in holds it
// exclusively (so a container change and a host change to the same path
// never interleave), except that requests made by the applier's own threads
// (HostOrigin) take no lock: the applier already holds it.
type Store struct {
	host    *hostpath.Root
	local   *hostpath.Root
	state   consistency.State
	journal *journal.Journal // nil unless delegated
	queue   *writeback.Queue // nil unless delegated
	through atomic.Bool      // delegated, but writing through (SetWriteThrough: rules C4, D5)
	// writersFromHost: cached (never set for delegated), and the source's
	// file system reports a failed write to any close of the file (see
	// writersFromHost).
	writersFromHost bool
	writers         string    // how cached writers are served, for Stats
	xattrsRefused   []string  // namespaces ("trusted.") the source refuses, and so the store (refusedXattrs); all: it takes none
	ranges          *rangeLog // delegated: what the container wrote to large files since their last Put
	halfMade        halfMade  // the renames made on the host and not yet in the store
	// halfMadeLog says which renames went unrecorded (halfMade.begin
	// failed: a full store disk); limited, as a container renames at will.
	halfMadeLog *logrepeat.Logger
	fsyncs      fsyncWaits
	held        heldFiles // delegated: host files kept open between a large file's Puts
	log         *slog.Logger
	apply       sync.RWMutex
	locks       keyedMutex // per-path: populate and fetch happen once

	// readerLog says what a container's reads meet (a full store), which
	// may be every read: it limits repeats (logrepeat).
	readerLog *logrepeat.Logger

	// baseLocks make the few syscalls that move a path's base between its
	// store entry and its tombstone one step: a Put recording what it wrote
	// (recordWritten) against the container removing or renaming the entry
	// (entombBase, renameLocal). Without them a base written in between went
	// with the removed entry and the tombstone kept the older one: the
	// removal's writeback then took the container's own version on the host
	// for a host edit (rule D7: a spurious conflict copy).
	baseLocks keyedMutex

	treeLocks treeLock   // writeback: a Put excludes Puts at or beneath its path
	linksMu   sync.Mutex // writeback of host files with several names, one at a time
	threads   Threads    // OS threads whose requests are host-origin

	busyMu  sync.Mutex
	busy    map[string]int // paths open for writing through to the host (cached)
	busyIno map[uint64]int // their store files, by inode (for their other names)

	// ownVersions: the host versions of linked files the store recorded
	// lately, which a share may still show under another name.
	ownVersions ownVersions

	conflicts atomic.Int64 // host copies kept aside (D7)
	// modeRefusalSeen: the host has refused a mode at writeback that was
	// no change of the container's (hostChmodFailed); said once, at Warn.
	modeRefusalSeen atomic.Bool
	// symlinkAttrsSeen: a symlink's owner or times were kept from the host
	// (hostpath.ErrSymlinkAttrs); said once per store.
	symlinkAttrsSeen atomic.Bool
	// targetRefusedSeen: the share refused a symlink's target
	// (hostReadlink); said once per store.
	targetRefusedSeen atomic.Bool

	// populated is the log of directories populated, in order (see
	// PopulatedSince): the most recent ones, at most populatedMax of them,
	// the first being the populatedFirst-th since the store was opened.
	populatedMu    sync.Mutex
	populated      []string
	populatedFirst int
	populatedMax   int

	shareWork func() // Config.ShareWork, or a no-op

	// tombs are the bases of host paths whose store entry was removed or
	// renamed away and whose writeback has not happened yet (delegated), and
	// of symlinks (which cannot carry the base xattr): the writeback compares
	// the host against them (rule D7). A delegated store keeps them in its
	// journal too, so that a restarted plugin still tells its own removals
	// and replacements from host edits. One lost (a crash before the
	// journal's next sync) makes the comparison "unknown", which keeps the
	// host's copy aside rather than lose it.
	tombMu sync.Mutex
	tombs  map[string]Base
	// linkWriting are the writing marks of symlinks (markWriting: what a
	// Put is renaming into place on the host), which cannot carry the
	// mark's xattr either: kept here and in the journal, like tombs.
	linkWriting map[string]Base
	fetched     atomic.Int64 // files whose content came from the host

	kept keptSet // store files kept open between read-only opens (OpenKept)

	heldWriters heldWriters // files holding their path dirty (File.BeginWrite)
	left        leftWriters // paths held for writers a killed run left (watchLeftWriters)
	// hostWritten flags that cached writers were opened since the last
	// clean Close (markWriter): their store files may be older than the
	// host's after a kill.
	hostWritten hostWritten

	// Metrics (see Stats), counted where the work happens.
	hits         atomic.Int64 // opens served from content already local (countHit)
	writtenBytes atomic.Int64 // file content written back to the host (countWrittenBytes)
	ops          sync.Map     // op kind -> *atomic.Int64 (CountOp)

	prefetch *prefetcher // read-ahead from the host

	tmp       tmpTags   // what the writeback's temporary names say of who made them
	leftovers leftovers // host directories an earlier run may have left some in
	writing   sync.Map  // rel -> struct{}: store files markWriting marked, until recordWritten (symlinks: linkWriting)
}

// checkFormat refuses a store tree written in a newer store format than
// this plugin's, and records this plugin's on one written before it. The
// store keeps its bookkeeping in user xattrs: writing the record is also
// the check that the disk holds them, refused here rather than misbehaving
// later.
func checkFormat(local *hostpath.Root, tree string) error {
	var b [16]byte
	n, err := local.Getxattr("", xattrFormat, b[:])
	switch {
	case err == nil:
		f, perr := strconv.Atoi(string(b[:n]))
		if perr != nil || f > storeFormat {
			return fmt.Errorf("store: %s was written by a newer bindstate (store format %q; this plugin reads formats 1 to %d): "+
				"run that version again; what the store has not written back to the host stays in it", tree, b[:n], storeFormat)
		}
		if f == storeFormat {
			return nil
		}
	case !errors.Is(err, unix.ENODATA):
		return fmt.Errorf("store: %s must support user xattrs (ext4, xfs, btrfs, tmpfs): %w", tree, err)
	}
	if err := local.Setxattr("", xattrFormat, []byte(strconv.Itoa(storeFormat)), 0); err != nil {
		return fmt.Errorf("store: %s must support user xattrs (ext4, xfs, btrfs, tmpfs): %w", tree, err)
	}
	return nil
}

// keptDirs is how many store directories stay open between operations:
// enough for an untar's or a build's working set, a few hundred KiB of
// kernel memory per store at most.
const keptDirs = 64

// Open opens (creating if needed) the store described by cfg. For the
// delegated state it replays the journal and resumes writeback of whatever an
// earlier run left unwritten.
func Open(cfg Config) (*Store, error) {
	if !cfg.State.NeedsStore() {
		return nil, fmt.Errorf("store: state %s is served as a plain bind, not from a store", cfg.State)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if err := os.MkdirAll(cfg.Tree, 0o755); err != nil {
		return nil, fmt.Errorf("store: create tree %s: %w", cfg.Tree, err)
	}
	local, err := hostpath.Open(cfg.Tree)
	if err != nil {
		return nil, fmt.Errorf("store: open tree: %w", err)
	}
	// Containers change the tree only through this store, so its
	// directories may stay open between operations (hostpath.parents).
	local.KeepParents(keptDirs)
	if cfg.PopulatedLog <= 0 {
		cfg.PopulatedLog = populatedLogMax
	}
	s := &Store{host: cfg.Host, local: local, state: cfg.State, log: cfg.Log, populatedMax: cfg.PopulatedLog,
		shareWork: cfg.ShareWork, ranges: newRangeLog(), xattrsRefused: refusedXattrs(cfg.Host),
		readerLog: logrepeat.Wrap(cfg.Log), tmp: newTmpTags(cfg.Tree),
		halfMade: halfMade{dir: halfMadeDir(cfg.Tree)}, halfMadeLog: logrepeat.Wrap(cfg.Log),
		hostWritten: hostWritten{flag: writersOpenFlag(cfg.Tree)}}
	switch {
	case !s.HostTakesXattrs():
		cfg.Log.Info("extended attributes refused, as by the source: its file system takes none")
	case len(s.xattrsRefused) > 0:
		cfg.Log.Info("extended attributes of some namespaces refused, as by the source", "namespaces", s.xattrsRefused)
	}
	switch {
	case cfg.ReadOnly:
		s.writers = "none: the volume is read-only"
	case cfg.State == consistency.Cached:
		var why string
		s.writersFromHost, why = writersFromHost(cfg.Host)
		cfg.Log.Info("cached writers", "served_from_host", s.writersFromHost, "because_the_source_is", why)
		if s.writersFromHost {
			s.writers = "the host file, by the kernel: the source is " + why
		} else {
			s.writers = "through the plugin: the source is " + why
		}
	}
	if s.shareWork == nil {
		s.shareWork = func() {}
	}
	if err := checkFormat(local, cfg.Tree); err != nil {
		local.Close()
		return nil, err
	}
	if err := s.syncRootAttrs(); err != nil {
		local.Close()
		return nil, err
	}
	if cfg.State.WritesBack() {
		j, err := journal.Open(cfg.Journal)
		if err != nil {
			local.Close()
			return nil, fmt.Errorf("store: %w", err)
		}
		s.journal = j
		// Before the queue starts writing back what an earlier run left.
		// Straight into the map: they are in the journal already.
		s.tombs = decodeBases(j.Tombs())
		s.linkWriting = decodeBases(j.Writing())
		if err := s.finishHalfMade(); err != nil {
			j.Close()
			local.Close()
			return nil, err
		}
		// Taken before the queue starts: its first Puts make them clean.
		pending := j.Pending()
		s.leftovers.expect(pending)
		s.queue = writeback.New(j, putter{s}, cfg.WriteBack)
		if len(pending) > 0 {
			s.log.Info("resuming writeback left by an earlier run", "pending", len(pending))
			s.watchLeftWriters(pending)
		}
	}
	if s.journal == nil {
		if err := s.finishHalfMade(); err != nil {
			local.Close()
			return nil, err
		}
		// After the renames: a file renamed while its writer was open is
		// under the name the host has.
		if err := s.restubHostWritten(); err != nil {
			local.Close()
			return nil, err
		}
	}
	s.prefetch = newPrefetcher(s)
	return s, nil
}

// Close stops writeback (unwritten paths stay journaled) and releases the tree.
func (s *Store) Close() error {
	var errs []error
	s.prefetch.close()
	s.stopLeftWriters()
	if s.queue != nil {
		s.queue.Close()
	}
	s.held.closeAll()
	if s.journal != nil {
		errs = append(errs, s.journal.Close())
	}
	s.closeKept()
	s.busyMu.Lock()
	writersOpen := len(s.busy) > 0
	s.busyMu.Unlock()
	if !writersOpen && !s.hostWritten.kept {
		// Every cached writer was released, and gave its file the host's
		// base: nothing for the next Open to look for.
		errs = append(errs, s.hostWritten.lower())
	}
	errs = append(errs, s.local.Close())
	s.readerLog.Close()
	s.halfMadeLog.Close()
	return errors.Join(errs...)
}

// State is the state this store serves.
func (s *Store) State() consistency.State { return s.state }

// HostTakesXattrs reports whether the source's file system holds extended
// attributes of any namespace. If not, the store refuses them all
// (EOPNOTSUPP) and the FUSE mount can tell the kernel not to ask
// (refusedXattrs).
func (s *Store) HostTakesXattrs() bool { return len(s.xattrsRefused) < len(xattrNamespaces) }

// Host is the source the store mirrors.
func (s *Store) Host() *hostpath.Root { return s.host }

// Local is the store's own tree (for the FUSE layer's reads and stats).
func (s *Store) Local() *hostpath.Root { return s.local }

// Threads is the registry of applier threads (see HostOrigin).
func (s *Store) Threads() *Threads { return &s.threads }

// Flush returns once every change under the given paths ("" or none: all) is
// on the host. It is a no-op unless delegated (cached writes are already
// there, rule C3).
func (s *Store) Flush(ctx context.Context, rels ...string) error {
	if s.queue == nil {
		return nil
	}
	rels = wholeIfNone(rels)
	if err := s.beforeFlush(); err != nil {
		return err
	}
	return s.queue.Flush(ctx, rels...)
}

// beforeFlush brings the holds up to date before a flush: each moved to
// the name its file has now (a rename lands while the flush starts), and
// those for a killed run's writers that are gone released, so that the
// flush writes back what is held under the names the files have and
// leaves clean a path nothing writes any more (the exit flush after a
// container's stop).
func (s *Store) beforeFlush() error {
	s.checkLeftWriters()
	return s.heldWriters.followRenames(s.queue)
}

// wholeIfNone is rels, or the whole source ("") when there are none.
func wholeIfNone(rels []string) []string {
	if len(rels) == 0 {
		return []string{""}
	}
	return rels
}

// Sync is Flush for a container's fsync (rule D2): once the changes are in
// the host's view, the host's copy of each path (a file's content, a
// directory's entries) is fsynced there too, as an fsync on a native mount
// makes it durable. The writeback itself never fsyncs (see put), so this is
// done whether the path was written just now or by the background writeback
// a while ago.
func (s *Store) Sync(ctx context.Context, rels ...string) error {
	return s.sync(ctx, false, rels)
}

// SyncData is Sync for a container's fdatasync: the content and size of
// each path are on the host and durable there when it returns, as for
// Sync, but a file's times may reach the host with a later Put (as
// fdatasync leaves a file's times to a later flush on a native disk). A
// database's commit is an fdatasync of its log, and setting the times
// there is one more share round trip per commit (two on sshfs).
func (s *Store) SyncData(ctx context.Context, rels ...string) error {
	return s.sync(ctx, true, rels)
}

func (s *Store) sync(ctx context.Context, dataOnly bool, rels []string) error {
	if s.queue == nil {
		return nil
	}
	rels = wholeIfNone(rels)
	w := s.fsyncs.wait(rels, dataOnly)
	defer s.fsyncs.done(w)
	if err := s.beforeFlush(); err != nil {
		return err
	}
	if err := s.queue.Flush(ctx, rels...); err != nil {
		return err
	}
	for _, rel := range rels {
		if s.fsyncs.isSynced(w, rel) {
			continue // the Put fsynced what it wrote (fsyncWaits)
		}
		if err := s.syncHost(rel, dataOnly); err != nil {
			return err
		}
	}
	return nil
}

// syncHost fsyncs the host's rel. A path that is not there (removed since)
// or is neither a regular file nor a directory (a symlink, a special file:
// nothing to fsync through) is left alone.
func (s *Store) syncHost(rel string, dataOnly bool) error {
	if rel == "" {
		d, err := s.host.OpenDir("")
		if err != nil {
			return fmt.Errorf("fsync the host's source: %w", err)
		}
		defer d.Close()
		return d.Sync()
	}
	f, err := s.host.OpenFile(rel, unix.O_RDONLY, 0)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENXIO):
		return nil
	case err != nil:
		return fmt.Errorf("fsync %q on the host: %w", rel, err)
	}
	defer f.Close()
	if err := fsyncHost(f, rel, dataOnly); err != nil {
		return fmt.Errorf("fsync %q on the host: %w", rel, err)
	}
	return nil
}

// Stats is a snapshot for status reports.
type Stats struct {
	WriteBack    writeback.Stats
	Conflicts    int64
	Fetched      int64
	Hits         int64            // opens served from content already local
	Kept         int64            // store files kept open between read-only opens (OpenKept)
	WrittenBytes int64            // file content written back to the host
	Ops          map[string]int64 // container operations served, by kind
	Writers      string           // cached: how files open for writing only are served, and why; a read-only volume: none
	Xattrs       string           // whether the volume takes extended attributes, and why
}

// CountOp counts one container operation of the given kind ("open",
// "write", ...) for Stats.Ops.
func (s *Store) CountOp(kind string) {
	c, ok := s.ops.Load(kind)
	if !ok {
		c, _ = s.ops.LoadOrStore(kind, new(atomic.Int64))
	}
	c.(*atomic.Int64).Add(1)
}

// countHit counts an open served from content already local.
func (s *Store) countHit() { s.hits.Add(1) }

// countWrittenBytes counts n bytes of file content written back.
func (s *Store) countWrittenBytes(n int64) { s.writtenBytes.Add(n) }

// Stats returns a snapshot.
func (s *Store) Stats() Stats {
	st := Stats{Conflicts: s.conflicts.Load(), Fetched: s.fetched.Load(),
		Hits: s.hits.Load(), WrittenBytes: s.writtenBytes.Load(), Ops: make(map[string]int64), Writers: s.writers,
		Xattrs: "kept: the source's file system holds them"}
	if !s.HostTakesXattrs() {
		st.Xattrs = "refused (not supported): the source's file system takes none"
	} else if len(s.xattrsRefused) > 0 {
		st.Xattrs = "kept, but " + strings.Join(s.xattrsRefused, "*, ") + "* refused (not supported): the source's file system takes none of those"
	}
	s.ops.Range(func(k, v any) bool {
		st.Ops[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	if s.queue != nil {
		st.WriteBack = s.queue.Stats()
	}
	s.kept.mu.Lock()
	st.Kept = int64(len(s.kept.files))
	s.kept.mu.Unlock()
	return st
}

// IsDirty reports whether rel or anything beneath it has changes the host
// has not seen yet (always false unless delegated).
func (s *Store) IsDirty(rel string) bool {
	return s.queue != nil && s.queue.IsDirty(rel)
}

// syncRootAttrs gives the store's root the host root's owner and mode (and,
// for a new store, its mtime), so the mount's root looks like the source.
func (s *Store) syncRootAttrs() error {
	st, err := s.host.Lstat("")
	if err != nil {
		return fmt.Errorf("store: source: %w", err)
	}
	if err := s.local.Lchown("", int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := s.local.Chmod("", st.Mode&07777); err != nil {
		return err
	}
	if s.isPopulated("") {
		return nil // the root's mtime is the container's now (its changes)
	}
	// A new store's root is the host's root, as every entry adopted later is
	// its host entry: with its mtime too.
	return s.local.Utimes("", nil, &st.Mtim)
}

// Base is the host's attributes as last seen in sync with the store entry.
// A host entry whose attributes differ from its base changed on the host.
type Base struct {
	Mode  uint32 // type and permission bits
	Size  int64
	Mtime int64 // nanoseconds
}

func baseOf(st *unix.Stat_t) Base {
	return Base{Mode: st.Mode, Size: st.Size, Mtime: st.Mtim.Nano()}
}

// Matches reports whether a host entry still looks as it did at base. Only
// what sftp and other shares keep stable is compared (no inode numbers).
func (b Base) Matches(st *unix.Stat_t) bool {
	return b.Mode == st.Mode && b.Mtime == st.Mtim.Nano() && (b.Size == st.Size || st.Mode&unix.S_IFMT == unix.S_IFDIR)
}

// String is the base as logs show it: mode (octal), size, mtime.
func (b Base) String() string { return fmt.Sprintf("%o %d %d", b.Mode, b.Size, b.Mtime) }

// baseBinary is the first byte of a base encoded by encode, and baseLen its
// length.
const (
	baseBinary = 2
	baseLen    = 1 + 2 + 8 + 8
)

// encode is the base as the store keeps it (its xattr, a tomb's journal
// record): a version byte, the mode (16 bits hold its type and permission
// bits), size and mtime, little-endian, 19 bytes. Small on purpose: ext4's
// default 256-byte inode holds 88 bytes of xattrs, and a stub's base and
// stub mark (a populated directory's base and mark) fit there only while
// the base is at most 20 bytes. The text form before it (up to 35 bytes)
// did not, so every stub and populated directory took an xattr block of its
// own: 4 KiB of disk and a block allocation each, 400 MB for a 100k-file
// source before anything was read.
func (b Base) encode() []byte {
	p := make([]byte, baseLen)
	p[0] = baseBinary
	binary.LittleEndian.PutUint16(p[1:], uint16(b.Mode))
	binary.LittleEndian.PutUint64(p[3:], uint64(b.Size))
	binary.LittleEndian.PutUint64(p[11:], uint64(b.Mtime))
	return p
}

// decodeBase reads a base encode wrote, or the text form ("v1 MODE SIZE
// MTIME") of stores and journals written before it.
func decodeBase(p []byte) (Base, bool) {
	if len(p) == baseLen && p[0] == baseBinary {
		return Base{
			Mode:  uint32(binary.LittleEndian.Uint16(p[1:])),
			Size:  int64(binary.LittleEndian.Uint64(p[3:])),
			Mtime: int64(binary.LittleEndian.Uint64(p[11:])),
		}, true
	}
	f := strings.Fields(string(p))
	if len(f) != 4 || f[0] != "v1" {
		return Base{}, false
	}
	mode, err1 := strconv.ParseUint(f[1], 8, 32)
	size, err2 := strconv.ParseInt(f[2], 10, 64)
	mt, err3 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return Base{}, false
	}
	return Base{Mode: uint32(mode), Size: size, Mtime: mt}, true
}

// Base returns the host attributes recorded when rel was last in sync, and
// whether any were recorded (an entry the container created has none).
func (s *Store) Base(rel string) (Base, bool) { return s.baseIn(rel, xattrBase) }

// baseIn reads a base kept in the store entry rel's xattr name (xattrBase,
// xattrWriting).
func (s *Store) baseIn(rel, name string) (Base, bool) {
	buf := make([]byte, 64)
	n, err := s.local.Getxattr(rel, name, buf)
	if err != nil {
		return Base{}, false
	}
	return decodeBase(buf[:n])
}

// EntryBase is Base for the store entry rel of type mode (its st_mode, as
// listed): a symlink cannot carry the base xattr, so its base is the one
// kept in memory (tombs).
func (s *Store) EntryBase(rel string, mode uint32) (Base, bool) {
	if mode&unix.S_IFMT != unix.S_IFLNK {
		return s.Base(rel)
	}
	s.tombMu.Lock()
	defer s.tombMu.Unlock()
	b, ok := s.tombs[rel]
	return b, ok
}

func (s *Store) setBase(rel string, st *unix.Stat_t) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFDIR:
	case unix.S_IFLNK:
		// The kernel allows user.* xattrs only on files and directories: a
		// symlink's base is kept in memory (see tombs).
		s.setTomb(rel, baseOf(st))
		return nil
	default:
		// FIFOs, sockets and devices belong to the host (rule D8): the
		// refresh mirrors them without a base.
		return nil
	}
	if err := s.local.Setxattr(rel, xattrBase, baseOf(st).encode(), 0); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		if byProcess, _ := s.host.ServedByProcess(); byProcess {
			if lst, err := s.local.Lstat(rel); err == nil && isLinked(&lst) {
				s.ownVersions.add(lst.Ino, baseOf(st))
			}
		}
	}
	return nil
}

func (s *Store) hasXattr(rel, name string) bool {
	var b [8]byte
	_, err := s.local.Getxattr(rel, name, b[:])
	return err == nil
}

// isStubFd is IsStub for a file already open.
func isStubFd(f *os.File) bool {
	var b [8]byte
	_, err := unix.Fgetxattr(int(f.Fd()), xattrStub, b[:])
	return err == nil
}

// IsStub reports whether rel is a regular file whose content has not been
// fetched from the host yet.
func (s *Store) IsStub(rel string) bool { return s.hasXattr(rel, xattrStub) }

// keyedMutex is a set of mutexes by path, created on demand.
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) Lock(key string) func() {
	k.mu.Lock()
	if k.m == nil {
		k.m = make(map[string]*keyedEntry)
	}
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}

// Busy reports whether rel has changes the host has not seen (delegated) or
// is open for writing through to the host (cached): the host refresh leaves
// such paths alone.
func (s *Store) Busy(rel string) bool {
	if s.IsDirty(rel) {
		return true
	}
	s.busyMu.Lock()
	if s.busy[rel] > 0 {
		s.busyMu.Unlock()
		return true
	}
	anyOpen := len(s.busyIno) > 0
	s.busyMu.Unlock()
	anyQueued := s.IsDirty("")
	if !anyOpen && !anyQueued {
		return false
	}
	// Open for writing is known by inode: a file renamed while its writer
	// is open is busy under its new name too, and bringing the host in
	// under one name of a file with several (isLinked) changes the file
	// under all of them. Queued for writeback is known by name only (the
	// journal keeps names), so while anything is queued a linked file is
	// taken as busy: its content may be the container's, not yet (or only
	// partly: an in-place rewrite) on the host.
	st, err := s.local.Lstat(rel)
	if err != nil {
		return false
	}
	if anyQueued && isLinked(&st) {
		return true
	}
	return anyOpen && s.writersOf(st.Ino) > 0
}

// holdBusy marks rel, and the store file f (by inode, for its other
// names), busy until the returned func is called.
func (s *Store) holdBusy(rel string, f *os.File) func() {
	var ino uint64
	var st unix.Stat_t
	if f != nil && unix.Fstat(int(f.Fd()), &st) == nil {
		ino = st.Ino
	}
	s.busyMu.Lock()
	if s.busy == nil {
		s.busy = make(map[string]int)
		s.busyIno = make(map[uint64]int)
	}
	s.busy[rel]++
	if ino != 0 {
		s.busyIno[ino]++
	}
	s.busyMu.Unlock()
	return func() {
		s.busyMu.Lock()
		if s.busy[rel]--; s.busy[rel] <= 0 {
			delete(s.busy, rel)
		}
		if ino != 0 {
			if s.busyIno[ino]--; s.busyIno[ino] <= 0 {
				delete(s.busyIno, ino)
			}
		}
		s.busyMu.Unlock()
	}
}

// setTomb remembers the base of a host path whose store entry is gone.
func (s *Store) setTomb(rel string, b Base) {
	s.tombMu.Lock()
	defer s.tombMu.Unlock()
	if s.tombs == nil {
		s.tombs = make(map[string]Base)
	}
	if old, ok := s.tombs[rel]; ok && old == b {
		return
	}
	s.tombs[rel] = b
	s.persistTomb(rel, &b)
}

// persistTomb records rel's tombstone (nil: its removal) in the journal of
// a delegated store; tombMu held, so the journal sees changes in the order
// the map does. A failure is logged, not returned: without the record a
// restarted plugin only keeps one host copy aside needlessly (see tombs).
func (s *Store) persistTomb(rel string, b *Base) {
	if s.journal == nil {
		return
	}
	var err error
	if b != nil {
		err = s.journal.SetTomb(rel, b.encode())
	} else {
		err = s.journal.DropTomb(rel)
	}
	if err != nil {
		s.log.Warn("recording a tombstone in the journal", "path", rel, "err", err)
	}
}

// decodeBases decodes the journal's values of a table of bases.
func decodeBases(values map[string][]byte) map[string]Base {
	out := make(map[string]Base, len(values))
	for rel, v := range values {
		if b, ok := decodeBase(v); ok {
			out[rel] = b
		}
	}
	return out
}

// entombBase keeps rel's base before its store entry is removed.
func (s *Store) entombBase(rel string) {
	if b, ok := s.Base(rel); ok {
		s.setTomb(rel, b)
	}
}

// hostBase is what the host had at rel when last in sync: the entry's base,
// or the tombstone of an entry removed or renamed away since.
func (s *Store) hostBase(rel string) (Base, bool) {
	if b, ok := s.Base(rel); ok {
		return b, true
	}
	s.tombMu.Lock()
	defer s.tombMu.Unlock()
	b, ok := s.tombs[rel]
	return b, ok
}

// moveTombs follows a rename made on the host too: the tombstones (symlink
// bases among them) beneath oldRel now describe host paths beneath newRel,
// and those beneath newRel went away with what the rename replaced, or, for
// an exchange, now sit beneath oldRel. Left behind, a symlink carried by a
// directory rename would have no base, and its later replacement would look
// like a host change (rule D7: a spurious conflict copy).
func (s *Store) moveTombs(oldRel, newRel string, exchange bool) {
	s.tombMu.Lock()
	defer s.tombMu.Unlock()
	moved := make(map[string]Base)
	for p, b := range s.tombs {
		if rest, ok := beneath(p, oldRel); ok {
			moved[newRel+rest] = b
			delete(s.tombs, p)
			s.persistTomb(p, nil)
		} else if rest, ok := beneath(p, newRel); ok {
			if exchange {
				moved[oldRel+rest] = b
			}
			delete(s.tombs, p)
			s.persistTomb(p, nil)
		}
	}
	for p, b := range moved {
		s.tombs[p] = b
		s.persistTomb(p, &b)
	}
}

// beneath reports whether store path p is root or lies beneath it, and
// what follows root in p ("" or "/...").
func beneath(p, root string) (string, bool) {
	if p == root {
		return "", true
	}
	if strings.HasPrefix(p, root+"/") {
		return p[len(root):], true
	}
	return "", false
}

// dropTomb forgets rel's tombstone once the host matches the store there.
func (s *Store) dropTomb(rel string) {
	s.tombMu.Lock()
	defer s.tombMu.Unlock()
	if _, ok := s.tombs[rel]; ok {
		delete(s.tombs, rel)
		s.persistTomb(rel, nil)
	}
}

// pinBase sets rel's base to b, or removes it when there is none.
func (s *Store) pinBase(rel string, b Base, known bool) {
	s.dropTomb(rel)
	if st, err := s.local.Lstat(rel); err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if known {
			s.setTomb(rel, b)
		}
		return
	}
	if known {
		if err := s.local.Setxattr(rel, xattrBase, b.encode(), 0); err != nil {
			s.log.Debug("pin base", "path", rel, "err", err)
		}
		return
	}
	if err := s.local.Removexattr(rel, xattrBase); err != nil && !errors.Is(err, unix.ENODATA) {
		s.log.Debug("drop base", "path", rel, "err", err)
	}
}

// treeLock orders writebacks on a path tree: lock(rel) holds every ancestor
// of rel shared and rel itself exclusive, so a Put of a directory waits for
// the Puts beneath it and the other way round, while Puts of unrelated paths
// (and siblings) run in parallel. A rename made on the host locks both of its
// names at once: no writeback may be writing a temporary file into a
// directory while the directory moves.
//
// Every locker takes its paths in byte order. An ancestor sorts before its
// descendants, so this is "from the root down" on each path, and one total
// order for all lockers means no two can wait on each other.
type treeLock struct {
	mu sync.Mutex
	m  map[string]*treeEntry
}

type treeEntry struct {
	rw   sync.RWMutex
	refs int
}

func (t *treeLock) entry(p string) *treeEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[string]*treeEntry)
	}
	e := t.m[p]
	if e == nil {
		e = &treeEntry{}
		t.m[p] = e
	}
	e.refs++
	return e
}

func (t *treeLock) put(p string) {
	t.mu.Lock()
	if e := t.m[p]; e != nil {
		if e.refs--; e.refs == 0 {
			delete(t.m, p)
		}
	}
	t.mu.Unlock()
}

// lock takes the locks for rel and returns their release.
func (t *treeLock) lock(rels ...string) func() {
	exclusive := make(map[string]bool) // path -> held exclusive (else shared)
	mark := func(p string, excl bool) { exclusive[p] = exclusive[p] || excl }
	for _, rel := range rels {
		if rel != "" {
			mark("", false)
			for i := 0; i < len(rel); i++ {
				if rel[i] == '/' {
					mark(rel[:i], false)
				}
			}
		}
		mark(rel, true)
	}
	paths := make([]string, 0, len(exclusive))
	for p := range exclusive {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	held := make([]*treeEntry, len(paths))
	for i, p := range paths {
		held[i] = t.entry(p)
		if exclusive[p] {
			held[i].rw.Lock()
		} else {
			held[i].rw.RLock()
		}
	}
	return func() {
		for i := len(paths) - 1; i >= 0; i-- {
			if exclusive[paths[i]] {
				held[i].rw.Unlock()
			} else {
				held[i].rw.RUnlock()
			}
			t.put(paths[i])
		}
	}
}

// openForWriteThrough reports whether a cached file is open for writing
// (its base is refreshed at close).
func (s *Store) openForWriteThrough(rel string) bool {
	s.busyMu.Lock()
	defer s.busyMu.Unlock()
	return s.busy[rel] > 0
}
