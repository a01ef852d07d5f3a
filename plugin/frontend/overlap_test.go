package frontend

// Overlapping mounts (rules C4, D5), through real mounts: the driver tells a
// front its floor (driver.Front.SetFloor); here the tests tell it directly.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/consistency"
)

func (r *rig) setFloor(t *testing.T, floor consistency.State) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.front.SetFloor(ctx, floor); err != nil {
		t.Fatalf("SetFloor(%s): %v", floor, err)
	}
}

func onHost(t *testing.T, r *rig, rel, want, what string) {
	t.Helper()
	b, err := os.ReadFile(r.hostPath(rel))
	if err != nil {
		t.Fatalf("%s: not on the host when the syscall returned: %v", what, err)
	}
	if string(b) != want {
		t.Fatalf("%s: host has %q when the syscall returned, want %q", what, b, want)
	}
}

func notOnHost(t *testing.T, r *rig, rel, what string) {
	t.Helper()
	if _, err := os.Stat(r.hostPath(rel)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s: %s is on the host already (err %v): the change was not held back", what, rel, err)
	}
}

func pwrite(t *testing.T, f *os.File, s string, off int64) {
	t.Helper()
	if _, err := f.WriteAt([]byte(s), off); err != nil {
		t.Fatalf("write %s: %v", f.Name(), err)
	}
}

// rule D5: a delegated front whose floor is cached (a cached mount overlaps
// it) writes every change through to the host before the syscall returns,
// (a file opened before the switch at its next fsync); relaxed again, its
// writes stay local until flushed.
func TestD5_DelegatedUnderCachedFloorWritesThrough(t *testing.T) {
	r := newRig(t, consistency.Delegated, func(h string) {
		writeFile(t, filepath.Join(h, "old"), "x")
		os.Mkdir(filepath.Join(h, "d"), 0o755)
	})
	// Opened (and created) while delegated: no host half.
	pre, err := os.OpenFile(r.mntPath("pre"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer pre.Close()
	pwrite(t, pre, "before", 0)
	notOnHost(t, r, "pre", "delegated create")

	r.setFloor(t, consistency.Cached)
	onHost(t, r, "pre", "before", "what was journaled before the switch")

	// A file opened before the switch is served by FUSE passthrough: the
	// kernel writes its store copy directly and cannot be made to stop, so
	// its writes reach the host at its next fsync (or close), not at once
	// (docs/states.md, "Overlapping mounts"). Its other changes (truncate)
	// reach the plugin and write through.
	pwrite(t, pre, "AFTER", 0)
	if err := pre.Sync(); err != nil {
		t.Fatal(err)
	}
	onHost(t, r, "pre", "AFTERe", "fsync of a file opened before the switch")
	if err := pre.Truncate(3); err != nil {
		t.Fatal(err)
	}
	onHost(t, r, "pre", "AFT", "ftruncate through a file opened before the switch")

	writeFile(t, r.mntPath("new"), "n")
	onHost(t, r, "new", "n", "create and write")
	f, err := os.OpenFile(r.mntPath("old"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("y"); err != nil {
		t.Fatal(err)
	}
	onHost(t, r, "old", "xy", "append before close")
	f.Close()
	if err := os.Mkdir(r.mntPath("d/sub"), 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.hostPath("d/sub")); err != nil {
		t.Fatalf("mkdir not on the host: %v", err)
	}
	if err := os.Rename(r.mntPath("new"), r.mntPath("d/sub/moved")); err != nil {
		t.Fatal(err)
	}
	onHost(t, r, "d/sub/moved", "n", "rename")
	if err := os.Remove(r.mntPath("old")); err != nil {
		t.Fatal(err)
	}
	notOnHost(t, r, "old", "unlink (want it gone)")
	// Nothing was journaled since the switch, except that "pre", written
	// while delegated and still open, stays held in the queue until closed
	// (its content is on the host, as checked above).
	if st := r.front.Status(); st.Dirty > 1 {
		t.Fatalf("writing through, yet %d paths are waiting for writeback", st.Dirty)
	}

	// Opened while writing through: it has a host half.
	during, err := os.OpenFile(r.mntPath("during"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer during.Close()
	pwrite(t, during, "1", 0)
	onHost(t, r, "during", "1", "write through a file opened after the switch")

	// Relaxed: delegated again.
	r.setFloor(t, consistency.Delegated)
	writeFile(t, r.mntPath("later"), "l")
	notOnHost(t, r, "later", "delegated again: create")
	pwrite(t, pre, "Z", 0)
	pwrite(t, during, "2", 0)
	onHost(t, r, "pre", "AFT", "delegated again: write through a file opened before the switch is held back;")
	onHost(t, r, "during", "1", "delegated again: write through a file opened during the switch is held back;")
	if err := during.Sync(); err != nil { // rule D2 still holds for it
		t.Fatalf("fsync: %v", err)
	}
	onHost(t, r, "during", "2", "fsync after relaxing")
	pre.Close()
	during.Close()
	r.flush(t)
	onHost(t, r, "later", "l", "flush after relaxing")
	onHost(t, r, "pre", "ZFT", "flush after relaxing")
}

// rule D5: a consistent floor makes a delegated front write through too
// (and rescan faster, see TestC4_...); a floor no stronger than the front's
// own state changes nothing.
func TestD5_DelegatedUnderConsistentFloorWritesThrough(t *testing.T) {
	r := newRig(t, consistency.Delegated, nil)
	r.setFloor(t, consistency.Delegated)
	writeFile(t, r.mntPath("a"), "a")
	notOnHost(t, r, "a", "own state as floor")
	r.setFloor(t, consistency.Consistent)
	onHost(t, r, "a", "a", "journaled before the switch")
	writeFile(t, r.mntPath("b"), "b")
	onHost(t, r, "b", "b", "consistent floor: create and write")
}

// rule D5: when what is journaled cannot be written back, the front keeps
// its delegated rule and SetFloor says why.
func TestD5_FloorNotTakenWhenWritebackFails(t *testing.T) {
	r := newRig(t, consistency.Delegated, nil)
	writeFile(t, r.mntPath("a"), "a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the writeback cannot finish
	if err := r.front.SetFloor(ctx, consistency.Cached); err == nil {
		t.Fatal("SetFloor succeeded without writing back what was journaled")
	}
	writeFile(t, r.mntPath("b"), "b")
	notOnHost(t, r, "b", "still delegated after a failed switch")
	r.setFloor(t, consistency.Cached) // and it can be retried
	onHost(t, r, "b", "b", "retried switch")
	writeFile(t, r.mntPath("c"), "c")
	onHost(t, r, "c", "c", "after the retried switch")
}

// rule C4: a cached front whose floor is consistent looks for host edits
// every 100ms at most (not every rescan interval), and goes back to its
// own interval when the floor drops. Writes go through either way (C3).
func TestC4_CachedUnderConsistentFloorRescansFast(t *testing.T) {
	r := newRescanRig(t, consistency.Cached, "1h", func(h string) { writeFile(t, filepath.Join(h, "f"), "v1") })
	if got := readFile(t, r.mntPath("f")); got != "v1" {
		t.Fatalf("container sees %q", got)
	}
	r.setFloor(t, consistency.Cached) // its own state: nothing changes
	if every := r.front.(*storeFront).every; every != time.Hour {
		t.Fatalf("floor cached: rescanning every %v, want the volume's 1h", every)
	}

	r.setFloor(t, consistency.Consistent)
	if every := r.front.(*storeFront).every; every != OverlapRescan {
		t.Fatalf("floor consistent: rescanning every %v, want %v", every, OverlapRescan)
	}
	writeFile(t, r.hostPath("f"), "v2")
	start := time.Now()
	waitFor(t, "the host edit in the container", func() bool { return readFile(t, r.mntPath("f")) == "v2" })
	t.Logf("host edit seen after %v", time.Since(start))
	writeFile(t, r.mntPath("g"), "g")
	onHost(t, r, "g", "g", "cached write under a consistent floor")

	r.setFloor(t, consistency.Cached)
	if every := r.front.(*storeFront).every; every != time.Hour {
		t.Fatalf("relaxed: rescanning every %v, want the volume's 1h", every)
	}
	writeFile(t, r.hostPath("f"), "v3")
	time.Sleep(5 * OverlapRescan)
	if got := readFile(t, r.mntPath("f")); got != "v2" {
		t.Fatalf("relaxed to a 1h rescan, yet the container saw the host edit: %q", got)
	}
}
