// Package sidebyside runs calls that may each wait on a round trip (an
// lstat on a share that keeps no attributes) a few at a time once the first
// ones show that they do, so that their waits overlap instead of adding
// up; calls that return at once (an lstat answered from a local disk or a
// cache) stay one after the other, where goroutines would only add to them.
package sidebyside

import (
	"sync"
	"sync/atomic"
	"time"
)

// slowInARow is how many calls in a row must have taken longer than quick
// before the rest go side by side: one slow call may be a preemption, a
// page fault, a cache miss; a few in a row are the round trips.
const slowInARow = 3

// Do calls fn(i) for every i in [0, n): one after the other until
// slowInARow calls in a row took longer than quick, then the rest up to
// atOnce at a time. It returns when all have returned. Indices are handed
// out in order.
func Do(n, atOnce int, quick time.Duration, fn func(i int)) {
	i, slow := 0, 0
	for i < n && slow < slowInARow {
		start := time.Now()
		fn(i)
		i++
		if time.Since(start) > quick {
			slow++
		} else {
			slow = 0
		}
	}
	if i >= n {
		return
	}
	var next atomic.Int64
	next.Store(int64(i))
	var wg sync.WaitGroup
	for range min(atOnce, n-i) {
		wg.Go(func() {
			for {
				j := int(next.Add(1) - 1)
				if j >= n {
					return
				}
				fn(j)
			}
		})
	}
	wg.Wait()
}
