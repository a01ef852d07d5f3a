package frontend

import (
	"os"
	"testing"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// rule C3, served from the host: a cached file open for writing only is
// written by the kernel on the host file itself (FUSE passthrough to the
// host file, store.File.HostPassthrough). Every write is on the host when it
// returns, the plugin serves none of them, and what the container stats,
// reads alongside and reads after the close is what the host has, though
// the store copy saw none of it (it becomes a stub at release).
func TestC3_CachedWriterIsServedFromTheHost(t *testing.T) {
	r := newRig(t, consistency.Cached, func(h string) { writeFile(t, h+"/f", "old content") })
	// In the store and in the kernel's page cache, as a reader leaves it.
	if got := readFile(t, r.mntPath("f")); got != "old content" {
		t.Fatalf("first read: %q", got)
	}
	writes := func() uint64 { return r.front.Status().Ops["write"] }
	before := writes()
	releasedReader(t, r, 1)

	w, err := os.OpenFile(r.mntPath("f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteAt([]byte("NEW"), 0); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, r.hostPath("f")); got != "NEW content" {
		t.Fatalf("host after the write returned: %q, want %q", got, "NEW content")
	}
	if _, err := w.WriteAt([]byte(" and more"), 11); err != nil {
		t.Fatal(err)
	}
	const want = "NEW content and more"
	if n := writes() - before; n != 0 {
		t.Fatalf("the plugin served %d WRITEs of a cached O_WRONLY file, want 0 (served from the host file)", n)
	}
	// Its size while open is the host's: the store copy has not grown.
	if fi, err := os.Stat(r.mntPath("f")); err != nil || fi.Size() != int64(len(want)) {
		t.Fatalf("stat while open for writing: %v, %v; want size %d", fi, err, len(want))
	}
	if fi, err := w.Stat(); err != nil || fi.Size() != int64(len(want)) {
		t.Fatalf("fstat of the writer: %v, %v; want size %d", fi, err, len(want))
	}
	// So is that of another name of it, looked up now.
	if err := os.Link(r.mntPath("f"), r.mntPath("f2")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(r.mntPath("f2")); err != nil || fi.Size() != int64(len(want)) {
		t.Fatalf("stat of a new link while open for writing: %v, %v; want size %d", fi, err, len(want))
	}
	// A reader that opens meanwhile reads the host file too.
	if got := readFile(t, r.mntPath("f")); got != want {
		t.Fatalf("read while open for writing: %q, want %q", got, want)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// After the close: neither the store copy nor the page cache of the
	// first read is served.
	if got := readFile(t, r.mntPath("f")); got != want {
		t.Fatalf("read after the close: %q, want %q", got, want)
	}
	if got := readFile(t, r.hostPath("f")); got != want {
		t.Fatalf("host after the close: %q, want %q", got, want)
	}

	// Created, appended to, truncated: the same, and the store copy of a
	// file left empty is empty.
	a, err := os.OpenFile(r.mntPath("log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"one\n", "two\n"} {
		if _, err := a.WriteString(line); err != nil {
			t.Fatal(err)
		}
	}
	if got := readFile(t, r.hostPath("log")); got != "one\ntwo\n" {
		t.Fatalf("host log after two appends: %q", got)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, r.mntPath("log")); got != "one\ntwo\n" {
		t.Fatalf("log read back: %q", got)
	}
	releasedReader(t, r, 6)
	writeFile(t, r.mntPath("log"), "")
	if got := readFile(t, r.mntPath("log")); got != "" {
		t.Fatalf("log emptied, read back: %q", got)
	}
	if n := writes() - before; n != 0 {
		t.Fatalf("the plugin served %d WRITEs, want 0", n)
	}
}

// rule C3 with a reader first: a file already open for reading when a
// writer comes is not served from the host (the kernel will not mix the
// two kinds of open), so the writer's writes go through the plugin, to
// both halves, and both opens see them.
func TestC3_CachedWriterAfterAReaderWritesThrough(t *testing.T) {
	r := newRig(t, consistency.Cached, func(h string) { writeFile(t, h+"/f", "0123456789") })
	rd, err := os.Open(r.mntPath("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	w, err := os.OpenFile(r.mntPath("f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteAt([]byte("abc"), 0); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, r.hostPath("f")); got != "abc3456789" {
		t.Fatalf("host after the write returned: %q", got)
	}
	buf := make([]byte, 10)
	if _, err := rd.ReadAt(buf, 0); err != nil || string(buf) != "abc3456789" {
		t.Fatalf("the reader reads %q (%v)", buf, err)
	}
	if r.front.Status().Ops["write"] == 0 {
		t.Fatal("no WRITE reached the plugin: the writer was served from the host while a reader was open")
	}
}

// releasedReader waits until the plugin has had n RELEASEs. The kernel
// sends RELEASE after close returns, and an open that comes while a reader
// is still counted open is not served from the host (the kernel will not
// mix the two kinds of open), so a test of that waits for it.
func releasedReader(t *testing.T, r *rig, n uint64) {
	t.Helper()
	waitFor(t, "the readers' RELEASEs", func() bool { return r.front.Status().Ops["release"] >= n })
}
