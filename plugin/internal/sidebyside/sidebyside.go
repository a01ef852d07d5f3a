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

// Stats runs the lstats fn(0) .. fn(n-1) of a listing or of a host check:
// 8 at a time once three in a row took over 200 µs, that is once they show
// they are round trips. Over a share that keeps no attributes (9p, as WSL2
// mounts Windows folders; virtiofs or NFS without attribute caching; sshfs
// with its caches off) each lstat is one, and one after the other N of them
// took N: over sshfs without caches and 2 ms added to each round trip, a
// host check of 901 directories took 9.2-9.5 s, 1.5-1.8 s side by side.
// Answered from a cache (a local disk; sshfs's attribute cache, tens of
// microseconds through FUSE) they stay one after the other: on a small
// machine the goroutines' switches cost more than they overlap (a cold
// `git status` over sshfs on 2 CPUs was 13-16% slower when any lstat over
// 50 µs set them going). contrib/bench/README.md, "Host stats side by side".
func Stats(n int, fn func(i int)) { Do(n, statsAtOnce, roundTrip, fn) }

const (
	statsAtOnce = 8                      // lstats in flight, at most
	roundTrip   = 200 * time.Microsecond // lstats that take longer are round trips
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
