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

// Pace runs the lstats of a listing or of a host check on one file system
// (fn(0) .. fn(n-1), Stats): 8 at a time once they show they are round
// trips. Over a share that keeps no attributes (9p, as WSL2 mounts Windows
// folders; virtiofs or NFS without attribute caching; sshfs with its caches
// off) each lstat is one, and one after the other N of them took N: over
// sshfs without caches and 2 ms added to each round trip, a host check of
// 901 directories took 9.2-9.5 s, 1.5-1.8 s side by side. Answered from a
// cache (a local disk; sshfs's attribute cache, tens of microseconds
// through FUSE) they stay one after the other: on a small machine the
// goroutines' switches cost more than they overlap (a cold `git status`
// over sshfs on 2 CPUs was 13-16% slower when any lstat over 50 µs set them
// going). contrib/bench/README.md, "Host stats side by side".
//
// A call shows it is a round trip by taking over 200 µs; three in a row
// set the rest of a run side by side. Pace remembers whether the last run
// went side by side, and if it did, one call that is a round trip is
// enough for the next: a sweep, or a container's first walk, lists one
// directory after another, most of them small, and each paid three round
// trips one after the other before the rest overlapped. That one call is
// made alone, not among others, so a busy machine does not pass for a far
// share: a quick one turns the Pace back to three in a row. The zero Pace
// wants three.
type Pace struct {
	far atomic.Bool // the last run went side by side
}

// Stats calls fn(i) for every i in [0, n), as Pace says, and returns when
// all have returned.
func (p *Pace) Stats(n int, fn func(i int)) {
	if n > 0 {
		p.far.Store(run(n, statsAtOnce, roundTrip, p.far.Load(), fn))
	}
}

const (
	statsAtOnce = 8                      // lstats in flight, at most
	roundTrip   = 200 * time.Microsecond // lstats that take longer are round trips
)

// slowInARow is how many calls in a row must have taken longer than quick
// before the rest go side by side: one slow call may be a preemption, a
// page fault, a cache miss; a few in a row are the round trips.
const slowInARow = 3

// run calls fn(i) for every i in [0, n): one after the other until
// slowInARow calls in a row took longer than quick (one, if far, until a
// call is quick), then the rest up to atOnce at a time, indices handed out
// in order. It returns when all have returned, and reports whether the
// calls showed they were round trips (and so the rest, if any, went side by
// side).
func run(n, atOnce int, quick time.Duration, far bool, fn func(i int)) (roundTrips bool) {
	need := slowInARow
	if far {
		need = 1
	}
	i, inARow := 0, 0
	for i < n && inARow < need {
		start := time.Now()
		fn(i)
		i++
		if time.Since(start) > quick {
			inARow++
		} else {
			inARow, need = 0, slowInARow
		}
	}
	roundTrips = inARow >= need
	if i >= n {
		return roundTrips
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
	return roundTrips
}
