package control

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/driver"
	"github.com/bindstate/bindstate/plugin/hostpath"
)

// fakeOpener makes fronts whose status and flush the test controls.
type fakeOpener struct {
	mu     sync.Mutex
	status map[string]driver.FrontStatus // by source
	// flush, if set, is what Flush does (it may change status, holding no lock).
	flush map[string]func(ctx context.Context) error // by source
}

func newFakeOpener() *fakeOpener {
	return &fakeOpener{status: map[string]driver.FrontStatus{}, flush: map[string]func(context.Context) error{}}
}

func (o *fakeOpener) Open(ctx context.Context, spec driver.FrontSpec) (driver.Front, error) {
	return &fakeFront{o: o, spec: spec}, nil
}

func (o *fakeOpener) Resume(ctx context.Context, spec driver.FrontSpec) error { return nil }

func (o *fakeOpener) setStatus(source string, f func(*driver.FrontStatus)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	st := o.status[source]
	f(&st)
	o.status[source] = st
}

func (o *fakeOpener) setFlush(source string, f func(ctx context.Context) error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.flush[source] = f
}

type fakeFront struct {
	o    *fakeOpener
	spec driver.FrontSpec
}

func (f *fakeFront) Mountpoint() string { return "/mnt/volumes/" + f.spec.Key }

func (f *fakeFront) Flush(ctx context.Context) error {
	f.o.mu.Lock()
	fn := f.o.flush[f.spec.Source]
	f.o.mu.Unlock()
	if fn == nil {
		return nil
	}
	return fn(ctx)
}

func (f *fakeFront) Status() driver.FrontStatus {
	f.o.mu.Lock()
	defer f.o.mu.Unlock()
	st := f.o.status[f.spec.Source]
	st.State, st.Source, st.Mountpoint = f.spec.State.String(), f.spec.Source, f.Mountpoint()
	return st
}

func (f *fakeFront) Close(ctx context.Context) error { return nil }

func (f *fakeFront) SetFloor(ctx context.Context, floor consistency.State) error { return nil }

// rig is a driver with a fake opener served on a real control socket.
type rig struct {
	op   *fakeOpener
	drv  *driver.Driver
	ring *Ring
	sock string
	cl   *Client
}

func newRig(t *testing.T) *rig {
	t.Helper()
	dir := t.TempDir()
	ring := NewRing(100)
	log := slog.New(ring.Handler(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})))
	op := newFakeOpener()
	drv, err := driver.New(driver.Config{
		StateDir: filepath.Join(dir, "state"),
		Opener:   op,
		Policy:   hostpath.Policy{AllowedRoots: []string{"/data"}},
		Log:      log,
	})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "run", "control.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	api := &Server{Driver: drv, Ring: ring, Log: log, Version: "1.2.3", ProgressEvery: 5 * time.Millisecond}
	srv := &http.Server{Handler: api.Handler()}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return &rig{op: op, drv: drv, ring: ring, sock: sock, cl: NewClient(sock)}
}

// volumes creates the test's volumes: d1 and d2 (delegated, one store), c
// (cached), k (consistent, never mounted); d1 and c mounted.
func (r *rig) volumes(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	for name, opts := range map[string]map[string]string{
		"d1": {"source": "/data/p", "state": "delegated"},
		"d2": {"source": "/data/p", "state": "delegated"},
		"c":  {"source": "/data/q", "state": "cached"},
		"k":  {"source": "/data/k"},
	} {
		if err := r.drv.Create(ctx, name, opts); err != nil {
			t.Fatal(err)
		}
	}
	p := &driver.Protocol{Driver: r.drv}
	for _, m := range []driver.MountRequest{{Name: "d1", ID: "bbbbbbbbbbbbbbbbbb"}, {Name: "d1", ID: "aaaa"}, {Name: "c", ID: "cccc"}} {
		if _, err := p.Mount(&m); err != nil {
			t.Fatal(err)
		}
	}
}
