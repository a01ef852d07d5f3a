package writeback

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/journal"
)

// The Putter below blocks every Put until the test answers it, so each test
// runs success, failure, retry and cancel in an order it chooses; no file
// system is involved beyond the journal.

type putCall struct {
	rel string
	ctx context.Context
	res chan error
}

func (c *putCall) ok()            { c.res <- nil }
func (c *putCall) fail(e error)   { c.res <- e }
func (c *putCall) String() string { return c.rel }

type fakePutter struct {
	t     testing.TB
	calls chan *putCall

	mu       sync.Mutex
	inflight map[string]bool
}

func (p *fakePutter) Put(ctx context.Context, rel string) error {
	p.mu.Lock()
	if p.inflight[rel] {
		p.t.Errorf("two Puts of %q at once", rel)
	}
	p.inflight[rel] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.inflight, rel)
		p.mu.Unlock()
	}()
	c := &putCall{rel: rel, ctx: ctx, res: make(chan error, 1)}
	select {
	case p.calls <- c:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-c.res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next returns the next Put the queue starts.
func (p *fakePutter) next(t *testing.T) *putCall {
	t.Helper()
	select {
	case c := <-p.calls:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no Put started")
		return nil
	}
}

// nextN returns the next n Puts, by path (they run in parallel).
func (p *fakePutter) nextN(t *testing.T, n int) map[string]*putCall {
	t.Helper()
	m := map[string]*putCall{}
	for range n {
		c := p.next(t)
		if m[c.rel] != nil {
			t.Fatalf("%q put twice", c.rel)
		}
		m[c.rel] = c
	}
	return m
}

// none checks that no Put starts within d (for things that must NOT happen).
func (p *fakePutter) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case c := <-p.calls:
		t.Fatalf("unexpected Put of %q", c.rel)
	case <-time.After(d):
	}
}

type rig struct {
	q    *Queue
	j    *journal.Journal
	p    *fakePutter
	path string
}

const never = time.Hour // a Delay that only Flush gets past

func newRig(t *testing.T, opts Options) *rig {
	t.Helper()
	r := &rig{path: filepath.Join(t.TempDir(), "journal")}
	r.p = &fakePutter{t: t, calls: make(chan *putCall), inflight: map[string]bool{}}
	r.open(t, opts)
	return r
}

// open (re)opens the journal and starts a queue on it.
func (r *rig) open(t *testing.T, opts Options) {
	t.Helper()
	j, err := journal.Open(r.path)
	if err != nil {
		t.Fatal(err)
	}
	r.j = j
	r.q = New(j, r.p, opts)
	t.Cleanup(func() { r.q.Close(); j.Close() })
}

// close stops the queue and closes the journal, as the store does.
func (r *rig) close(t *testing.T) {
	t.Helper()
	r.q.Close()
	if err := r.j.Close(); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) dirty(t *testing.T, rels ...string) {
	t.Helper()
	for _, rel := range rels {
		if err := r.q.MarkDirty(rel); err != nil {
			t.Fatal(err)
		}
	}
}

// flush starts Flush in the background; read its result from the channel.
func (r *rig) flush(ctx context.Context, prefixes ...string) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- r.q.Flush(ctx, prefixes...) }()
	return ch
}

// waiting waits until n Flush calls wait for rel (so a test can order a
// Flush before what it races with).
func (r *rig) waiting(t *testing.T, rel string, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		r.q.mu.Lock()
		it := r.q.items[rel]
		got := it != nil && len(it.waits) >= n
		r.q.mu.Unlock()
		if got {
			return
		}
	}
	t.Fatalf("Flush never started waiting for %q", rel)
}

func result(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Flush did not return")
		return nil
	}
}

func pending(t *testing.T, ch <-chan error) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("Flush returned early: %v", err)
	default:
	}
}

func wantJournal(t *testing.T, j *journal.Journal, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	slices.Sort(want)
	if got := j.Pending(); !slices.Equal(got, want) {
		t.Fatalf("journal names %q, want %q", got, want)
	}
}

func TestPutAfterDelayThenClean(t *testing.T) {
	r := newRig(t, Options{Delay: 10 * time.Millisecond})
	start := time.Now()
	r.dirty(t, "a/b")
	wantJournal(t, r.j, "a/b")
	for _, p := range []string{"", "a", "a/b"} {
		if !r.q.IsDirty(p) {
			t.Fatalf("IsDirty(%q) = false while a/b is dirty", p)
		}
	}
	c := r.p.next(t)
	if c.rel != "a/b" {
		t.Fatalf("put %q", c.rel)
	}
	if d := time.Since(start); d < 10*time.Millisecond {
		t.Fatalf("Put started after %v, before the delay", d)
	}
	done := r.flush(context.Background(), "a/b")
	c.ok()
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	// Flush returned: the path is clean everywhere.
	for _, p := range []string{"", "a", "a/b"} {
		if r.q.IsDirty(p) {
			t.Fatalf("IsDirty(%q) after the write", p)
		}
	}
	wantJournal(t, r.j)
	if st := r.q.Stats(); st.Dirty != 0 || st.Written != 1 || st.Failed != 0 {
		t.Fatalf("stats %+v", st)
	}
	if len(r.q.under) != 0 || len(r.q.items) != 0 {
		t.Fatalf("bookkeeping left behind: %v %v", r.q.under, r.q.items)
	}
}

func TestIsDirtyIsPrefixAware(t *testing.T) {
	r := newRig(t, Options{Delay: never})
	r.dirty(t, "a/b/c", "x")
	for p, want := range map[string]bool{
		"": true, "a": true, "a/b": true, "a/b/c": true, "x": true,
		"a/b/cd": false, "a/bb": false, "ab": false, "a/c": false, "a/b/c/d": false, "x/y": false, "y": false,
	} {
		if got := r.q.IsDirty(p); got != want {
			t.Errorf("IsDirty(%q) = %v, want %v", p, got, want)
		}
	}
}

// A write that lands while its own path is being put must not be lost: the
// path stays dirty and is put again.
func TestWriteRacingItsPutIsPutAgain(t *testing.T) {
	r := newRig(t, Options{Delay: time.Millisecond})
	r.dirty(t, "f")
	c1 := r.p.next(t)
	r.dirty(t, "f") // the store's "before" and "after" marks around a write
	r.dirty(t, "f")
	c1.ok()
	c2 := r.p.next(t)
	if c2.rel != "f" {
		t.Fatalf("put %q", c2.rel)
	}
	if !r.q.IsDirty("f") {
		t.Fatal("f clean while its second Put runs")
	}
	wantJournal(t, r.j, "f")
	done := r.flush(context.Background(), "f")
	c2.ok()
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	wantJournal(t, r.j)
	if st := r.q.Stats(); st.Written != 2 || st.Dirty != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestNeverTwoPutsOfOnePath(t *testing.T) {
	r := newRig(t, Options{Delay: time.Millisecond, Workers: 4})
	r.dirty(t, "f")
	c1 := r.p.next(t)
	r.dirty(t, "f")
	done := r.flush(context.Background(), "f")
	// Four idle workers, a due path and a waiting Flush: still no second Put
	// of f until the first ends.
	r.p.none(t, 30*time.Millisecond)
	c1.ok()
	r.p.next(t).ok()
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
}

func TestFailureIsRetriedWithBackoff(t *testing.T) {
	const delay, maxBackoff = 20 * time.Millisecond, 50 * time.Millisecond
	r := newRig(t, Options{Delay: delay, MaxBackoff: maxBackoff})
	if got, want := []time.Duration{r.q.backoff(1), r.q.backoff(2), r.q.backoff(3), r.q.backoff(60)},
		[]time.Duration{delay, 2 * delay, maxBackoff, maxBackoff}; !slices.Equal(got, want) {
		t.Fatalf("backoff %v, want %v", got, want)
	}
	boom := errors.New("host says no")
	r.dirty(t, "f")
	r.p.next(t).fail(boom)
	failedAt := time.Now()
	c := r.p.next(t) // retried without anyone asking
	if d := time.Since(failedAt); d < delay {
		t.Fatalf("first retry after %v, want >= %v", d, delay)
	}
	st := r.q.Stats()
	if st.Failed != 1 || st.Dirty != 1 || st.LastFailed != "f" || !strings.Contains(st.LastError, "host says no") {
		t.Fatalf("stats while failing: %+v", st)
	}
	wantJournal(t, r.j, "f")
	c.fail(boom)
	failedAt = time.Now()
	c = r.p.next(t)
	if d := time.Since(failedAt); d < 2*delay {
		t.Fatalf("second retry after %v, want >= %v", d, 2*delay)
	}
	done := r.flush(context.Background())
	c.ok()
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	st = r.q.Stats()
	if st.Failed != 0 || st.Dirty != 0 || st.Written != 1 || st.LastFailed != "f" {
		t.Fatalf("stats after recovery: %+v", st)
	}
	wantJournal(t, r.j)
}

// rule D4: a failed writeback is reported with its paths, retried, and never
// dropped, not even by a restart.
func TestD4_FlushReportsFailedPathsWhichStayQueuedAndJournaled(t *testing.T) {
	r := newRig(t, Options{Delay: never, MaxBackoff: 10 * time.Millisecond})
	r.dirty(t, "out/bad", "out/good", "other")
	done := r.flush(context.Background(), "out")
	calls := r.p.nextN(t, 2)
	if calls["out/bad"] == nil || calls["out/good"] == nil {
		t.Fatalf("flush of out put %v", calls)
	}
	refused := fmt.Errorf("writeback %q: %w", "out/bad", errors.New("operation not permitted"))
	calls["out/bad"].fail(refused)
	calls["out/good"].ok()
	err := result(t, done)
	var fe *FlushError
	if !errors.As(err, &fe) {
		t.Fatalf("want *FlushError, got %T %v", err, err)
	}
	if len(fe.Failed) != 1 || !errors.Is(fe.Failed["out/bad"], refused) {
		t.Fatalf("Failed = %v", fe.Failed)
	}
	if !strings.Contains(err.Error(), "out/bad") || strings.Contains(err.Error(), "out/good") {
		t.Fatalf("message names the wrong paths: %v", err)
	}
	if !errors.Is(err, refused) {
		t.Fatal("FlushError does not unwrap to the Putter's error")
	}
	wantJournal(t, r.j, "out/bad", "other")
	if !r.q.IsDirty("out") || r.q.IsDirty("out/good") {
		t.Fatal("IsDirty disagrees with the failure")
	}

	// Retried on its own (backoff), and failing again it stays.
	c := r.p.next(t)
	if c.rel != "out/bad" {
		t.Fatalf("retried %q", c.rel)
	}
	c.fail(refused)
	c = r.p.next(t)

	// Plugin stops while the retry is in flight; the next run picks it up.
	r.close(t)
	if c.ctx.Err() == nil {
		t.Fatal("in-flight Put not cancelled by Close")
	}
	r.open(t, Options{Delay: never, Workers: 1})
	wantJournal(t, r.j, "other", "out/bad")
	if !r.q.IsDirty("out/bad") {
		t.Fatal("reopened queue forgot out/bad")
	}
	// Scheduled at once despite the delay, oldest (sorted) first.
	c = r.p.next(t)
	if c.rel != "other" {
		t.Fatalf("first put after restart %q", c.rel)
	}
	c.ok()
	c = r.p.next(t)
	if c.rel != "out/bad" {
		t.Fatalf("second put after restart %q", c.rel)
	}
	done = r.flush(context.Background())
	c.ok()
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	wantJournal(t, r.j)
}

func TestFlushCoversPrefixesOnly(t *testing.T) {
	r := newRig(t, Options{Delay: never})
	r.dirty(t, "a", "a/b", "a/b/c", "ab", "b/a", "c")
	done := r.flush(context.Background(), "a/b", "c")
	calls := r.p.nextN(t, 3)
	for _, want := range []string{"a/b", "a/b/c", "c"} {
		if calls[want] == nil {
			t.Fatalf("flush put %v, missing %q", calls, want)
		}
		calls[want].ok()
	}
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	// Nothing else is due for an hour, so nothing else may have started.
	r.p.none(t, 0)
	wantJournal(t, r.j, "a", "ab", "b/a")

	if err := r.q.Flush(context.Background(), "nothing/here", "a/b"); err != nil {
		t.Fatalf("flush of clean paths: %v", err)
	}

	done = r.flush(context.Background(), "a")
	r.p.next(t).ok() // "a" only: "ab" is not beneath it
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	wantJournal(t, r.j, "ab", "b/a")

	done = r.flush(context.Background(), "")
	for _, c := range r.p.nextN(t, 2) {
		c.ok()
	}
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	wantJournal(t, r.j)
}

// A Flush takes its paths oldest first within each directory, and one
// directory after another: the first path of each, then the second of each.
func TestFlushPutsOldestFirstInEachDirectory(t *testing.T) {
	r := newRig(t, Options{Delay: never, Workers: 1})
	r.dirty(t, "c", "a", "b/x", "b", "b/y")
	done := r.flush(context.Background())
	var order []string
	for range 5 {
		c := r.p.next(t)
		order = append(order, c.rel)
		c.ok()
	}
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	if want := []string{"c", "b/x", "a", "b/y", "b"}; !slices.Equal(order, want) {
		t.Fatalf("put order %q, want %q", order, want)
	}
}

// The exit flush (rule D4) of a tree: the workers write back one path in
// each of several directories at once, not several in one. On a share the
// kernel holds a directory's lock for each create and rename in it, round
// trip included, so Puts in one directory wait for each other: 8 workers
// flushing 200 directories of 100 new files over sshfs took 34 s, spread
// over directories 14 to 16 s.
func TestD4_FlushSpreadsItsPutsOverDirectories(t *testing.T) {
	const dirs, files = 4, 5
	r := newRig(t, Options{Delay: never, Workers: dirs})
	r.dirtyTree(t, dirs, files)
	done := r.flush(context.Background())
	r.putsSpread(t, "of the flush", dirs, files)
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
}

// dirtyTree dirties dirs x files paths d<i>/f<j>, directory by directory, as
// cp -r or an untar does.
func (r *rig) dirtyTree(t *testing.T, dirs, files int) {
	t.Helper()
	for d := range dirs {
		for f := range files {
			r.dirty(t, fmt.Sprintf("d%d/f%d", d, f))
		}
	}
}

// putsSpread answers the Puts of a tree from dirtyTree, as many workers as
// directories, and fails unless the first Puts running side by side are one
// in each directory.
func (r *rig) putsSpread(t *testing.T, what string, dirs, files int) {
	t.Helper()
	first := r.p.nextN(t, dirs)
	inDir := map[string][]string{}
	for rel := range first {
		inDir[filepath.Dir(rel)] = append(inDir[filepath.Dir(rel)], rel)
	}
	if len(inDir) != dirs {
		t.Errorf("the first %d Puts %s ran in %d directories, want %d: %v", dirs, what, len(inDir), dirs, inDir)
	}
	for _, c := range first {
		c.ok()
	}
	for range dirs*files - dirs {
		r.p.next(t).ok()
	}
}

func TestFlushTimeoutNamesPendingPaths(t *testing.T) {
	r := newRig(t, Options{Delay: never})
	r.dirty(t, "slow", "quick")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := r.flush(ctx)
	calls := r.p.nextN(t, 2)
	calls["quick"].ok()
	err := result(t, done)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want DeadlineExceeded, got %v", err)
	}
	if !strings.Contains(err.Error(), `"slow"`) || strings.Contains(err.Error(), "quick") {
		t.Fatalf("error should name slow only: %v", err)
	}
	var fe *FlushError
	if errors.As(err, &fe) {
		t.Fatalf("nothing failed, yet got %v", fe)
	}
	// The abandoned Flush leaves nothing behind; slow still completes.
	calls["slow"].ok()
	if err := r.q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantJournal(t, r.j)
}

// A Flush cut short in a big tree (an untar the share could not take in
// time) names a few of the paths it left and counts the rest: the error is
// one line for the docker CLI and the log, not tens of thousands of names.
func TestFlushErrorsNameAFewPathsAndCountTheRest(t *testing.T) {
	r := newRig(t, Options{Delay: never})
	var rels []string
	for i := range 30 {
		rels = append(rels, fmt.Sprintf("p%02d", i))
	}
	r.dirty(t, rels...)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := result(t, r.flush(ctx))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want DeadlineExceeded, got %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"30 path(s) still pending", `"p00"`, `"p19"`, "and 10 more"} {
		if !strings.Contains(msg, want) {
			t.Errorf("pending error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, `"p20"`) {
		t.Errorf("pending error names more than %d paths: %q", errorPaths, msg)
	}

	failed := map[string]error{}
	for i := range 25 {
		failed[fmt.Sprintf("f%02d", i)] = fmt.Errorf("refused %d", i)
	}
	msg = (&FlushError{Failed: failed}).Error()
	for _, want := range []string{"25 path(s)", `"f00": refused 0`, `"f09": refused 9`, `"f19"`, "and 5 more"} {
		if !strings.Contains(msg, want) {
			t.Errorf("FlushError %q does not say %q", msg, want)
		}
	}
	for _, not := range []string{"refused 10", `"f20"`} {
		if strings.Contains(msg, not) {
			t.Errorf("FlushError %q says %q", msg, not)
		}
	}
}

// rule D2: fsync of one file waits for that file's writeback only.
func TestD2_FlushOfOnePathDoesNotWaitForOthers(t *testing.T) {
	r := newRig(t, Options{Delay: time.Millisecond})
	r.dirty(t, "big")
	big := r.p.next(t) // held for the whole test: a slow, unrelated writeback
	r.dirty(t, "small")
	done := r.flush(context.Background(), "small")
	c := r.p.next(t)
	if c.rel != "small" {
		t.Fatalf("put %q", c.rel)
	}
	c.ok()
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	if !r.q.IsDirty("big") {
		t.Fatal("big clean without its Put ending")
	}
	big.ok()
}

// rule D2: Flush waits for a Put that saw the state at the time it was
// called; a Put already running then does not count, and later writes do
// not keep it waiting.
func TestD2_FlushWaitsForTheWriteCoveringItsCall(t *testing.T) {
	r := newRig(t, Options{Delay: never})
	r.dirty(t, "f")
	first := r.flush(context.Background(), "f")
	c1 := r.p.next(t)
	r.dirty(t, "f") // written while c1 runs, then fsync'd
	second := r.flush(context.Background(), "f")
	r.waiting(t, "f", 2)
	c1.ok()
	if err := result(t, first); err != nil {
		t.Fatal(err)
	}
	c2 := r.p.next(t) // at once: second is waiting, the Delay does not apply
	time.Sleep(20 * time.Millisecond)
	pending(t, second)
	r.dirty(t, "f") // written again while c2 runs: second does not wait for that
	c2.ok()
	if err := result(t, second); err != nil {
		t.Fatal(err)
	}
	if !r.q.IsDirty("f") {
		t.Fatal("the last write was lost")
	}
	wantJournal(t, r.j, "f")
}

// Flush retries a path in backoff at once, and a failure of the attempt
// covering its call is reported even though the backoff is long.
func TestFlushRetriesFailedPathAtOnce(t *testing.T) {
	// Delay is also the first backoff: an hour.
	r := newRig(t, Options{Delay: never, MaxBackoff: never})
	r.dirty(t, "f")
	done := r.flush(context.Background(), "f")
	r.p.next(t).fail(errors.New("first"))
	var fe *FlushError
	if err := result(t, done); !errors.As(err, &fe) || fe.Failed["f"].Error() != "first" {
		t.Fatalf("got %v", err)
	}
	// The next retry is an hour away; a new Flush does not wait for it, and
	// reports the new attempt's error, not the old one.
	done = r.flush(context.Background(), "f")
	r.p.next(t).fail(errors.New("second"))
	if err := result(t, done); !errors.As(err, &fe) || fe.Failed["f"].Error() != "second" {
		t.Fatalf("got %v", err)
	}
	done = r.flush(context.Background(), "f")
	r.p.next(t).ok()
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
}

func TestCloseCancelsInFlightPutAndKeepsItJournaled(t *testing.T) {
	r := newRig(t, Options{Delay: time.Millisecond})
	r.dirty(t, "inflight", "queued")
	c := r.p.next(t)
	blocked := r.flush(context.Background(), c.rel)
	r.waiting(t, c.rel, 1)
	r.close(t) // returns only once the Put has returned
	if c.ctx.Err() == nil {
		t.Fatal("in-flight Put's ctx not cancelled")
	}
	if err := result(t, blocked); !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), c.rel) {
		t.Fatalf("Flush across Close: %v", err)
	}
	if err := r.q.MarkDirty("late"); !errors.Is(err, ErrClosed) {
		t.Fatalf("MarkDirty after Close: %v", err)
	}
	if err := r.q.Flush(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Flush after Close: %v", err)
	}
	r.q.Close() // twice is fine

	r.open(t, Options{Delay: never})
	wantJournal(t, r.j, "inflight", "queued")
	for _, c := range r.p.nextN(t, 2) {
		c.ok()
	}
	if err := r.q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantJournal(t, r.j)
}

func TestStats(t *testing.T) {
	r := newRig(t, Options{Delay: never, MaxBackoff: never})
	if st := r.q.Stats(); !reflect.DeepEqual(st, Stats{}) {
		t.Fatalf("fresh queue: %+v", st)
	}
	r.dirty(t, "a", "b", "c")
	time.Sleep(5 * time.Millisecond) // so the age is measurable
	st := r.q.Stats()
	if st.Dirty != 3 || st.Failed != 0 || st.Written != 0 || st.OldestAge < 5*time.Millisecond ||
		!slices.Equal(st.DirtyPaths, []string{"a", "b", "c"}) || len(st.FailedPaths) != 0 {
		t.Fatalf("3 dirty: %+v", st)
	}
	done := r.flush(context.Background())
	calls := r.p.nextN(t, 3)
	calls["a"].ok()
	calls["b"].fail(errors.New("disk full"))
	calls["c"].ok()
	result(t, done)
	st = r.q.Stats()
	if st.Dirty != 1 || st.Failed != 1 || st.Written != 2 || st.LastFailed != "b" || st.LastError != "disk full" ||
		st.Errors != 1 || !slices.Equal(st.FailedPaths, []string{"b"}) || !slices.Equal(st.DirtyPaths, []string{"b"}) {
		t.Fatalf("after one failure: %+v", st)
	}
}

func TestMarkDirtyHotPathDoesNotAllocate(t *testing.T) {
	r := newRig(t, Options{Delay: never})
	r.dirty(t, "some/file")
	if n := testing.AllocsPerRun(1000, func() { r.q.MarkDirty("some/file") }); n != 0 {
		t.Fatalf("MarkDirty of a dirty path allocates %v times", n)
	}
}

func TestConcurrentUse(t *testing.T) {
	r := newRig(t, Options{Delay: time.Millisecond, Workers: 4})
	stop := make(chan struct{})
	var answered sync.WaitGroup
	answered.Go(func() {
		for {
			select {
			case c := <-r.p.calls:
				c.ok()
			case <-stop:
				return
			}
		}
	})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 200 {
				rel := fmt.Sprintf("d%d/f%d", w%3, i%17)
				if err := r.q.MarkDirty(rel); err != nil {
					t.Error(err)
					return
				}
				r.q.IsDirty(rel)
				if i%50 == 0 {
					if err := r.q.Flush(context.Background(), fmt.Sprintf("d%d", w%3)); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if err := r.q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(stop)
	answered.Wait()
	wantJournal(t, r.j)
	if r.q.IsDirty("") || r.q.Stats().Dirty != 0 {
		t.Fatalf("dirty after full flush: %+v", r.q.Stats())
	}
}

func BenchmarkMarkDirtyHot(b *testing.B) {
	j, err := journal.Open(filepath.Join(b.TempDir(), "journal"))
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	q := New(j, &fakePutter{t: b, calls: make(chan *putCall), inflight: map[string]bool{}}, Options{Delay: never})
	defer q.Close()
	if err := q.MarkDirty("dir/file"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		q.MarkDirty("dir/file")
	}
}

func BenchmarkMarkDirtyHotParallel(b *testing.B) {
	j, err := journal.Open(filepath.Join(b.TempDir(), "journal"))
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	q := New(j, &fakePutter{t: b, calls: make(chan *putCall), inflight: map[string]bool{}}, Options{Delay: never})
	defer q.Close()
	for i := range 64 {
		q.MarkDirty(fmt.Sprintf("dir/file%d", i))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			q.MarkDirty("dir/file7")
		}
	})
}

// A path open for writing is held: dirty and journaled, not written back on
// its own schedule (a growing file would be copied again every Delay), still
// written at once by a Flush (fsync, rule D2), never marked clean while
// held, and written once more after Release.
func TestD2_HeldPathWrittenOnFlushAndAfterRelease(t *testing.T) {
	r := newRig(t, Options{Delay: 20 * time.Millisecond})
	if err := r.q.Hold("big"); err != nil {
		t.Fatal(err)
	}
	r.p.none(t, 150*time.Millisecond) // many Delays pass: no Put while held

	done := make(chan error, 1)
	go func() { done <- r.q.Flush(t.Context(), "big") }()
	r.p.next(t).ok()
	if err := <-done; err != nil {
		t.Fatalf("flush of a held path: %v", err)
	}
	if !r.q.IsDirty("big") || !slices.Contains(r.j.Pending(), "big") {
		t.Fatal("a held path was marked clean: later writes through its handle would not be journaled")
	}
	r.p.none(t, 100*time.Millisecond)

	r.q.Release("big")
	r.p.next(t).ok()
	r.waitClean(t, "big")
	wantJournal(t, r.j)
}

// A path whose Put failed and that is then held (opened for writing during
// its backoff) waits outside the schedule like any held path, but is not
// forgotten there: a Flush retries it at once (rule D4: the exit flush of a
// container must not wait out a backoff, let alone forever), and so does
// its Release.
func TestD4_FailedThenHeldPathIsStillRetried(t *testing.T) {
	for _, end := range []string{"flush", "release"} {
		t.Run(end, func(t *testing.T) {
			r := newRig(t, Options{Delay: 200 * time.Millisecond, MaxBackoff: never})
			r.dirty(t, "p")
			r.p.next(t).fail(errors.New("share went away"))
			for r.q.Stats().Failed == 0 { // the failure is recorded, the retry due in 200 ms
				time.Sleep(time.Millisecond)
			}
			// Held during its backoff.
			if err := r.q.Hold("p"); err != nil {
				t.Fatal(err)
			}
			switch end {
			case "flush":
				r.p.none(t, 400*time.Millisecond) // held: not retried on its own
				done := make(chan error, 1)
				go func() { done <- r.q.Flush(t.Context(), "p") }()
				r.p.next(t).ok()
				if err := <-done; err != nil {
					t.Fatalf("flush of a failed, then held path: %v", err)
				}
				r.q.Release("p")
				r.p.next(t).ok()
			case "release":
				r.q.Release("p")
				r.p.next(t).ok()
			}
			r.waitClean(t, "p")
		})
	}
}

// waitClean waits (at most 5 s) for rel, whose last Put has been answered,
// to be marked clean.
func (r *rig) waitClean(t *testing.T, rel string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for r.q.IsDirty(rel) {
		if time.Now().After(deadline) {
			t.Fatalf("%s written, but still dirty", rel)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// touching keeps the container busy without changes of its own (opens, as
// the reads of a build) until the returned stop is called.
func (r *rig) touching(t *testing.T) (stop func()) {
	t.Helper()
	return every(func(int) error { r.q.Touch(); return nil })
}

// busy makes changes (MarkDirty of other paths) every few milliseconds until
// the returned stop is called: a container untarring into the mount.
func (r *rig) busy(t *testing.T) (stop func()) {
	t.Helper()
	return every(func(i int) error {
		r.q.Touch() // an open
		if err := r.q.MarkDirty(fmt.Sprintf("busy/%d", i%50)); err != nil {
			t.Error(err)
			return err
		}
		return nil
	})
}

// every calls f(0), f(1), ... every 5 ms until the returned stop is called
// or f fails.
func every(f func(i int) error) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if f(i) != nil {
				return
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// When the container goes quiet after a burst (an untar, npm install), the
// background writeback takes the burst as a Flush would: one path in each
// directory at a time, not several in one (TestD4_FlushSpreadsItsPutsOverDirectories
// says why).
func TestBackgroundWritebackSpreadsOverDirectories(t *testing.T) {
	const dirs, files = 4, 5
	r := newRig(t, Options{Delay: time.Millisecond, Quiet: 500 * time.Millisecond, MaxDelay: never, BusyWorkers: -1, Workers: dirs})
	r.dirtyTree(t, dirs, files) // the burst
	r.putsSpread(t, "after the burst", dirs, files)
	for d := range dirs {
		for f := range files {
			r.waitClean(t, fmt.Sprintf("d%d/f%d", d, f))
		}
	}
}

// Background writeback waits while the container keeps making changes, and
// starts once it has been quiet for Quiet.
func TestBackgroundWritebackWaitsForQuiet(t *testing.T) {
	// One worker: with several, the Puts reach the fake putter in any order.
	r := newRig(t, Options{Delay: time.Millisecond, Quiet: 2 * time.Second, MaxDelay: never, BusyWorkers: -1, Workers: 1})
	r.dirty(t, "a")
	stop := r.busy(t)
	r.p.none(t, 1500*time.Millisecond) // due long ago, but the container is busy
	stop()
	c := r.p.next(t) // within Quiet of the last change
	if c.rel != "a" {
		t.Fatalf("put %q first, want a (oldest)", c.rel)
	}
	c.ok()
	r.waitClean(t, "a")
}

// While the container is busy, BusyWorkers Puts go on (the writeback
// trickles rather than stops, so less is left for the exit flush), and the
// rest start once it is quiet.
func TestBackgroundWritebackTricklesWhileBusy(t *testing.T) {
	r := newRig(t, Options{Delay: time.Millisecond, Quiet: 2 * time.Second, MaxDelay: never, BusyWorkers: 1, BusyBacklog: -1, Workers: 4})
	r.dirty(t, "a", "b", "c")
	stop := r.busy(t)
	first := r.p.next(t) // one, though the container is busy
	if first.rel != "a" {
		t.Fatalf("put %q first, want a (oldest)", first.rel)
	}
	r.p.none(t, 500*time.Millisecond) // no second one beside it
	first.ok()
	second := r.p.next(t) // the next, once the first is done
	if second.rel != "b" {
		t.Fatalf("put %q second, want b", second.rel)
	}
	stop()
	// Quiet: the other workers join in; c (and the busy/* paths) start
	// while b still runs.
	for {
		c := r.p.next(t)
		c.ok()
		if c.rel == "c" {
			break
		}
	}
	second.ok()
	r.waitClean(t, "c")
}

// While more than BusyBacklog paths wait (a burst: an untar into the mount),
// not even the BusyWorkers write them back until the container is quiet;
// with that many or fewer waiting, they trickle again.
func TestBackgroundWritebackWaitsOutABurst(t *testing.T) {
	r := newRig(t, Options{Delay: time.Millisecond, Quiet: 2 * time.Second, MaxDelay: never, BusyWorkers: 1, BusyBacklog: 3, Workers: 1})
	stop := r.touching(t)
	defer stop()
	r.dirty(t, "a", "b", "c", "d")
	r.p.none(t, 500*time.Millisecond) // four wait, one more than BusyBacklog
	// A Flush writes d at once; three wait then, and the trickle starts.
	done := r.flush(t.Context(), "d")
	if c := r.p.next(t); c.rel != "d" {
		t.Fatalf("put %q, want the flushed d", c.rel)
	} else {
		c.ok()
	}
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	c := r.p.next(t)
	if c.rel != "a" {
		t.Fatalf("put %q, want a (oldest) from the trickle", c.rel)
	}
	c.ok()
	r.waitClean(t, "a")
}

// No change waits longer than MaxDelay, however busy the container is.
func TestBackgroundWritebackStartsAfterMaxDelayWhileBusy(t *testing.T) {
	r := newRig(t, Options{Delay: time.Millisecond, Quiet: never, MaxDelay: 200 * time.Millisecond, BusyWorkers: -1})
	stop := r.busy(t)
	defer stop()
	r.dirty(t, "a")
	for {
		c := r.p.next(t) // busy/* paths first dirtied before a may come first
		c.ok()
		if c.rel == "a" {
			break
		}
	}
	r.waitClean(t, "a")
}

// A Flush (fsync, the exit flush: rules D2, D4) does not wait for quiet, nor
// behind background writeback that waits for it.
func TestD2_FlushDoesNotWaitForQuiet(t *testing.T) {
	r := newRig(t, Options{Delay: time.Millisecond, Quiet: never, MaxDelay: never, BusyWorkers: -1})
	r.dirty(t, "old") // due first, but waiting for quiet
	time.Sleep(5 * time.Millisecond)
	r.dirty(t, "a")
	stop := r.busy(t)
	defer stop()
	done := r.flush(t.Context(), "a")
	c := r.p.next(t)
	if c.rel != "a" {
		t.Fatalf("put %q, want the flushed a", c.rel)
	}
	c.ok()
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	r.p.none(t, 100*time.Millisecond) // old still waits for quiet
	if !r.q.IsDirty("old") {
		t.Fatal("old written while the container was busy")
	}
}
