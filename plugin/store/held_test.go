package store

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// old is a time no write makes: a store file given it shows whether a Put
// set the host file's times.
var old = time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)

// ageStoreFile gives the store's copy of rel the times old, beneath the
// store (as a write through it would leave other times).
func ageStoreFile(t *testing.T, s *Store, rel string) {
	t.Helper()
	if err := os.Chtimes(filepath.Join(s.Local().Path(), rel), old, old); err != nil {
		t.Fatal(err)
	}
}

func hostMtime(t *testing.T, host, rel string) time.Time {
	t.Helper()
	fi, err := os.Lstat(filepath.Join(host, rel))
	if err != nil {
		t.Fatal(err)
	}
	return fi.ModTime().UTC()
}

// Rule D2 for fdatasync: the content and size are on the host when it
// returns; the times, which fdatasync does not ask for, come with a later
// Put. A full fsync puts the times there too.
func TestD2_AnFdatasyncPutsTheContentNowAndTheTimesLater(t *testing.T) {
	ctx := context.Background()
	r := newLargeFileRig(t)

	r.write(t, 4096, bytes.Repeat([]byte("d"), 8192))
	ageStoreFile(t, r.s, "db")
	if err := r.f.SyncData(ctx); err != nil {
		t.Fatal(err)
	}
	r.hostMatches(t)
	if got := hostMtime(t, r.host, "db"); got.Equal(old) {
		t.Fatal("the fdatasync's Put set the times too (a round trip more per commit)")
	}
	if !r.s.IsDirty("db") {
		t.Fatal("after an fdatasync without the times the path is clean: its times would never reach the host")
	}
	// The later Put, which no fdatasync waits for, brings them.
	if err := r.s.Flush(ctx, "db"); err != nil {
		t.Fatal(err)
	}
	if got := hostMtime(t, r.host, "db"); !got.Equal(old) {
		t.Fatalf("host mtime %v after the writeback, want the container's %v", got, old)
	}
	if r.s.IsDirty("db") {
		t.Fatal("still dirty after the times reached the host")
	}

	// A full fsync: content and times at once.
	r.write(t, 100_000, []byte("fsync"))
	ageStoreFile(t, r.s, "db")
	r.sync(t)
	r.hostMatches(t)
	if got := hostMtime(t, r.host, "db"); !got.Equal(old) {
		t.Fatalf("host mtime %v after fsync, want the container's %v", got, old)
	}
}

// keptFile is the host descriptor s keeps for rel (nil: none).
func keptFile(s *Store, rel string) *os.File {
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	if h := s.held.files[rel]; h != nil {
		return h.f
	}
	return nil
}

// Rule D2, one commit after another: the Put of each writes through the
// host descriptor the last one kept open (no open and close per commit).
func TestD2_ACommitWritesThroughTheDescriptorTheLastCommitKept(t *testing.T) {
	r := newLargeFileRig(t)
	var kept *os.File
	for i := range 5 {
		r.write(t, int64(i*70_001), bytes.Repeat([]byte{byte('a' + i)}, 8192))
		if err := r.f.SyncData(context.Background()); err != nil {
			t.Fatal(err)
		}
		r.hostMatches(t)
		f := keptFile(r.s, "db")
		if f == nil {
			t.Fatalf("commit %d: no host descriptor kept", i)
		}
		if i > 0 && f != kept {
			t.Fatalf("commit %d: the host file was opened again", i)
		}
		kept = f
	}
}

// A host file replaced between two commits (renamed over, with the same
// size and times, so that its base still matches) is written at its path,
// not through the descriptor kept open on the file it replaced.
func TestD2_AHostFileReplacedBetweenCommitsGetsTheNextCommit(t *testing.T) {
	r := newLargeFileRig(t)
	r.write(t, 0, []byte("first"))
	r.sync(t)
	hostDB := filepath.Join(r.host, "db")
	fi, err := os.Stat(hostDB)
	if err != nil {
		t.Fatal(err)
	}
	repl := filepath.Join(r.host, "db.new")
	if err := os.WriteFile(repl, r.want, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(repl, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(repl, hostDB); err != nil {
		t.Fatal(err)
	}
	r.write(t, 200, []byte("second"))
	r.sync(t)
	r.hostMatches(t)
}

// Rule D7 with a kept descriptor: a host edit between two commits is kept
// aside, and the container's version is written at the path.
func TestD7_AHostEditBetweenCommitsIsKeptAsideNotWrittenOver(t *testing.T) {
	r := newLargeFileRig(t)
	r.write(t, 0, []byte("first"))
	r.sync(t)
	if r.s.held.count() != 1 {
		t.Fatal("no descriptor kept after the first commit")
	}
	hostDB := filepath.Join(r.host, "db")
	if err := os.WriteFile(hostDB, []byte("the host's own version"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.write(t, 200, []byte("second"))
	r.sync(t)
	r.hostMatches(t)
	copies := conflictCopies(t, r.host, "db")
	if len(copies) != 1 {
		t.Fatalf("conflict copies %v, want one", copies)
	}
	if got, err := os.ReadFile(filepath.Join(r.host, copies[0])); err != nil || string(got) != "the host's own version" {
		t.Fatalf("the copy kept aside has %q (%v)", got, err)
	}
}

// A file renamed in the container is written back under its new name, and
// the Put of the old name (its removal) closes what was kept for it.
func TestD2_ARenamedFilesKeptDescriptorIsClosed(t *testing.T) {
	ctx := context.Background()
	r := newLargeFileRig(t)
	r.write(t, 0, []byte("first"))
	r.sync(t)
	kept := keptFile(r.s, "db")
	if kept == nil {
		t.Fatal("no descriptor kept after the commit")
	}
	if err := r.s.Rename(ctx, "db", "db2", 0); err != nil {
		t.Fatal(err)
	}
	r.write(t, 300, []byte("after the rename"))
	if err := r.s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(r.host, "db2"))
	if err != nil || !bytes.Equal(got, r.want) {
		t.Fatalf("host db2: %d bytes, err %v; want the container's %d", len(got), err, len(r.want))
	}
	if _, err := os.Lstat(filepath.Join(r.host, "db")); !os.IsNotExist(err) {
		t.Fatalf("host db still there: %v", err)
	}
	if _, err := kept.Stat(); err == nil {
		t.Fatal("the descriptor kept for the old name is still open")
	}
}

// heldFiles closes what it keeps: the least recently kept past heldMax,
// everything at close (and whatever is kept after), and each after heldIdle.
func TestHeldFilesAreClosedWhenFullClosedOrIdle(t *testing.T) {
	dir := t.TempDir()
	open := func(name string) *os.File {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	isClosed := func(f *os.File) bool {
		_, err := f.Stat()
		return err != nil
	}
	var h heldFiles
	first := open("first")
	h.keep("first", first, 1)
	var rest []*os.File
	for i := range heldMax {
		f := open(fmt.Sprint("f", i))
		rest = append(rest, f)
		h.keep(fmt.Sprint("f", i), f, uint64(i+2))
	}
	if h.count() != heldMax || !isClosed(first) {
		t.Fatalf("kept %d (max %d), oldest closed: %v", h.count(), heldMax, isClosed(first))
	}
	// take hands one on; reuse checks it is open on the host's file.
	got := h.take("f0")
	if f := got.reuse(&unix.Stat_t{Ino: 99}); f != nil || !isClosed(rest[0]) {
		t.Fatal("a descriptor open on another inode was reused")
	}
	got = h.take("f1")
	if f := got.reuse(&unix.Stat_t{Ino: 3}); f != rest[1] {
		t.Fatal("the descriptor open on the host's file was not reused")
	}
	rest[1].Close()

	h.closeAll()
	for _, f := range rest[2:] {
		if !isClosed(f) {
			t.Fatal("a descriptor is open after closeAll")
		}
	}
	late := open("late")
	h.keep("late", late, 1)
	if h.count() != 0 || !isClosed(late) {
		t.Fatal("kept a descriptor after closeAll")
	}

	var idle heldFiles
	f := open("idle")
	idle.keep("idle", f, 1)
	deadline := time.Now().Add(10 * heldIdle)
	for idle.count() > 0 && time.Now().Before(deadline) {
		time.Sleep(heldIdle / 10)
	}
	if idle.count() != 0 || !isClosed(f) {
		t.Fatalf("a descriptor unused for %v is still open", 10*heldIdle)
	}
}
