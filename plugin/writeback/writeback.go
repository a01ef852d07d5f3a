// Package writeback owns the queue of store paths waiting to reach the host
// in the delegated state: it schedules, batches and retries their writeback
// and lets callers wait for it (Flush).
//
// Lock order: Queue.mu only; Put and journal calls are never made with it
// held (the journal has its own leaf lock). Methods named _foo expect mu
// held. A path whose journal record is being written sits in a transitional
// state (journaling, cleaning) instead, and MarkDirty on it waits on
// Queue.settled until the record is down, so the journal and the queue
// never disagree about a path in a way that could lose a change.
//
// Each path moves through explicit states:
//
//	clean --MarkDirty--> dirty --(delay)--> writing --Put ok, gen unchanged--> clean
//	                       ^                   |--Put ok, gen changed---> dirty
//	                       |                   '--Put failed--> failed (retry with backoff, capped)
//	                       '------------------- MarkDirty (any state) bumps gen
//
// A path is marked clean only if no MarkDirty happened while its Put ran
// (generation check), so a write racing with its own writeback is never lost.
//
// A path can also be held (Hold, while a container has it open for writing):
// it stays dirty and journaled but is not written back on its own schedule,
// which would copy a large file to the host again every Delay while it grows;
// a Flush still writes it at once (fsync). Release schedules it normally.
// A held path is never marked clean: writes made through a handle the queue
// does not see are covered by the Put that follows Release.
// Nothing is ever dropped: a failed path stays in the journal and is retried
// forever with capped backoff; Flush reports it.
//
// Background writeback yields to a busy container: while changes keep coming
// (a build, an untar, npm install: the container is making changes faster
// than the share could take them, and on a small machine the writeback's
// share traffic takes CPU from it) at most BusyWorkers Puts run, until no
// change has been made for Quiet; no path waits longer than MaxDelay after
// its change for a full-speed writeback. The kernel's dirty page writeback
// works alike (dirty_expire). A Flush (fsync, the exit flush) never waits.
// The BusyWorkers trickle only while at most BusyBacklog paths wait: a few
// changes while the container works (a log, an editor's saves) still reach
// the host within Delay, but a burst (an untar, npm install) waits for its
// end, when all Workers write it; trickling it meanwhile leaves the host no
// sooner complete (the share is as slow either way) and makes the burst take
// longer on a small machine.
//
// Scheduling uses one goroutine and one timer for the whole queue: paths
// waiting for their delay or backoff sit in a heap ordered by due time, then
// by the order they became dirty (oldest first); the timer is set for the
// heap's top only. A MarkDirty on a path already queued touches neither. A
// Flush makes its paths due at once and takes them oldest first in each
// directory, a directory after another (spreader): Puts in one directory
// of a share wait for each other. The background writeback is ordered so
// too when it goes full speed (_spread).
package writeback

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bindstate/bindstate/plugin/journal"
)

// Putter makes the host match the store at one path (the store's current
// content, metadata, or absence). It must be safe for concurrent calls on
// different paths. A Putter must not call back into the Queue.
type Putter interface {
	Put(ctx context.Context, rel string) error
}

// Options tune a Queue. Zero values pick defaults.
type Options struct {
	Delay       time.Duration // how long a path stays dirty before writeback starts (default 1s); also the first retry backoff
	Workers     int           // parallel Puts (default 8)
	MaxBackoff  time.Duration // cap on retry backoff (default 30s)
	Quiet       time.Duration // full-speed background writeback waits until no change for this long (default 300ms; negative: never waits)
	BusyWorkers int           // Puts that run meanwhile (default 1; negative: none)
	BusyBacklog int           // ... while at most this many paths wait (default 64; negative: any number)
	MaxDelay    time.Duration // ... but a path waits at most this long after its change (default 30s)
}

const (
	defaultDelay       = time.Second
	defaultWorkers     = 8
	defaultMaxBackoff  = 30 * time.Second
	defaultQuiet       = 300 * time.Millisecond
	defaultBusyWorkers = 1
	defaultBusyBacklog = 64
	defaultMaxDelay    = 30 * time.Second
)

// ErrClosed is returned by calls on a closed Queue.
var ErrClosed = errors.New("writeback: queue closed")

// FlushError names every path that could not be written back.
type FlushError struct {
	Failed map[string]error // rel -> last error
}

// flushErrorDetail is how many paths Error spells out with their error, and
// errorPaths how many an error names at most; the rest are counted. An
// error goes to the docker CLI and to one log line: a flush cut short in an
// untarred tree leaves tens of thousands of paths, which were once all
// named there. (bindstate status shows the failures; the journal keeps
// every path.)
const (
	flushErrorDetail = 10
	errorPaths       = 20
)

func (e *FlushError) Error() string {
	rels := e.paths()
	var b strings.Builder
	fmt.Fprintf(&b, "writeback failed for %d path(s), kept and retrying: ", len(rels))
	writePaths(&b, rels, func(i int, rel string) {
		if i < flushErrorDetail {
			fmt.Fprintf(&b, ": %v", e.Failed[rel])
		}
	})
	return b.String()
}

// pendingError names the paths a Flush left pending (sorted).
func pendingError(pending []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "writeback: %d path(s) still pending: ", len(pending))
	writePaths(&b, pending, nil)
	return errors.New(b.String())
}

// writePaths writes at most errorPaths of rels, quoted and separated by
// "; ", then how many more there are. detail, if set, adds to the i-th.
func writePaths(b *strings.Builder, rels []string, detail func(i int, rel string)) {
	for i, rel := range rels[:min(len(rels), errorPaths)] {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(b, "%q", rel)
		if detail != nil {
			detail(i, rel)
		}
	}
	if more := len(rels) - errorPaths; more > 0 {
		fmt.Fprintf(b, "; and %d more", more)
	}
}

// Unwrap lets errors.Is/As see the Putter's errors (in path order).
func (e *FlushError) Unwrap() []error {
	rels := e.paths()
	errs := make([]error, len(rels))
	for i, rel := range rels {
		errs[i] = e.Failed[rel]
	}
	return errs
}

func (e *FlushError) paths() []string {
	rels := make([]string, 0, len(e.Failed))
	for rel := range e.Failed {
		rels = append(rels, rel)
	}
	slices.Sort(rels)
	return rels
}

// Stats is a snapshot for status output and metrics.
type Stats struct {
	Dirty      int           // paths waiting or being written
	Failed     int           // paths whose last Put failed
	Written    uint64        // successful Puts since start
	OldestAge  time.Duration // age of the oldest unwritten change (writeback lag)
	LastError  string        // most recent Put failure, "" if none
	LastFailed string        // path of that failure
	Errors     uint64        // failed Puts since start (each retry counts)

	// The paths themselves, sorted, at most MaxListed of each (Dirty and
	// Failed still count them all): what `bindstate status` names.
	DirtyPaths  []string // waiting or being written (failed ones included)
	FailedPaths []string // whose last Put failed
}

// MaxListed bounds Stats' path lists.
const MaxListed = 1000

type state uint8

// parked reports whether it waits outside the heap: held (see Hold), dirty
// or failed, and no Put running. A failed item is parked too when a Hold
// comes during its backoff; Release and Flush must put it back either way.
func (it *item) parked() bool {
	return it.index < 0 && (it.state == stDirty || it.state == stFailed)
}

const (
	stJournaling state = iota // first "dirty" record being appended; MarkDirty waits
	stDirty                   // in the heap, waiting for its delay
	stWriting                 // a worker runs Put
	stFailed                  // last Put failed; in the heap, waiting for its backoff
	stCleaning                // Put covered the latest change; "clean" record being appended; MarkDirty waits
)

// item is one path that is not clean. It is in Queue.items from its first
// MarkDirty until its "clean" record is written, and in Queue.wait exactly
// while its state is stDirty or stFailed.
type item struct {
	rel         string
	state       state
	gen         uint64    // bumped by every MarkDirty
	seq         uint64    // order of becoming dirty: ties in the heap go oldest first
	spread      uint32    // under a Flush or _spread: its place among their paths in its directory (spreader)
	spreadSince time.Time // set by _spread: the oldest change among the paths it spread (for MaxDelay)
	due         time.Time // when a worker may pick it up (in the heap)
	index       int       // position in the heap, -1 if not in it
	since       time.Time // no unwritten change is older than this
	failures    int       // consecutive failed Puts (drives the backoff)
	holds       int       // open Holds: not scheduled on its own, never cleaned
	err         error     // last Put's error, nil if it succeeded or none ran
	waits       []waiter  // Flush calls waiting for this path
}

// waiter is one Flush waiting for a Put that started at generation gen or
// later: such a Put saw every change made before Flush was called.
type waiter struct {
	f   *flusher
	gen uint64
}

// flusher is one Flush call. Its fields are guarded by Queue.mu until done
// is closed, after which nothing writes them.
type flusher struct {
	open   map[*item]struct{}
	failed map[string]error
	done   chan struct{}
}

// Queue is safe for concurrent use.
type Queue struct {
	j    *journal.Journal
	put  Putter
	opts Options

	ctx    context.Context // passed to Put; cancelled by Close
	cancel context.CancelFunc
	kick   chan struct{} // wakes the scheduler: the heap's top may have changed
	stop   chan struct{} // closed by Close
	wg     sync.WaitGroup

	// lastChange is when the latest MarkDirty or Touch came (UnixNano):
	// background writeback waits for it to be Quiet ago.
	lastChange atomic.Int64
	spreadFor  int64 // the lastChange of the quiet spell _spread last ran in (-1: none yet)

	mu       sync.Mutex
	work     sync.Cond // idle workers wait here for a due item
	settled  sync.Cond // MarkDirty waits here while a path's record is being written
	closed   bool
	items    map[string]*item
	wait     waitHeap       // items in state stDirty or stFailed
	under    map[string]int // dir or path -> number of items at or beneath it (IsDirty)
	seq      uint64
	busyPuts int // Puts started before their _readyAt (BusyWorkers)
	written  uint64
	nfailed  int    // items with err != nil
	nerrors  uint64 // failed Puts, all told
	lastErr  string
	lastRel  string
}

// New starts a Queue whose dirty set begins with j.Pending() (paths left by
// an earlier run are scheduled at once).
func New(j *journal.Journal, put Putter, opts Options) *Queue {
	if opts.Delay <= 0 {
		opts.Delay = defaultDelay
	}
	if opts.Workers <= 0 {
		opts.Workers = defaultWorkers
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = defaultMaxBackoff
	}
	if opts.Quiet == 0 {
		opts.Quiet = defaultQuiet
	}
	if opts.MaxDelay <= 0 {
		opts.MaxDelay = defaultMaxDelay
	}
	if opts.BusyWorkers == 0 {
		opts.BusyWorkers = defaultBusyWorkers
	}
	if opts.BusyBacklog == 0 {
		opts.BusyBacklog = defaultBusyBacklog
	}
	ctx, cancel := context.WithCancel(context.Background())
	q := &Queue{
		j: j, put: put, opts: opts,
		ctx: ctx, cancel: cancel,
		kick:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		items: make(map[string]*item),
		under: make(map[string]int),

		spreadFor: -1,
	}
	q.work.L = &q.mu
	q.settled.L = &q.mu
	now := time.Now()
	for _, rel := range j.Pending() {
		it := q._add(rel, stDirty)
		it.since = now
		it.due = now
		heap.Push(&q.wait, it)
	}
	q.wg.Add(1 + opts.Workers)
	go q.scheduler()
	for range opts.Workers {
		go q.worker()
	}
	return q
}

// MarkDirty records rel in the journal (before returning: the caller makes
// the change after this returns) and schedules its writeback.
//
// For a path already queued this is the hot path (the store calls it twice
// per container write): a lock, a map lookup and a generation bump.
func (q *Queue) MarkDirty(rel string) error {
	q.Touch()
	q.mu.Lock()
	for {
		if q.closed {
			q.mu.Unlock()
			return ErrClosed
		}
		it := q.items[rel]
		if it == nil {
			break
		}
		if it.state == stJournaling || it.state == stCleaning {
			q.settled.Wait()
			continue
		}
		it.gen++
		q.mu.Unlock()
		return nil
	}
	// New path: its "dirty" record must be written before we return. Other
	// MarkDirty calls on it wait meanwhile (stJournaling); the rest of the
	// queue does not.
	it := q._add(rel, stJournaling)
	q.mu.Unlock()
	err := q.j.MarkDirty(rel)
	q.mu.Lock()
	defer q.mu.Unlock()
	defer q.settled.Broadcast()
	if err != nil {
		q._remove(it)
		return err
	}
	now := time.Now()
	it.state = stDirty
	it.since = now
	it.due = now.Add(q.opts.Delay)
	q._push(it)
	return nil
}

// Touch tells the queue the container is busy with the mount (a change, or
// an open): background writeback runs at most BusyWorkers Puts until it has
// been quiet for Options.Quiet. MarkDirty touches too.
func (q *Queue) Touch() {
	if q.opts.Quiet > 0 {
		q.lastChange.Store(time.Now().UnixNano())
	}
}

// _readyAt is when any worker may start it: its due time, or for background
// writeback (no Flush waits for it) once the container has been quiet for
// Quiet, but no later than MaxDelay after its change. Before that, from its
// due time, BusyWorkers workers may (_next).
func (q *Queue) _readyAt(it *item) time.Time {
	if len(it.waits) > 0 || q.opts.Quiet <= 0 {
		return it.due
	}
	quiet := time.Unix(0, q.lastChange.Load()).Add(q.opts.Quiet)
	if !quiet.After(it.due) {
		return it.due
	}
	since := it.since
	if !it.spreadSince.IsZero() && it.spreadSince.Before(since) {
		since = it.spreadSince
	}
	if latest := since.Add(q.opts.MaxDelay); latest.Before(quiet) {
		return maxTime(latest, it.due)
	}
	return quiet
}

// _next says whether a worker may start the heap's top now, and whether as
// one of the BusyWorkers.
func (q *Queue) _next(now time.Time) (ok, busy bool) {
	if len(q.wait) == 0 {
		return false, false
	}
	top := q.wait[0]
	if !q._readyAt(top).After(now) {
		return true, false
	}
	if !top.due.After(now) && q.busyPuts < q.opts.BusyWorkers && !q._burst() {
		return true, true
	}
	return false, false
}

// _burst says whether more paths wait than BusyBacklog: the container is
// changing things faster than a trickle writes them back.
func (q *Queue) _burst() bool {
	return q.opts.BusyBacklog >= 0 && len(q.wait) > q.opts.BusyBacklog
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Hold marks rel dirty (journaled before it returns, as MarkDirty) and keeps
// it so until the matching Release: the queue does not write it back on its
// own meanwhile, only when a Flush asks. Every Hold needs one Release.
func (q *Queue) Hold(rel string) error {
	for {
		if err := q.MarkDirty(rel); err != nil {
			return err
		}
		q.mu.Lock()
		it := q.items[rel]
		if it == nil || it.state == stJournaling || it.state == stCleaning {
			q.mu.Unlock()
			continue // cleaned just now: mark it again
		}
		it.holds++
		if it.index >= 0 && len(it.waits) == 0 {
			heap.Remove(&q.wait, it.index) // park it until Release or Flush
			q._kick()
		}
		q.mu.Unlock()
		return nil
	}
}

// Release ends one Hold of rel and schedules its writeback (after Delay) once
// no Hold is left. The release itself counts as a change: writes made while
// held may not have been announced with MarkDirty.
func (q *Queue) Release(rel string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	it := q.items[rel]
	if it == nil || it.holds == 0 {
		return
	}
	it.holds--
	it.gen++
	if it.holds == 0 && it.parked() {
		it.due = time.Now().Add(q.opts.Delay)
		q._push(it)
	}
}

// IsDirty reports whether rel, or anything beneath it, has changes the host
// has not seen (the host-refresh worker leaves such paths alone).
func (q *Queue) IsDirty(rel string) bool {
	q.mu.Lock()
	n := q.under[rel]
	q.mu.Unlock()
	return n > 0
}

// Flush writes back every path dirty when it is called that equals one of
// prefixes or lies beneath one ("" = everything), without waiting for the
// delay, and returns when all of them are clean (nil) or have failed at least
// once since Flush started (*FlushError), or ctx ends (ctx.Err() joined with
// the list of paths still pending). Paths that fail stay queued and retried.
//
// No prefixes at all means everything, as "" does. A path counts as written
// once a Put that started after the path's last MarkDirty before Flush
// succeeds, even if the path has been dirtied again since: Flush waits for
// the state it was called on, not for the queue to go quiet. A path in
// backoff is retried at once. When Flush returns an error it first fsyncs
// the journal, so the paths it names survive a crash.
func (q *Queue) Flush(ctx context.Context, prefixes ...string) error {
	if len(prefixes) == 0 {
		prefixes = []string{""}
	}
	f := &flusher{open: make(map[*item]struct{}), failed: make(map[string]error), done: make(chan struct{})}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	var its []*item
	for _, p := range prefixes {
		switch n := q.under[p]; {
		case n == 0:
		case n == 1 && q.items[p] != nil:
			its = append(its, q.items[p])
		default:
			for rel, it := range q.items {
				if beneath(rel, p) {
					its = append(its, it)
				}
			}
		}
	}
	// Oldest first within each directory (see spreader).
	slices.SortFunc(its, bySeq)
	now := time.Now()
	sp := make(spreader)
	for _, it := range its {
		q._await(f, it, now, sp)
	}
	if len(f.open) == 0 {
		q.mu.Unlock()
		return nil
	}
	q.mu.Unlock()

	var cause error
	select {
	case <-f.done:
	case <-ctx.Done():
		cause = ctx.Err()
	case <-q.stop:
		cause = ErrClosed
	}
	var pending []string
	if cause != nil {
		q.mu.Lock()
		for it := range f.open {
			pending = append(pending, it.rel)
			it.waits = slices.DeleteFunc(it.waits, func(w waiter) bool { return w.f == f })
		}
		f.open = nil
		q.mu.Unlock()
	}
	if len(pending) == 0 && len(f.failed) == 0 {
		return nil // everything came through just as ctx ended
	}
	var errs []error
	if len(pending) > 0 {
		slices.Sort(pending)
		errs = append(errs, cause, pendingError(pending))
	}
	if len(f.failed) > 0 {
		errs = append(errs, &FlushError{Failed: f.failed})
	}
	if err := q.j.Sync(); err != nil && !errors.Is(err, journal.ErrClosed) {
		errs = append(errs, err)
	}
	if len(errs) == 1 {
		return errs[0] // a bare *FlushError, as callers expect
	}
	return errors.Join(errs...)
}

// dueSpread is the due time _spread gives the paths it spreads: due at once,
// after every path a Flush waits for (due at the zero time).
var dueSpread = time.Unix(0, 1)

// _spread orders the background writeback as a Flush orders its paths
// (spreader) when it goes full speed, the container quiet: the paths due
// by now become due at once (dueSpread), oldest first in each directory, a
// directory after another. Once per quiet spell (spreadFor).
//
// That changes when none of them may start: quiet, all of them may now.
// When the container gets busy again before they are written, each may
// wait for quiet or MaxDelay again, and MaxDelay counts from the oldest
// change among them (spreadSince): the heap's top, which the timer and the
// workers look at, is never one that may wait longer than another.
func (q *Queue) _spread(now time.Time) {
	last := q.lastChange.Load()
	if q.opts.Quiet <= 0 || last == q.spreadFor || now.Before(time.Unix(0, last).Add(q.opts.Quiet)) {
		return
	}
	q.spreadFor = last
	var its []*item
	var oldest time.Time
	for _, it := range q.wait {
		if len(it.waits) == 0 && !it.due.IsZero() && !it.due.After(now) {
			its = append(its, it)
			if oldest.IsZero() || it.since.Before(oldest) {
				oldest = it.since
			}
		}
	}
	if len(its) < 2 {
		return
	}
	slices.SortFunc(its, bySeq)
	sp := make(spreader)
	for _, it := range its {
		it.due, it.spread, it.spreadSince = dueSpread, sp.next(it.rel), oldest
	}
	heap.Init(&q.wait)
}

// spreader numbers a Flush's paths within each directory, oldest first
// (parent path -> paths numbered so far).
//
// A Flush moves its paths to the front of the heap, all due at once, and
// the heap orders equal due times by that number first: the workers take
// one path of each directory, then a second of each, and so on, instead of
// all of them working in one directory. On a share, creates and renames in
// one directory run one at a time: the kernel holds the directory's lock
// for each round trip (seen: 8 workers flushing 100 new files a directory
// spent most of their time waiting for that lock, and 16 or 32 workers
// were no faster than 8).
type spreader map[string]uint32

func (sp spreader) next(rel string) uint32 {
	dir := ""
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		dir = rel[:i]
	}
	n := sp[dir]
	sp[dir] = n + 1
	return n
}

// _await makes f wait for it, unless it is already covered, and moves it to
// the front of the schedule, spread among its directory's other paths (sp).
func (q *Queue) _await(f *flusher, it *item, now time.Time, sp spreader) {
	if it.state == stJournaling {
		return // the change it precedes has not been made yet
	}
	// An item in stCleaning is waited for too, briefly: its Put covered the
	// latest change, and the worker answers when the journal agrees.
	if _, ok := f.open[it]; ok {
		return
	}
	if it.holds > 0 {
		// Open for writing through a handle whose writes the queue does not
		// see (passthrough): only a Put that starts from now on covers them.
		it.gen++
	}
	f.open[it] = struct{}{}
	it.waits = append(it.waits, waiter{f: f, gen: it.gen})
	if it.parked() { // held: parked outside the heap
		it.spread = sp.next(it.rel)
		q._push(it)
		return
	}
	if it.index >= 0 && !it.due.IsZero() {
		it.due = time.Time{} // first, ahead of background writeback (see _readyAt)
		it.spread = sp.next(it.rel)
		heap.Fix(&q.wait, it.index)
		q._kick()
	}
}

// Stats returns a snapshot.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := Stats{Failed: q.nfailed, Written: q.written, LastError: q.lastErr, LastFailed: q.lastRel, Errors: q.nerrors}
	var oldest time.Time
	for _, it := range q.items {
		if it.state == stCleaning {
			continue
		}
		st.Dirty++
		if len(st.DirtyPaths) < MaxListed {
			st.DirtyPaths = append(st.DirtyPaths, it.rel)
		}
		if it.err != nil && len(st.FailedPaths) < MaxListed {
			st.FailedPaths = append(st.FailedPaths, it.rel)
		}
		if !it.since.IsZero() && (oldest.IsZero() || it.since.Before(oldest)) {
			oldest = it.since
		}
	}
	if !oldest.IsZero() {
		st.OldestAge = time.Since(oldest)
	}
	slices.Sort(st.DirtyPaths)
	slices.Sort(st.FailedPaths)
	return st
}

// Close stops the workers (in-flight Puts are cancelled and stay dirty).
//
// Nothing is written to the journal after Close returns, so the caller may
// close the journal then; paths not yet clean are still named in it.
func (q *Queue) Close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	close(q.stop)
	q.cancel()
	q.work.Broadcast()
	q.settled.Broadcast()
	q.mu.Unlock()
	q.wg.Wait()
}

// scheduler sleeps until the earliest due item and then wakes the workers.
// When an item is already due it sets no timer: a busy worker looks at the
// heap again as soon as its Put ends, so there is nothing to wait for.
func (q *Queue) scheduler() {
	defer q.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		q.mu.Lock()
		wait := time.Duration(-1)
		if len(q.wait) > 0 {
			now := time.Now()
			top := q.wait[0]
			if d := q._readyAt(top).Sub(now); d > 0 {
				wait = d
				if ok, _ := q._next(now); ok {
					q.work.Signal() // one of the BusyWorkers
				} else if due := top.due.Sub(now); due > 0 && due < wait {
					wait = due
				}
			} else {
				q._spread(now)
				q.work.Broadcast()
			}
		}
		q.mu.Unlock()
		if wait >= 0 {
			t.Reset(wait)
		} else {
			t.Stop()
		}
		select {
		case <-q.kick:
		case <-t.C:
		case <-q.stop:
			return
		}
	}
}

// worker runs Puts for due items, one at a time.
func (q *Queue) worker() {
	defer q.wg.Done()
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if q.closed {
			return
		}
		ok, busy := q._next(time.Now())
		if !ok {
			q.work.Wait()
			continue
		}
		if busy {
			q.busyPuts++
		}
		it := heap.Pop(&q.wait).(*item)
		it.spread, it.spreadSince = 0, time.Time{}
		q._kick() // the top changed; the scheduler re-arms its timer
		it.state = stWriting
		gen := it.gen
		start := time.Now()
		q.mu.Unlock()
		err := q.put.Put(q.ctx, it.rel)
		q.mu.Lock()
		if busy {
			q.busyPuts--
		}
		if q.closed {
			// Cancelled, or finished too late to record: the path stays
			// dirty in the journal and the next run writes it again.
			return
		}
		if err != nil {
			q._failed(it, gen, err)
			continue
		}
		q.written++
		if it.err != nil {
			it.err = nil
			q.nfailed--
		}
		it.failures = 0
		if it.gen != gen || it.holds > 0 {
			// Changed while Put ran, or still open for writing: those
			// changes still need a Put (a held path waits for Release or
			// a Flush).
			q._resolve(it, gen, nil)
			it.state = stDirty
			it.since = start
			it.due = start.Add(q.opts.Delay)
			if it.holds == 0 || len(it.waits) > 0 {
				q._push(it)
			}
			continue
		}
		it.state = stCleaning
		q.mu.Unlock()
		jerr := q.j.MarkClean(it.rel)
		q.mu.Lock()
		// No MarkDirty ran meanwhile (they wait for stCleaning to end), so
		// gen is still the one the Put covered. Flush callers hear of it
		// only now, so that what they see after Flush (IsDirty, Stats, the
		// journal) agrees that the path is clean.
		q._resolve(it, gen, nil)
		q._remove(it)
		q.settled.Broadcast()
		if jerr != nil {
			// The host has the path; at worst the journal still names it
			// and the next run writes it once more. Say so in Stats.
			q.lastErr, q.lastRel = jerr.Error(), it.rel
		}
	}
}

// _failed records a failed Put of it that started at generation gen and
// schedules the retry.
func (q *Queue) _failed(it *item, gen uint64, err error) {
	if it.err == nil {
		q.nfailed++
	}
	it.err = err
	it.failures++
	q.nerrors++
	q.lastErr, q.lastRel = err.Error(), it.rel
	q._resolve(it, gen, err)
	it.state = stFailed
	it.due = time.Now().Add(q.backoff(it.failures))
	q._push(it)
}

// backoff is the wait before retry number n (n >= 1): Delay doubled each
// time, capped at MaxBackoff.
func (q *Queue) backoff(n int) time.Duration {
	d := q.opts.Delay
	for i := 1; i < n && d < q.opts.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, q.opts.MaxBackoff)
}

// _resolve answers the Flush calls on it that a Put started at generation
// gen covers: written if err is nil, else failed.
func (q *Queue) _resolve(it *item, gen uint64, err error) {
	it.waits = slices.DeleteFunc(it.waits, func(w waiter) bool {
		if w.gen > gen {
			return false
		}
		if err != nil {
			w.f.failed[it.rel] = err
		}
		delete(w.f.open, it)
		if len(w.f.open) == 0 {
			close(w.f.done)
		}
		return true
	})
}

// _push puts it in the heap, at once if a Flush waits for it.
func (q *Queue) _push(it *item) {
	if len(it.waits) > 0 {
		it.due = time.Time{} // first, ahead of background writeback (see _readyAt)
	}
	heap.Push(&q.wait, it)
	q._kick()
}

// _kick wakes the scheduler without blocking.
func (q *Queue) _kick() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// _add creates the item for rel and counts it under every ancestor.
func (q *Queue) _add(rel string, st state) *item {
	q.seq++
	it := &item{rel: rel, state: st, gen: 1, seq: q.seq, index: -1}
	q.items[rel] = it
	q._count(rel, +1)
	return it
}

// _remove forgets it (clean, or never journaled).
func (q *Queue) _remove(it *item) {
	if it.err != nil {
		q.nfailed--
	}
	delete(q.items, it.rel)
	q._count(it.rel, -1)
}

// _count adds delta to rel and each of its ancestors ("" last), so IsDirty
// is one map lookup however large the queue.
func (q *Queue) _count(rel string, delta int) {
	p := rel
	for {
		if n := q.under[p] + delta; n > 0 {
			q.under[p] = n
		} else {
			delete(q.under, p)
		}
		if p == "" {
			return
		}
		if i := strings.LastIndexByte(p, '/'); i >= 0 {
			p = p[:i]
		} else {
			p = ""
		}
	}
}

// beneath reports whether rel is p or lies under it ("" is above all).
func beneath(rel, p string) bool {
	return p == "" || rel == p || (len(rel) > len(p) && rel[len(p)] == '/' && rel[:len(p)] == p)
}

// bySeq orders items by when they became dirty, oldest first.
func bySeq(a, b *item) int { return cmp.Compare(a.seq, b.seq) }

// waitHeap orders items by due time, then by their place in their
// directory under a Flush (spread), then by when they became dirty.
type waitHeap []*item

func (h waitHeap) Len() int { return len(h) }
func (h waitHeap) Less(a, b int) bool {
	if !h[a].due.Equal(h[b].due) {
		return h[a].due.Before(h[b].due)
	}
	if h[a].spread != h[b].spread {
		return h[a].spread < h[b].spread
	}
	return h[a].seq < h[b].seq
}
func (h waitHeap) Swap(a, b int) {
	h[a], h[b] = h[b], h[a]
	h[a].index = a
	h[b].index = b
}
func (h *waitHeap) Push(x any) {
	it := x.(*item)
	it.index = len(*h)
	*h = append(*h, it)
}
func (h *waitHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	it.index = -1
	*h = old[:len(old)-1]
	return it
}
