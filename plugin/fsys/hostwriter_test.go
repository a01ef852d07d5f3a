package fsys

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// rule C3: an open that the store served from a whole store copy, and that
// a cached writer served from the host file then released before the open
// was counted (so it is not served from the host file too), reads what the
// writer wrote, not the store copy its release left a stub of. Without the
// second look (node.hostReleases) it read "old content" and zeros.
func TestC3_AnOpenRacingAHostWritersReleaseReadsItsWrites(t *testing.T) {
	st := newOneFileStore(t, consistency.Cached, "old content")
	// Set before the mount (its server goroutines read it), armed later.
	var armed atomic.Pointer[func()]
	testHookStoreOpened = func(string) {
		if f := armed.Swap(nil); f != nil {
			(*f)()
		}
	}
	t.Cleanup(func() { testHookStoreOpened = nil })
	m := mountStore(t, st)
	mnt := filepath.Join(m.Mountpoint(), "f")

	// The store copy is whole, and no open is counted any more.
	readReleased(t, st, mnt, "old content")
	w, err := os.OpenFile(mnt, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	const want = "NEW content and more"
	if _, err := w.WriteAt([]byte(want), 0); err != nil {
		t.Fatal(err)
	}
	if n := st.Stats().Ops["write"]; n != 0 {
		t.Fatalf("the writer was not served from the host (%d WRITEs)", n)
	}
	closeWriter := func() {
		// The reader's store open found the copy whole; now the writer
		// closes and is released before the reader's handle is made.
		w.Close()
		waitReleases(t, st, 2)
	}
	armed.Store(&closeWriter)
	if b, err := os.ReadFile(mnt); err != nil || string(b) != want {
		t.Fatalf("read racing the writer's release: %q %v, want %q", b, err, want)
	}
}
