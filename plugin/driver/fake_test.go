package driver

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// fakeOpener records what the Driver asks of it, in one event log shared
// with its fronts ("open KEY", "flush KEY", "close KEY", "resume KEY",
// "floor KEY STATE").
type fakeOpener struct {
	mu      sync.Mutex
	events  []string
	fronts  map[string]*fakeFront // latest front per key
	openErr error                 // returned by Open if set
	// flush, if set, is what every front's Flush does.
	flush func(ctx context.Context, key string) error
	// setFloor, if set, is what every front's SetFloor returns.
	setFloor func(key string, floor consistency.State) error
	status   FrontStatus
}

func newFakeOpener() *fakeOpener { return &fakeOpener{fronts: make(map[string]*fakeFront)} }

func (o *fakeOpener) record(ev string) {
	o.mu.Lock()
	o.events = append(o.events, ev)
	o.mu.Unlock()
}

func (o *fakeOpener) Open(ctx context.Context, spec FrontSpec) (Front, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.openErr != nil {
		o.events = append(o.events, "open-failed "+spec.Key)
		return nil, o.openErr
	}
	if f := o.fronts[spec.Key]; f != nil && !f.closed {
		panic("Open of key " + spec.Key + " while its front is open")
	}
	o.events = append(o.events, "open "+spec.Key)
	f := &fakeFront{o: o, spec: spec}
	o.fronts[spec.Key] = f
	return f, nil
}

func (o *fakeOpener) Resume(ctx context.Context, spec FrontSpec) error {
	o.record("resume " + spec.Key)
	return nil
}

// count returns how many events are exactly ev.
func (o *fakeOpener) count(ev string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, e := range o.events {
		if e == ev {
			n++
		}
	}
	return n
}

// countPrefix returns how many events start with p.
func (o *fakeOpener) countPrefix(p string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, e := range o.events {
		if strings.HasPrefix(e, p) {
			n++
		}
	}
	return n
}

func (o *fakeOpener) log() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.events)
}

type fakeFront struct {
	o      *fakeOpener
	spec   FrontSpec
	closed bool // fakeOpener.mu
}

func (f *fakeFront) Mountpoint() string { return "/mnt/volumes/" + f.spec.Key }

func (f *fakeFront) Flush(ctx context.Context) error {
	f.o.mu.Lock()
	closed := f.closed
	hook := f.o.flush
	f.o.mu.Unlock()
	if closed {
		return fmt.Errorf("flush of closed front %s", f.spec.Key)
	}
	f.o.record("flush " + f.spec.Key)
	if hook != nil {
		return hook(ctx, f.spec.Key)
	}
	return nil
}

func (f *fakeFront) SetFloor(ctx context.Context, floor consistency.State) error {
	f.o.mu.Lock()
	closed := f.closed
	hook := f.o.setFloor
	f.o.mu.Unlock()
	if closed {
		panic("SetFloor of closed front " + f.spec.Key)
	}
	f.o.record("floor " + f.spec.Key + " " + floor.String())
	if hook != nil {
		return hook(f.spec.Key, floor)
	}
	return nil
}

func (f *fakeFront) Status() FrontStatus {
	f.o.mu.Lock()
	defer f.o.mu.Unlock()
	if f.closed {
		panic("Status of a closed front")
	}
	st := f.o.status
	st.State, st.Source, st.Mountpoint = f.spec.State.String(), f.spec.Source, f.Mountpoint()
	return st
}

func (f *fakeFront) Close(ctx context.Context) error {
	f.o.mu.Lock()
	defer f.o.mu.Unlock()
	if f.closed {
		panic("double Close of " + f.spec.Key)
	}
	f.closed = true
	f.o.events = append(f.o.events, "close "+f.spec.Key)
	return nil
}

// testPolicy stands in for hostpath.Policy.Check.
func testPolicy(source string) error {
	if strings.HasPrefix(source, "/etc") {
		return fmt.Errorf("source %q is outside the allowed roots (/data, /tmp)", source)
	}
	return nil
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func newTestDriver(t *testing.T, dir string, op Opener, mods ...func(*Config)) *Driver {
	t.Helper()
	cfg := Config{StateDir: dir, Opener: op, Log: testLogger(t), UnmountFlushTimeout: 5 * time.Second}
	for _, m := range mods {
		m(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.check = testPolicy
	return d
}

func mustCreate(t *testing.T, d *Driver, name string, opts map[string]string) {
	t.Helper()
	if err := d.Create(t.Context(), name, opts); err != nil {
		t.Fatalf("Create %s: %v", name, err)
	}
}

func mustMount(t *testing.T, d *Driver, name, id string) string {
	t.Helper()
	mp, err := d.Mount(t.Context(), name, id)
	if err != nil {
		t.Fatalf("Mount %s %s: %v", name, id, err)
	}
	return mp
}

func mustUnmount(t *testing.T, d *Driver, name, id string) {
	t.Helper()
	if err := d.Unmount(t.Context(), name, id); err != nil {
		t.Fatalf("Unmount %s %s: %v", name, id, err)
	}
}

func key(source, state string) string {
	o, err := parseOptions(map[string]string{OptSource: source, OptState: state}, nil)
	if err != nil {
		panic(err)
	}
	return o.key()
}
