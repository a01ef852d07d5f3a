package frontend

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/internal/testshare"
	"github.com/bindstate/bindstate/plugin/syncer"
)

// rules C5 and D6 while the share is gone: every look at the host fails,
// once an interval, for as long as it is gone. The refresher says the
// first failure, then at most once a minute that it goes on failing, and
// says when a look works again, with how many failed: not a record per
// look, which would bury the rest of the log. What the container sees
// stays as it was, and a host change made meanwhile arrives once the share
// is back.
func TestC5_D6_AShareGoneIsSaidOnceAndItsReturnWithTheLooksThatFailed(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			var share *testshare.Far
			backing := t.TempDir()
			r := newRescanRig(t, st, "1h", func(h string) {
				writeFile(t, filepath.Join(backing, "kept"), "from the host")
				share = testshare.MountFar(t, h, backing, 0, false)
			})
			if got := readFile(t, r.mntPath("kept")); got != "from the host" { // listed and read: watched
				t.Fatalf("set-up: %q", got)
			}
			out := &lockedBuffer{}
			f := r.front.(*storeFront)
			ref := syncer.NewRefresher(f.ost.st, f.mnt, f.mount, f.inUse, 5*time.Millisecond,
				slog.New(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug})))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { ref.Run(ctx); close(done) }()
			stop := func() { cancel(); <-done }
			defer stop()
			looksAfter := func(n int) int { return len(out.records(t, "host refresh")) - n }
			waitFor(t, "a first look at the host", func() bool { return looksAfter(0) > 0 })

			share.SetGone(true)
			waitFor(t, "a failed look", func() bool { return len(out.records(t, "host refresh failed")) > 0 })
			failedAt := len(out.records(t, "host refresh"))
			waitFor(t, "20 more looks at the gone share", func() bool { return looksAfter(failedAt) >= 20 })
			if n := len(out.records(t, "host refresh failed")); n != 1 {
				t.Fatalf("%d records %q; want the first failure said once", n, "host refresh failed")
			}
			if n := len(out.records(t, "host refresh still failing")); n != 0 {
				t.Fatalf("%d records %q within a minute; want none", n, "host refresh still failing")
			}
			if got := readFile(t, r.mntPath("kept")); got != "from the host" {
				t.Fatalf("the container reads %q while the share is gone", got)
			}

			writeFile(t, filepath.Join(backing, "new"), "made while the share was gone") // on the share's server
			share.SetGone(false)
			waitFor(t, "the record of the share's return", func() bool { return len(out.records(t, "host refresh works again")) > 0 })
			back := out.records(t, "host refresh works again")[0]
			if n, _ := back["failed_looks"].(float64); n < 20 || back["failing_for"] == nil {
				t.Fatalf("the return says %v; want failed_looks >= 20 and failing_for", back)
			}
			if n := len(out.records(t, "host refresh works again")); n != 1 {
				t.Fatalf("%d records of the return; want 1", n)
			}
			waitFor(t, "the host change made while the share was gone", func() bool {
				b, err := os.ReadFile(r.mntPath("new"))
				return err == nil && string(b) == "made while the share was gone"
			})
		})
	}
}
