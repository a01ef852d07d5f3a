package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/integration/harness"
	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/driver"
	"github.com/bindstate/bindstate/plugin/hostpath"
	"github.com/bindstate/bindstate/plugin/internal/testenv"
	"github.com/bindstate/bindstate/plugin/internal/testshare"
	"github.com/bindstate/bindstate/plugin/writeback"
)

// rig is one front over a fresh host folder.
type rig struct {
	host  string // the source, edited directly as a user on the host would
	mnt   string // what containers would see
	front driver.Front
	o     *Opener
	spec  driver.FrontSpec
	share *harness.Share // the sshfs share host is the mount of, or nil (newShareRig)
}

// testWriter sends log lines to the test's log until the test ends: a store
// still writing back in the background after its front closed (D4) may log
// later, and t.Log after the end of a test panics.
type testWriter struct {
	t    testing.TB
	mu   *sync.Mutex
	done *bool
}

func (w testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !*w.done {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	w := testWriter{t: t, mu: new(sync.Mutex), done: new(bool)}
	t.Cleanup(func() {
		w.mu.Lock()
		*w.done = true
		w.mu.Unlock()
	})
	// BINDSTATE_TEST_LOG=debug adds the plugin's debug lines (each host
	// change the refresh brings in, each writeback), for a failure that
	// FUSE debug output hides by changing its timing.
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: testLogLevel()}))
}

// testLogLevel is the level of the plugin's records in tests' logs (the
// crash test's children's too): Info, or Debug with BINDSTATE_TEST_LOG=debug.
func testLogLevel() slog.Level {
	if os.Getenv("BINDSTATE_TEST_LOG") == "debug" {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// lockedBuffer is a bytes.Buffer for a log handler that goroutines share,
// for tests that read what a front logged (a JSON handler writing to it).
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// records are the JSON records written so far with message msg.
func (l *lockedBuffer) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(l.b.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// newRig serves a fresh host folder in state st, rescanning the host every
// 50 ms. setup, if given, fills the host folder before the mount.
func newRig(t testing.TB, st consistency.State, setup func(host string)) *rig {
	t.Helper()
	return newRescanRig(t, st, "50ms", setup)
}

// newRescanRig is newRig with the given rescan interval.
func newRescanRig(t testing.TB, st consistency.State, rescan string, setup func(host string)) *rig {
	t.Helper()
	return newConfiguredRig(t, st, rescan, setup, nil)
}

// newConfiguredRig is newRescanRig whose Opener's Config configure, if
// given, may change (after the rig's own fields are set).
func newConfiguredRig(t testing.TB, st consistency.State, rescan string, setup func(host string), configure func(*Config)) *rig {
	t.Helper()
	return openRig(t, st, rescan, setup, configure, false)
}

// newReadOnlyRig is newRig for a read-only volume (option readonly).
func newReadOnlyRig(t testing.TB, st consistency.State, setup func(host string)) *rig {
	t.Helper()
	return openRig(t, st, "50ms", setup, nil, true)
}

// rigOpener is newRig or newReadOnlyRig.
type rigOpener func(t testing.TB, st consistency.State, setup func(host string)) *rig

// forStoreRigs runs test in each store state, over a writable volume and
// over a read-only one (subtests "cached", ..., "cached,readonly", ...).
func forStoreRigs(t *testing.T, test func(t *testing.T, st consistency.State, open rigOpener)) {
	for _, readOnly := range []bool{false, true} {
		for _, st := range storeStates {
			name, open := st.String(), rigOpener(newRig)
			if readOnly {
				name, open = name+",readonly", newReadOnlyRig
			}
			t.Run(name, func(t *testing.T) { test(t, st, open) })
		}
	}
}

func openRig(t testing.TB, st consistency.State, rescan string, setup func(host string), configure func(*Config), readOnly bool) *rig {
	t.Helper()
	testenv.RequireFUSE(t)
	base := t.TempDir()
	host := filepath.Join(base, "host")
	if err := os.Mkdir(host, 0o755); err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(host)
	}
	return openRigAt(t, base, host, st, rescan, configure, readOnly)
}

// newShareRig is newRescanRig over a real slow share, the source most users
// serve and the bench measures: an sshfs mount over loopback of a fresh
// folder (contrib/share.sh, its own sshd). The plugin then writes a cached
// volume's files through its own open files of the share rather than
// letting the kernel write the host file (store.writersFromHost), and keeps
// no xattrs. Read what the host holds with hostNow. Skipped without sshd
// and sshfs, except in CI.
func newShareRig(t testing.TB, st consistency.State, rescan string) *rig {
	t.Helper()
	testenv.RequireFUSE(t)
	base := t.TempDir()
	share := testshare.SSHFS(t, base)
	r := openRigAt(t, base, share.Mount, st, rescan, nil, false)
	r.share = share
	return r
}

// hostNow is the folder where what the host holds can be read now: the
// host folder itself or, over a share, the server's own folder once every
// request sent to the share before is done. sshfs acknowledges a write
// before the server has it; a statfs is a round trip on the same SFTP
// session, which the server answers in order.
func (r *rig) hostNow(t testing.TB) string {
	t.Helper()
	if r.share == nil {
		return r.host
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(r.share.Mount, &fs); err != nil {
		t.Fatalf("statfs of the share (to wait for the requests before it): %v", err)
	}
	// sshfs renames a file removed while open to .fuse_hidden* until its
	// last close, and the plugin may close its own file of the share a
	// moment after the container's close returned (the kernel sends
	// RELEASE after it). They must go, and soon.
	deadline := time.Now().Add(10 * time.Second)
	for {
		hidden := shareHiddenFiles(t, r.share.HostDir)
		if len(hidden) == 0 {
			return r.share.HostDir
		}
		if time.Now().After(deadline) {
			t.Fatalf("the share still holds %q 10 s on: a file of it the plugin never closed", hidden)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// shareHiddenFiles lists the .fuse_hidden* files in the share's folder dir.
func shareHiddenFiles(t testing.TB, dir string) []string {
	t.Helper()
	var hidden []string
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(e.Name(), ".fuse_hidden") {
			hidden = append(hidden, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hidden
}

// openRigAt opens a front in state st over host, with its state and mount
// under base.
func openRigAt(t testing.TB, base, host string, st consistency.State, rescan string, configure func(*Config), readOnly bool) *rig {
	t.Helper()
	cfg := Config{
		StateDir:  filepath.Join(base, "state"),
		MountRoot: filepath.Join(base, "mnt"),
		Policy:    hostpath.Policy{AllowedRoots: []string{base}},
		Log:       testLogger(t),
		// BINDSTATE_TEST_FUSE_DEBUG=1 logs every FUSE request, to read
		// what the kernel asked when a test fails only with some timing.
		FuseDebug: os.Getenv("BINDSTATE_TEST_FUSE_DEBUG") != "",
	}
	if configure != nil {
		configure(&cfg)
	}
	o := New(cfg)
	spec := driver.FrontSpec{Key: "k-" + st.String(), Source: host, State: st, ReadOnly: readOnly,
		Opts: map[string]string{"rescan": rescan}}
	f, err := o.Open(context.Background(), spec)
	if err != nil {
		t.Fatalf("open %s front: %v", st, err)
	}
	r := &rig{host: host, mnt: f.Mountpoint(), front: f, o: o, spec: spec}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := f.Close(ctx); err != nil {
			t.Errorf("close front: %v", err)
		}
		o.waitDrained(spec.Key, 3*time.Second)
	})
	return r
}

func (r *rig) hostPath(rel string) string { return filepath.Join(r.host, rel) }
func (r *rig) mntPath(rel string) string  { return filepath.Join(r.mnt, rel) }

func (r *rig) flush(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.front.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// flushFailure flushes as flush does and wants the writeback to fail: it
// returns the FlushError, which names the paths that failed.
func (r *rig) flushFailure(t testing.TB) *writeback.FlushError {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := r.front.Flush(ctx)
	var fe *writeback.FlushError
	if !errors.As(err, &fe) {
		t.Fatalf("flush: %v; want a writeback failure (FlushError)", err)
	}
	return fe
}

// listNames lists dir, sorted, without . and ..
func listNames(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func writeFile(t testing.TB, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitFor polls cond until it holds or the bound passes. Bounds are generous:
// this checks behaviour, not speed (speed is the benchmark's job).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// treeOf describes a tree for comparison: type, permission bits, content or
// link target of every entry, by path.
func treeOf(t testing.TB, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		desc := fi.Mode().String()
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t testing.TB, what string, want, got map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s: want %q, got %q", what, k, v, got[k])
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected %s (%q)", what, k, v)
		}
	}
}

// inotify watches one directory of the mount as a tool in a container would.
type inotify struct {
	fd int
}

func watch(t testing.TB, dir string) *inotify {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MODIFY|unix.IN_DELETE|unix.IN_CLOSE_WRITE|unix.IN_ATTRIB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return &inotify{fd: fd}
}

// wait returns once an event with mask bit and name arrives.
func (in *inotify) wait(t testing.TB, mask uint32, name string) {
	t.Helper()
	buf := make([]byte, 64*1024)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		n, err := unix.Read(in.fd, buf)
		if err == unix.EAGAIN {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafePointer(buf[off:]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			evName := string(bytes.TrimRight(nameBytes, "\x00"))
			if ev.Mask&mask != 0 && evName == name {
				return
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
	t.Fatalf("no inotify event %#x for %q", mask, name)
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// waitDrained waits (at most max) for a closed front's background writeback
// (D4) to finish, so that it does not write into a host folder the test's
// cleanup is removing. A test whose host refuses writes just waits max.
func (o *Opener) waitDrained(key string, max time.Duration) {
	for end := time.Now().Add(max); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		o.mu.Lock()
		_, open := o.stores[key]
		o.mu.Unlock()
		if !open {
			return
		}
	}
}
