package driver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/hostpath"
)

func TestCreateOptions(t *testing.T) {
	src := "/data/project"
	tests := []struct {
		name     string
		opts     map[string]string
		want     []string // substrings of the error; nil: no error
		state    consistency.State
		rescan   time.Duration
		readOnly bool
		kindErr  Kind
	}{
		{name: "minimal", opts: map[string]string{"source": src}, state: consistency.Default, rescan: time.Second},
		{name: "no options", opts: nil, want: []string{`option "source" is required`, "absolute host path", "-o source="}},
		{name: "empty source", opts: map[string]string{"source": ""}, want: []string{`option "source" is required`}},
		{name: "relative source", opts: map[string]string{"source": "data/x"},
			want: []string{`option "source" must be an absolute host path`, `got "data/x"`}},
		{name: "policy refuses", opts: map[string]string{"source": "/etc/ssl"},
			want: []string{`source "/etc/ssl" is outside the allowed roots`}},
		{name: "unknown option", opts: map[string]string{"source": src, "size": "1G"},
			want: []string{`unknown option "size"`, "valid options are source, state, consistency, rescan, readonly"}},
		{name: "bad state", opts: map[string]string{"source": src, "state": "fast"},
			want: []string{`option "state"`, `invalid state "fast"`, "consistent, default, cached, delegated"}},
		{name: "bad consistency", opts: map[string]string{"source": src, "consistency": "weak"},
			want: []string{`option "consistency"`, `invalid state "weak"`, "consistent, default, cached, delegated"}},
		{name: "aliases disagree", opts: map[string]string{"source": src, "state": "cached", "consistency": "delegated"},
			want: []string{`"state" and "consistency"`, `("cached" vs "delegated")`, "only one"}},
		{name: "aliases agree", opts: map[string]string{"source": src, "state": "cached", "consistency": "cached"},
			state: consistency.Cached, rescan: time.Second},
		{name: "alias alone", opts: map[string]string{"source": src, "consistency": "delegated"},
			state: consistency.Delegated, rescan: time.Second},
		{name: "each state", opts: map[string]string{"source": src, "state": "consistent"},
			state: consistency.Consistent, rescan: time.Second},
		{name: "rescan", opts: map[string]string{"source": src, "state": "cached", "rescan": "250ms"},
			state: consistency.Cached, rescan: 250 * time.Millisecond},
		{name: "rescan minimum", opts: map[string]string{"source": src, "rescan": "100ms"},
			state: consistency.Default, rescan: 100 * time.Millisecond},
		{name: "rescan not a duration", opts: map[string]string{"source": src, "rescan": "often"},
			want: []string{`option "rescan"`, `"often" is not a duration`, "at least 100ms", "e.g. 1s"}},
		{name: "rescan unitless", opts: map[string]string{"source": src, "rescan": "5"},
			want: []string{`option "rescan"`, `"5" is not a duration`}},
		{name: "rescan too short", opts: map[string]string{"source": src, "rescan": "50ms"},
			want: []string{`option "rescan"`, "50ms is too short", "minimum is 100ms"}},
		{name: "readonly", opts: map[string]string{"source": src, "state": "cached", "readonly": "true"},
			state: consistency.Cached, rescan: time.Second, readOnly: true},
		{name: "readonly false", opts: map[string]string{"source": src, "state": "cached", "readonly": "false"},
			state: consistency.Cached, rescan: time.Second},
		{name: "readonly not a boolean", opts: map[string]string{"source": src, "readonly": "ro"},
			want: []string{`option "readonly"`, `"ro" is not a boolean`, "use true", "or false"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newTestDriver(t, t.TempDir(), newFakeOpener())
			err := d.Create(t.Context(), "v", tc.opts)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				v := d.vols["v"]
				if v.opts.State != tc.state || v.opts.Rescan != tc.rescan || v.opts.ReadOnly != tc.readOnly {
					t.Fatalf("parsed %+v, want state %v rescan %v readonly %v", v.opts, tc.state, tc.rescan, tc.readOnly)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if KindOf(err) != KindInvalid || !IsInvalid(err) {
				t.Errorf("kind %v, want invalid parameter", KindOf(err))
			}
			if _, err := d.Get(t.Context(), "v"); KindOf(err) != KindNotFound {
				t.Errorf("refused volume exists anyway: %v", err)
			}
		})
	}
}

// With the real hostpath.Policy.
func TestCreateRealPolicy(t *testing.T) {
	p := hostpath.Policy{AllowedRoots: []string{"/data"}, Denied: []string{"/data/state"}}
	d, err := New(Config{StateDir: t.TempDir(), Opener: newFakeOpener(), Policy: p, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Create(t.Context(), "ok", map[string]string{"source": "/data/x"}); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{"/etc", "/data/state/x", "/data/../etc"} {
		if err := d.Create(t.Context(), "bad", map[string]string{"source": src}); !IsInvalid(err) {
			t.Errorf("source %s: %v, want an invalid-parameter error", src, err)
		}
	}
}

func TestCreateIdempotent(t *testing.T) {
	d := newTestDriver(t, t.TempDir(), newFakeOpener())
	opts := map[string]string{"source": "/data/p", "state": "cached"}
	mustCreate(t, d, "v", opts)
	mustCreate(t, d, "v", opts)
	// The same options spelled differently are the same volume.
	mustCreate(t, d, "v", map[string]string{"source": "/data/p", "consistency": "cached", "rescan": "1s"})

	err := d.Create(t.Context(), "v", map[string]string{"source": "/data/p", "state": "delegated"})
	if KindOf(err) != KindConflict {
		t.Fatalf("create with other options: %v, want a conflict", err)
	}
	for _, w := range []string{`volume "v" already exists`, "source=/data/p state=cached rescan=1s", "remove it first"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
	// default and consistent are served alike but are different options.
	mustCreate(t, d, "w", map[string]string{"source": "/data/p"})
	if err := d.Create(t.Context(), "w", map[string]string{"source": "/data/p", "state": "consistent"}); KindOf(err) != KindConflict {
		t.Fatalf("default vs consistent: %v", err)
	}
	if err := d.Create(t.Context(), "", map[string]string{"source": "/data/p"}); !IsInvalid(err) {
		t.Fatalf("empty name: %v", err)
	}
	vs, _ := d.List(t.Context())
	if len(vs) != 2 {
		t.Fatalf("%d volumes, want 2", len(vs))
	}
}

func TestKey(t *testing.T) {
	k := frontKey("/data/p", consistency.Cached, false)
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(k) {
		t.Fatalf("key %q", k)
	}
	if key("/data/p", "cached") != k || key("/data/p", "") != key("/data/p", "consistent") {
		t.Fatal("keys differ for the same (source, served state)")
	}
	if key("/data/p", "cached") == key("/data/p", "delegated") || key("/data/p", "cached") == key("/data/q", "cached") {
		t.Fatal("keys collide")
	}
	// A read-only volume is served otherwise (no OPEN): its own front. A
	// writable one keeps the key it had before read-only volumes existed
	// (its store is found again after an upgrade).
	if frontKey("/data/p", consistency.Cached, true) == k {
		t.Fatal("a read-only volume shares the writable one's front")
	}
	if want := sha256.Sum256([]byte("/data/p\x00cached")); k != hex.EncodeToString(want[:])[:16] {
		t.Fatalf("a writable volume's key changed: %q", k)
	}
	// A NUL separates source and state: no ambiguity by concatenation.
	if frontKey("/a", consistency.Cached, false) == frontKey("/acached", consistency.State(0), false) {
		t.Fatal("ambiguous key")
	}
}

// Rule D3: volumes with the same source and state share one front.
func TestD3_SameSourceAndStateShareOneFront(t *testing.T) {
	op := newFakeOpener()
	d := newTestDriver(t, t.TempDir(), op)
	mustCreate(t, d, "a", map[string]string{"source": "/data/p", "state": "delegated"})
	mustCreate(t, d, "b", map[string]string{"source": "/data/p", "consistency": "delegated", "rescan": "5s"})
	mustCreate(t, d, "other-state", map[string]string{"source": "/data/p", "state": "cached"})
	mustCreate(t, d, "dflt", map[string]string{"source": "/data/p"})
	mustCreate(t, d, "cons", map[string]string{"source": "/data/p", "state": "consistent"})

	k := key("/data/p", "delegated")
	mpA := mustMount(t, d, "a", "c1")
	mpB := mustMount(t, d, "b", "c2")
	if mpA != mpB || op.count("open "+k) != 1 {
		t.Fatalf("mountpoints %s %s, %d opens; want one shared front", mpA, mpB, op.count("open "+k))
	}
	if mp := mustMount(t, d, "other-state", "c3"); mp == mpA {
		t.Fatal("cached shares the delegated front")
	}
	// default is served as consistent: the same front.
	kc := key("/data/p", "consistent")
	if mustMount(t, d, "dflt", "c4") != mustMount(t, d, "cons", "c5") || op.count("open "+kc) != 1 {
		t.Fatal("default and consistent of one source do not share a front")
	}

	mustUnmount(t, d, "a", "c1")
	if op.count("close "+k) != 0 {
		t.Fatal("front closed while volume b still mounts it")
	}
	if p, _ := d.Path(t.Context(), "b"); p != mpA {
		t.Fatalf("Path(b) = %q", p)
	}
	mustUnmount(t, d, "b", "c2")
	if op.count("close "+k) != 1 {
		t.Fatal("front not closed after the last mount of its key")
	}
	// A later mount opens it again.
	mustMount(t, d, "b", "c6")
	if op.count("open "+k) != 2 {
		t.Fatal("no reopen")
	}
}

// Mount IDs are a set (moby#46508): a repeated Mount of one ID does not
// count twice, an unknown ID's Unmount does nothing.
// Docker mounts a running container's volume again with the same ID for
// `docker cp` and unmounts it after the copy: that must not end the
// container's own mount (moby issue 46508 is what a bare counter over all
// IDs does; a set of IDs fails the other way). Mounts count per ID.
func TestMountIDsCountedPerID(t *testing.T) {
	op := newFakeOpener()
	dir := t.TempDir()
	d := newTestDriver(t, dir, op)
	mustCreate(t, d, "v", map[string]string{"source": "/data/p", "state": "cached"})
	k := key("/data/p", "cached")

	mp1 := mustMount(t, d, "v", "c1")
	mp2 := mustMount(t, d, "v", "c1") // docker cp mounts again with the same ID
	if mp1 != mp2 || op.count("open "+k) != 1 {
		t.Fatal("second mount of the same id reopened the front")
	}
	mustUnmount(t, d, "v", "c1") // the copy ends
	if op.count("close "+k) != 0 {
		t.Fatal("docker cp's unmount closed the running container's mount")
	}
	mustMount(t, d, "v", "c2")
	mustUnmount(t, d, "v", "unknown")

	// The counts survive a restart of the plugin.
	op = newFakeOpener() // a new process
	d2 := newTestDriver(t, dir, op)
	if op.count("open "+k) != 1 {
		t.Fatalf("restart did not reopen the mounted volume: %v", op.log())
	}
	mustUnmount(t, d2, "v", "c1") // the container stops
	if op.count("close "+k) != 0 {
		t.Fatal("closed with c2 still active")
	}
	mustUnmount(t, d2, "v", "c1") // again: nothing
	if op.count("close "+k) != 0 {
		t.Fatal("a repeated unmount of c1 released c2's mount")
	}
	mustUnmount(t, d2, "v", "c2")
	if op.count("close "+k) != 1 {
		t.Fatal("not closed after the last id")
	}
	mustUnmount(t, d2, "v", "c2")
	if op.count("close "+k) != 1 {
		t.Fatal("closed twice")
	}

	if _, err := d2.Mount(t.Context(), "nope", "c1"); KindOf(err) != KindNotFound || !strings.Contains(err.Error(), `no such volume "nope"`) {
		t.Fatalf("mount of unknown volume: %v", err)
	}
	if err := d2.Unmount(t.Context(), "nope", "c1"); KindOf(err) != KindNotFound {
		t.Fatalf("unmount of unknown volume: %v", err)
	}
}

func TestMountOpenFailure(t *testing.T) {
	op := newFakeOpener()
	op.openErr = errors.New("fuse: device busy")
	d := newTestDriver(t, t.TempDir(), op)
	mustCreate(t, d, "v", map[string]string{"source": "/data/p", "state": "cached"})
	_, err := d.Mount(t.Context(), "v", "c1")
	if err == nil || !strings.Contains(err.Error(), `mount volume "v"`) || !strings.Contains(err.Error(), "device busy") || IsInvalid(err) {
		t.Fatalf("Mount: %v", err)
	}
	if info, _ := d.Get(t.Context(), "v"); info.Status["mounts"] != 0 {
		t.Fatal("failed mount left an id")
	}
	mustCreate(t, d, "v", map[string]string{"source": "/data/p", "state": "cached"})
	if err := d.Remove(t.Context(), "v"); err != nil {
		t.Fatal(err)
	}
}

// Rule D4: a delegated Unmount writes everything back before it returns,
// and before the front is closed.
func TestD4_UnmountFlushesDelegatedBeforeClose(t *testing.T) {
	op := newFakeOpener()
	d := newTestDriver(t, t.TempDir(), op)
	mustCreate(t, d, "v", map[string]string{"source": "/data/p", "state": "delegated"})
	k := key("/data/p", "delegated")
	mustMount(t, d, "v", "c1")
	mustMount(t, d, "v", "c2")
	mustUnmount(t, d, "v", "c1")
	if op.count("flush "+k) != 1 || op.count("close "+k) != 0 {
		t.Fatalf("events %v: want one flush, no close", op.log())
	}
	mustUnmount(t, d, "v", "c2")
	want := []string{"open " + k, "flush " + k, "flush " + k, "close " + k}
	if got := op.log(); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// Rule D4: a failed writeback still ends the mount (the data stays
// journaled) but Unmount reports the volume and the paths.
func TestD4_UnmountFlushFailureNamesPaths(t *testing.T) {
	op := newFakeOpener()
	op.flush = func(ctx context.Context, key string) error {
		return errors.New("2 paths not written back: /data/p/out/a.bin: input/output error; /data/p/out/b.bin: no space left on device")
	}
	d := newTestDriver(t, t.TempDir(), op)
	mustCreate(t, d, "build", map[string]string{"source": "/data/p", "state": "delegated"})
	k := key("/data/p", "delegated")
	mustMount(t, d, "build", "c1")
	err := d.Unmount(t.Context(), "build", "c1")
	if err == nil {
		t.Fatal("Unmount hid the writeback failure")
	}
	for _, w := range []string{`volume "build"`, "/data/p/out/a.bin", "/data/p/out/b.bin", "journaled"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
	if IsInvalid(err) {
		t.Error("a writeback failure classified as a user error")
	}
	got := op.log()
	if want := []string{"open " + k, "flush " + k, "close " + k}; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v (the id is removed and the front closed anyway)", got, want)
	}
	if info, _ := d.Get(t.Context(), "build"); info.Status["mounts"] != 0 {
		t.Fatal("failed unmount kept its id")
	}
	if err := d.Remove(t.Context(), "build"); err != nil {
		t.Fatal(err)
	}
}

// The flush an Unmount waits for is bounded by UnmountFlushTimeout.
func TestD4_UnmountFlushTimeout(t *testing.T) {
	op := newFakeOpener()
	op.flush = func(ctx context.Context, key string) error {
		<-ctx.Done()
		return fmt.Errorf("1 path not written back: /data/p/big: %w", ctx.Err())
	}
	d := newTestDriver(t, t.TempDir(), op, func(c *Config) { c.UnmountFlushTimeout = 100 * time.Millisecond })
	mustCreate(t, d, "v", map[string]string{"source": "/data/p", "state": "delegated"})
	mustMount(t, d, "v", "c1")
	start := time.Now()
	err := d.Unmount(t.Context(), "v", "c1")
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Unmount took %v", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "/data/p/big") {
		t.Fatalf("Unmount: %v", err)
	}
	if op.count("close "+key("/data/p", "delegated")) != 1 {
		t.Fatal("front left open")
	}
}

// Consistent (and cached) volumes never wait for a flush.
func TestConsistentNeverFlushWaits(t *testing.T) {
	op := newFakeOpener()
	op.flush = func(ctx context.Context, key string) error {
		t.Errorf("Flush called for key %s", key)
		return nil
	}
	d := newTestDriver(t, t.TempDir(), op)
	for i, st := range []string{"consistent", "default", "cached"} {
		name := "v-" + st
		mustCreate(t, d, name, map[string]string{"source": fmt.Sprintf("/data/p%d", i), "state": st})
		mustMount(t, d, name, "c1")
		mustUnmount(t, d, name, "c1")
	}
	if n := op.countPrefix("flush "); n != 0 {
		t.Fatalf("%d flushes", n)
	}
}

// Rule D4: Docker removes a volume only once no container refers to it, so
// a mount the plugin still counts then is one whose Unmount never arrived
// (moby/moby#39331: a request resent after a plugin restart has an empty
// body). Remove ends it as the Unmount would have: written back first, the
// front closed with the last one. If the writeback fails the volume stays,
// and the next Remove (the mounts ended) removes it. A mount in progress
// still refuses it.
func TestD4_RemoveEndsMountsWhoseUnmountNeverArrived(t *testing.T) {
	op := newFakeOpener()
	d := newTestDriver(t, t.TempDir(), op)
	mustCreate(t, d, "v", map[string]string{"source": "/data/p", "state": "delegated"})
	mustMount(t, d, "v", "c1")
	mustMount(t, d, "v", "c2")
	k := key("/data/p", "delegated")
	if err := d.Remove(t.Context(), "v"); err != nil {
		t.Fatalf("Remove of a volume Docker no longer uses: %v", err)
	}
	if n := op.count("flush " + k); n != 2 {
		t.Errorf("%d writebacks before the removal, want 2 (one per mount ended)", n)
	}
	if op.count("close "+k) != 1 {
		t.Errorf("front not closed: %v", op.log())
	}
	if _, err := d.Get(t.Context(), "v"); KindOf(err) != KindNotFound {
		t.Fatalf("Get after Remove: %v", err)
	}

	mustCreate(t, d, "w", map[string]string{"source": "/data/q", "state": "delegated"})
	mustMount(t, d, "w", "c3")
	op.mu.Lock()
	op.flush = func(ctx context.Context, key string) error { return errors.New("not written back: /data/q/x") }
	op.mu.Unlock()
	if err := d.Remove(t.Context(), "w"); err == nil || !strings.Contains(err.Error(), "/data/q/x") {
		t.Fatalf("Remove with a failed writeback: %v, want its error", err)
	}
	if _, err := d.Get(t.Context(), "w"); err != nil {
		t.Fatalf("the volume went with a failed writeback: %v", err)
	}
	if err := d.Remove(t.Context(), "w"); err != nil {
		t.Fatalf("Remove once its mounts are ended: %v", err)
	}

	// A Mount in progress: Docker holds the volume, so nothing is lost,
	// and nothing counted is ended.
	mustCreate(t, d, "x", map[string]string{"source": "/data/r", "state": "delegated"})
	mustMount(t, d, "x", "c4")
	d.mu.Lock()
	d.vols["x"].pending++
	d.mu.Unlock()
	if err := d.Remove(t.Context(), "x"); KindOf(err) != KindInUse {
		t.Fatalf("Remove during a Mount: %v", err)
	}
	if info, err := d.Get(t.Context(), "x"); err != nil || info.Status["mounts"] != 1 {
		t.Fatalf("the mount of c4 during a Mount: %+v %v, want it kept", info, err)
	}
	if n := op.count("close " + key("/data/r", "delegated")); n != 0 {
		t.Errorf("front closed during a Mount (%d)", n)
	}
}

func TestGetAndList(t *testing.T) {
	op := newFakeOpener()
	op.status = FrontStatus{Dirty: 3, Failed: 1, Lag: 2 * time.Second, LastError: "EIO", Conflicts: 4, Writers: "through the plugin"}
	d := newTestDriver(t, t.TempDir(), op)
	mustCreate(t, d, "z", map[string]string{"source": "/data/z"})
	mustCreate(t, d, "a", map[string]string{"source": "/data/a", "state": "delegated", "rescan": "2s"})
	mp := mustMount(t, d, "a", "c1")

	info, err := d.Get(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if info.Mountpoint != mp || info.CreatedAt.IsZero() {
		t.Fatalf("info %+v", info)
	}
	want := map[string]any{
		"source": "/data/a", "state": "delegated", "mounts": 1, "key": key("/data/a", "delegated"),
		"rescan": "2s", "mountpoint": mp, "dirty": 3, "failed": 1, "lag": "2s", "last_error": "EIO", "conflicts": 4,
		"writers": "through the plugin",
	}
	for k, w := range want {
		if info.Status[k] != w {
			t.Errorf("Status[%s] = %v, want %v", k, info.Status[k], w)
		}
	}
	z, _ := d.Get(t.Context(), "z")
	if z.Mountpoint != "" || z.Status["dirty"] != nil || z.Status["state"] != "default" || z.Status["mounts"] != 0 {
		t.Errorf("unmounted volume: %+v", z)
	}
	if p, err := d.Path(t.Context(), "z"); p != "" || err != nil {
		t.Errorf("Path of unmounted = %q, %v", p, err)
	}
	vs, _ := d.List(t.Context())
	if len(vs) != 2 || vs[0].Name != "a" || vs[1].Name != "z" {
		t.Fatalf("List = %+v", vs)
	}
}

// A read-only volume says so (docker volume inspect, bindstate status), and
// its front is opened read-only; a writable one says nothing of it.
func TestAReadOnlyVolumeSaysSo(t *testing.T) {
	op := newFakeOpener()
	d := newTestDriver(t, t.TempDir(), op)
	mustCreate(t, d, "ro", map[string]string{"source": "/data/p", "state": "cached", "readonly": "true"})
	mustCreate(t, d, "rw", map[string]string{"source": "/data/p", "state": "cached"})
	mustMount(t, d, "ro", "c1")
	mustMount(t, d, "rw", "c2")
	for name, want := range map[string]bool{"ro": true, "rw": false} {
		info, err := d.Get(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := info.Status["readonly"].(bool); got != want || (!want && info.Status["readonly"] != nil) {
			t.Errorf("%s: Status[readonly] = %v, want %v", name, info.Status["readonly"], want)
		}
		st, err := d.Status(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if st.ReadOnly != want {
			t.Errorf("%s: VolumeStatus.ReadOnly = %v, want %v", name, st.ReadOnly, want)
		}
	}
	op.mu.Lock()
	defer op.mu.Unlock()
	if len(op.fronts) != 2 {
		t.Fatalf("fronts opened: %d, want two (read-only and writable)", len(op.fronts))
	}
	for k, f := range op.fronts {
		if want := k != key("/data/p", "cached"); f.spec.ReadOnly != want {
			t.Errorf("front %s opened with ReadOnly %v, want %v", k, f.spec.ReadOnly, want)
		}
	}
}

// A flush that takes long does not hold up other volumes, nor Get of the
// flushing volume, nor mounts of its own key.
func TestSlowFlushDoesNotBlockOthers(t *testing.T) {
	op := newFakeOpener()
	release := make(chan struct{})
	inFlush := make(chan struct{}, 1)
	op.flush = func(ctx context.Context, key string) error {
		inFlush <- struct{}{}
		<-release
		return nil
	}
	d := newTestDriver(t, t.TempDir(), op)
	mustCreate(t, d, "slow", map[string]string{"source": "/data/p", "state": "delegated"})
	mustCreate(t, d, "other", map[string]string{"source": "/data/q"})
	mustMount(t, d, "slow", "c1")
	done := make(chan error)
	go func() { done <- d.Unmount(context.Background(), "slow", "c1") }()
	<-inFlush

	mustCreate(t, d, "new", map[string]string{"source": "/data/r", "state": "cached"})
	mustMount(t, d, "other", "c2")
	mustUnmount(t, d, "other", "c2")
	mustMount(t, d, "new", "c3")
	if _, err := d.Get(t.Context(), "slow"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.List(t.Context()); err != nil {
		t.Fatal(err)
	}
	mustMount(t, d, "slow", "c4") // same key: the front is still open
	select {
	case err := <-done:
		t.Fatalf("Unmount returned before its flush: %v", err)
	default:
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	k := key("/data/p", "delegated")
	if op.count("close "+k) != 0 || op.count("open "+k) != 1 {
		t.Fatalf("events %v: c4 keeps the front open", op.log())
	}
}

// Plugin restart: the table comes back; keys with active mounts are opened
// at once, the others resumed.
func TestRestartRestoresVolumes(t *testing.T) {
	dir := t.TempDir()
	op1 := newFakeOpener()
	d1 := newTestDriver(t, dir, op1)
	mustCreate(t, d1, "dlg", map[string]string{"source": "/data/a", "state": "delegated"})
	mustCreate(t, d1, "dlg2", map[string]string{"source": "/data/a", "state": "delegated"}) // same key, not mounted
	mustCreate(t, d1, "cch", map[string]string{"source": "/data/b", "state": "cached", "rescan": "3s"})
	mustCreate(t, d1, "con", map[string]string{"source": "/data/c"})
	mustCreate(t, d1, "gone", map[string]string{"source": "/data/d"})
	mustMount(t, d1, "dlg", "c1")
	mustMount(t, d1, "con", "c2")
	mustMount(t, d1, "con", "c3")
	mustMount(t, d1, "cch", "c4")
	mustUnmount(t, d1, "cch", "c4")
	if err := d1.Remove(t.Context(), "gone"); err != nil {
		t.Fatal(err)
	}
	before, _ := d1.List(t.Context())
	// No Shutdown: the plugin died.

	op2 := newFakeOpener()
	d2 := newTestDriver(t, dir, op2)
	kA, kB, kC := key("/data/a", "delegated"), key("/data/b", "cached"), key("/data/c", "consistent")
	got := op2.log()
	slices.Sort(got)
	want := []string{"open " + kA, "open " + kC, "resume " + kB}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("restart events %v, want %v", got, want)
	}
	after, _ := d2.List(t.Context())
	if len(after) != len(before) {
		t.Fatalf("%d volumes after restart, %d before", len(after), len(before))
	}
	for i := range after {
		b, a := before[i], after[i]
		if a.Name != b.Name || !a.CreatedAt.Equal(b.CreatedAt) || a.Mountpoint != b.Mountpoint ||
			a.Status["mounts"] != b.Status["mounts"] || a.Status["state"] != b.Status["state"] || a.Status["rescan"] != b.Status["rescan"] {
			t.Errorf("volume %s: before %+v, after %+v", b.Name, b, a)
		}
	}
	// The ids are live: a second Mount of an id (docker cp) counts, the
	// last unmount flushes and closes.
	mustMount(t, d2, "con", "c2")
	mustUnmount(t, d2, "dlg", "c1")
	if op2.count("flush "+kA) != 1 || op2.count("close "+kA) != 1 {
		t.Fatalf("events %v", op2.log())
	}
	mustUnmount(t, d2, "con", "c2")
	mustUnmount(t, d2, "con", "c3")
	if op2.count("close "+kC) != 0 {
		t.Fatalf("closed while c2's first mount is active: %v", op2.log())
	}
	mustUnmount(t, d2, "con", "c2")
	if op2.count("close "+kC) != 1 || op2.count("open "+kC) != 1 {
		t.Fatalf("events %v", op2.log())
	}
}

// A key that cannot be reopened at start is resumed (its journal must
// drain) and opened by the next Mount.
func TestRestartOpenFailure(t *testing.T) {
	dir := t.TempDir()
	d1 := newTestDriver(t, dir, newFakeOpener())
	mustCreate(t, d1, "v", map[string]string{"source": "/data/a", "state": "delegated"})
	mustMount(t, d1, "v", "c1")

	op2 := newFakeOpener()
	op2.openErr = errors.New("source gone")
	d2 := newTestDriver(t, dir, op2)
	k := key("/data/a", "delegated")
	if got, want := op2.log(), []string{"open-failed " + k, "resume " + k}; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if p, _ := d2.Path(t.Context(), "v"); p != "" {
		t.Fatalf("Path = %q", p)
	}
	op2.mu.Lock()
	op2.openErr = nil
	op2.mu.Unlock()
	mustMount(t, d2, "v", "c1") // already active, but its front is not open
	if op2.count("open "+k) != 1 {
		t.Fatal("Mount did not open the front")
	}
	mustUnmount(t, d2, "v", "c1")
	if op2.count("close "+k) != 0 {
		t.Fatal("closed with the mount from before the restart still active")
	}
	mustUnmount(t, d2, "v", "c1")
	if op2.count("close "+k) != 1 {
		t.Fatal("not closed")
	}
}

func TestStateFile(t *testing.T) {
	dir := t.TempDir()
	d := newTestDriver(t, dir, newFakeOpener())
	mustCreate(t, d, "v", map[string]string{"source": "/data/a", "consistency": "cached"})
	mustMount(t, d, "v", "id-b")
	mustMount(t, d, "v", "id-a")
	b, err := os.ReadFile(filepath.Join(dir, "volumes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc stateDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Version != 1 || len(doc.Volumes) != 1 {
		t.Fatalf("doc %+v", doc)
	}
	r := doc.Volumes[0]
	if r.Name != "v" || r.Opts["consistency"] != "cached" || !slices.Equal(r.Mounts, []string{"id-a", "id-b"}) || r.CreatedAt.IsZero() {
		t.Fatalf("record %+v", r)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("state dir holds %v: temporary files left", ents)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "volumes.json")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
}

func TestStateFileCorrupt(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "volumes.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Config{StateDir: dir, Opener: newFakeOpener(), Log: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "volumes.json is corrupt") {
		t.Fatalf("New: %v", err)
	}
}

// A volume whose stored options no longer validate is kept, refuses to
// mount, and can be removed.
func TestStateFileInvalidVolume(t *testing.T) {
	dir := t.TempDir()
	doc := `{"version":1,"volumes":[{"name":"old","opts":{"source":"/data/a","rescan":"1ms"},"created_at":"2024-01-02T03:04:05Z","mounts":["c9"]}]}`
	if err := os.WriteFile(filepath.Join(dir, "volumes.json"), []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	op := newFakeOpener()
	d := newTestDriver(t, dir, op)
	if n := len(op.log()); n != 0 {
		t.Fatalf("events for an invalid volume: %v", op.log())
	}
	info, err := d.Get(t.Context(), "old")
	if err != nil || !strings.Contains(fmt.Sprint(info.Status["error"]), "too short") {
		t.Fatalf("Get: %+v, %v", info, err)
	}
	if _, err := d.Mount(t.Context(), "old", "c1"); !IsInvalid(err) || !strings.Contains(err.Error(), "remove it and create it again") {
		t.Fatalf("Mount: %v", err)
	}
	// Its mount ID is ended with it (Docker no longer uses it).
	if err := d.Remove(t.Context(), "old"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Get(t.Context(), "old"); KindOf(err) != KindNotFound {
		t.Fatalf("Get after Remove: %v", err)
	}
}

func TestShutdown(t *testing.T) {
	dir := t.TempDir()
	op := newFakeOpener()
	d := newTestDriver(t, dir, op)
	mustCreate(t, d, "dlg", map[string]string{"source": "/data/a", "state": "delegated"})
	mustCreate(t, d, "con", map[string]string{"source": "/data/b"})
	mustMount(t, d, "dlg", "c1")
	mustMount(t, d, "con", "c2")
	if err := d.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	kA, kB := key("/data/a", "delegated"), key("/data/b", "consistent")
	if op.count("flush "+kA) != 1 || op.count("close "+kA) != 1 || op.count("close "+kB) != 1 || op.count("flush "+kB) != 0 {
		t.Fatalf("events %v", op.log())
	}
	if _, err := d.Mount(t.Context(), "con", "c3"); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("Mount after Shutdown: %v", err)
	}
	// The ids survive for the next start.
	op2 := newFakeOpener()
	newTestDriver(t, dir, op2)
	if op2.count("open "+kA) != 1 || op2.count("open "+kB) != 1 {
		t.Fatalf("events after restart %v", op2.log())
	}
}

// Many containers of volumes of one key mounting and unmounting at once:
// every Open is matched by one Close, never two fronts for one key (the
// fake panics on that).
func TestConcurrentMounts(t *testing.T) {
	op := newFakeOpener()
	d := newTestDriver(t, t.TempDir(), op)
	names := []string{"a", "b", "c"}
	for _, n := range names {
		mustCreate(t, d, n, map[string]string{"source": "/data/p", "state": "delegated"})
	}
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			name := names[g%len(names)]
			for i := range 20 {
				id := fmt.Sprintf("g%d-%d", g, i%3)
				if _, err := d.Mount(context.Background(), name, id); err != nil {
					t.Error(err)
					return
				}
				if i%2 == 0 {
					d.Get(context.Background(), name)
				}
				if err := d.Unmount(context.Background(), name, id); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	k := key("/data/p", "delegated")
	if o, c := op.count("open "+k), op.count("close "+k); o != c || o == 0 {
		t.Fatalf("%d opens, %d closes", o, c)
	}
	for _, n := range names {
		if info, _ := d.Get(t.Context(), n); info.Status["mounts"] != 0 || info.Mountpoint != "" {
			t.Fatalf("%s: %+v", n, info)
		}
	}
}

// A plugin killed inside Unmount (during its flush, say): the daemon does
// not send that Unmount again, so the restarted plugin ends the mount itself
// (its changes are journaled and resumed), and the volume can be removed.
// Another mount of the same ID (docker cp while the container runs) is kept.
func TestRestartEndsAnUnmountCutShort(t *testing.T) {
	dir := t.TempDir()
	op1 := newFakeOpener()
	inFlush := make(chan struct{})
	op1.flush = func(ctx context.Context, key string) error {
		close(inFlush)
		<-ctx.Done() // the plugin dies here
		return ctx.Err()
	}
	d1 := newTestDriver(t, dir, op1)
	mustCreate(t, d1, "dlg", map[string]string{"source": "/data/a", "state": "delegated"})
	mustCreate(t, d1, "two", map[string]string{"source": "/data/b", "state": "cached"})
	mustMount(t, d1, "dlg", "c1")
	mustMount(t, d1, "two", "c2")
	mustMount(t, d1, "two", "c2") // docker cp of the running container
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d1.Unmount(ctx, "dlg", "c1") }()
	<-inFlush
	// The plugin dies now: what the next one reads is what is on disk.
	b, err := os.ReadFile(stateFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	snapshot := t.TempDir()
	if err := os.WriteFile(stateFile(snapshot), b, 0o600); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	mustUnmount(t, d1, "two", "c2") // one of c2's two mounts ends normally

	// The snapshot is the crash; dir is after the Unmount gave up (its
	// count ended normally).
	for _, state := range []string{snapshot, dir} {
		d2 := newTestDriver(t, state, newFakeOpener())
		// Ended by the start itself, not by the Remove (which would end a
		// mount still counted too: endLostUnmounts).
		if info, err := d2.Get(t.Context(), "dlg"); err != nil || info.Status["mounts"] != 0 {
			t.Fatalf("after an Unmount cut short (%s): %+v %v, want no mount", state, info, err)
		}
		if err := d2.Remove(t.Context(), "dlg"); err != nil {
			t.Fatalf("remove after an Unmount cut short (%s): %v", state, err)
		}
		if info, err := d2.Get(t.Context(), "two"); err != nil || info.Status["mounts"] != 1 {
			t.Fatalf("the mount c2 still has: %+v %v, want 1", info, err)
		}
	}
}
