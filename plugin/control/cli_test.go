package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/driver"
	"github.com/bindstate/bindstate/plugin/writeback"
)

type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs the command against r's socket (given by CONTROL_SOCKET), with
// Docker reporting the container "web" on d1.
func (r *rig) run(t *testing.T, terminal bool, args ...string) cliResult {
	t.Helper()
	var out, errb bytes.Buffer
	c := &CLI{
		Stdout: &out, Stderr: &errb, Terminal: terminal,
		Getenv: func(k string) string {
			if k == SocketEnv {
				return r.sock
			}
			return ""
		},
		Containers: func(ctx context.Context) (map[string][]string, error) {
			return map[string][]string{"d1": {"web"}}, nil
		},
	}
	code := c.Run(t.Context(), args)
	return cliResult{code, out.String(), errb.String()}
}

// row finds the table row starting with name and returns its cells (split
// on runs of 2+ spaces).
func row(t *testing.T, table, name string) []string {
	t.Helper()
	for _, line := range strings.Split(table, "\n") {
		cells := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
		if cells[0] == name {
			return cells
		}
	}
	t.Fatalf("no row %q in\n%s", name, table)
	return nil
}

func TestCLILs(t *testing.T) {
	r := newRig(t)
	r.volumes(t)
	r.op.setStatus("/data/p", func(st *driver.FrontStatus) { st.Dirty, st.Failed = 2, 1 })

	res := r.run(t, false, "ls")
	if res.code != 0 {
		t.Fatalf("ls: %+v", res)
	}
	if h := row(t, res.stdout, "VOLUME"); strings.Join(h, "|") != "VOLUME|STATE|SOURCE|MOUNTS|CONTAINERS|STATUS" {
		t.Fatalf("header %q", h)
	}
	if got := strings.Join(row(t, res.stdout, "d1"), "|"); got != "d1|delegated|/data/p|2|web|1 failing, 2 to write back" {
		t.Fatalf("d1 row %q", got)
	}
	if got := strings.Join(row(t, res.stdout, "k"), "|"); got != "k|default|/data/k|0|-|not mounted" {
		t.Fatalf("k row %q", got)
	}
	if got := strings.Join(row(t, res.stdout, "c"), "|"); got != "c|cached|/data/q|1|-|in sync" {
		t.Fatalf("c row %q", got)
	}

	res = r.run(t, false, "ls", "--format", "json")
	var vs []volumeOut
	if err := json.Unmarshal([]byte(res.stdout), &vs); err != nil || res.code != 0 {
		t.Fatalf("ls json: %v %+v", err, res)
	}
	if len(vs) != 4 || vs[1].Name != "d1" || len(vs[1].Containers) != 1 || vs[1].Containers[0] != "web" ||
		len(vs[1].MountIDs) != 2 || vs[1].Front == nil || vs[1].Front.Failed != 1 || vs[0].Containers == nil {
		t.Fatalf("ls json %+v", vs)
	}
	// The JSON names are what scripts use.
	for _, k := range []string{`"name"`, `"state"`, `"source"`, `"mount_ids"`, `"containers"`, `"front"`, `"dirty"`} {
		if !strings.Contains(res.stdout, k) {
			t.Errorf("ls json lacks %s", k)
		}
	}
}

func TestCLIStatus(t *testing.T) {
	r := newRig(t)
	r.volumes(t)
	r.op.setStatus("/data/p", func(st *driver.FrontStatus) {
		st.Dirty, st.DirtyBytes, st.Failed, st.Lag, st.Conflicts = 3, 3*1024*1024/2, 1, 2500*time.Millisecond, 1
		st.LastError, st.FailedPaths = "write /data/p/x/y: permission denied", []string{"x/y"}
		st.Writers = "the host file, by the kernel: the source is virtiofs"
		st.Xattrs = "refused (not supported): the source's file system takes none"
	})
	res := r.run(t, false, "status")
	if res.code != 0 {
		t.Fatalf("%+v", res)
	}
	if got := strings.Join(row(t, res.stdout, "d1"), "|"); got != "d1|delegated|3|1.5 MiB|2.5s|1|1|write /data/p/x/y: permission denied" {
		t.Fatalf("d1 row %q\n%s", got, res.stdout)
	}
	if got := strings.Join(row(t, res.stdout, "k"), "|"); got != "k|default|-|-|-|-|-|not mounted" {
		t.Fatalf("k row %q", got)
	}

	res = r.run(t, false, "status", "d1")
	for _, want := range []string{
		"Volume:        d1", "State:         delegated", "Source:        /data/p",
		"Mount IDs:     2 (aaaa, bbbbbbbbbbbb)", "Containers:    web",
		"Dirty:         3 files, 1.5 MiB", "Writeback lag: 2.5s", "Failed:        1", "Conflicts:     1",
		"Last error:    write /data/p/x/y: permission denied",
		"Writers:       the host file, by the kernel: the source is virtiofs",
		"Xattrs:        refused (not supported): the source's file system takes none",
		"Failed paths (journaled, retried):\n  /data/p/x/y\n",
	} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("status d1 lacks %q:\n%s", want, res.stdout)
		}
	}
	// Flags after the argument work too.
	res = r.run(t, false, "status", "d1", "--format", "json")
	var v volumeOut
	if err := json.Unmarshal([]byte(res.stdout), &v); err != nil || res.code != 0 {
		t.Fatalf("status json: %v %+v", err, res)
	}
	if v.Name != "d1" || v.Front == nil || v.Front.Dirty != 3 || v.Front.Lag != 2500*time.Millisecond || v.Front.FailedPaths[0] != "x/y" || v.Containers[0] != "web" {
		t.Fatalf("status json %+v", v)
	}

	res = r.run(t, false, "status", "nope")
	if res.code != ExitFailed || !strings.Contains(res.stderr, `no such volume "nope"`) {
		t.Fatalf("unknown: %+v", res)
	}
}

func TestCLIFlush(t *testing.T) {
	r := newRig(t)
	r.volumes(t)
	r.op.setStatus("/data/p", func(st *driver.FrontStatus) { st.Dirty, st.DirtyBytes = 3, 3000 })
	r.op.setFlush("/data/p", func(ctx context.Context) error {
		time.Sleep(30 * time.Millisecond)
		r.op.setStatus("/data/p", func(st *driver.FrontStatus) { st.Dirty, st.DirtyBytes = 0, 0 })
		return nil
	})

	// Not a terminal: plain lines.
	res := r.run(t, false, "flush", "d1")
	if res.code != ExitOK {
		t.Fatalf("flush: %+v", res)
	}
	if got := strings.Join(row(t, res.stdout, "d1"), "|"); !strings.HasPrefix(got, "d1|/data/p|on the host|") {
		t.Fatalf("result row %q", got)
	}
	if !strings.Contains(res.stderr, "flush: 3 files (2.9 KiB) left to write back\n") || !strings.Contains(res.stderr, "flush: 0 files (0 B) left to write back\n") ||
		strings.Contains(res.stderr, "\r") {
		t.Fatalf("plain progress %q", res.stderr)
	}

	// A terminal: a bar redrawn in place.
	r.op.setStatus("/data/p", func(st *driver.FrontStatus) { st.Dirty, st.DirtyBytes = 3, 3000 })
	res = r.run(t, true, "flush", "d1")
	if res.code != ExitOK || !strings.Contains(res.stderr, "\rflushing 1 volume(s) [") || !strings.Contains(res.stderr, "] 3/3 files, 0 B left") ||
		!strings.HasSuffix(res.stderr, "\n") {
		t.Fatalf("bar %q", res.stderr)
	}

	// A failure: exit status 1, the paths on stdout, a summary on stderr.
	r.op.setFlush("/data/p", func(ctx context.Context) error {
		return &writeback.FlushError{Failed: map[string]error{
			"b.txt":   errors.New("no space left on device"),
			"a/c.txt": errors.New("permission denied"),
		}}
	})
	res = r.run(t, false, "flush", "d1")
	if res.code != ExitFailed {
		t.Fatalf("failed flush exit %d: %+v", res.code, res)
	}
	if got := strings.Join(row(t, res.stdout, "d1"), "|"); !strings.HasPrefix(got, "d1|/data/p|FAILED (2 paths)|") {
		t.Fatalf("result row %q", got)
	}
	if !strings.Contains(res.stdout, "d1: not written back:\n  /data/p/a/c.txt: permission denied\n  /data/p/b.txt: no space left on device\n") {
		t.Fatalf("failed paths:\n%s", res.stdout)
	}
	if !strings.Contains(res.stderr, "1 of 1 volumes did not reach the host") {
		t.Fatalf("stderr %q", res.stderr)
	}
	res = r.run(t, false, "flush", "--format", "json")
	var results []FlushResult
	if err := json.Unmarshal([]byte(res.stdout), &results); err != nil {
		t.Fatalf("json: %v %q", err, res.stdout)
	}
	if res.code != ExitFailed || len(results) != 2 || results[0].OK || results[0].Failed[0].Path != "/data/p/a/c.txt" {
		t.Fatalf("flush all json: %d %+v", res.code, results)
	}

	// Back to healthy: exit 0 again.
	r.op.setFlush("/data/p", nil)
	if res = r.run(t, false, "flush"); res.code != ExitOK {
		t.Fatalf("%+v", res)
	}
	res = r.run(t, false, "flush", "nope")
	if res.code != ExitFailed || !strings.Contains(res.stderr, `no such volume "nope"`) {
		t.Fatalf("unknown: %+v", res)
	}
}

func TestCLILogs(t *testing.T) {
	r := newRig(t)
	r.volumes(t)
	res := r.run(t, false, "logs", "-n", "2")
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if res.code != 0 || len(lines) != 2 {
		t.Fatalf("logs -n 2: %+v", res)
	}
	res = r.run(t, false, "logs", "--volume", "c")
	if !regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT[0-9:.]+Z INFO  mounted volume=c id=cccc key=\w+ `).MatchString(res.stdout) {
		t.Fatalf("logs --volume c:\n%s", res.stdout)
	}
	if strings.Contains(res.stdout, "volume=d1") {
		t.Fatalf("other volume's lines:\n%s", res.stdout)
	}
	res = r.run(t, false, "logs", "--format", "json")
	for _, line := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
		var rec LogRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Message == "" || rec.Seq == 0 {
			t.Fatalf("json line %q: %v", line, err)
		}
	}

	// -f follows: new lines appear until the context ends.
	ctx, cancel := context.WithCancel(t.Context())
	var out syncBuffer
	done := make(chan int)
	c := &CLI{Stdout: &out, Stderr: &bytes.Buffer{}, Getenv: func(k string) string { return map[string]string{SocketEnv: r.sock}[k] }}
	go func() { done <- c.Run(ctx, []string{"logs", "-f", "-n", "1"}) }()
	time.Sleep(100 * time.Millisecond)
	r.drv.Create(t.Context(), "late", map[string]string{"source": "/data/late"})
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "volume=late") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 || !strings.Contains(out.String(), "volume=late") {
		t.Fatalf("follow: %d %q", code, out.String())
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestCLIUsage(t *testing.T) {
	r := newRig(t)
	for _, args := range [][]string{
		{}, {"frobnicate"}, {"status", "a", "b"}, {"ls", "--format", "xml"}, {"ls", "x"}, {"flush", "--timeout", "soon"},
	} {
		res := r.run(t, false, args...)
		if res.code != ExitUsage || !strings.Contains(res.stderr, "usage: bindstate") {
			t.Errorf("%q: %+v", args, res)
		}
	}
	// No socket anywhere.
	var errb bytes.Buffer
	c := &CLI{Stdout: &bytes.Buffer{}, Stderr: &errb, Getenv: func(string) string { return "" }}
	c.Run(t.Context(), []string{"ls", "--socket", r.sock + ".missing"})
	if !strings.Contains(errb.String(), "control socket") {
		t.Fatalf("missing socket: %q", errb.String())
	}
}

func TestBytesCell(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := bytesCell(n); got != want {
			t.Errorf("%d: %q, want %q", n, got, want)
		}
	}
}

// A read-only volume's state says so wherever the CLI shows it.
func TestStateCellSaysReadOnly(t *testing.T) {
	if got := stateCell(driver.VolumeStatus{State: "cached", ReadOnly: true}); got != "cached, read-only" {
		t.Errorf("read-only cached volume: %q", got)
	}
	if got := stateCell(driver.VolumeStatus{State: "cached"}); got != "cached" {
		t.Errorf("writable cached volume: %q", got)
	}
}
