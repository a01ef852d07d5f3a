package syncer

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// The files in use are the most recently opened, newest first, at most max
// of them: a build that opens a whole tree does not make checks stat it all.
func TestInUseKeepsTheMostRecentlyOpened(t *testing.T) {
	u := NewInUse(3)
	for _, rel := range []string{"a", "b", "c", "a", "d"} {
		u.Opened(rel)
	}
	// b was the least recently opened when d came.
	if got, want := u.Since(time.Time{}), []string{"d", "a", "c"}; !slices.Equal(got, want) {
		t.Fatalf("in use: %q, want %q", got, want)
	}
}

// A file not opened since the time asked for is forgotten: it is not stat'ed
// again until it is opened again.
func TestInUseForgetsFilesNotOpenedSince(t *testing.T) {
	u := NewInUse(0)
	u.Opened("old")
	cut := time.Now()
	time.Sleep(time.Millisecond) // past cut, on any clock resolution seen
	u.Opened("new")
	if got, want := u.Since(cut), []string{"new"}; !slices.Equal(got, want) {
		t.Fatalf("opened since the cut: %q, want %q", got, want)
	}
	if got, want := u.Since(time.Time{}), []string{"new"}; !slices.Equal(got, want) {
		t.Fatalf("after the cut, in use: %q, want %q (old forgotten)", got, want)
	}
	u.Opened("old")
	if got, want := u.Since(time.Time{}), []string{"old", "new"}; !slices.Equal(got, want) {
		t.Fatalf("after old was opened again: %q, want %q", got, want)
	}
}

// Opens come from many FUSE request goroutines at once, while a check reads.
func TestInUseIsSafeForConcurrentOpens(t *testing.T) {
	u := NewInUse(64)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				u.Opened(fmt.Sprintf("g%d/f%d", g, i%100))
			}
		}()
	}
	for range 10 {
		u.Since(time.Time{})
	}
	wg.Wait()
	got := u.Since(time.Time{})
	if len(got) != 64 {
		t.Fatalf("%d files in use after 400 distinct opens, want the bound, 64", len(got))
	}
	seen := make(map[string]bool)
	for _, rel := range got {
		if seen[rel] {
			t.Fatalf("%q in use twice: %q", rel, got)
		}
		seen[rel] = true
	}
}
