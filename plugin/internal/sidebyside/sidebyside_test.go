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
func TestDoGoesSideBySideOnceACallIsSlow(t *testing.T) {
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
			Do(n, atOnce, c.quick, func(i int) {
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
