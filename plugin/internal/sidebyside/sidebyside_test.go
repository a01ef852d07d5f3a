package sidebyside

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Every index is called once; calls that each take longer than quick go up
// to atOnce at a time after the first, and calls within quick one after the
// other.
func TestRunGoesSideBySideOnceACallIsSlow(t *testing.T) {
	for _, c := range []struct {
		name     string
		quick    time.Duration
		min, max int32 // calls under way at once, at most
	}{
		{"each call slower than quick", 0, 2, 4},
		{"each call within quick", time.Hour, 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			const n, atOnce = 37, 4
			var mu sync.Mutex
			calls := make(map[int]int)
			var inFlight, most atomic.Int32
			run(n, atOnce, c.quick, false, func(i int) {
				k := inFlight.Add(1)
				for m := most.Load(); k > m && !most.CompareAndSwap(m, k); m = most.Load() {
				}
				time.Sleep(2 * time.Millisecond)
				inFlight.Add(-1)
				mu.Lock()
				calls[i]++
				mu.Unlock()
			})
			for i := range n {
				if calls[i] != 1 {
					t.Errorf("index %d called %d times, want once", i, calls[i])
				}
			}
			if len(calls) != n {
				t.Errorf("%d indices called, want %d", len(calls), n)
			}
			if m := most.Load(); m < c.min || m > c.max {
				t.Errorf("at most %d calls under way at once, want %d to %d", m, c.min, c.max)
			}
		})
	}
}

// A Pace whose last run went side by side needs one round trip, not three,
// before the rest of the next run does; a quick call turns it back to three.
func TestAPaceRemembersThatTheCallsWereRoundTrips(t *testing.T) {
	var p Pace
	// run makes n calls, each a round trip (20 ms) if slow, and reports
	// for each call but the last whether the next began before it ended.
	run := func(n int, slow bool) string {
		type span struct{ start, end time.Time }
		spans := make([]span, n)
		p.Stats(n, func(i int) {
			spans[i].start = time.Now()
			if slow {
				time.Sleep(20 * time.Millisecond)
			}
			spans[i].end = time.Now()
		})
		var overlapped string
		for i := range n - 1 {
			overlapped += map[bool]string{false: "-", true: "x"}[spans[i+1].start.Before(spans[i].end)]
		}
		return overlapped
	}
	for _, step := range []struct {
		what string
		n    int
		slow bool
		want string // per call but the last: x if the next overlapped it
	}{
		{"the first run: three round trips one after the other, then side by side", 6, true, "---xx"},
		{"the next: one round trip, then side by side", 6, true, "-xxxx"},
		{"a small listing: one round trip, then side by side", 3, true, "-x"},
		{"calls that are quick again: one after the other", 6, false, "-----"},
		{"round trips again: three first, as at the start", 6, true, "---xx"},
	} {
		if got := run(step.n, step.slow); got != step.want {
			t.Fatalf("%s: %s, want %s (x: the next call began before this one ended)", step.what, got, step.want)
		}
	}
}
