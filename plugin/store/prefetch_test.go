package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/hostpath"
)

func openTestStore(t *testing.T, st consistency.State, setup func(host string)) *Store {
	t.Helper()
	base := t.TempDir()
	host := filepath.Join(base, "host")
	if err := os.Mkdir(host, 0o755); err != nil {
		t.Fatal(err)
	}
	setup(host)
	root, err := hostpath.Open(host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	s, err := Open(Config{Host: root, Tree: filepath.Join(base, "tree"), Journal: filepath.Join(base, "journal"), State: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
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
