package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/internal/testshare"
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

// storeOfThreeFiles opens a cached store over a host (returned) that has
// d/a, d/b and d/c, with d listed: three stubs.
func storeOfThreeFiles(t *testing.T) (*Store, string) {
	t.Helper()
	var host string
	s := openTestStore(t, consistency.Cached, func(h string) {
		host = h
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
	return s, host
}

// A container's open that has to fetch its file starts the read-ahead of
// the directory's other small files beside that fetch, not after it: a
// container reading a directory's files one after the other asks for the
// next while the first is still on its way from a slow share.
func TestAFetchForAnOpenStartsItsDirectorysReadAheadBesideIt(t *testing.T) {
	s, _ := storeOfThreeFiles(t)
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

// outageShare is a share (a go-fuse loopback) that can be taken away and
// brought back: while it is down every open of a file or a directory on it
// fails ENOTCONN, as on an sshfs mount whose server has gone.
type outageShare struct{ down atomic.Bool }

type outageNode struct {
	fs.LoopbackNode
	share *outageShare
}

func (n *outageNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.share.down.Load() {
		return nil, 0, syscall.ENOTCONN
	}
	return n.LoopbackNode.Open(ctx, flags)
}

func (n *outageNode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.share.down.Load() {
		return nil, 0, syscall.ENOTCONN
	}
	return n.LoopbackNode.OpendirHandle(ctx, flags)
}

// A read-ahead that failed because the share was gone starts again at the
// directory's next request once the share is back: each directory's
// read-ahead runs once, and one used up by the outage left that directory
// without any (each file then fetched at its own open, one round trip
// after the other) until 65,536 other directories had had theirs.
func TestAReadAheadTheShareFailedStartsAgainWhenItIsBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		// request is the container's request that starts the read-ahead.
		request func(s *Store) error
		// wantDone reports whether the read-ahead it starts is done.
		wantDone func(s *Store) bool
		what     string
		// failsWhileDown: the request itself needs the share (an open of a
		// stub does, a listing of a directory listed before does not).
		failsWhileDown bool
	}{{
		name:           "the other files of a directory a file was opened in",
		request:        func(s *Store) error { return s.fetchForOpen("d/a") },
		wantDone:       func(s *Store) bool { return !s.IsStub("d/b") && !s.IsStub("d/c") },
		what:           "d/b and d/c fetched",
		failsWhileDown: true,
	}, {
		name: "the subdirectories of a listed directory",
		request: func(s *Store) error {
			_, err := s.ReadDir("d")
			return err
		},
		wantDone: func(s *Store) bool { return s.IsPopulated("d/x") && s.IsPopulated("d/y") },
		what:     "d/x and d/y listed",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			backing := t.TempDir()
			share := new(outageShare)
			// Set before the store opens, so that it is unset only after
			// the store's read-ahead workers have stopped (cleanups run
			// last first).
			var mu sync.Mutex
			failed := 0
			testHookReadAhead = func(rel string, err error) {
				if err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
			t.Cleanup(func() { testHookReadAhead = nil })
			s := openTestStore(t, consistency.Cached, func(h string) {
				for _, dir := range []string{"d/x", "d/y"} {
					os.MkdirAll(filepath.Join(backing, dir), 0o755)
					os.WriteFile(filepath.Join(backing, dir, "f"), []byte("in "+dir), 0o644)
				}
				for _, name := range []string{"a", "b", "c"} {
					os.WriteFile(filepath.Join(backing, "d", name), []byte("content of "+name), 0o644)
				}
				testshare.Mount(t, h, backing, "outage-share", fs.Options{},
					func(rd *fs.LoopbackRoot, _ *syscall.Stat_t) fs.InodeEmbedder {
						return &outageNode{LoopbackNode: fs.LoopbackNode{RootData: rd}, share: share}
					})
			})
			for _, dir := range []string{"", "d"} {
				if err := s.EnsurePopulated(dir); err != nil {
					t.Fatal(err)
				}
			}
			// The share goes; the request and the read-ahead it starts
			// (the two other files, or the two subdirectories) fail.
			share.down.Store(true)
			if err := tc.request(s); (err != nil) != tc.failsWhileDown {
				t.Fatalf("set-up: the request while the share is gone: %v", err)
			}
			eventually(t, "the read-ahead's two failures while the share is gone", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return failed >= 2
			})
			if tc.wantDone(s) {
				t.Fatalf("set-up: %s while the share was gone", tc.what)
			}
			// Back: the same request starts the read-ahead again.
			share.down.Store(false)
			if err := tc.request(s); err != nil {
				t.Fatalf("the request once the share is back: %v", err)
			}
			eventually(t, tc.what+" after the share came back (the read-ahead the outage used up did not start again)",
				func() bool { return tc.wantDone(s) })
		})
	}
}

// eventually waits up to 5 s for cond, and fails the test naming what it
// waited for.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not %s within 5 s", what)
		}
	}
}

// A read-ahead that failed on a name the host no longer has is not started
// again: it would fail the same way each time, and each open that fetches in
// the directory would list it again for nothing.
func TestAReadAheadOfANameTheHostNoLongerHasIsNotStartedAgain(t *testing.T) {
	var mu sync.Mutex
	tries := 0 // read-ahead fetches of d/b
	testHookReadAhead = func(rel string, err error) {
		if rel == "d/b" {
			mu.Lock()
			tries++
			mu.Unlock()
		}
	}
	t.Cleanup(func() { testHookReadAhead = nil })
	s, host := storeOfThreeFiles(t)
	if err := os.Remove(filepath.Join(host, "d", "b")); err != nil {
		t.Fatal(err)
	}
	if err := s.fetchForOpen("d/a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "d/c fetched by the read-ahead", func() bool { return !s.IsStub("d/c") })
	eventually(t, "the read-ahead's fetch of d/b tried", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return tries >= 1
	})
	// The hook runs after the job has given its directory's key back, if it
	// does: the key must still be there, so that the next open that fetches
	// in d (of b, say, which the store still lists) starts nothing.
	p := s.prefetch
	p.mu.Lock()
	_, kept := p.done[siblingsKey("d")]
	p.mu.Unlock()
	if !kept {
		t.Fatal("the read-ahead of d was given back after a fetch of a name the host no longer has: the next open that fetches in d starts it again")
	}
}
