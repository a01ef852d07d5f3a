package syncer

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/hostpath"
	"github.com/bindstate/bindstate/plugin/store"
)

// Invalidator drops what the kernel caches for a path (fsys.Mount).
type Invalidator interface {
	Invalidate(rel string, content, entry bool)
}

// Mount is where the refresher makes host changes: the store's own FUSE
// mount, so that the kernel raises the container's events and drops its
// caches as for any change (ownmount.Root, whose thread a killed plugin
// cannot be stranded on).
type Mount interface {
	Mkdir(rel string, mode uint32) error
	Mknod(rel string, mode uint32, dev uint64) error
	Symlink(target, rel string) error
	Create(rel string, mode uint32) error // a new empty regular file
	Truncate(rel string, size int64) error
	RemoveAll(rel string) error
	// ThreadID is the OS thread the requests come from, which the store
	// registers as host-origin while a change is applied (BringIn).
	ThreadID() uint32
}

// Refresher keeps a mounted store up to date with host edits. A share gives
// no change notifications (sshfs, NFS, 9p), so it looks, in two ways:
//
//   - a sweep (Scan) compares every populated directory with the host, entry
//     by entry; it finds every change, and on a large tree it is slow (a host
//     stat per entry: about 1 s of CPU per 100k entries on sshfs);
//   - between sweeps, a check (Check) stats only the populated directories on
//     the host, and lists those whose mtime moved (with their parents), and
//     those populated since.
//     A name made, removed or renamed on the host, which is also how most
//     editors save (write a new file, rename it over the old), moves the
//     directory's mtime; an edit in place does not, and waits for the sweep,
//     unless the directory had a host change in the last minute (hotFor), or
//     the container opened the file lately (InUse: each such file is
//     stat'ed too).
//
// Only populated directories are looked at, so a large tree the container
// never looked into costs nothing.
type Refresher struct {
	store *store.Store
	mnt   Mount // the FUSE mount, where changes are applied
	inval Invalidator
	inUse *InUse // nil: no files are stat'ed by checks
	every time.Duration
	log   *slog.Logger

	mu sync.Mutex // one Scan or Check at a time
	// inSync holds, for each directory the last look found in sync, how
	// its two sides looked then. A directory that still looks the same is
	// not compared entry by entry again: on a large tree that comparison
	// (a store lstat and a base xattr read per entry) was half of a
	// sweep's CPU, and nearly every directory is unchanged.
	inSync map[string]syncMark
	// watched are the populated directories as of the last sweep, and those
	// found by checks since: nil before the first sweep, but on a new
	// volume, whose checks watch what is listed from the start (Run tells
	// a new volume by that).
	watched map[string]dirWatch
	// populated is where this refresher is in the store's log of populated
	// directories (store.PopulatedSince), and populatedAt when it was read.
	populated   int
	populatedAt time.Time
	// hot are the directories listed at every check until the time given
	// (see hotFor); sweeps leave them be.
	hot map[string]time.Time
	// inUseSeen holds, for each file in use whose host attributes matched
	// its base at the last check, that base: while the host still matches
	// it, the store's (an xattr read and a parse) is not read again.
	inUseSeen map[string]store.Base
}

// syncMark is how a directory looked on both sides when it was last in sync.
// The host side is a sum of its listing (what Plan compares: name, mode,
// size, mtime); the store side is the directory's inode and ctime, which
// change whenever an entry is made, removed or renamed in the store, by the
// container or by a refresh. The contents of the store's files do not
// matter: a file the container changed is either busy (left alone by any
// plan) or, once written back, changed on the host too.
type syncMark struct {
	host       uint64
	localIno   uint64
	localCtime int64
}

// dirWatch is what a check compares a watched directory with.
type dirWatch struct {
	mtime int64 // the host directory's mtime (ns) before it was last listed
	// racy: that mtime was too recent to tell a later change in the same
	// tick of the host's clock (sftp keeps whole seconds), so the next
	// check lists the directory whatever its mtime (git's "racy clean").
	// Judged by this machine's clock: against a share whose clock is far
	// off, such a change waits for the sweep.
	racy bool
}

// hotFor is how long a directory in which a host change was found is listed
// at every check: edits come in bursts (a save, then another; a branch
// switch), and an edit in place does not move the directory's mtime.
const hotFor = time.Minute

// racyWindow is how recent an mtime may be and still be trusted to move
// with the next change: sftp's whole seconds, and a second of slack.
const racyWindow = 2 * time.Second

func watchOf(mtime int64) dirWatch {
	return dirWatch{mtime: mtime, racy: time.Since(time.Unix(0, mtime)) < racyWindow}
}

// NewRefresher applies host changes to st through the mount opened as mnt,
// looking every interval; checks also stat the files in inUse (may be nil).
func NewRefresher(st *store.Store, mnt Mount, inval Invalidator, inUse *InUse, every time.Duration, log *slog.Logger) *Refresher {
	if log == nil {
		log = slog.Default()
	}
	r := &Refresher{store: st, mnt: mnt, inval: inval, inUse: inUse, every: every, log: log,
		inSync: make(map[string]syncMark), hot: make(map[string]time.Time), inUseSeen: make(map[string]store.Base)}
	// Where the store's log of populated directories is now, read before
	// asking whether the root is populated: a root populated in between is
	// then in the log after this point, and checks find it.
	_, next, _ := st.PopulatedSince(0)
	readAt := time.Now()
	if !st.IsPopulated("") {
		// Nothing listed into the store yet (a new volume): whatever the
		// container lists from now on is listed after this moment, so
		// checks watch it from the start (see Check: a directory whose
		// host mtime is older than that is not listed again), and the
		// first look need not be a sweep (see Run).
		r.populated, r.populatedAt = next, readAt
		r.watched = make(map[string]dirWatch)
	}
	return r
}

// checkDutyCycle and sweepDutyCycle bound the share of time the refresher
// spends looking: after a check (or sweep) that took d, the next starts no
// sooner than (dutyCycle-1)*d later. A large tree on a slow share is then
// looked at less often, instead of keeping the plugin and the share busy all
// the time (a polling storm). Sweeps are the costly kind: on a 100k-entry
// tree on sshfs one takes ~3 s (~1 s of CPU), so it runs about every 80 s,
// while checks (~1,000 directory stats, 15 ms) run every interval. A
// sweep's length is estimated for the directories watched now (sweepCost).
const (
	checkDutyCycle = 10
	sweepDutyCycle = 30
)

// Run looks for host changes until ctx ends: a sweep first (on a new
// volume, checks first), then a check every interval and a sweep as often
// as sweepDutyCycle allows.
func (r *Refresher) Run(ctx context.Context) {
	t := time.NewTimer(r.every)
	defer t.Stop()
	var last struct { // the last sweep
		start time.Time // zero: the first look is a sweep
		took  time.Duration
		dirs  int
	}
	failures := failureReport{log: r.log}
	r.mu.Lock()
	watching := r.watched != nil // before any look: only a new volume's
	r.mu.Unlock()
	if watching {
		// A new volume: what the container lists was just listed from the
		// host, and checks watch it (NewRefresher). A sweep at the first
		// interval listed it all again, during the container's first walk
		// of it (a cold `git status`, `go list`), on the same share. The
		// first sweep waits as if one had taken an interval (sweepDutyCycle
		// intervals); from then on sweeps are spaced by what they cost.
		last.start, last.took = time.Now(), r.every
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		kind := "sweep"
		var stats ScanStats
		var err error
		cost := sweepCost(last.took, last.dirs, r.watchedCount())
		if !last.start.IsZero() && start.Before(last.start.Add(nextLook(r.every, cost, sweepDutyCycle))) {
			kind = "check"
			stats, err = r.Check(ctx)
		} else {
			stats, err = r.Scan(ctx)
			last.start, last.took, last.dirs = start, time.Since(start), stats.Dirs
		}
		if ctx.Err() == nil {
			failures.look(time.Now(), kind, err)
		}
		r.log.Debug("host refresh", "kind", kind, "took", time.Since(start), "checked", stats.Checked,
			"files", stats.Files, "dirs", stats.Dirs, "unchanged", stats.Unchanged, "changes", stats.Applied)
		t.Reset(nextLook(r.every, time.Since(start), checkDutyCycle))
	}
}

// sweepCost estimates the next sweep's length from the last one, which took
// took over swept directories, when watched are watched now: a sweep made
// while the container was still walking a tree saw a few of the directories
// the next one will list, and spacing sweeps by its length alone put the
// next full one right after the walk.
func sweepCost(took time.Duration, swept, watched int) time.Duration {
	if swept > 0 && watched > swept {
		return took * time.Duration(watched) / time.Duration(swept)
	}
	return took
}

// watchedCount is how many directories checks stat.
func (r *Refresher) watchedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.watched)
}

// nextLook is the wait before the next look, after one that took took.
func nextLook(every, took time.Duration, dutyCycle int64) time.Duration {
	return max(every, time.Duration(dutyCycle-1)*took)
}

// ScanStats says what one Scan or Check did.
type ScanStats struct {
	Checked   int // directories whose mtime was compared (Check)
	Files     int // files in use whose attributes were compared (Check)
	Dirs      int // directories listed on the host and compared
	Unchanged int // of those, found as at the last look: not compared entry by entry
	Applied   int // host changes brought in
}

// dirRef is a directory to list, with its host mtime (ns) from before.
type dirRef struct {
	rel   string
	mtime int64
}

// Scan sweeps: it compares every populated directory with the host and
// applies what changed.
func (r *Refresher) Scan(ctx context.Context) (ScanStats, error) {
	var stats ScanStats
	if !r.store.IsPopulated("") {
		return stats, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return stats, r.sweep(ctx, &stats)
}

// sweep is Scan, r.mu held.
func (r *Refresher) sweep(ctx context.Context, stats *ScanStats) error {
	// Read first: a directory populated during the sweep is then looked
	// for by the next check.
	_, r.populated, _ = r.store.PopulatedSince(r.populated)
	r.populatedAt = time.Now()
	root, err := r.store.Host().Lstat("")
	if err != nil {
		return err
	}
	// What this sweep finds is what is watched: a directory gone, or not
	// populated any more, is forgotten.
	r.watched = make(map[string]dirWatch, len(r.watched))
	err = r.list(ctx, []dirRef{{"", root.Mtim.Nano()}}, stats)
	for dir := range r.inSync {
		if _, ok := r.watched[dir]; !ok {
			delete(r.inSync, dir)
		}
	}
	return err
}

// Check stats every watched directory on the host, and lists those whose
// mtime moved, those holding a file in use that changed, those populated
// since they were last looked at, and the populated subdirectories found in
// them.
func (r *Refresher) Check(ctx context.Context) (ScanStats, error) {
	var stats ScanStats
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watched == nil {
		return stats, nil // no sweep yet
	}
	var queue []dirRef
	var errs []error
	populated, next, complete := r.store.PopulatedSince(r.populated)
	readAt := time.Now()
	if !complete {
		// More directories were populated since the last look than the
		// store's log keeps: which ones is not known, so look at all.
		return stats, r.sweep(ctx, &stats)
	}
	now := time.Now()
	mtimes := make(map[string]int64, len(r.watched))
	toList := make(map[string]bool)
	dirs := make([]string, 0, len(r.watched))
	watches := make([]dirWatch, 0, len(r.watched))
	for dir, w := range r.watched {
		dirs, watches = append(dirs, dir), append(watches, w)
	}
	for i, hs := range r.lstatAll(ctx, dirs) {
		if hs.skipped {
			break // ctx ended
		}
		dir, w := dirs[i], watches[i]
		st, err := hs.st, hs.err
		stats.Checked++
		if notThere(err) || (err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR) {
			// Gone on the host: the mtime of its parent (or of the
			// directory a symlink now replaces) moved, and that
			// directory's plan removes it from the store.
			delete(r.watched, dir)
			delete(r.inSync, dir)
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		mtimes[dir] = st.Mtim.Nano()
		switch {
		case st.Mtim.Nano() != w.mtime:
			// The directory's own attributes (its new mtime) are in
			// its parent's listing.
			toList[dir], toList[parentOf(dir)] = true, true
		case w.racy || now.Before(r.hot[dir]):
			toList[dir] = true
		}
	}
	for dir, until := range r.hot {
		if !now.Before(until) {
			delete(r.hot, dir)
		}
	}
	r.checkInUse(ctx, now, mtimes, toList, &stats)
	for dir := range toList {
		if mtime, ok := mtimes[dir]; ok {
			queue = append(queue, dirRef{dir, mtime})
		}
	}
	// Directories populated since the last look (after the loop above,
	// which need not stat them again). One whose host mtime is older than
	// that look (and not racy) has not changed since it was listed into
	// the store: it is only watched from now on. (After a container walks a
	// large tree, listing each again was most of the refresher's work.)
	before := r.populatedAt
	r.populated, r.populatedAt = next, readAt
	for _, rel := range populated {
		if _, ok := r.watched[rel]; ok || !r.store.IsPopulated(rel) {
			continue
		}
		st, err := r.store.Host().Lstat(rel)
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue // gone on the host: its parent's mtime moved
		}
		if mtime := time.Unix(0, st.Mtim.Nano()); mtime.Before(before.Add(-racyWindow)) {
			r.watched[rel] = watchOf(st.Mtim.Nano())
			continue
		}
		queue = append(queue, dirRef{rel, st.Mtim.Nano()})
	}
	errs = append(errs, r.list(ctx, queue, &stats))
	return stats, errors.Join(errs...)
}

// hostStat is one result of lstatAll.
type hostStat struct {
	st      unix.Stat_t
	err     error
	skipped bool // not stat'ed: ctx ended first
}

// lstatAll lstats rels on the host and returns the results in the order of
// rels. Over a share where each lstat is a round trip they go side by side
// (hostpath.Root.Stats): one after the other they made a check of N watched
// directories N round trips long, and the next check waits nine times that
// (checkDutyCycle), so that over sshfs without caches and 2 ms added to each
// round trip checks of 901 directories came ~85 s apart, now ~14 s. Once
// ctx ends, the rels not stat'ed yet are skipped.
func (r *Refresher) lstatAll(ctx context.Context, rels []string) []hostStat {
	out := make([]hostStat, len(rels))
	host := r.store.Host()
	host.Stats(len(rels), func(i int) {
		if ctx.Err() != nil {
			out[i].skipped = true
			return
		}
		out[i].st, out[i].err = host.Lstat(rels[i])
	})
	return out
}

// checkInUse stats on the host each file the container opened lately whose
// directory is watched and not to be listed anyway, and marks the directory
// to be listed if the file is not as the store last took it from the host:
// an edit in place moves no directory's mtime (see InUse). The directory's
// plan then brings the change in, as a sweep's would.
func (r *Refresher) checkInUse(ctx context.Context, now time.Time, mtimes map[string]int64, toList map[string]bool, stats *ScanStats) {
	if r.inUse == nil {
		return
	}
	seen := make(map[string]store.Base, len(r.inUseSeen))
	defer func() { r.inUseSeen = seen }() // files no longer in use are forgotten
	var rels []string
	for _, rel := range r.inUse.Since(now.Add(-inUseFor)) {
		dir := parentOf(rel)
		if _, watched := mtimes[dir]; !watched || toList[dir] {
			continue // not watched (yet: it was populated since), or listed anyway
		}
		rels = append(rels, rel)
	}
	// Stat'ed side by side (lstatAll), so also a file whose directory
	// another file in use, found changed, puts on the list below.
	for i, hs := range r.lstatAll(ctx, rels) {
		if hs.skipped {
			return // ctx ended
		}
		rel, dir := rels[i], parentOf(rels[i])
		st, err := hs.st, hs.err
		stats.Files++
		if err == nil {
			if last, ok := r.inUseSeen[rel]; ok && last.Matches(&st) {
				seen[rel] = last // as when it last matched its base
				continue
			}
		}
		if r.store.Busy(rel) {
			continue // the container's version wins until writeback
		}
		base, ok := r.store.Base(rel)
		switch {
		case !ok:
			// Made in the container, or gone from the store: not the
			// host's to change.
		case err == nil && base.Matches(&st):
			seen[rel] = base
		default:
			// Changed, or gone, or not stat'able: the listing sorts it out
			// (and says what failed).
			toList[dir] = true
		}
	}
}

// list compares each queued directory with the host, and then the populated
// subdirectories found in them that are not watched yet (all of them, in a
// sweep), and records what it saw. r.mu held.
func (r *Refresher) list(ctx context.Context, queue []dirRef, stats *ScanStats) error {
	var errs []error
	// A directory found both ways (populated since the last look, and
	// beneath one listed now) is listed once.
	queued := make(map[string]bool, len(queue))
	for _, d := range queue {
		queued[d.rel] = true
	}
	for len(queue) > 0 && ctx.Err() == nil {
		d := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		res, err := r.scanDir(d.rel)
		stats.Dirs++
		stats.Applied += res.applied
		if res.unchanged {
			stats.Unchanged++
		}
		if res.inSync != nil {
			r.inSync[d.rel] = *res.inSync
		} else {
			delete(r.inSync, d.rel)
		}
		w := watchOf(d.mtime)
		if res.applied > 0 {
			r.hot[d.rel] = time.Now().Add(hotFor)
		}
		if err != nil {
			errs = append(errs, err)
			w.racy = true // listed in full at the next check
		}
		if res.gone {
			delete(r.watched, d.rel)
		} else {
			r.watched[d.rel] = w
		}
		for _, sub := range res.sub {
			if _, ok := r.watched[sub.rel]; !ok && !queued[sub.rel] {
				queued[sub.rel] = true
				queue = append(queue, sub)
			}
		}
	}
	return errors.Join(errs...)
}

// notThere reports an error saying that a directory is not in the tree any
// more: gone, replaced by something else, or reached only through a symlink
// now (a directory on the way replaced by one, which hostpath refuses to
// follow). None is a failure of the refresh: the listing of the nearest
// directory still there brings the change in.
func notThere(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, hostpath.ErrEscape)
}

// parentOf is the directory holding rel ("" for the root's entries and the
// root itself).
func parentOf(rel string) string {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i]
	}
	return ""
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// dirScan is what scanning one directory did.
type dirScan struct {
	applied   int       // host changes brought in
	sub       []dirRef  // populated subdirectories, to scan next
	unchanged bool      // both sides as at the last look: nothing compared
	inSync    *syncMark // set if the directory is now in sync
	gone      bool      // not on the host (any more)
}

// scanDir plans and applies one directory.
func (r *Refresher) scanDir(dir string) (dirScan, error) {
	var res dirScan
	host, err := r.store.Host().ReadDir(dir)
	if notThere(err) {
		res.gone = true
		return res, nil // gone on the host: the parent's plan deletes it
	}
	if err != nil {
		return res, err
	}
	// The host's subdirectories' mtimes, from before their own listing:
	// the populated ones are listed next.
	hostDirs := make(map[string]int64)
	for _, h := range host {
		if h.Stat.Mode&unix.S_IFMT == unix.S_IFDIR {
			hostDirs[h.Name] = h.Stat.Mtim.Nano()
		}
	}
	addSub := func(name string) {
		rel := join(dir, name)
		if r.store.IsPopulated(rel) {
			res.sub = append(res.sub, dirRef{rel, hostDirs[name]})
		}
	}
	mark, err := r.markOf(dir, host)
	if notThere(err) {
		// Gone from the store: the container removed it (delegated, not
		// written back yet: its removal stands), or a plan did just now.
		res.gone = true
		return res, nil
	}
	if err != nil {
		return res, err
	}
	if last, ok := r.inSync[dir]; ok && last == mark {
		res.unchanged, res.inSync = true, &mark
		// The store has the host's entries (in sync, and nothing made or
		// removed since): its subdirectories are the host's.
		for name := range hostDirs {
			addSub(name)
		}
		return res, nil
	}
	entries, err := r.store.Local().ReadDir(dir)
	if notThere(err) {
		res.gone = true
		return res, nil
	}
	if err != nil {
		return res, err
	}
	local := make([]Local, len(entries))
	for i, e := range entries {
		b, ok := r.store.EntryBase(join(dir, e.Name), e.Stat.Mode)
		local[i] = Local{Name: e.Name, Mode: e.Stat.Mode, Base: b, HasBase: ok}
	}
	skipped := false // an entry left alone: the directory is not in sync
	busy := func(name string) bool {
		b := r.store.Busy(join(dir, name))
		skipped = skipped || b
		return b
	}
	var errs []error
	actions := Plan(host, local, busy)
	for _, a := range actions {
		err := r.apply(dir, a)
		if errors.Is(err, unix.EBUSY) { // store.ErrBusy, or EBUSY from a syscall on the mount
			skipped = true
			continue // the container changed it meanwhile: its version wins until writeback
		}
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOENT) {
			// The container created or removed the name between the
			// listing and now: the next scan sees where things stand.
			r.log.Debug("host change raced with the container; rescanning later", "path", join(dir, a.Name), "err", err)
			skipped = true
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		res.applied++
	}
	for _, e := range entries {
		if e.Stat.Mode&unix.S_IFMT == unix.S_IFDIR {
			addSub(e.Name)
		}
	}
	if len(actions) == 0 && !skipped {
		// Nothing to bring in. (After applying changes the store's side
		// has moved: the next look compares once more and finds it in sync.)
		res.inSync = &mark
	}
	return res, errors.Join(errs...)
}

// markOf sums up how dir looks on both sides (see syncMark).
func (r *Refresher) markOf(dir string, host []hostpath.Entry) (syncMark, error) {
	st, err := r.store.Local().Lstat(dir)
	if err != nil {
		return syncMark{}, err
	}
	h := uint64(fnvOffset)
	for _, e := range host {
		h = fnvString(h, e.Name)
		h = fnvString(h, "\x00") // names hold no NUL: where one ends is plain
		h = fnvUint64(h, uint64(e.Stat.Mode))
		h = fnvUint64(h, uint64(e.Stat.Size))
		h = fnvUint64(h, uint64(e.Stat.Mtim.Nano()))
	}
	return syncMark{host: h, localIno: st.Ino, localCtime: st.Ctim.Nano()}, nil
}

// apply brings one host change in. Creation and deletion are syscalls on
// the mount (the kernel raises IN_CREATE / IN_DELETE); an update changes the
// store in place, drops the kernel's cache, and then truncates the file to
// its own size through the mount, which raises IN_MODIFY only after the new
// content is in place (rule D1: what is read after the event is the host's).
func (r *Refresher) apply(dir string, a Action) error {
	rel := join(dir, a.Name)
	return r.store.BringIn(r.mnt.ThreadID(), func() error {
		if r.store.Busy(rel) {
			return nil // the container got there first
		}
		if st, err := r.store.Local().Lstat(dir); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return nil // the directory itself changed meanwhile
		}
		r.log.Debug("bringing host change in", "change", a.Kind.String(), "path", rel)
		switch a.Kind {
		case Create:
			return r.create(rel, &a.Host)
		case Delete:
			return r.mnt.RemoveAll(rel)
		case Replace:
			return r.replace(rel, &a.Host)
		default:
			changed, err := r.store.RefreshEntry(rel)
			if errors.Is(err, store.ErrRetargeted) {
				return r.replace(rel, &a.Host)
			}
			if err != nil || !changed {
				return err
			}
			r.inval.Invalidate(rel, true, false)
			if a.Host.Mode&unix.S_IFMT == unix.S_IFREG {
				return r.mnt.Truncate(rel, a.Host.Size)
			}
			return nil
		}
	})
}

// replace removes rel and makes it again from the host's, through the mount.
func (r *Refresher) replace(rel string, st *unix.Stat_t) error {
	if err := r.mnt.RemoveAll(rel); err != nil {
		return err
	}
	return r.create(rel, st)
}

// create makes rel through the mount; the store's host-origin handlers
// adopt the host's entry whatever the request carried.
func (r *Refresher) create(rel string, st *unix.Stat_t) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return r.mnt.Mkdir(rel, 0o700)
	case unix.S_IFREG:
		return r.mnt.Create(rel, 0o600)
	case unix.S_IFLNK:
		return r.mnt.Symlink("bindstate-placeholder", rel)
	default:
		return r.mnt.Mknod(rel, st.Mode, st.Rdev)
	}
}

// FNV-1a over a listing, written out: hash/fnv takes []byte through an
// interface, which costs an allocation per name on the sweep's path (100k
// names for a large tree).
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
}

func fnvUint64(h, v uint64) uint64 {
	for i := 0; i < 8; i++ {
		h = (h ^ (v & 0xff)) * fnvPrime
		v >>= 8
	}
	return h
}
