package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/driver"
	"github.com/bindstate/bindstate/plugin/writeback"
)

func TestVolumesOverSocket(t *testing.T) {
	r := newRig(t)
	r.volumes(t)
	r.op.setStatus("/data/p", func(st *driver.FrontStatus) {
		st.Dirty, st.DirtyBytes, st.Lag, st.FailedPaths = 2, 2048, 1500*time.Millisecond, []string{"x/y"}
	})
	vs, err := r.cl.Volumes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, v := range vs {
		names = append(names, v.Name)
	}
	if !slices.Equal(names, []string{"c", "d1", "d2", "k"}) {
		t.Fatalf("volumes %v", names)
	}
	d1 := vs[1]
	if d1.State != "delegated" || d1.Source != "/data/p" || !slices.Equal(d1.MountIDs, []string{"aaaa", "bbbbbbbbbbbbbbbbbb"}) ||
		d1.Front == nil || d1.Front.Dirty != 2 || d1.Front.DirtyBytes != 2048 || d1.Front.Lag != 1500*time.Millisecond || d1.Mountpoint == "" {
		t.Fatalf("d1 %+v %+v", d1, d1.Front)
	}
	if vs[3].Front != nil || len(vs[3].MountIDs) != 0 {
		t.Fatalf("k %+v", vs[3])
	}
	v, err := r.cl.Volume(t.Context(), "d2")
	if err != nil || v.Key != d1.Key || v.Front == nil {
		t.Fatalf("d2 %+v %v", v, err)
	}
	if _, err := r.cl.Volume(t.Context(), "nope"); !IsNotFound(err) || !strings.Contains(err.Error(), `no such volume "nope"`) {
		t.Fatalf("unknown volume: %v", err)
	}
}

func TestFlushOverSocket(t *testing.T) {
	r := newRig(t)
	r.volumes(t)
	// The flush writes one path at a time, so progress is seen going down.
	r.op.setStatus("/data/p", func(st *driver.FrontStatus) { st.Dirty, st.DirtyBytes = 4, 4000 })
	r.op.setFlush("/data/p", func(ctx context.Context) error {
		for {
			left := 0
			r.op.setStatus("/data/p", func(st *driver.FrontStatus) {
				if st.Dirty > 0 {
					st.Dirty--
					st.DirtyBytes -= 1000
				}
				left = st.Dirty
			})
			if left == 0 {
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	var seen []int
	final, err := r.cl.Flush(t.Context(), "d1", 0, func(ev FlushEvent) {
		if len(ev.Volumes) != 1 || ev.Volumes[0].Volume != "d1" {
			t.Errorf("progress %+v", ev)
			return
		}
		seen = append(seen, ev.Volumes[0].Dirty)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(final.Results) != 1 || !final.Results[0].OK || final.Results[0].Volume != "d1" || final.Results[0].Source != "/data/p" {
		t.Fatalf("final %+v", final)
	}
	if len(seen) < 3 || slices.Max(seen) < 2 || seen[len(seen)-1] != 0 {
		t.Fatalf("progress seen %v", seen)
	}

	// All: every delegated volume (d1, d2: one store), none of the others.
	final, err = r.cl.Flush(t.Context(), "", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, res := range final.Results {
		got = append(got, res.Volume)
	}
	if !slices.Equal(got, []string{"d1", "d2"}) {
		t.Fatalf("flush all: %+v", final.Results)
	}

	// A failed writeback: not OK, with the host paths.
	r.op.setFlush("/data/p", func(ctx context.Context) error {
		return &writeback.FlushError{Failed: map[string]error{"src/main.go": errors.New("permission denied")}}
	})
	final, err = r.cl.Flush(t.Context(), "d1", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := final.Results[0]
	if res.OK || len(res.Failed) != 1 || res.Failed[0].Path != "/data/p/src/main.go" || res.Failed[0].Error != "permission denied" ||
		!strings.Contains(res.Error, `volume "d1"`) {
		t.Fatalf("failed flush %+v", res)
	}

	// A flush that does not end in time: the plugin gives up with ctx's error.
	r.op.setFlush("/data/p", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	final, err = r.cl.Flush(t.Context(), "d1", 50*time.Millisecond, nil)
	if err != nil || final.Results[0].OK || !strings.Contains(final.Results[0].Error, "deadline") {
		t.Fatalf("timed out flush %+v %v", final, err)
	}

	if _, err := r.cl.Flush(t.Context(), "nope", 0, nil); !IsNotFound(err) {
		t.Fatalf("unknown volume: %v", err)
	}
	// A cached volume has nothing to wait for.
	final, err = r.cl.Flush(t.Context(), "c", 0, nil)
	if err != nil || !final.Results[0].OK {
		t.Fatalf("cached %+v %v", final, err)
	}
}

func TestMetrics(t *testing.T) {
	r := newRig(t)
	r.volumes(t)
	r.op.setStatus("/data/p", func(st *driver.FrontStatus) {
		st.Dirty, st.DirtyBytes, st.Failed, st.Lag, st.Conflicts = 3, 300, 1, 2*time.Second, 4
		st.WrittenFiles, st.WrittenBytes, st.Fetched, st.CacheHits, st.Errors = 10, 1000, 5, 50, 2
		st.Ops = map[string]uint64{"read": 7, "write": 8}
	})
	r.op.setFlush("/data/p", func(ctx context.Context) error {
		return &writeback.FlushError{Failed: map[string]error{"a": errors.New("EIO")}}
	})
	r.cl.Flush(t.Context(), "d1", 0, nil)
	text, err := r.cl.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	key := r.mustKey(t, "d1")
	store := `store="` + key + `",source="/data/p",state="delegated"`
	for _, want := range []string{
		`bindstate_info{version="1.2.3"} 1`,
		`bindstate_requests_total{op="mount"} 3`,
		`bindstate_requests_total{op="create"} 0`,
		`bindstate_flushes_total 1`,
		`bindstate_flush_failures_total 1`,
		`bindstate_volumes 4`,
		`bindstate_volume_info{volume="d2",store="` + key + `",source="/data/p",state="delegated"} 1`,
		`bindstate_volume_mounts{volume="d1"} 2`,
		`bindstate_dirty_files{` + store + `} 3`,
		`bindstate_dirty_bytes{` + store + `} 300`,
		`bindstate_failed_files{` + store + `} 1`,
		`bindstate_writeback_lag_seconds{` + store + `} 2`,
		`bindstate_written_back_files_total{` + store + `} 10`,
		`bindstate_written_back_bytes_total{` + store + `} 1000`,
		`bindstate_writeback_errors_total{` + store + `} 2`,
		`bindstate_conflicts_total{` + store + `} 4`,
		`bindstate_cache_fetches_total{` + store + `} 5`,
		`bindstate_cache_hits_total{` + store + `} 50`,
		`bindstate_ops_total{` + store + `,op="write"} 8`,
		"# TYPE bindstate_dirty_files gauge",
		"# TYPE bindstate_written_back_files_total counter",
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	// One series per store, though two volumes share it (D3).
	if n := strings.Count(text, "bindstate_dirty_files{"); n != 2 { // d1/d2's store and c's
		t.Errorf("%d dirty_files series:\n%s", n, text)
	}
	// Every sample line is name{labels} value.
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if strings.HasPrefix(line, "# ") {
			continue
		}
		if f := strings.Fields(line); len(f) < 2 || !strings.HasPrefix(f[0], "bindstate_") {
			t.Errorf("bad sample line %q", line)
		}
	}
}

func (r *rig) mustKey(t *testing.T, name string) string {
	t.Helper()
	st, err := r.drv.Status(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return st.Key
}

func TestEscapeLabel(t *testing.T) {
	if got := escapeLabel("a\"b\\c\nd"); got != `a\"b\\c\nd` {
		t.Fatal(got)
	}
}

func TestLogsOverSocket(t *testing.T) {
	r := newRig(t)
	r.volumes(t)
	all, err := r.cl.Logs(t.Context(), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 {
		t.Fatal("no logs")
	}
	d1, err := r.cl.Logs(t.Context(), 0, "d1")
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, rec := range d1 {
		if rec.Attrs["volume"] != "d1" {
			t.Fatalf("record of another volume: %+v", rec)
		}
		msgs = append(msgs, rec.Message)
	}
	if !slices.Contains(msgs, "volume created") || !slices.Contains(msgs, "mounted") {
		t.Fatalf("d1's logs: %v", msgs)
	}
	last := all[len(all)-1].Seq
	after, err := r.cl.Logs(t.Context(), last-1, "")
	if err != nil || len(after) != 1 || after[0].Seq != last {
		t.Fatalf("after %d: %+v %v", last-1, after, err)
	}
}

// The server is safe for concurrent use (run with -race).
func TestConcurrentRequests(t *testing.T) {
	r := newRig(t)
	r.volumes(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				if _, err := r.cl.Volumes(context.Background()); err != nil {
					t.Error(err)
				}
				if _, err := r.cl.Metrics(context.Background()); err != nil {
					t.Error(err)
				}
				if _, err := r.cl.Flush(context.Background(), "d1", 0, nil); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}

func TestDiscover(t *testing.T) {
	dir := t.TempDir()
	if _, err := discoverIn(dir); err == nil || !strings.Contains(err.Error(), "--socket") {
		t.Fatalf("none: %v", err)
	}
	listen := func(p string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
	}
	// A managed plugin's directory (Docker's /run/docker/plugins/<ID>).
	managed := filepath.Join(dir, "0123abcd", "bindstate-control", "control.sock")
	listen(managed)
	// Not a socket, or one nobody listens on (left by a killed plugin): ignored.
	os.MkdirAll(filepath.Join(dir, "x", "bindstate-control", "control.sock"), 0o755)
	stale := filepath.Join(dir, "dead", "bindstate-control", "control.sock")
	os.MkdirAll(filepath.Dir(stale), 0o755)
	sln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	sln.(*net.UnixListener).SetUnlinkOnClose(false)
	sln.Close()
	if fi, err := os.Stat(stale); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("stale socket: %v", err)
	}
	if got, err := discoverIn(dir); err != nil || got != managed {
		t.Fatalf("managed: %q %v", got, err)
	}
	listen(filepath.Join(dir, "bindstate-control", "control.sock"))
	if _, err := discoverIn(dir); err == nil || !strings.Contains(err.Error(), "several") || !strings.Contains(err.Error(), managed) {
		t.Fatalf("two: %v", err)
	}
}

func TestDockerContainers(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "docker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/containers/json" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(`[
 {"Id":"1111111111111111","Names":["/web"],"Mounts":[{"Type":"volume","Name":"d1"},{"Type":"bind","Name":""}]},
 {"Id":"2222222222222222","Names":["/api"],"Mounts":[{"Type":"volume","Name":"d1"},{"Type":"volume","Name":"c"}]},
 {"Id":"3333333333333333","Names":[],"Mounts":[{"Type":"volume","Name":"c"}]}]`))
	})}
	go srv.Serve(ln)
	defer srv.Close()
	m, err := DockerContainers(t.Context(), func(k string) string {
		if k == "DOCKER_HOST" {
			return "unix://" + sock
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m["d1"], []string{"api", "web"}) || !slices.Equal(m["c"], []string{"333333333333", "api"}) || len(m) != 2 {
		t.Fatalf("%v", m)
	}
	if _, err := DockerContainers(t.Context(), func(string) string { return "tcp://1.2.3.4:2375" }); err == nil {
		t.Fatal("tcp DOCKER_HOST accepted")
	}
}

// A managed plugin's control socket, seen from the host, has a path too long
// for a socket address; the client still reaches it.
func TestClientLongSocketPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run", "docker", "plugins", strings.Repeat("0123456789abcdef", 4), "bindstate-control")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "control.sock")
	if len(sock) <= maxSunPath {
		t.Fatalf("path not long enough for the test: %d", len(sock))
	}
	if _, err := net.Dial("unix", sock); err == nil {
		t.Fatal("the kernel took a long socket path: nothing to test")
	}
	// Listen through the directory, as the plugin sees a shorter path.
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ln, err := net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/control.sock", d.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("bindstate_info 1\n"))
	})}
	go srv.Serve(ln)
	defer srv.Close()
	text, err := NewClient(sock).Metrics(t.Context())
	if err != nil || text != "bindstate_info 1\n" {
		t.Fatalf("%q %v", text, err)
	}
	if got, err := discoverIn(filepath.Dir(filepath.Dir(dir))); err != nil || got != sock {
		t.Fatalf("discover: %q %v", got, err)
	}
}
