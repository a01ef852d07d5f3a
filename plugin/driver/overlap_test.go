package driver

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/bindstate/bindstate/plugin/consistency"
)

func TestOverlaps(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"/a/b", "/a/b", true},
		{"/a/b", "/a/b/c", true},
		{"/a/b/c", "/a/b", true},
		{"/a/b", "/a/bc", false},
		{"/a/bc", "/a/b", false},
		{"/a/b/", "/a/b", true},
		{"/a/./b", "/a/b/c/..", true},
		{"/", "/x", true},
		{"/a", "/b", false},
		{"/a/b/c", "/a/b/d", false},
	}
	for _, tc := range tests {
		if got := overlaps(tc.a, tc.b); got != tc.want {
			t.Errorf("overlaps(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// floorEvents returns the "floor ..." events, in order.
func floorEvents(o *fakeOpener) []string {
	var out []string
	for _, e := range o.log() {
		if strings.HasPrefix(e, "floor ") {
			out = append(out, e)
		}
	}
	return out
}

func sorted(s ...string) []string { return slices.Sorted(slices.Values(s)) }

func wantFloors(t *testing.T, o *fakeOpener, what string, want ...string) {
	t.Helper()
	if got := floorEvents(o); !slices.Equal(got, want) {
		t.Fatalf("%s: floor events\n got %q\nwant %q\n(all events %q)", what, got, want, o.log())
	}
}

// rule D5: a delegated front overlapped by a cached one is told its floor
// before the cached Mount returns, and relaxed once the cached front is
// gone. A front whose source only shares a name prefix (/a/b vs /a/bc) does
// not overlap; mounting more IDs of an open front changes nothing.
func TestD5_DelegatedFrontGetsFloorOfOverlappingCachedMount(t *testing.T) {
	op := newFakeOpener()
	d := newTestDriver(t, t.TempDir(), op)
	mustCreate(t, d, "del", map[string]string{"source": "/data/a/b", "state": "delegated"})
	mustCreate(t, d, "near", map[string]string{"source": "/data/a/bc", "state": "cached"})
	mustCreate(t, d, "sub", map[string]string{"source": "/data/a/b/c", "state": "cached"})
	mustCreate(t, d, "sub2", map[string]string{"source": "/data/a/b/c", "state": "cached"}) // same key as sub
	kd := key("/data/a/b", "delegated")

	mustMount(t, d, "del", "c1")
	mustMount(t, d, "near", "c2")
	wantFloors(t, op, "no overlap (/data/a/b vs /data/a/bc)")

	mustMount(t, d, "sub", "c3")
	// Pushed by the time Mount returned.
	wantFloors(t, op, "cached mount beneath the delegated one", "floor "+kd+" cached")

	mustMount(t, d, "sub", "c4")
	mustMount(t, d, "sub2", "c5")
	mustMount(t, d, "del", "c6")
	wantFloors(t, op, "more mounts of open fronts", "floor "+kd+" cached")

	mustUnmount(t, d, "sub", "c3")
	mustUnmount(t, d, "sub2", "c5")
	wantFloors(t, op, "the cached front is still open", "floor "+kd+" cached")

	mustUnmount(t, d, "sub", "c4")
	wantFloors(t, op, "the cached front closed", "floor "+kd+" cached", "floor "+kd+" delegated")
	if i, j := slices.Index(op.log(), "close "+key("/data/a/b/c", "cached")), slices.Index(op.log(), "floor "+kd+" delegated"); i < 0 || j < i {
		t.Fatalf("relaxed before the stronger front closed: %q", op.log())
	}

	mustUnmount(t, d, "near", "c2")
	mustUnmount(t, d, "del", "c1")
	mustUnmount(t, d, "del", "c6")
	wantFloors(t, op, "no more changes", "floor "+kd+" cached", "floor "+kd+" delegated")
}

// rule D5: the overlap rule works both ways (the stronger mount may be the
// outer one), with the strongest overlapping front winning, and two
// delegated fronts impose nothing on each other.
func TestD5_StrongestOverlappingFrontIsTheFloor(t *testing.T) {
	op := newFakeOpener()
	d := newTestDriver(t, t.TempDir(), op)
	mustCreate(t, d, "inner", map[string]string{"source": "/data/p/node_modules", "state": "delegated"})
	mustCreate(t, d, "inner2", map[string]string{"source": "/data/p", "state": "delegated"})
	mustCreate(t, d, "outer", map[string]string{"source": "/data/p", "state": "cached"})
	mustCreate(t, d, "top", map[string]string{"source": "/data", "state": "consistent"})
	ki, ki2, ko := key("/data/p/node_modules", "delegated"), key("/data/p", "delegated"), key("/data/p", "cached")

	mustMount(t, d, "inner", "c1")
	mustMount(t, d, "inner2", "c2")
	wantFloors(t, op, "delegated over delegated")

	mustMount(t, d, "outer", "c3")
	got := floorEvents(op)
	if want := sorted("floor "+ki2+" cached", "floor "+ki+" cached"); !slices.Equal(sorted(got...), want) {
		t.Fatalf("cached outer mount: floors %q, want %q", got, want)
	}

	mustMount(t, d, "top", "c4")
	got = floorEvents(op)[2:]
	if want := sorted("floor "+ko+" consistent", "floor "+ki2+" consistent", "floor "+ki+" consistent"); !slices.Equal(sorted(got...), want) {
		t.Fatalf("consistent mount above all: floors %q, want %q", got, want)
	}

	mustUnmount(t, d, "top", "c4")
	got = floorEvents(op)[5:]
	if want := sorted("floor "+ko+" cached", "floor "+ki2+" cached", "floor "+ki+" cached"); !slices.Equal(sorted(got...), want) {
		t.Fatalf("consistent mount gone: floors %q, want %q", got, want)
	}
}

// rule C4: a cached front overlapped by a consistent one (or a default one:
// default ranks as consistent) is told so, and relaxed afterwards.
func TestC4_CachedFrontGetsFloorOfOverlappingConsistentMount(t *testing.T) {
	op := newFakeOpener()
	d := newTestDriver(t, t.TempDir(), op)
	mustCreate(t, d, "cac", map[string]string{"source": "/data/x/y", "state": "cached"})
	mustCreate(t, d, "near", map[string]string{"source": "/data/x/yz", "state": "consistent"})
	mustCreate(t, d, "dflt", map[string]string{"source": "/data/x"}) // state default
	mustCreate(t, d, "kons", map[string]string{"source": "/data/x/y/z", "state": "consistent"})
	kc := key("/data/x/y", "cached")

	mustMount(t, d, "cac", "c1")
	mustMount(t, d, "near", "c2")
	wantFloors(t, op, "no overlap (/data/x/y vs /data/x/yz)")

	// "default" is consistent minus the overlap rules (SEMANTICS.md): a
	// default mount above the cached one leaves it cached.
	mustMount(t, d, "dflt", "c3")
	wantFloors(t, op, "default mount above the cached one")
	mustMount(t, d, "kons", "c4")
	wantFloors(t, op, "a consistent mount inside the cached one", "floor "+kc+" consistent")

	mustUnmount(t, d, "dflt", "c3")
	wantFloors(t, op, "the default mount goes", "floor "+kc+" consistent")
	mustUnmount(t, d, "kons", "c4")
	wantFloors(t, op, "consistent overlap gone", "floor "+kc+" consistent", "floor "+kc+" cached")
}

// rule D5: a front that cannot take its floor (its writeback fails) does not
// fail the stronger Mount; the push is retried at the next Mount or Unmount.
func TestD5_FloorFailureKeepsMountAndIsRetried(t *testing.T) {
	op := newFakeOpener()
	fail := true
	op.setFloor = func(key string, floor consistency.State) error {
		op.mu.Lock()
		defer op.mu.Unlock()
		if fail {
			return errors.New("writeback of a.txt failed: share is down")
		}
		return nil
	}
	d := newTestDriver(t, t.TempDir(), op)
	mustCreate(t, d, "del", map[string]string{"source": "/data/a", "state": "delegated"})
	mustCreate(t, d, "cac", map[string]string{"source": "/data/a/b", "state": "cached"})
	kd := key("/data/a", "delegated")
	mustMount(t, d, "del", "c1")
	if mp := mustMount(t, d, "cac", "c2"); mp == "" {
		t.Fatal("no mountpoint")
	}
	wantFloors(t, op, "failed push", "floor "+kd+" cached")

	op.mu.Lock()
	fail = false
	op.mu.Unlock()
	mustMount(t, d, "cac", "c3") // another container: retried
	wantFloors(t, op, "retried push", "floor "+kd+" cached", "floor "+kd+" cached")
	mustMount(t, d, "cac", "c4")
	wantFloors(t, op, "taken: not pushed again", "floor "+kd+" cached", "floor "+kd+" cached")
}

// rule D5: after a restart, the reopened fronts get their floors again.
func TestD5_FloorsPushedAfterRestart(t *testing.T) {
	dir := t.TempDir()
	op := newFakeOpener()
	d := newTestDriver(t, dir, op)
	mustCreate(t, d, "del", map[string]string{"source": "/data/a", "state": "delegated"})
	mustCreate(t, d, "cac", map[string]string{"source": "/data/a/b", "state": "cached"})
	mustMount(t, d, "del", "c1")
	mustMount(t, d, "cac", "c2")
	kd := key("/data/a", "delegated")
	wantFloors(t, op, "before restart", "floor "+kd+" cached")

	op2 := newFakeOpener() // a new process: fronts are opened afresh
	newTestDriver(t, dir, op2)
	wantFloors(t, op2, "after restart", "floor "+kd+" cached")
}
