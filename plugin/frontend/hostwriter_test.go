package frontend

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/internal/testenv"
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
	if w := r.front.Status().Writers; !strings.HasPrefix(w, "the host file, by the kernel: the source is a kernel file system") {
		t.Errorf("status says cached writers are served by %q, want the host file", w)
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

// rule C3 where the kernel refuses the host file for passthrough: a source
// on overlayfs is a kernel file system, so its cached writers are meant to
// be served from the host file, but the kernel bounds the stacking of file
// systems and will not take an overlayfs file (go-fuse then serves every
// open of the mount by requests). Writes then go through the plugin to
// both halves of a store copy made whole first (the writer's open left it
// a stub), and a reader that joins the writer, and one after the close,
// read what the host has.
func TestC3_CachedWritersOnAStackedSourceWriteThroughThePlugin(t *testing.T) {
	testenv.RequireFUSE(t)
	r := newRig(t, consistency.Cached, func(h string) {
		base := t.TempDir()
		lower, upper, work := base+"/lower", base+"/upper", base+"/work"
		for _, d := range []string{lower, upper, work} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		writeFile(t, lower+"/f", "0123456789")
		if err := unix.Mount("overlay", h, "overlay", 0, "lowerdir="+lower+",upperdir="+upper+",workdir="+work); err != nil {
			t.Skipf("overlayfs: %v", err)
		}
		t.Cleanup(func() { unix.Unmount(h, unix.MNT_DETACH) })
	})
	w, err := os.OpenFile(r.mntPath("f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteAt([]byte("AB"), 0); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, r.hostPath("f")); got != "AB23456789" {
		t.Fatalf("host after the write returned: %q", got)
	}
	if n := r.front.Status().Fetched; n != 1 {
		t.Fatalf("%d fetches after the first write through the plugin, want 1 (the copy made whole)", n)
	}
	if got := readFile(t, r.mntPath("f")); got != "AB23456789" {
		t.Fatalf("a reader while the writer is open reads %q, want %q", got, "AB23456789")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, r.mntPath("f")); got != "AB23456789" {
		t.Fatalf("read after the close: %q", got)
	}
}

// rule C3, served from the host: an append (a log written a line at a
// time, each an open, a write and a close) copies nothing into the store:
// the writer needs no store copy, and the one reader after them fetches
// the file once.
func TestC3_AppendsServedFromTheHostFetchNothing(t *testing.T) {
	r := newRig(t, consistency.Cached, func(h string) { writeFile(t, h+"/log", "first\n") })
	for i, line := range []string{"a\n", "b\n", "c\n"} {
		f, err := os.OpenFile(r.mntPath("log"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(line); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		releasedReader(t, r, uint64(i+1))
	}
	if n := r.front.Status().Fetched; n != 0 {
		t.Fatalf("%d fetches for three appends, want none", n)
	}
	if got := readFile(t, r.mntPath("log")); got != "first\na\nb\nc\n" {
		t.Fatalf("log read back: %q", got)
	}
	if got := readFile(t, r.hostPath("log")); got != "first\na\nb\nc\n" {
		t.Fatalf("host log: %q", got)
	}
	if n := r.front.Status().Fetched; n != 1 {
		t.Fatalf("%d fetches after one read, want 1", n)
	}
}

// rule C2 with cached writers served from the host: a host edit to a file
// the container has listed but never read reaches it with its IN_MODIFY
// (the refresh's own open of the file raises it) and no fetch: the
// content stays on the host until the container reads it. The refresh's
// open is one for writing that is not served from the host, and such an
// open otherwise makes the store copy whole (File.EnsureContent).
func TestC2_HostEditsOfUnreadFilesFetchNothing(t *testing.T) {
	r := newRig(t, consistency.Cached, func(h string) { writeFile(t, h+"/f", "v1") })
	if names := listNames(t, r.mnt); len(names) != 1 {
		t.Fatalf("listing: %v", names)
	}
	w := watch(t, r.mnt)
	writeFile(t, r.hostPath("f"), "version two")
	w.wait(t, unix.IN_MODIFY, "f")
	if n := r.front.Status().Fetched; n != 0 {
		t.Fatalf("%d fetches for a host edit of a file never read, want 0", n)
	}
	if got := readFile(t, r.mntPath("f")); got != "version two" {
		t.Fatalf("read after the event: %q", got)
	}
}
