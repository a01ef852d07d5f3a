package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/writeback"
)

// leftWriterRig is a delegated store with f pending when it restarts and f's
// store file open for writing by someone else: what a passthrough writer
// of a killed run is to the kernel (the frontend's
// TestD4_AWriterTheKilledPluginLeftKeepsItsWrites kills a real one).
func leftWriterRig(t *testing.T) (*storeRig, *os.File) {
	t.Helper()
	r := newStoreRig(t, consistency.Delegated, writeback.Options{Delay: 20 * time.Millisecond}, func(string) {})
	if err := r.s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	writeAsContainer(t, r.s, "f", "v1\n")
	var w *os.File
	r.restart(t, func() {
		var err error
		w, err = os.OpenFile(filepath.Join(r.base, "tree", "f"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
	})
	return r, w
}

// flushAppendFlush flushes the store, appends s through w (the left
// writer), and flushes again: what the second flush writes back is the
// held file's.
func flushAppendFlush(t *testing.T, r *storeRig, w *os.File, s string) {
	t.Helper()
	if err := r.s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	appendTo(t, w, s)
	if err := r.s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func appendTo(t *testing.T, w *os.File, s string) {
	t.Helper()
	if _, err := w.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// Rule D4: a store file a killed run's writer still has open is held dirty
// from the restart until the writer closes it: each flush writes what it
// has then, the background writeback leaves it alone meanwhile (it would
// copy a growing file again and again), and the close lets it go clean.
func TestD4_AKilledRunsWriterIsHeldUntilItCloses(t *testing.T) {
	r, w := leftWriterRig(t)
	ctx := context.Background()
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	appendTo(t, w, "v2\n")
	time.Sleep(100 * time.Millisecond) // five times the Delay
	if got := readHost(t, r.host, "f"); got != "v1\n" {
		t.Fatalf("host f = %q before a flush, want %q: a held path is written back by flushes only", got, "v1\n")
	}
	if !r.s.IsDirty("f") {
		t.Fatal("f clean while a writer of the killed run has it open")
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readHost(t, r.host, "f"); got != "v1\nv2\n" {
		t.Fatalf("host f = %q after a flush, want %q", got, "v1\nv2\n")
	}
	appendTo(t, w, "v3\n")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "f clean once its writer closed it", func() bool { return !r.s.IsDirty("f") })
	if got := readHost(t, r.host, "f"); got != "v1\nv2\nv3\n" {
		t.Fatalf("host f = %q once the writer closed it, want %q", got, "v1\nv2\nv3\n")
	}
}

// The hold is for the file, not the name: an exchange through the mount
// takes it to the name the file has now, and a removal lets it go (the
// writes of a removed file go with it, as on any file system).
func TestD4_AKilledRunsWritersHoldFollowsItsFile(t *testing.T) {
	r, w := leftWriterRig(t)
	ctx := context.Background()
	writeAsContainer(t, r.s, "g", "g1\n")
	if err := r.s.Rename(ctx, "f", "g", unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	flushAppendFlush(t, r, w, "v2\n")
	if got := readHost(t, r.host, "g"); got != "v1\nv2\n" {
		t.Fatalf("host g = %q after the exchange and a flush, want the writer's file %q", got, "v1\nv2\n")
	}
	if r.s.IsDirty("f") {
		t.Fatal("f still held after the exchange took the writer's file to g")
	}
	if err := r.s.Unlink(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if r.s.IsDirty("g") {
		t.Fatal("g still held after its removal")
	}
	if _, err := os.Lstat(filepath.Join(r.host, "g")); !os.IsNotExist(err) {
		t.Fatalf("host g after its removal: %v", err)
	}
	if got := readHost(t, r.host, "f"); got != "g1\n" {
		t.Fatalf("host f = %q, want g's old content %q", got, "g1\n")
	}
}

// A file with several names keeps its hold when the held name goes: the
// hold moves to a name it has left (found by the crash exerciser: a left
// writer of a linked file whose held name was removed wrote on, unheld and
// unseen by the mount).
func TestD4_AKilledRunsWritersHoldMovesToANameTheFileHasLeft(t *testing.T) {
	r, w := leftWriterRig(t)
	ctx := context.Background()
	if err := r.s.Link(ctx, "f", "g"); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Unlink(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	flushAppendFlush(t, r, w, "v2\n")
	if got := readHost(t, r.host, "g"); got != "v1\nv2\n" {
		t.Fatalf("host g = %q after f, its held name, was removed and a flush, want %q", got, "v1\nv2\n")
	}
	if !r.s.IsDirty("g") {
		t.Fatal("g clean while a writer of the killed run has the file open")
	}
	w.Close()
	eventually(t, "g clean once its writer closed it", func() bool { return !r.s.IsDirty("g") })
}
