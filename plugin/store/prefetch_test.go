package store

import (
	"os"
	"path/filepath"
	"strings"
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
