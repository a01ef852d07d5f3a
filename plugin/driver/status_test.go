package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/writeback"
)

func TestStatus(t *testing.T) {
	op := newFakeOpener()
	op.status = FrontStatus{Dirty: 3, DirtyBytes: 300, Failed: 1, FailedPaths: []string{"a/b"}, LastError: "EACCES"}
	d := newTestDriver(t, t.TempDir(), op)
	mustCreate(t, d, "d1", map[string]string{"source": "/data/p", "state": "delegated"})
	mustCreate(t, d, "d2", map[string]string{"source": "/data/p", "state": "delegated"})
	mustCreate(t, d, "c", map[string]string{"source": "/data/q", "state": "cached"})
	mustMount(t, d, "d1", "m2")
	mustMount(t, d, "d1", "m1")

	st, err := d.Status(t.Context(), "d1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Name != "d1" || st.State != "delegated" || st.Source != "/data/p" || st.Key != key("/data/p", "delegated") ||
		!slices.Equal(st.MountIDs, []string{"m1", "m2"}) || st.Front == nil || st.Front.Dirty != 3 || st.Mountpoint == "" || st.Background {
		t.Fatalf("status %+v front %+v", st, st.Front)
	}
	all := d.StatusAll(t.Context())
	if len(all) != 3 || all[0].Name != "c" || all[1].Name != "d1" || all[2].Name != "d2" {
		t.Fatalf("all %+v", all)
	}
	// d2 shares d1's store (D3): same front, no mount IDs of its own.
	if all[2].Front == nil || all[2].Key != st.Key || len(all[2].MountIDs) != 0 {
		t.Fatalf("d2 %+v", all[2])
	}
	if all[0].Front != nil || all[0].MountIDs == nil {
		t.Fatalf("unmounted c %+v", all[0])
	}
	if _, err := d.Status(t.Context(), "nope"); KindOf(err) != KindNotFound {
		t.Fatalf("unknown: %v", err)
	}
}

func TestFlushVolume(t *testing.T) {
	op := newFakeOpener()
	d := newTestDriver(t, t.TempDir(), op)
	mustCreate(t, d, "d", map[string]string{"source": "/data/p", "state": "delegated"})
	mustCreate(t, d, "c", map[string]string{"source": "/data/q", "state": "cached"})
	k := key("/data/p", "delegated")

	// Not mounted, no background store: nothing to wait for.
	if err := d.Flush(t.Context(), "d"); err != nil {
		t.Fatal(err)
	}
	mustMount(t, d, "d", "m1")
	mustMount(t, d, "c", "m1")
	if err := d.Flush(t.Context(), "d"); err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	if n := op.count("flush " + k); n != 1 {
		t.Fatalf("flushes of %s: %d; events %v", k, n, op.log())
	}
	if n := op.countPrefix("flush " + key("/data/q", "cached")); n != 0 {
		t.Fatalf("a cached volume was flushed: %v", op.log())
	}
	if err := d.Flush(t.Context(), "nope"); KindOf(err) != KindNotFound {
		t.Fatalf("unknown: %v", err)
	}

	// A failure names the volume and keeps the failed paths.
	op.mu.Lock()
	op.flush = func(ctx context.Context, key string) error {
		return &writeback.FlushError{Failed: map[string]error{"z": errors.New("EIO"), "a/b": errors.New("permission denied")}}
	}
	op.mu.Unlock()
	err := d.Flush(t.Context(), "d")
	if err == nil || !strings.Contains(err.Error(), `volume "d"`) || !strings.Contains(err.Error(), "/data/p") {
		t.Fatalf("flush error %v", err)
	}
	fp := FailedPaths(err, "/data/p")
	want := []FailedPath{{"/data/p/a/b", "permission denied"}, {"/data/p/z", "EIO"}}
	if !slices.Equal(fp, want) {
		t.Fatalf("failed paths %+v", fp)
	}
	if FailedPaths(errors.New("x"), "/") != nil || FailedPaths(nil, "/") != nil {
		t.Fatal("failed paths of a plain error")
	}
	c := d.Counters()
	if c.Flushes != 3 || c.FlushFailures != 1 {
		t.Fatalf("counters %+v", c)
	}
}

// The last Unmount during a Flush leaves the front open for the Flush, which
// closes it when it is over; a Mount meanwhile is not held up.
func TestFlushKeepsFrontOpen(t *testing.T) {
	op := newFakeOpener()
	d := newTestDriver(t, t.TempDir(), op)
	mustCreate(t, d, "d", map[string]string{"source": "/data/p", "state": "delegated"})
	mustCreate(t, d, "e", map[string]string{"source": "/data/r", "state": "delegated"})
	k := key("/data/p", "delegated")
	mustMount(t, d, "d", "m1")

	entered, release := make(chan struct{}, 1), make(chan struct{})
	op.mu.Lock()
	op.flush = func(ctx context.Context, key string) error {
		if key == k {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release
		}
		return nil
	}
	op.mu.Unlock()
	flushed := make(chan error, 1)
	go func() { flushed <- d.Flush(context.Background(), "d") }()
	<-entered

	// Another key mounts at once.
	mctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := d.Mount(mctx, "e", "m9"); err != nil {
		t.Fatal(err)
	}
	unmounted := make(chan error, 1)
	go func() { unmounted <- d.Unmount(context.Background(), "d", "m1") }()
	close(release)
	if err := <-unmounted; err != nil {
		t.Fatal(err)
	}
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if n := op.count("close " + k); n != 1 {
		t.Fatalf("closes: %d; events %v", n, op.log())
	}
	ev := op.log()
	last := -1
	for i, e := range ev {
		if e == "flush "+k {
			last = i
		}
	}
	if ci := slices.Index(ev, "close "+k); ci < last {
		t.Fatalf("front closed before a flush was over: %v", ev)
	}
	if st, _ := d.Status(t.Context(), "d"); st.Front != nil || st.Mountpoint != "" {
		t.Fatalf("front still open: %+v", st)
	}
}

// bgOpener is a fakeOpener whose stores keep writing back after unmount.
type bgOpener struct {
	*fakeOpener
	bgFlush func(key string) error
	flushed []string
}

func (o *bgOpener) BackgroundStatus(spec FrontSpec) (FrontStatus, bool) {
	return FrontStatus{State: spec.State.String(), Dirty: 7}, true
}

func (o *bgOpener) BackgroundFlush(ctx context.Context, spec FrontSpec) error {
	o.mu.Lock()
	o.flushed = append(o.flushed, spec.Key)
	o.mu.Unlock()
	return o.bgFlush(spec.Key)
}

func TestBackgroundStatusAndFlush(t *testing.T) {
	op := &bgOpener{fakeOpener: newFakeOpener(), bgFlush: func(key string) error { return fmt.Errorf("host gone") }}
	d := newTestDriver(t, t.TempDir(), op)
	mustCreate(t, d, "d", map[string]string{"source": "/data/p", "state": "delegated"})
	mustCreate(t, d, "c", map[string]string{"source": "/data/q", "state": "cached"})
	st, _ := d.Status(t.Context(), "d")
	if st.Front == nil || !st.Background || st.Front.Dirty != 7 {
		t.Fatalf("background status %+v", st)
	}
	if st, _ := d.Status(t.Context(), "c"); st.Front != nil {
		t.Fatalf("cached volume has no background store: %+v", st)
	}
	if err := d.Flush(t.Context(), "d"); err == nil || !strings.Contains(err.Error(), "host gone") {
		t.Fatalf("background flush: %v", err)
	}
	if len(op.flushed) != 1 || op.flushed[0] != key("/data/p", "delegated") {
		t.Fatalf("flushed %v", op.flushed)
	}
}
