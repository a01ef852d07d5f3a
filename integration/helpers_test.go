package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bindstate/bindstate/integration/harness"
)

var seq atomic.Int64

// slug makes a short unique name for t (volume names, directories).
func slug(t *testing.T) string {
	s := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "-"))
	if len(s) > 40 {
		s = s[:40]
	}
	return fmt.Sprintf("%s-%d", strings.Trim(s, "-"), seq.Add(1))
}

// src is a source folder on the slow share: Source is what the plugin is
// given (through sshfs), Host the backing directory where host-side edits
// are made.
type src struct {
	Source string
	Host   string
}

func (s src) host(rel string) string { return filepath.Join(s.Host, rel) }

// newShareSource makes an empty folder on the share for t, through the
// sshfs mount (as a user would), and checks it is seen in the backing dir.
func newShareSource(t *testing.T) src {
	t.Helper()
	name := slug(t)
	s := src{Source: env.share.Source(name), Host: env.share.Host(name)}
	if err := os.Mkdir(s.Source, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Host); err != nil {
		t.Fatalf("mkdir through the share did not reach its backing dir: %v", err)
	}
	return s
}

// newLocalSource makes an empty folder on local disk (allowed root) for t.
func newLocalSource(t *testing.T) src {
	t.Helper()
	p := filepath.Join(env.local, slug(t))
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return src{Source: p, Host: p}
}

// createVolume creates a bindstate volume over source in state (and extra
// -o options), removed when t ends.
func createVolume(t *testing.T, d *harness.Daemon, source, state string, extra ...string) string {
	t.Helper()
	name := "v-" + slug(t) + "-" + state
	args := []string{"volume", "create", "-d", pluginName, "-o", "source=" + source, "-o", "state=" + state}
	for _, o := range extra {
		args = append(args, "-o", o)
	}
	d.Docker(t, append(args, name)...)
	t.Cleanup(func() {
		if _, err := d.Try("volume", "rm", "-f", name); err != nil {
			t.Errorf("remove volume %s: %v", name, err)
		}
	})
	return name
}

// runDetached starts a container with vol at /data running cmd (default:
// sleep), removed when t ends.
func runDetached(t *testing.T, d *harness.Daemon, vol string, cmd ...string) string {
	t.Helper()
	if len(cmd) == 0 {
		cmd = []string{"sleep", "3600"}
	}
	args := append([]string{"run", "-d", "--network", "none", "-v", vol + ":/data", image}, cmd...)
	id := d.Docker(t, args...)
	t.Cleanup(func() { d.Try("rm", "-f", id) })
	return id
}

// runOnce runs sh -c script in a new container with vol at /data and
// returns its output; the container is gone when it returns.
func runOnce(t *testing.T, d *harness.Daemon, vol, script string) string {
	t.Helper()
	return d.Docker(t, "run", "--rm", "--network", "none", "-v", vol+":/data", image, "sh", "-c", script)
}

// sh runs sh -c script in container id and returns its output; t fails if
// it fails.
func sh(t *testing.T, d *harness.Daemon, id, script string) string {
	t.Helper()
	return d.Docker(t, "exec", id, "sh", "-c", script)
}

// readHost reads a host file; "" and the error text if it cannot.
func readHost(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

// mustHost checks, right now (no waiting), that the host file has want.
func mustHost(t *testing.T, path, want string) {
	t.Helper()
	got, err := readHost(path)
	if err != nil {
		t.Fatalf("host: %v", err)
	}
	if got != want {
		t.Fatalf("host %s = %q, want %q", path, got, want)
	}
}

// writeHost replaces a host file atomically (write aside, rename in), as an
// editor does, so the plugin never sees it half written.
func writeHost(t *testing.T, path, content string) {
	t.Helper()
	tmp, err := os.CreateTemp(env.hostTmp, "edit-")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmp.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := tmp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		t.Fatal(err)
	}
}

// waitContainerFile waits until path in container id reads want.
func waitContainerFile(t *testing.T, d *harness.Daemon, id, path, want string, timeout time.Duration) time.Duration {
	t.Helper()
	return harness.Eventually(t, timeout, fmt.Sprintf("container sees %s = %q", path, want), func() (bool, string) {
		got, err := d.Try("exec", id, "cat", path)
		if err != nil {
			return false, err.Error()
		}
		return got == want, fmt.Sprintf("%q", got)
	})
}

// waitHostFile waits until the host file reads want.
func waitHostFile(t *testing.T, path, want string, timeout time.Duration) time.Duration {
	t.Helper()
	return harness.Eventually(t, timeout, fmt.Sprintf("host has %s = %q", path, want), func() (bool, string) {
		got, err := readHost(path)
		if err != nil {
			return false, err.Error()
		}
		return got == want, fmt.Sprintf("%q", got)
	})
}

// noStaleMount fails t if out shows a dead FUSE mount.
func noStaleMount(t *testing.T, out string) {
	t.Helper()
	if strings.Contains(strings.ToLower(out), "transport endpoint is not connected") {
		t.Fatalf("stale FUSE mount: %s", out)
	}
}

// fuseMountsOf lists the mount points of the plugin's FUSE mounts of source
// in this namespace's /proc/self/mountinfo, where a managed plugin's mounts
// show beneath its propagated mount (source has nothing mountinfo escapes).
func fuseMountsOf(t *testing.T, source string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var at []string
	for line := range strings.Lines(string(b)) {
		_, after, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(line), strings.Fields(after)
		if ok && len(f) > 4 && len(g) > 1 && g[0] == "fuse.bindstate" && g[1] == "bindstate:"+source {
			at = append(at, f[4])
		}
	}
	return at
}

// The tree a container writes in the write tests, and how it looks on the host.
const writeTreeScript = `set -e
cd /data
echo one > f1
mkdir -p dir/sub
echo two > dir/sub/f2
printf 'x%.0s' $(seq 1 5000) > big
ln -s dir/sub/f2 link
echo old > renamed-from
mv renamed-from renamed
chmod 0600 f1
echo gone > removed
rm removed
mkdir emptydir
`

func checkTree(t *testing.T, host string) {
	t.Helper()
	mustHost(t, filepath.Join(host, "f1"), "one\n")
	mustHost(t, filepath.Join(host, "dir/sub/f2"), "two\n")
	mustHost(t, filepath.Join(host, "big"), strings.Repeat("x", 5000))
	mustHost(t, filepath.Join(host, "renamed"), "old\n")
	if target, err := os.Readlink(filepath.Join(host, "link")); err != nil || target != "dir/sub/f2" {
		t.Errorf("host link: %q, %v; want a symlink to dir/sub/f2", target, err)
	}
	if fi, err := os.Stat(filepath.Join(host, "f1")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("host f1 mode: %v, %v; want 0600", fi, err)
	}
	for _, gone := range []string{"removed", "renamed-from"} {
		if _, err := os.Lstat(filepath.Join(host, gone)); !os.IsNotExist(err) {
			t.Errorf("host %s: %v; want it gone", gone, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(host, "emptydir")); err != nil || !fi.IsDir() {
		t.Errorf("host emptydir: %v; want a directory", err)
	}
}

// waitShareShows waits until path, seen through the share's mountpoint
// (sshfs, with its attribute cache: what the plugin sees), has size want.
func waitShareShows(t *testing.T, path string, want int64) time.Duration {
	t.Helper()
	return harness.Eventually(t, hostEditDeadline, fmt.Sprintf("the share shows %s with size %d", path, want), func() (bool, string) {
		fi, err := os.Stat(path)
		if err != nil {
			return false, err.Error()
		}
		return fi.Size() == want, fmt.Sprintf("size %d mtime %v", fi.Size(), fi.ModTime())
	})
}

// anotherDaemon starts a daemon of its own, beneath a new short directory
// (its data root, socket and config: no plugin, no image), from the same
// programs as like; setup, if not nil, changes it before it starts. It is
// stopped, by PID, and its directory removed when the test ends.
func anotherDaemon(t *testing.T, like *harness.Daemon, setup func(*harness.Daemon)) *harness.Daemon {
	t.Helper()
	dir, err := harness.MakeShortDir()
	if err != nil {
		t.Fatal(err)
	}
	d := harness.NewDaemon(dir)
	d.Dockerd, d.DockerCLI, d.ExtraPath = like.Dockerd, like.DockerCLI, like.ExtraPath
	if setup != nil {
		setup(d)
	}
	t.Cleanup(func() {
		if err := d.Cleanup(); err != nil {
			t.Errorf("the daemon in %s: %v", dir, err)
		}
	})
	if err := d.Start(); err != nil {
		t.Fatalf("start a daemon in %s: %v\n%s", dir, err, d.LogTail(40))
	}
	d.ShowLogOnFailure(t)
	return d
}

// liveRestoreDaemon is a daemon of its own started with --live-restore
// (containers and managed plugins run on while it is down, and it takes
// them back when it starts), with the test image and the plugin.
type liveRestoreDaemon struct {
	d        *harness.Daemon
	pluginID string
}

// newLiveRestoreDaemon starts one from the same programs as like (Debian's
// dockerd or the patched one) and installs the plugin from env.pluginDir,
// allowed the share. All is removed when the test ends.
func newLiveRestoreDaemon(t *testing.T, like *harness.Daemon) *liveRestoreDaemon {
	t.Helper()
	d := anotherDaemon(t, like, func(d *harness.Daemon) { d.ExtraArgs = append(d.ExtraArgs, "--live-restore") })
	if err := d.ImportBusybox(image, env.tools.Busybox, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.InstallPlugin(pluginName, env.pluginDir, "ALLOWED_ROOTS="+env.share.Mount, "LOG_LEVEL=debug"); err != nil {
		t.Fatalf("%v\n%s", err, d.LogTail(40))
	}
	id, err := d.PluginID(pluginName)
	if err != nil {
		t.Fatal(err)
	}
	// A daemon that stops with live-restore leaves containers and plugins
	// running: the plugin is removed before the daemon stops (cleanups run
	// last registered first: this one before anotherDaemon's, and a
	// container's and a volume's, registered later, before this one).
	t.Cleanup(func() {
		d.Try("plugin", "disable", "-f", pluginName)
		d.Try("plugin", "rm", "-f", pluginName)
	})
	return &liveRestoreDaemon{d: d, pluginID: id}
}

// pluginProcess is the pid of the bindstate binary among the processes of
// the managed plugin with that id, or 0 if it has none (yet).
func pluginProcess(id string) int {
	for _, p := range harness.PluginPids(id) {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); strings.TrimSpace(string(comm)) == "bindstate" {
			return p
		}
	}
	return 0
}

// pluginPid waits for the managed plugin with that id to run and returns
// the pid of its binary.
func pluginPid(t *testing.T, id string) int {
	t.Helper()
	var pid int
	harness.Eventually(t, 90*time.Second, "the managed plugin's process", func() (bool, string) {
		pid = pluginProcess(id)
		return pid != 0, fmt.Sprint("pids in its cgroup: ", harness.PluginPids(id))
	})
	return pid
}

// runThroughACrash runs a container with mount (a -v argument that mounts
// at /data: VOLUME:/data, or SRC:/data:STATE) that writes before.txt, then during.txt
// while the daemon is killed, then after.txt once it is back, each read back
// through the mount at once. It fails t unless the daemon that came back
// kept the same plugin process and the container running. It returns the
// container, still running, for the caller to stop.
func (lr *liveRestoreDaemon) runThroughACrash(t *testing.T, mount string) string {
	t.Helper()
	d := lr.d
	ctl := t.TempDir()
	// Told through a plain bind (ctl) when to write each file, not by
	// sleeping; each write is acknowledged in ctl.
	step := func(name string) string {
		return fmt.Sprintf("while [ ! -e /ctl/%[1]s.go ]; do sleep 0.1; done; echo %[1]s > /data/%[1]s.txt && "+
			"[ \"$(cat /data/%[1]s.txt)\" = %[1]s ] && touch /ctl/%[1]s.done; ", name)
	}
	cid := d.Docker(t, "run", "-d", "--network", "none", "--stop-timeout", "5", "-v", mount, "-v", ctl+":/ctl", image,
		"sh", "-c", step("before")+step("during")+step("after")+"exec sleep 3600")
	t.Cleanup(func() { d.Try("rm", "-f", cid) })
	do := func(name string) {
		t.Helper()
		writeHost(t, filepath.Join(ctl, name+".go"), "")
		harness.Eventually(t, 30*time.Second, "the container wrote and read back /data/"+name+".txt", func() (bool, string) {
			_, err := os.Stat(filepath.Join(ctl, name+".done"))
			return err == nil, ""
		})
	}
	do("before")
	pid := pluginPid(t, lr.pluginID)
	if err := d.Kill(); err != nil {
		t.Fatal(err)
	}
	do("during") // the daemon down: the plugin serves the mount on
	if err := d.Start(); err != nil {
		t.Fatalf("start the daemon again: %v\n%s", err, d.LogTail(40))
	}
	if got := pluginPid(t, lr.pluginID); got != pid {
		t.Fatalf("the daemon started the plugin again (pid %d, then %d): with live-restore it must keep it, and the container's mount with it", pid, got)
	}
	if running := d.Docker(t, "inspect", "-f", "{{.State.Running}}", cid); running != "true" {
		t.Fatalf("the container after the daemon came back: running=%s; want it restored alive", running)
	}
	do("after")
	return cid
}
