package store

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

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
	w.synced("x", true)
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

// Rule D2: each fsync and fdatasync ends with one of the host's, of the
// path's host file, whichever way it went (a Put written in place, a Put of
// a whole file, or nothing to write back and the host file fsynced as it
// is). Durability itself cannot be seen without a power cut; that the
// host's fsync was asked for can.
func TestD2_EachFsyncEndsWithTheHostsFsyncOfThePath(t *testing.T) {
	ctx := context.Background()
	type call struct {
		rel      string
		dataOnly bool
	}
	var mu sync.Mutex
	var calls []call
	testHookHostFsync = func(rel string, dataOnly bool) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, call{rel, dataOnly})
	}
	t.Cleanup(func() { testHookHostFsync = nil })
	expect := func(what string, want call, sync func() error) {
		t.Helper()
		mu.Lock()
		calls = nil
		mu.Unlock()
		if err := sync(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(calls, want) {
			t.Fatalf("%s: host fsyncs %v, want %v among them", what, calls, want)
		}
	}

	r := newLargeFileRig(t)
	r.write(t, 0, []byte("in place"))
	expect("fsync of a file written in place", call{"db", false}, func() error { return r.f.Sync(ctx) })
	r.write(t, 10, []byte("in place"))
	expect("fdatasync of a file written in place", call{"db", true}, func() error { return r.f.SyncData(ctx) })
	if err := r.s.Flush(ctx); err != nil { // the times the fdatasync left
		t.Fatal(err)
	}
	expect("fsync with nothing to write back", call{"db", false}, func() error { return r.s.Sync(ctx, "db") })

	me := Owner{Uid: os.Getuid(), Gid: os.Getgid()}
	f, err := r.s.Create(ctx, "small", unix.O_RDWR, 0o600, me, func() (string, bool) { return "small", true })
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	if _, err := f.WriteAt(ctx, []byte("a new small file"), 0); err != nil {
		t.Fatal(err)
	}
	expect("fdatasync of a new file, written back whole", call{"small", true}, func() error { return f.SyncData(ctx) })
}

// Rule D2 when an fsync and an fdatasync of one file wait together: a Put
// that left the times for later ends the fdatasync's wait only; the
// fsync's needs the times too.
func TestD2_APutWithoutTheTimesEndsOnlyTheFdatasyncs(t *testing.T) {
	var w fsyncWaits
	data := w.wait([]string{"x"}, true)
	if want, dataOnly := w.wanted("x"); !want || !dataOnly {
		t.Fatalf("an fdatasync alone: wanted = %v, %v; want true, true", want, dataOnly)
	}
	full := w.wait([]string{"x"}, false)
	if want, dataOnly := w.wanted("x"); !want || dataOnly {
		t.Fatalf("an fsync beside the fdatasync: wanted = %v, %v; want true, false (the times too)", want, dataOnly)
	}
	if w.synced("x", false) {
		t.Fatal("every wait ended, though an fsync still needs the times")
	}
	if !w.isSynced(data, "x") || w.isSynced(full, "x") {
		t.Fatal("a Put without the times ended the wrong waits")
	}
	if !w.synced("x", true) || !w.isSynced(full, "x") {
		t.Fatal("a Put with the times did not end the fsync's wait")
	}
}

// Rule D2, the race of the two: a plain fsync that begins waiting while a
// Put written for an fdatasync runs gets the file's times on the host too,
// from that Put, before it returns.
func TestD2_AnFsyncThatJoinsAnFdatasyncsPutGetsTheTimes(t *testing.T) {
	r := newLargeFileRig(t)
	r.write(t, 0, []byte("joined"))
	ageStoreFile(t, r.s, "db")
	var full *fsyncWait
	testHookHostFsync = func(rel string, dataOnly bool) {
		if rel == "db" && dataOnly && full == nil {
			full = r.s.fsyncs.wait([]string{"db"}, false) // the fsync arrives now
		}
	}
	t.Cleanup(func() { testHookHostFsync = nil })
	if err := r.f.SyncData(context.Background()); err != nil {
		t.Fatal(err)
	}
	if full == nil {
		t.Fatal("the Put made no host fdatasync")
	}
	defer r.s.fsyncs.done(full)
	if !r.s.fsyncs.isSynced(full, "db") {
		t.Fatal("the Put did not end the wait of the fsync that joined it")
	}
	if got := hostMtime(t, r.host, "db"); !got.Equal(old) {
		t.Fatalf("host mtime %v when the joining fsync ends, want the container's %v", got, old)
	}
}
