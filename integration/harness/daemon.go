package harness

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// CommandTimeout bounds every docker CLI call.
var CommandTimeout = 3 * time.Minute

// Daemon is a private dockerd: its own data root, exec root, socket, pid
// file, config file ("{}": the system's /etc/docker/daemon.json is never
// read) and log. It never touches the system daemon.
type Daemon struct {
	// Dockerd is the daemon binary (default /usr/sbin/dockerd). A patched
	// engine can be used by setting it (and ExtraPath for a newer runc).
	Dockerd string
	// ExtraPath is put in front of PATH for the daemon (runc, containerd).
	ExtraPath []string
	// ExtraArgs are added to the daemon's command line.
	ExtraArgs []string
	// DockerCLI is the docker client binary (default: docker on PATH).
	DockerCLI string

	Dir        string // everything lives beneath: /tmp/bs-XXXX (short: unix socket paths)
	DataRoot   string
	ExecRoot   string
	Socket     string
	PidFile    string
	ConfigFile string
	LogFile    string
	CLIConfig  string // DOCKER_CONFIG of the CLI: empty, never ~/.docker

	pid    int
	waited chan struct{} // closed when the daemon process is reaped
}

// MakeShortDir creates /tmp/bs-XXXX (4 hex digits), short enough that unix
// socket paths beneath it (plugins/<64-hex id>/x.sock) stay under 108 bytes.
func MakeShortDir() (string, error) {
	for range 100 {
		b := make([]byte, 2)
		rand.Read(b)
		dir := "/tmp/bs-" + hex.EncodeToString(b)
		if err := os.Mkdir(dir, 0o755); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrExist) {
			return "", err
		}
	}
	return "", errors.New("no free /tmp/bs-XXXX name")
}

// NewDaemon describes a daemon living beneath dir (see MakeShortDir).
func NewDaemon(dir string) *Daemon {
	return &Daemon{
		Dockerd:    "/usr/sbin/dockerd",
		DockerCLI:  "docker",
		Dir:        dir,
		DataRoot:   filepath.Join(dir, "d"),
		ExecRoot:   filepath.Join(dir, "x"),
		Socket:     filepath.Join(dir, "docker.sock"),
		PidFile:    filepath.Join(dir, "docker.pid"),
		ConfigFile: filepath.Join(dir, "daemon.json"),
		LogFile:    filepath.Join(dir, "dockerd.log"),
		CLIConfig:  filepath.Join(dir, "cli"),
	}
}

// Host is the DOCKER_HOST of the daemon.
func (d *Daemon) Host() string { return "unix://" + d.Socket }

// Pid is the daemon's process id (0 when not running).
func (d *Daemon) Pid() int { return d.pid }

// Start starts the daemon and waits until it answers (up to 2 minutes).
func (d *Daemon) Start() error {
	if d.pid != 0 {
		return fmt.Errorf("dockerd already running (pid %d)", d.pid)
	}
	if len(d.Socket) >= 108 {
		return fmt.Errorf("socket path %s is too long for a unix socket", d.Socket)
	}
	for _, dir := range []string{d.DataRoot, d.ExecRoot, d.CLIConfig} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	if err := os.WriteFile(d.ConfigFile, []byte("{}\n"), 0o644); err != nil {
		return err
	}
	logf, err := os.OpenFile(d.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "==== harness: starting dockerd at %s ====\n", time.Now().Format(time.RFC3339Nano))
	args := []string{
		"--data-root", d.DataRoot,
		"--exec-root", d.ExecRoot,
		"-H", d.Host(),
		"--pidfile", d.PidFile,
		"--config-file", d.ConfigFile,
		"--storage-driver", "vfs",
		"--bridge=none", "--iptables=false", "--ip6tables=false",
		"--log-level", "debug",
	}
	args = append(args, d.ExtraArgs...)
	cmd := exec.Command(d.Dockerd, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = d.daemonEnv()
	// Own process group: a ^C to the test does not reach it (Stop does);
	// if the test binary dies (go test -timeout), the daemon is told to stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", d.Dockerd, err)
	}
	d.pid = cmd.Process.Pid
	d.waited = make(chan struct{})
	go func() { cmd.Wait(); close(d.waited) }()

	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := d.ping(); err == nil {
			return nil
		}
		select {
		case <-d.waited:
			d.pid = 0
			return fmt.Errorf("dockerd exited during start; log %s:\n%s", d.LogFile, d.LogTail(40))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.Stop()
			return fmt.Errorf("dockerd did not answer on %s within 2m; log:\n%s", d.Socket, d.LogTail(40))
		}
	}
}

func (d *Daemon) daemonEnv() []string {
	var env []string
	path := os.Getenv("PATH")
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH", "DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "NOTIFY_SOCKET":
			continue
		}
		env = append(env, kv)
	}
	if len(d.ExtraPath) > 0 {
		path = strings.Join(d.ExtraPath, ":") + ":" + path
	}
	if !strings.Contains(":"+path+":", ":/usr/sbin:") {
		path += ":/usr/sbin:/sbin"
	}
	return append(env, "PATH="+path)
}

func (d *Daemon) ping() error {
	c := http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", d.Socket)
		}},
	}
	resp, err := c.Get("http://docker/_ping")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("_ping: %s", resp.Status)
	}
	return nil
}

// Stop stops the daemon by its PID: SIGTERM, then SIGKILL after 90 s (and
// then its containerd and shims, which a killed dockerd leaves behind).
func (d *Daemon) Stop() error {
	if d.pid == 0 {
		return nil
	}
	pid := d.pid
	kids := descendants(pid)
	syscall.Kill(pid, syscall.SIGTERM)
	var err error
	select {
	case <-d.waited:
	case <-time.After(90 * time.Second):
		err = fmt.Errorf("dockerd (pid %d) ignored SIGTERM for 90s: killed", pid)
		syscall.Kill(pid, syscall.SIGKILL)
		<-d.waited
		for _, k := range kids {
			syscall.Kill(k, syscall.SIGKILL)
		}
	}
	d.pid = 0
	return err
}

// Kill kills the daemon as a crash would (SIGKILL: no shutdown; the shims,
// their containers and managed plugins live on), and waits until the
// containerd it started is gone too, as it goes with the daemon
// (Pdeathsig): a daemon started while that containerd is still dying finds
// its pid alive, waits for its socket and gives up ("timeout waiting for
// containerd to start"), as Debian's docker.io did in a test that started
// it at once.
func (d *Daemon) Kill() error {
	if d.pid == 0 {
		return nil
	}
	var containerd []int
	for _, k := range descendants(d.pid) {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", k)); strings.TrimSpace(string(comm)) == "containerd" {
			containerd = append(containerd, k)
		}
	}
	if err := syscall.Kill(d.pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill dockerd (pid %d): %w", d.pid, err)
	}
	<-d.waited
	d.pid = 0
	for _, p := range containerd {
		deadline := time.Now().Add(60 * time.Second)
		for {
			_, err := os.Stat(fmt.Sprintf("/proc/%d", p))
			if os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the killed daemon's containerd (pid %d) still there after 60 s", p)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// Restart stops and starts the daemon, keeping its state.
func (d *Daemon) Restart() error {
	if err := d.Stop(); err != nil {
		return err
	}
	return d.Start()
}

// Cleanup stops the daemon, unmounts everything left beneath Dir (deepest
// first, lazily if busy) and removes Dir, but only when no mount is left
// beneath it: a bind of the host's "/" or a share must never be deleted
// through.
func (d *Daemon) Cleanup() error {
	errs := []error{d.Stop()}
	errs = append(errs, UnmountBeneath(d.Dir))
	if left := MountsBeneath(d.Dir); len(left) > 0 {
		errs = append(errs, fmt.Errorf("not removing %s: still mounted: %s", d.Dir, strings.Join(left, ", ")))
	} else {
		errs = append(errs, os.RemoveAll(d.Dir))
	}
	return errors.Join(errs...)
}

// MountsBeneath lists the mount points at or beneath dir, deepest first.
func MountsBeneath(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return slices.Compact(out)
}

func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// UnmountBeneath unmounts every mount at or beneath dir, deepest first,
// detaching those that are busy.
func UnmountBeneath(dir string) error {
	var errs []error
	for range 5 {
		left := MountsBeneath(dir)
		if len(left) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, mp := range left {
			if err := syscall.Unmount(mp, 0); err != nil {
				if err2 := syscall.Unmount(mp, syscall.MNT_DETACH); err2 != nil && !errors.Is(err2, syscall.EINVAL) {
					errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err2))
				}
			}
		}
	}
	if left := MountsBeneath(dir); len(left) > 0 {
		errs = append(errs, fmt.Errorf("still mounted beneath %s: %s", dir, strings.Join(left, ", ")))
	}
	return errors.Join(errs...)
}

// descendants lists the descendants of pid (from /proc).
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
	}
	var out []int
	var walk func(int)
	walk = func(p int) {
		for _, c := range children[p] {
			out = append(out, c)
			walk(c)
		}
	}
	walk(pid)
	return out
}

// LogSize is the current size of the daemon log (see LogSince).
func (d *Daemon) LogSize() int64 {
	fi, err := os.Stat(d.LogFile)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// LogSince returns the daemon log from byte offset off.
func (d *Daemon) LogSince(off int64) string {
	f, err := os.Open(d.LogFile)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	f.Seek(off, io.SeekStart)
	b, _ := io.ReadAll(f)
	return string(b)
}

// LogTail returns the last n lines of the daemon log.
func (d *Daemon) LogTail(n int) string {
	b, err := os.ReadFile(d.LogFile)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ShowLogOnFailure registers a cleanup that prints, if t failed, what the
// daemon (and the managed plugin, which logs through it) wrote during t,
// without the daemon's own debug lines (API calls); the whole log stays in
// LogFile.
func (d *Daemon) ShowLogOnFailure(t testing.TB) {
	t.Helper()
	off := d.LogSize()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		t.Logf("daemon log (%s) during %s, daemon debug lines left out:\n%s", d.LogFile, t.Name(), FilterLog(d.LogSince(off), 80000))
	})
}

// pluginLine turns a line the daemon logged for the managed plugin
// (time=... level=error msg="{\"time\":...}" plugin=ID) into the plugin's
// own line, "plugin: {...}"; other lines are returned as they are.
func pluginLine(line string) string {
	i := strings.Index(line, ` msg="`)
	j := strings.LastIndex(line, `" plugin=`)
	if i < 0 || j <= i {
		return line
	}
	msg, err := strconv.Unquote(line[i+5 : j+1])
	if err != nil {
		return line
	}
	return "plugin: " + strings.TrimRight(msg, "\n") + "\n"
}

// FilterLog drops the daemon's debug lines (but never the plugin's) and,
// past max bytes, the middle.
func FilterLog(log string, max int) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(log, "\n") {
		if strings.Contains(line, "level=debug") && !strings.Contains(line, " plugin=") {
			continue
		}
		b.WriteString(pluginLine(line))
	}
	out := b.String()
	if len(out) > max {
		out = out[:max/4] + "\n[... " + strconv.Itoa(len(out)-max) + " bytes left out ...]\n" + out[len(out)-3*max/4:]
	}
	return out
}

// Cmd is a docker CLI command against this daemon (no ~/.docker, no context).
func (d *Daemon) Cmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, d.DockerCLI, args...)
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_API_VERSION":
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = append(env, "DOCKER_HOST="+d.Host(), "DOCKER_CONFIG="+d.CLIConfig, "DOCKER_CLI_HINTS=false")
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Run runs the docker CLI with stdin (may be nil) and returns its stdout and
// stderr; err says how it failed, with stderr.
func (d *Daemon) Run(stdin io.Reader, args ...string) (stdout, stderr string, err error) {
	return d.RunTimeout(CommandTimeout, stdin, args...)
}

// RunTimeout is Run with its own time limit.
func (d *Daemon) RunTimeout(timeout time.Duration, stdin io.Reader, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := d.Cmd(ctx, args...)
	var o, e bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &o, &e
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("docker %s: timed out after %v", strings.Join(args, " "), timeout)
	} else if err != nil {
		err = fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(e.String()))
	}
	return o.String(), e.String(), err
}

// Try runs the docker CLI and returns its stdout (trimmed) and error.
func (d *Daemon) Try(args ...string) (string, error) {
	o, _, err := d.Run(nil, args...)
	return strings.TrimSpace(o), err
}

// Docker runs the docker CLI and fails t if it fails; it returns stdout
// with surrounding space trimmed.
func (d *Daemon) Docker(t testing.TB, args ...string) string {
	t.Helper()
	o, _, err := d.Run(nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(o)
}
