package store

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/hostpath"
	"github.com/bindstate/bindstate/plugin/internal/testshare"
	"github.com/bindstate/bindstate/plugin/writeback"
)

// kill leaves r's store as a killed plugin does: open, its writers never
// released, nothing closed; then opens the store again on the same tree.
// (The abandoned store is closed at the test's end, to free its files.)
func (r *storeRig) kill(t *testing.T) {
	t.Helper()
	dead := r.s
	t.Cleanup(func() { dead.Close() })
	r.open(t)
}

// readVia reads rel whole through s, as a container's open and read do.
func readVia(t *testing.T, s *Store, rel string) string {
	t.Helper()
	f, err := s.Open(context.Background(), rel, unix.O_RDONLY, func() (string, bool) { return rel, true })
	if err != nil {
		t.Fatalf("open %s: %v", rel, err)
	}
	defer f.Release()
	return readAll(t, f)
}

// writeHostHalf writes data at off into the host half of the cached writer
// w only, and gives the host file back the mtime it had: the write a kill
// cut between its two halves (or a passthrough write, which the store
// never sees), in place and within the host's second, as a sweep of the
// host cannot tell from no change.
func writeHostHalf(t *testing.T, r *storeRig, w *File, rel, data string, off int64) {
	t.Helper()
	p := filepath.Join(r.host, rel)
	before, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Pwrite(w.HostFd(), []byte(data), off); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, before.ModTime(), before.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// Rule C3 (what a cached writer wrote is what the container reads) across
// a kill (D4: nothing the container saw succeed is lost): a cached writer
// writes the host first, and the store copy is whole and current only at
// its release, so a plugin killed while a writer had the file open left
// a copy older than the host file. Each such file is fetched again from
// the host at the next Open: one a writer served from the host had open
// (the kernel writes the host file; where the test folder's file system
// allows it), one whose write was cut between the host's half and the
// store's, one renamed while its writer had it open, and one the
// container created (it has no base of the host's at all). The host's
// writes keep size and mtime, so that no sweep of the host could tell.
// Without the walk at Open: "the store's d/g after the next Open: "old
// content", want "new content"" (and the same for d/h without the rename
// leaving the writer's base alone, and for d/n without the mark at
// Create).
func TestD4_C3_AFileWrittenOnTheHostWhenThePluginWasKilledIsFetchedAgain(t *testing.T) {
	const old, written = "old content", "new"
	want := "new content"
	r := newStoreRig(t, consistency.Cached, writeback.Options{}, func(h string) {
		os.Mkdir(filepath.Join(h, "d"), 0o755)
		for _, rel := range []string{"f", "d/g", "d/h0", "untouched"} {
			os.WriteFile(filepath.Join(h, rel), []byte(old), 0o644)
		}
		// Whole seconds, as sftp keeps them.
		past := time.Now().Add(-time.Hour).Truncate(time.Second)
		for _, rel := range []string{"f", "d/g", "d/h0", "untouched"} {
			os.Chtimes(filepath.Join(h, rel), past, past)
		}
	})
	ctx := context.Background()
	for _, dir := range []string{"", "d"} {
		if err := r.s.EnsurePopulated(dir); err != nil {
			t.Fatal(err)
		}
	}
	for _, rel := range []string{"f", "d/g", "d/h0", "untouched"} {
		if got := readVia(t, r.s, rel); got != old {
			t.Fatalf("first read of %s: %q", rel, got)
		}
	}
	if _, err := os.Stat(writersOpenFlag(filepath.Join(r.base, "tree"))); err == nil {
		t.Fatal("the flag of cached writers is up before any writer")
	}

	fromHost := r.s.ServesFromHost()
	if fromHost {
		w, err := r.s.Open(ctx, "f", unix.O_WRONLY, relF)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.ServeFromHost(); err != nil {
			t.Fatal(err)
		}
		writeHostHalf(t, r, w, "f", written, 0)
	} else {
		t.Log("the test folder's file system is not one cached writers are served from the host on: f left out")
	}
	g, err := r.s.Open(ctx, "d/g", unix.O_RDWR, func() (string, bool) { return "d/g", true })
	if err != nil {
		t.Fatal(err)
	}
	writeHostHalf(t, r, g, "d/g", written, 0)

	rel := "d/h0"
	h, err := r.s.Open(ctx, "d/h0", unix.O_RDWR, func() (string, bool) { return rel, true })
	if err != nil {
		t.Fatal(err)
	}
	if err := r.s.Rename(ctx, "d/h0", "d/h", 0); err != nil {
		t.Fatal(err)
	}
	rel = "d/h"
	writeHostHalf(t, r, h, "d/h", written, 0)

	// Made by the container (Create), written whole, then a write cut.
	n, err := r.s.Create(ctx, "d/n", unix.O_RDWR, 0o644, Owner{Uid: os.Getuid(), Gid: os.Getgid()}, func() (string, bool) { return "d/n", true })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.WriteAt(ctx, []byte(old), 0); err != nil {
		t.Fatal(err)
	}
	writeHostHalf(t, r, n, "d/n", written, 0)
	if _, err := os.Stat(writersOpenFlag(filepath.Join(r.base, "tree"))); err != nil {
		t.Fatalf("the flag of cached writers with three open: %v", err)
	}

	r.kill(t)
	check := []string{"d/g", "d/h", "d/n"}
	if fromHost {
		check = append(check, "f")
	}
	for _, rel := range check {
		if got := readVia(t, r.s, rel); got != want {
			t.Errorf("the store's %s after the next Open: %q, want %q", rel, got, want)
		}
	}
	if got := readVia(t, r.s, "untouched"); got != old {
		t.Errorf("untouched after the next Open: %q", got)
	}
	if r.s.IsStub("untouched") {
		t.Error("a file no writer had open was made a stub again at the next Open: only those a writer had open are")
	}
	if _, err := os.Stat(writersOpenFlag(filepath.Join(r.base, "tree"))); err == nil {
		t.Error("the flag of cached writers is still up once the next Open fetched every file again")
	}
}

// A cached writer's store file keeps the writer's base while any writer
// has it open (a release of one of two leaves it), and takes the host's at
// the last writer's release; a clean Close lowers the flag that made the
// next Open look. Without the count of writers at release: "base with one
// of two writers released: ..., want the writer's".
func TestACachedWritersReleaseGivesBackTheHostsBase(t *testing.T) {
	r := newStoreRig(t, consistency.Cached, writeback.Options{}, func(h string) {
		os.WriteFile(filepath.Join(h, "f"), []byte("host"), 0o644)
	})
	ctx := context.Background()
	if err := r.s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	var ws []*File
	for range 2 {
		w, err := r.s.Open(ctx, "f", unix.O_RDWR, relF)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteAt(ctx, []byte("more"), 4); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	if b, ok := r.s.Base("f"); !ok || b != writerBase {
		t.Fatalf("base with two writers open: %v %v, want the writer's (%v)", b, ok, writerBase)
	}
	if err := ws[0].Release(); err != nil {
		t.Fatal(err)
	}
	if b, ok := r.s.Base("f"); !ok || b != writerBase {
		t.Fatalf("base with one of two writers released: %v %v, want the writer's (%v)", b, ok, writerBase)
	}
	if err := ws[1].Release(); err != nil {
		t.Fatal(err)
	}
	hst, err := os.Lstat(filepath.Join(r.host, "f"))
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	unix.Lstat(filepath.Join(r.host, "f"), &st)
	if b, ok := r.s.Base("f"); !ok || !b.Matches(&st) {
		t.Fatalf("base with both writers released: %v %v, want the host's (size %d)", b, ok, hst.Size())
	}
	flag := writersOpenFlag(filepath.Join(r.base, "tree"))
	if _, err := os.Stat(flag); err != nil {
		t.Fatalf("the flag of cached writers after writers in this run: %v", err)
	}
	if err := r.s.Close(); err != nil {
		t.Fatal(err)
	}
	r.s = nil
	if _, err := os.Stat(flag); err == nil {
		t.Fatal("the flag of cached writers is still up after a clean Close")
	}
}

// A file renamed while a cached writer has it open is busy under its new
// name (the host refresh leaves it alone): it holds the writer's base,
// which matches no host file, and bringing the host in would change it
// under the writer. Busy knew open files by name only, but for linked
// ones: "busy under the new name false".
func TestARenamedCachedWriterIsBusyUnderItsNewName(t *testing.T) {
	s := openTestStore(t, consistency.Cached, func(h string) {
		os.WriteFile(filepath.Join(h, "f"), []byte("host"), 0o644)
	})
	ctx := context.Background()
	if err := s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	rel := "f"
	w, err := s.Open(ctx, "f", unix.O_WRONLY, func() (string, bool) { return rel, true })
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Rename(ctx, "f", "g", 0); err != nil {
		t.Fatal(err)
	}
	rel = "g"
	if !s.Busy("g") {
		t.Fatal("busy under the new name false, with the writer open")
	}
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	if s.Busy("g") {
		t.Fatal("busy after the writer's release")
	}
}

// The test above over a real sshfs share, for a file with three names: the
// share shows each name as a file of its own and keeps each one's size for
// a while (20 s), so a write through one name leaves the others' sizes
// from before it. The next Open finds the writer's base under the first
// name, a, looks at the host past the caches through it, and must fetch
// the content through it then and there: left a stub, the content came
// from a later open through b, whose size on the share was the old one,
// and the fetch read the file short: "the store's b after the next Open:
// "first", want "first, and more through c"".
func TestD4_C3_ALinkedFileAKilledWriterLeftOnAShareIsFetchedThroughTheNameLookedAt(t *testing.T) {
	base := t.TempDir()
	share := testshare.SSHFS(t, base)
	r := &storeRig{base: base, host: share.Mount, state: consistency.Cached}
	r.start(t)
	ctx := context.Background()
	c, err := r.s.Create(ctx, "a", unix.O_RDWR, 0o644, Owner{Uid: os.Getuid(), Gid: os.Getgid()}, relF)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteAt(ctx, []byte("first"), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"b", "c"} {
		if err := r.s.Link(ctx, "a", name); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a", "b", "c"} { // the share keeps each name's size
		if fi, err := os.Stat(filepath.Join(r.host, name)); err != nil || fi.Size() != 5 {
			t.Fatalf("the share's %s: %v, %v", name, fi, err)
		}
	}
	want := "first, and more through c"
	w, err := r.s.Open(ctx, "c", unix.O_RDWR, func() (string, bool) { return "c", true })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(ctx, []byte(want[5:]), 5); err != nil {
		t.Fatal(err)
	}
	if err := w.FlushHost(); err != nil { // on the server
		t.Fatal(err)
	}
	r.kill(t)
	for _, name := range []string{"b", "a", "c"} {
		if got := readVia(t, r.s, name); got != want {
			t.Errorf("the store's %s after the next Open: %q, want %q", name, got, want)
		}
	}
}

// A delegated store writing through (rules C4, D5) has writers with a host
// half too, but its copy is the container's: a writer's base is for
// cached only. Given one, a writer a kill left open made the file's next
// writeback take the host file for a host edit and keep it aside (D7), a
// conflict copy of the container's own file: "base with a delegated
// writer open while writing through: 100000 -1 -1".
func TestD5_ADelegatedWriterWritingThroughKeepsTheHostsBase(t *testing.T) {
	r := newStoreRig(t, consistency.Delegated, writeback.Options{}, func(h string) {
		os.WriteFile(filepath.Join(h, "f"), []byte("host"), 0o644)
	})
	ctx := context.Background()
	if err := r.s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	if err := r.s.SetWriteThrough(ctx, true); err != nil {
		t.Fatal(err)
	}
	w, err := r.s.Open(ctx, "f", unix.O_RDWR, relF)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release()
	if !w.WritesThrough() {
		t.Fatal("the writer has no host half while the store writes through")
	}
	var hst unix.Stat_t
	if err := unix.Lstat(filepath.Join(r.host, "f"), &hst); err != nil {
		t.Fatal(err)
	}
	if b, ok := r.s.Base("f"); !ok || !b.Matches(&hst) {
		t.Fatalf("base with a delegated writer open while writing through: %v %v, want the host's", b, ok)
	}
}

// BenchmarkOpenAfterAKilledWriter is the start of a cached store of 10,000
// files (100 directories of 100, all populated) that finds the flag a
// killed run's writer left: the walk of restubHostWritten alone (a listing
// per directory, a getxattr per file; no file with a writer's base),
// against the clean start beside it (BenchmarkOpenAfterACleanStop): what a
// kill adds to the next start.
func BenchmarkOpenAfterAKilledWriter(b *testing.B) { benchmarkOpenAfter(b, true) }

// BenchmarkOpenAfterACleanStop: see BenchmarkOpenAfterAKilledWriter.
func BenchmarkOpenAfterACleanStop(b *testing.B) { benchmarkOpenAfter(b, false) }

func benchmarkOpenAfter(b *testing.B, killed bool) {
	base := b.TempDir()
	host := filepath.Join(base, "host")
	for d := range 100 {
		dir := filepath.Join(host, "d"+strconv.Itoa(d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(f)), []byte("x"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	root, err := hostpath.Open(host)
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	cfg := Config{Host: root, Tree: filepath.Join(base, "tree"), State: consistency.Cached}
	s, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.EnsurePopulated(""); err != nil {
		b.Fatal(err)
	}
	for d := range 100 {
		if err := s.EnsurePopulated("d" + strconv.Itoa(d)); err != nil {
			b.Fatal(err)
		}
	}
	s.Close()
	for b.Loop() {
		b.StopTimer()
		if killed {
			if err := os.WriteFile(writersOpenFlag(cfg.Tree), nil, 0o600); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		s, err := Open(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.Close()
		b.StartTimer()
	}
}

// A file the start cannot fetch again (the share refuses or is gone) keeps
// the writer's base, and the flag stays up through a clean stop, so that
// the next start tries again: lowered at the clean Close, the flag was gone
// and the copy was served old until a sweep of the host happened to look
// ("the flag is down after a clean stop with a file not fetched again").
func TestD4_C3_AFileTheStartCouldNotFetchIsTriedAgainAtTheNext(t *testing.T) {
	r := newStoreRig(t, consistency.Cached, writeback.Options{}, func(h string) {
		os.WriteFile(filepath.Join(h, "f"), []byte("old content"), 0o644)
	})
	ctx := context.Background()
	if err := r.s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	if got := readVia(t, r.s, "f"); got != "old content" {
		t.Fatalf("first read: %q", got)
	}
	w, err := r.s.Open(ctx, "f", unix.O_RDWR, relF)
	if err != nil {
		t.Fatal(err)
	}
	writeHostHalf(t, r, w, "f", "new", 0)
	testHookRestubFromHost = func(string, error) error { return unix.EIO }
	t.Cleanup(func() { testHookRestubFromHost = nil })
	r.kill(t)
	testHookRestubFromHost = nil
	flag := writersOpenFlag(filepath.Join(r.base, "tree"))
	if _, err := os.Stat(flag); err != nil {
		t.Fatalf("the flag after a start that could not fetch f: %v", err)
	}
	if err := r.s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(flag); err != nil {
		t.Fatalf("the flag is down after a clean stop with a file not fetched again: %v", err)
	}
	r.open(t)
	if got := readVia(t, r.s, "f"); got != "new content" {
		t.Errorf("f at the start after: %q, want %q", got, "new content")
	}
}
