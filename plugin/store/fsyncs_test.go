package store

import "testing"

// A Put that fsyncs a path ends the host fsync of every Sync waiting on
// that path then, and of no other path or later Sync (rule D2: each Sync
// still gets its fsync, from the Put or from syncHost).
func TestD2_APutsFsyncCountsForTheSyncsWaitingOnItsPath(t *testing.T) {
	var w fsyncWaits
	a := w.wait([]string{"x", "y"}, false)
	b := w.wait([]string{"x"}, false)
	if !wanted(&w, "x") || !wanted(&w, "y") || wanted(&w, "z") {
		t.Fatal("wanted does not follow the waits")
	}
	w.synced("x")
	late := w.wait([]string{"x"}, false)
	if !w.isSynced(a, "x") || !w.isSynced(b, "x") {
		t.Fatal("a Sync waiting on x was not told of the Put's fsync of x")
	}
	if w.isSynced(a, "y") || w.isSynced(late, "x") {
		t.Fatal("told of an fsync that did not happen for it")
	}
	w.done(a)
	w.done(b)
	if wanted(&w, "y") {
		t.Fatal("y still wanted after its only Sync ended")
	}
	w.done(late)
	if len(w.waiting) != 0 {
		t.Fatalf("waits left: %v", w.waiting)
	}
}

func wanted(w *fsyncWaits, rel string) bool {
	want, _ := w.wanted(rel)
	return want
}
