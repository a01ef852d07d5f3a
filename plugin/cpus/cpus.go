// Package cpus decides how many CPUs the plugin's Go code runs on at once
// (GOMAXPROCS): one while the plugin only answers from the local store, all
// of them while it works on the share.
//
// Why: a FUSE request hands off between the container's thread and a plugin
// thread, and on the small VMs Docker runs in, waking a thread on another
// virtual CPU is the dear part of it. With one P the Go runtime wakes its own
// threads half as often, and an open+close through the plugin took 12-15 µs
// instead of 30-33 µs on a 2-CPU VM. But with one P throughout, a cold
// `git status` took 50% longer: listing, fetching and writing back keep many
// goroutines waiting on the share at once. Hence the switch. The figures and
// how they were taken: contrib/bench/README.md, "What a FUSE round trip costs
// on a small VM".
package cpus

import (
	"sync"
	"time"
)

// DefaultQuiet is how long after the last share work a Governor goes back
// to one CPU: long enough that a listing followed by its lookups, or a run
// of writebacks, does not flip it back and forth (each change briefly stops
// every goroutine).
const DefaultQuiet = 200 * time.Millisecond

// Governor switches GOMAXPROCS between 1 and max. It is safe for concurrent
// use.
type Governor struct {
	max   int
	quiet time.Duration
	set   func(int) int // runtime.GOMAXPROCS, or a test's recorder

	mu      sync.Mutex
	high    bool
	last    time.Time   // latest ShareWork
	timer   *time.Timer // lowers again once quiet; armed while high
	stopped bool
}

// New returns a Governor that has already set one CPU. It runs the
// plugin's Go code on max CPUs during share work (see ShareWork).
func New(max int, quiet time.Duration, set func(int) int) *Governor {
	g := &Governor{max: max, quiet: quiet, set: set}
	g.timer = time.AfterFunc(quiet, g.lower)
	g.timer.Stop() // armed at each raise
	set(1)
	return g
}

// ShareWork says the plugin starts work on the share that may overlap other
// work: a listing, a fetch, a writeback. It raises GOMAXPROCS to max, if it
// is not there already, until quiet has passed with no further ShareWork.
func (g *Governor) ShareWork() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return
	}
	g.last = time.Now()
	if g.high {
		return // the timer's lower re-arms itself while work keeps coming
	}
	g.high = true
	g.set(g.max)
	g.timer.Reset(g.quiet)
}

// lower goes back to one CPU if no share work came for quiet, or waits the
// rest of quiet.
func (g *Governor) lower() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped || !g.high {
		return
	}
	if left := g.quiet - time.Since(g.last); left > 0 {
		g.timer.Reset(left)
		return
	}
	g.high = false
	g.set(1)
}

// Stop sets max CPUs for good (the plugin is stopping: its last writebacks
// should not wait on one CPU).
func (g *Governor) Stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return
	}
	g.stopped = true
	g.timer.Stop()
	g.set(g.max)
}
