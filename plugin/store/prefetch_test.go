package store

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/writeback"
)

func openTestStore(t *testing.T, st consistency.State, setup func(host string)) *Store {
	t.Helper()
	return newStoreRig(t, st, writeback.Options{}, setup).s
}

// A truncation to zero (open with O_TRUNC) of a file whose content is being
// fetched (by the container's own read, or by read-ahead) waits for the
// fetch: otherwise the fetch would go on copying the host's content into the
// file after it was truncated, under what the container writes next.
func TestTruncateWaitsForAFetchInProgress(t *testing.T) {
	s := openTestStore(t, consistency.Cached, func(h string) {
		os.WriteFile(filepath.Join(h, "f"), []byte(strings.Repeat("h", 4096)), 0o644)
	})
	if err := s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	copied, finish := make(chan struct{}), make(chan struct{})
	testHookFetchCopied = func(string) { close(copied); <-finish }
	t.Cleanup(func() { testHookFetchCopied = nil })

	fetched := make(chan error, 1)
	go func() { fetched <- s.EnsureContent("f") }()
	<-copied
	truncated := make(chan error, 1)
	go func() { truncated <- s.prepareTruncate("f", 0) }()
	select {
	case err := <-truncated:
		t.Fatalf("the truncation went ahead during a fetch (err %v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(finish)
	if err := <-fetched; err != nil {
		t.Fatal(err)
	}
	if err := <-truncated; err != nil {
		t.Fatal(err)
	}
	if s.IsStub("f") {
		t.Fatal("still a stub")
	}
}

// The names of a linked file share one store copy: a fetch through one
// name while another name's fetch is under way waits for it and finds the
// content there, rather than copying again under it (truncating what the
// container wrote meanwhile) and failing when the stub mark is gone
// (ENODATA, which the container's open saw).
func TestC3_AFetchThroughAnotherNameOfALinkedFileWaitsForTheFirst(t *testing.T) {
	content := strings.Repeat("linked ", 1000)
	s := openTestStore(t, consistency.Cached, func(h string) {
		os.WriteFile(filepath.Join(h, "a"), []byte(content), 0o644)
		os.Link(filepath.Join(h, "a"), filepath.Join(h, "b"))
	})
	if err := s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	if sa, sb := lstat(t, filepath.Join(s.local.Path(), "a")), lstat(t, filepath.Join(s.local.Path(), "b")); sa.Ino != sb.Ino || !s.IsStub("b") {
		t.Fatalf("want a and b one stub in the store: inodes %d and %d, b a stub: %v", sa.Ino, sb.Ino, s.IsStub("b"))
	}
	other := make(chan error, 1)
	var once sync.Once
	testHookFetchCopied = func(string) {
		once.Do(func() {
			go func() { other <- s.EnsureContent("b") }()
			// Long enough for the other fetch to run whole if nothing
			// holds it back (it did, and then this one failed).
			select {
			case err := <-other:
				other <- err
			case <-time.After(200 * time.Millisecond):
			}
		})
	}
	t.Cleanup(func() { testHookFetchCopied = nil })
	if err := s.EnsureContent("a"); err != nil {
		t.Fatalf("fetch through a: %v", err)
	}
	if err := <-other; err != nil {
		t.Fatalf("fetch through b: %v", err)
	}
	for _, name := range []string{"a", "b"} {
		if s.IsStub(name) {
			t.Errorf("%s still a stub", name)
		}
		if b, err := os.ReadFile(filepath.Join(s.local.Path(), name)); err != nil || string(b) != content {
			t.Errorf("store copy through %s: %d bytes (%v), want the host's %d", name, len(b), err, len(content))
		}
	}
	if n := s.fetched.Load(); n != 1 {
		t.Errorf("fetched %d times, want once", n)
	}
}

// A container's open that has to fetch its file starts the read-ahead of
// the directory's other small files beside that fetch, not after it: a
// container reading a directory's files one after the other asks for the
// next while the first is still on its way from a slow share.
func TestAFetchForAnOpenStartsItsDirectorysReadAheadBesideIt(t *testing.T) {
	s := openTestStore(t, consistency.Cached, func(h string) {
		os.Mkdir(filepath.Join(h, "d"), 0o755)
		for _, name := range []string{"a", "b", "c"} {
			os.WriteFile(filepath.Join(h, "d", name), []byte("content of "+name), 0o644)
		}
	})
	for _, dir := range []string{"", "d"} {
		if err := s.EnsurePopulated(dir); err != nil {
			t.Fatal(err)
		}
	}
	copied, finish := make(chan struct{}), make(chan struct{})
	testHookFetchCopied = func(rel string) {
		if rel == "d/a" {
			close(copied)
			<-finish // a's fetch is held here until b and c are fetched, or the test gives up
		}
	}
	t.Cleanup(func() { testHookFetchCopied = nil })
	opened := make(chan error, 1)
	go func() { opened <- s.fetchForOpen("d/a") }()
	<-copied
	deadline := time.Now().Add(5 * time.Second)
	for s.IsStub("d/b") || s.IsStub("d/c") {
		if time.Now().After(deadline) {
			close(finish)
			<-opened
			t.Fatalf("b and c were not fetched while a's fetch was under way (stubs: b %v, c %v): the read-ahead waited for it",
				s.IsStub("d/b"), s.IsStub("d/c"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(finish)
	if err := <-opened; err != nil {
		t.Fatalf("the open's fetch of a: %v", err)
	}
	if s.IsStub("d/a") {
		t.Fatal("a is still a stub after its open")
	}
}
