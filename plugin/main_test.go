package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/internal/testenv"
)

func TestRunVersionAndUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(t.Context(), []string{"version"}, env(nil), &out, &errb); code != 0 || out.String() != "bindstate dev\n" {
		t.Fatalf("version: %d %q", code, out.String())
	}
	out.Reset()
	if code := run(t.Context(), []string{"selftest"}, env(nil), &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage: bindstate") || !strings.Contains(errb.String(), "LOG_LEVEL") {
		t.Fatalf("unknown command: %d %q", code, errb.String())
	}
}

func TestRunBadConfig(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(t.Context(), nil, env(map[string]string{"LOG_LEVEL": "loud"}), &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), `LOG_LEVEL="loud": valid levels are debug, info, warn, error`) {
		t.Fatalf("%d %q", code, errb.String())
	}
	// "serve" is the same as no command.
	errb.Reset()
	code = run(t.Context(), []string{"serve"}, env(map[string]string{"LOG_LEVEL": "loud"}), &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), `LOG_LEVEL="loud"`) {
		t.Fatalf("serve: %d %q", code, errb.String())
	}
}

// GOMAXPROCS set in the plugin's environment stands: no governing.
func TestGOMAXPROCSSetTurnsTheGovernorOff(t *testing.T) {
	cfg, err := loadConfig(env(map[string]string{"GOMAXPROCS": "3"}))
	if err != nil {
		t.Fatal(err)
	}
	procs := runtime.GOMAXPROCS(0)
	shareWork, stop, desc := governCPUs(cfg.FixedCPUs)
	defer stop()
	if shareWork != nil || runtime.GOMAXPROCS(0) != procs || !strings.Contains(desc, "(GOMAXPROCS)") {
		t.Fatalf("GOMAXPROCS=3 set: governed anyway (share work hook %v, GOMAXPROCS %d, was %d, %q)",
			shareWork != nil, runtime.GOMAXPROCS(0), procs, desc)
	}
}

// servePlugin runs the plugin in this process, as main does, with the
// environment e, until it answers on its socket (e's SOCKET_NAME, a path).
// stop stops it and returns its exit code.
func servePlugin(t *testing.T, e map[string]string, logs io.Writer) (client *http.Client, stop func() int) {
	t.Helper()
	sock := e["SOCKET_NAME"]
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() { done <- run(ctx, nil, env(e), io.Discard, logs) }()
	stop = func() int {
		t.Helper()
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(20 * time.Second):
			t.Fatal("did not stop")
			return -1
		}
	}
	client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		resp, err := client.Post("http://plugin/Plugin.Activate", "application/json", nil)
		if err == nil {
			resp.Body.Close()
			return client, stop
		}
		if time.Since(start) > 10*time.Second {
			stop()
			t.Fatalf("plugin not serving: %v", err)
		}
	}
}

// The plugin serves the protocol on its socket and stops cleanly when told
// to (its socket is removed).
func TestServeAndStop(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "bindstate.sock") // never Docker's plugin dir in tests
	var logs bytes.Buffer
	client, stop := servePlugin(t, map[string]string{
		"STATE_DIR":   filepath.Join(dir, "state"),
		"SOCKET_NAME": sock,
		"LOG_LEVEL":   "debug",
		"CPU_PROFILE": filepath.Join(dir, "cpu.pprof"),
	}, &logs)
	resp, err := client.Post("http://plugin/Plugin.Activate", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var act struct{ Implements []string }
	json.NewDecoder(resp.Body).Decode(&act)
	resp.Body.Close()
	if len(act.Implements) != 1 || act.Implements[0] != "VolumeDriver" {
		t.Fatalf("activate: %+v", act)
	}
	// No GOMAXPROCS in its environment: serving from the stores alone, the
	// plugin runs on one CPU (package cpus).
	if got := runtime.GOMAXPROCS(0); procs > 1 && got != 1 {
		t.Errorf("GOMAXPROCS while serving, nothing on the share: %d, want 1", got)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket: %v %v", fi, err)
	}
	resp, err = client.Post("http://plugin/VolumeDriver.List", "application/json", strings.NewReader("{}"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("list: %v %v", resp, err)
	}
	resp.Body.Close()

	// The bindstate command reaches it over the control socket, beside the
	// plugin socket by default, and finds the volume Docker created.
	ctl := filepath.Join(dir, "run", "bindstate-control", "control.sock")
	resp, err = client.Post("http://plugin/VolumeDriver.Create", "application/json",
		strings.NewReader(`{"Name":"v1","Opts":{"source":"/home/me/p","state":"delegated"}}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("create: %v %v", resp, err)
	}
	resp.Body.Close()
	var cout, cerr bytes.Buffer
	if code := run(t.Context(), []string{"ls", "--format", "json"}, env(map[string]string{"CONTROL_SOCKET": ctl}), &cout, &cerr); code != 0 {
		t.Fatalf("ls: %d %s", code, cerr.String())
	}
	var vols []struct{ Name, State, Source string }
	if err := json.Unmarshal(cout.Bytes(), &vols); err != nil || len(vols) != 1 || vols[0].Name != "v1" || vols[0].State != "delegated" {
		t.Fatalf("ls: %q %v", cout.String(), err)
	}
	cout.Reset()
	if code := run(t.Context(), []string{"logs", "--socket", ctl, "--volume", "v1"}, env(nil), &cout, &cerr); code != 0 || !strings.Contains(cout.String(), "volume created volume=v1") {
		t.Fatalf("logs: %d %q %s", code, cout.String(), cerr.String())
	}
	if fi, err := os.Stat(ctl); err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("control socket: %v %v", fi, err)
	}

	if code := stop(); code != 0 {
		t.Fatalf("exit %d; logs:\n%s", code, logs.String())
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("GOMAXPROCS after stopping: %d, want every CPU again (%d)", got, procs)
	}
	if _, err := os.Stat(ctl); !os.IsNotExist(err) {
		t.Fatalf("control socket left behind: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "mnt")); err != nil {
		t.Fatalf("mount root not created: %v", err)
	}
	// CPU_PROFILE: a complete profile (gzipped protobuf) once stopped.
	if prof, err := os.ReadFile(filepath.Join(dir, "cpu.pprof")); err != nil || len(prof) < 2 || prof[0] != 0x1f || prof[1] != 0x8b {
		t.Fatalf("CPU profile not written at stop: %v (%d bytes)", err, len(prof))
	}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if !json.Valid([]byte(line)) {
			t.Fatalf("log line is not JSON: %q", line)
		}
	}
}

// Share work in the serving plugin raises GOMAXPROCS to every CPU: serve
// hands the governor to the stores the driver opens. Without that, the
// plugin would stay on one CPU through every cold walk and writeback
// (package cpus says what that costs).
func TestServingPluginRaisesCPUsForShareWork(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	if procs < 2 {
		t.Skip("one CPU: nothing to switch")
	}
	testenv.RequireFUSE(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("from the host"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Record what the governor sets, from its start: it lowers again 200 ms
	// after the last share work, and a sampler on a timer missed that window
	// on a loaded machine.
	var most atomic.Int64
	setMaxProcs = func(n int) int {
		if int64(n) > most.Load() {
			most.Store(int64(n))
		}
		return runtime.GOMAXPROCS(n)
	}
	t.Cleanup(func() { setMaxProcs = runtime.GOMAXPROCS })
	client, stop := servePlugin(t, map[string]string{
		"STATE_DIR":      filepath.Join(dir, "state"),
		"SOCKET_NAME":    filepath.Join(dir, "run", "bindstate.sock"),
		"CONTROL_SOCKET": filepath.Join(dir, "run", "control.sock"),
		"ALLOWED_ROOTS":  src,
	}, io.Discard)
	call := func(method, body string) (out struct{ Mountpoint, Err string }) {
		t.Helper()
		resp, err := client.Post("http://plugin/VolumeDriver."+method, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Err != "" {
			t.Fatalf("%s: %v %s", method, err, out.Err)
		}
		return out
	}
	call("Create", fmt.Sprintf(`{"Name":"v","Opts":{"source":%q,"state":"cached"}}`, src))
	mp := call("Mount", `{"Name":"v","ID":"c1"}`).Mountpoint
	names, err := os.ReadDir(mp)
	if err != nil || len(names) != 1 {
		t.Fatalf("listing the mount: %v %v", names, err)
	}
	if b, err := os.ReadFile(filepath.Join(mp, "f")); err != nil || string(b) != "from the host" {
		t.Fatalf("reading through the mount: %q %v", b, err)
	}
	if got := most.Load(); got != int64(procs) {
		t.Errorf("a cold listing and read through a served volume: the governor set GOMAXPROCS at most %d, want %d (every CPU)", got, procs)
	}
	call("Unmount", `{"Name":"v","ID":"c1"}`)
	if code := stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// A plugin whose stderr nobody reads (the Docker daemon is down: the shim
// holds the fifo open but does not read it) serves on: its log is queued
// and, past the queue's limit, dropped and counted, never waited for. It
// still stops, and what it kept reaches stderr once read, with a notice of
// how many records were dropped.
func TestAPluginWhoseOutputNobodyReadsServesOnAndStops(t *testing.T) {
	limit := logQueueLimit
	logQueueLimit = 16 << 10
	t.Cleanup(func() { logQueueLimit = limit })
	dir := t.TempDir()
	unread, stderr := io.Pipe() // a Write blocks until read, as a full pipe does
	client, stop := servePlugin(t, map[string]string{
		"STATE_DIR":   filepath.Join(dir, "state"),
		"SOCKET_NAME": filepath.Join(dir, "run", "bindstate.sock"),
	}, stderr)
	// Each Create and Remove logs a record: 400 of them, past the limit.
	for i := range 200 {
		for _, req := range []string{
			fmt.Sprintf(`Create {"Name":"v%d","Opts":{"source":"/home/me/p%d","state":"cached"}}`, i, i),
			fmt.Sprintf(`Remove {"Name":"v%d"}`, i),
		} {
			method, body, _ := strings.Cut(req, " ")
			resp, err := client.Post("http://plugin/VolumeDriver."+method, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatalf("%s, with nobody reading the plugin's output: %v", req, err)
			}
			var out struct{ Err string }
			err = json.NewDecoder(resp.Body).Decode(&out)
			resp.Body.Close()
			if err != nil || out.Err != "" {
				t.Fatalf("%s: %v %s", req, err, out.Err)
			}
		}
	}
	if code := stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}

	// Read what it kept: the records in order, and where some were
	// dropped, a notice of how many. Kept and dropped, they are every
	// record logged: at least the 400 of the Creates and Removes.
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(unread)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var first string
	kept, dropped, notices := 0, 0, 0
	for kept+dropped < 400 || notices == 0 {
		var line string
		select {
		case line = <-lines:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d records read and %d said dropped (%d notices), then nothing; want at least 400 in all and a notice", kept, dropped, notices)
		}
		var rec struct {
			Msg     string
			Dropped int
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if rec.Dropped > 0 {
			dropped += rec.Dropped
			notices++
			continue
		}
		if kept == 0 {
			first = rec.Msg
		}
		kept++
	}
	if first != "bindstate serving" || kept < 10 {
		t.Fatalf("%d records kept, the first %q; want the first records from the start", kept, first)
	}
	t.Logf("%d records kept, %d dropped (%d notices)", kept, dropped, notices)
	unread.Close()
}
