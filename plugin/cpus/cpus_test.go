package cpus

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// recorder stands in for runtime.GOMAXPROCS: it records every value set.
type recorder struct {
	mu  sync.Mutex
	set []int
}

func (r *recorder) GOMAXPROCS(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.set = append(r.set, n)
	return 0
}

func (r *recorder) values() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.set)
}

// waitFor polls until the recorded values are want, or fails after 5 s.
func (r *recorder) waitFor(t *testing.T, what string, want ...int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(r.values(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: GOMAXPROCS set to %v, want %v", what, r.values(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestShareWorkRaisesThenQuietLowers(t *testing.T) {
	r := &recorder{}
	g := New(4, 20*time.Millisecond, r.GOMAXPROCS)
	defer g.Stop()
	if got := r.values(); !slices.Equal(got, []int{1}) {
		t.Fatalf("New: GOMAXPROCS set to %v, want [1]", got)
	}
	g.ShareWork()
	if got := r.values(); !slices.Equal(got, []int{1, 4}) {
		t.Fatalf("ShareWork: GOMAXPROCS set to %v, want [1 4] at once", got)
	}
	r.waitFor(t, "quiet after one ShareWork", 1, 4, 1)

	// A second round raises again and lowers again.
	g.ShareWork()
	r.waitFor(t, "second round", 1, 4, 1, 4, 1)
}

func TestShareWorkKeepsRunningWorkHigh(t *testing.T) {
	r := &recorder{}
	quiet := 50 * time.Millisecond
	g := New(2, quiet, r.GOMAXPROCS)
	defer g.Stop()
	// Share work every 10 ms for 4 quiet periods: no lowering in between,
	// and no second raise (each change stops every goroutine for a moment).
	start := time.Now()
	for time.Since(start) < 4*quiet {
		g.ShareWork()
		time.Sleep(10 * time.Millisecond)
	}
	if got := r.values(); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("while share work kept coming: GOMAXPROCS set to %v, want [1 2]", got)
	}
	r.waitFor(t, "quiet after the run", 1, 2, 1)
}

func TestStopLeavesAllCPUs(t *testing.T) {
	r := &recorder{}
	g := New(3, 10*time.Millisecond, r.GOMAXPROCS)
	g.ShareWork()
	g.Stop()
	time.Sleep(50 * time.Millisecond) // past quiet: the timer must not lower
	g.ShareWork()                     // nor may share work after Stop change anything
	if got := r.values(); !slices.Equal(got, []int{1, 3, 3}) {
		t.Fatalf("after Stop: GOMAXPROCS set to %v, want [1 3 3]", got)
	}
}
