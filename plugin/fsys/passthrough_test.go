package fsys

import (
	"bytes"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// Rules D2, C3: an open made while the bridge is still releasing a
// passthrough writer of the same file (after handle.Release, before the
// bridge drops the backing file) is served by the kernel by passthrough,
// whatever the plugin decides, so the plugin must count it as such.
// Delegated: its writes are journaled and every fsync puts them on the
// host. (Seen in CI, once: TestD2_FsyncOfALargeFileWrittenInPlacesReachesHost,
// "fsync 1: the host file differs".) Cached: the kernel writes the host
// file, and the store copy must not keep what was there before. Without
// afterBridgeFS: "fsync 1 returned, the host file lacks the write" (delegated)
// and "a read after the writers' release: the file lacks the writes" (cached).
func TestD2_C3_AnOpenRacingAPassthroughWritersReleaseIsServedAsOne(t *testing.T) {
	// Set before the mounts (their server goroutines read it), armed later.
	var armed atomic.Pointer[func()]
	testHookReleased = func() {
		if f := armed.Swap(nil); f != nil {
			(*f)()
		}
	}
	t.Cleanup(func() { testHookReleased = nil })
	for _, state := range []consistency.State{consistency.Cached, consistency.Delegated} {
		t.Run(state.String(), func(t *testing.T) {
			st := newOneFileStore(t, state, "old content")
			m := mountStore(t, st)
			mnt := filepath.Join(m.Mountpoint(), "f")
			host := filepath.Join(st.Host().Path(), "f")

			want := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
			w, err := os.OpenFile(mnt, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(want); err != nil {
				t.Fatal(err)
			}
			if n := st.Stats().Ops["write"]; n != 0 {
				w.Close()
				t.Skipf("the writer was not served by passthrough (%d WRITEs): nothing to race", n)
			}
			// The writer's RELEASE waits in the gap until the open below
			// has written, fsynced and closed.
			inGap, done := make(chan struct{}), make(chan struct{})
			hold := func() {
				close(inGap)
				select {
				case <-done:
				case <-time.After(20 * time.Second):
				}
			}
			armed.Store(&hold)
			w.Close()
			select {
			case <-inGap:
			case <-time.After(10 * time.Second):
				t.Fatal("no RELEASE came in 10 s")
			}
			f, err := os.OpenFile(mnt, os.O_RDWR, 0)
			if err != nil {
				close(done)
				t.Fatal(err)
			}
			for i := range 2 {
				// The first fsync also writes back the writer's content
				// and leaves the path clean: only the journal has the
				// second write.
				off := 1000 + i*10000
				p := bytes.Repeat([]byte{byte('A' + i)}, 100)
				copy(want[off:], p)
				if _, err := f.WriteAt(p, int64(off)); err != nil {
					t.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					t.Fatalf("fsync %d: %v", i, err)
				}
				if b, err := os.ReadFile(host); err != nil || !bytes.Equal(b, want) {
					f.Close()
					close(done)
					t.Fatalf("fsync %d returned, the host file lacks the write (%v)", i, err)
				}
			}
			f.Close()
			close(done)
			if !waitReleases(t, st, 2) {
				t.FailNow()
			}
			if b, err := os.ReadFile(mnt); err != nil || !bytes.Equal(b, want) {
				t.Fatalf("a read after the writers' release: the file lacks the writes (%v)", err)
			}
		})
	}
}
