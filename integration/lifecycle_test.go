package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bindstate/bindstate/integration/harness"
)

// TestCreate_RefusesInvalidOptions: docker volume create refuses a bad
// option with a message that lists what is valid, and creates nothing.
func TestCreate_RefusesInvalidOptions(t *testing.T) {
	d := need(t)
	s := newShareSource(t)
	cases := []struct {
		name string
		opts []string
		want []string // all in the error message
	}{
		{"unknown-state", []string{"source=" + s.Source, "state=bogus"}, []string{"bogus", "consistent", "cached", "delegated"}},
		{"unknown-consistency", []string{"source=" + s.Source, "consistency=fast"}, []string{"fast", "consistent", "cached", "delegated"}},
		{"relative-source", []string{"source=relative/dir", "state=cached"}, []string{"relative/dir", "absolute"}},
		{"missing-source", []string{"state=cached"}, []string{"source"}},
		{"outside-allowed-roots", []string{"source=" + env.outside, "state=cached"}, []string{env.outside, env.share.Mount}},
		{"system-dir", []string{"source=/etc", "state=consistent"}, []string{"/etc"}},
		{"unknown-option", []string{"source=" + s.Source, "state=cached", "colour=red"}, []string{"colour", "source", "state"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := "v-" + slug(t)
			args := []string{"volume", "create", "-d", pluginName}
			for _, o := range c.opts {
				args = append(args, "-o", o)
			}
			out, err := d.Try(append(args, name)...)
			if err == nil {
				d.Try("volume", "rm", "-f", name)
				t.Fatalf("docker volume create %v succeeded (%s); want it refused", c.opts, out)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message does not mention %q: %v", w, err)
				}
			}
			if _, err := d.Try("volume", "inspect", name); err == nil {
				t.Errorf("volume %s exists after a refused create", name)
			}
		})
	}
}

// TestD4_VolumesSurvivePluginDisableEnable: after docker plugin disable and
// enable, every volume still works: data written before is there, new
// writes reach the host, and no mount is stale.
func TestD4_VolumesSurvivePluginDisableEnable(t *testing.T) {
	d := need(t)
	states := []string{"consistent", "cached", "delegated"}
	vols := map[string]string{}
	srcs := map[string]src{}
	for _, st := range states {
		srcs[st] = newShareSource(t)
		vols[st] = createVolume(t, d, srcs[st].Source, st)
		runOnce(t, d, vols[st], "echo before > /data/before")
		mustHost(t, srcs[st].host("before"), "before\n")
	}

	d.Docker(t, "plugin", "disable", "-f", pluginName)
	enabled := false
	t.Cleanup(func() {
		if !enabled {
			d.Try("plugin", "enable", "--timeout", "120", pluginName)
		}
	})
	if err := d.EnablePlugin(pluginName); err != nil {
		t.Fatal(err)
	}
	enabled = true

	for _, st := range states {
		out, err := d.Try("run", "--rm", "--network", "none", "-v", vols[st]+":/data", image,
			"sh", "-c", "cat /data/before && echo after > /data/after")
		noStaleMount(t, out+fmt.Sprint(err))
		if err != nil {
			t.Fatalf("%s after re-enable: %v", st, err)
		}
		if out != "before" {
			t.Errorf("%s after re-enable reads %q, want before", st, out)
		}
		mustHost(t, srcs[st].host("after"), "after\n")
	}
}

// TestD4_VolumesSurviveDaemonRestart: a daemon restart with a delegated
// container running and unsynced changes: the changes are on the host once
// the daemon has stopped the container, the plugin comes back enabled, and
// every volume works again with no stale mount.
func TestD4_VolumesSurviveDaemonRestart(t *testing.T) {
	d := need(t)
	states := []string{"consistent", "cached", "delegated"}
	vols := map[string]string{}
	srcs := map[string]src{}
	for _, st := range states {
		srcs[st] = newShareSource(t)
		vols[st] = createVolume(t, d, srcs[st].Source, st)
	}
	id := d.Docker(t, "run", "-d", "--stop-timeout", "2", "--network", "none", "-v", vols["delegated"]+":/data", image, "sleep", "3600")
	t.Cleanup(func() { d.Try("rm", "-f", id) })
	sh(t, d, id, "mkdir /data/pending && echo unsynced > /data/pending/f")

	t.Cleanup(func() {
		if d.Pid() == 0 { // a failure between Stop and Start: the next tests need it
			if err := d.Start(); err != nil {
				t.Errorf("restart the daemon: %v", err)
			}
		}
	})
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	// D4: the daemon stopped the container before it went; its changes are out.
	mustHost(t, srcs["delegated"].host("pending/f"), "unsynced\n")
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	if got := d.Docker(t, "plugin", "inspect", "--format", "{{.Enabled}}", pluginName); got != "true" {
		t.Fatalf("plugin enabled after daemon restart: %s", got)
	}
	for _, st := range states {
		out, err := d.Try("run", "--rm", "--network", "none", "-v", vols[st]+":/data", image,
			"sh", "-c", "ls /data && echo after > /data/after")
		noStaleMount(t, out+fmt.Sprint(err))
		if err != nil {
			t.Fatalf("%s after daemon restart: %v", st, err)
		}
		mustHost(t, srcs[st].host("after"), "after\n")
	}
	out, err := d.Try("run", "--rm", "--network", "none", "-v", vols["delegated"]+":/data", image, "cat", "/data/pending/f")
	if err != nil || out != "unsynced" {
		t.Errorf("delegated volume after restart reads pending/f = %q, %v", out, err)
	}
	// the stopped container starts again on its volume
	d.Docker(t, "start", id)
	if got := sh(t, d, id, "cat /data/pending/f"); got != "unsynced" {
		t.Errorf("restarted container reads %q", got)
	}
}

// TestD4_JournalReplayedAfterPluginCrash: the plugin is killed (SIGKILL)
// while a delegated container has unsynced changes; nothing is lost: once
// the plugin is back (the daemon restarts a managed plugin that dies) the
// changes reach the host, and the volume works again with no stale mount.
func TestD4_JournalReplayedAfterPluginCrash(t *testing.T) {
	d := need(t)
	s := newShareSource(t)
	vol := createVolume(t, d, s.Source, "delegated")
	id := runDetached(t, d, vol)
	sh(t, d, id, "mkdir /data/j && for i in $(seq 1 50); do echo $i > /data/j/f$i; done")

	killPlugin(t, d)
	// The killed plugin's mount is dead in that container: remove it.
	d.Try("rm", "-f", id)

	for i := 1; i <= 50; i++ {
		waitHostFile(t, s.host(fmt.Sprintf("j/f%d", i)), fmt.Sprintf("%d\n", i), writebackDeadline)
	}
	out, err := d.Try("run", "--rm", "--network", "none", "-v", vol+":/data", image, "sh", "-c", "cat /data/j/f50 && echo again > /data/again")
	noStaleMount(t, out+fmt.Sprint(err))
	if err != nil || out != "50" {
		t.Fatalf("volume after the plugin crash: %q, %v", out, err)
	}
	mustHost(t, s.host("again"), "again\n")
	// The new mount took the dead one's place and went at the unmount: none
	// is left. (The dead one stayed beneath while the kernel kept its root's
	// attributes, which the plugin's restart took for a live mount.)
	if at := fuseMountsOf(t, s.Source); len(at) != 0 {
		t.Fatalf("FUSE mounts of %s left after the volume's last container: %q", s.Source, at)
	}
}

// TestD4_AContainersOpenFileKeepsItsWritesAcrossAPluginCrash: a process in
// a delegated container keeps a file open for writing (a log: O_WRONLY,
// which the plugin serves by passthrough) while the plugin is killed. Its
// mount is dead, but the kernel still writes that file, so its writes
// after the kill succeed; rule D4: they reach the host by the container's
// stop. Before store/leftwriters.go the restarted plugin wrote the file back
// once, as it was at the kill, and the lines after that never reached the
// host (it kept "line0\n").
func TestD4_AContainersOpenFileKeepsItsWritesAcrossAPluginCrash(t *testing.T) {
	d := need(t)
	off := d.LogSize()
	s := newShareSource(t)
	vol := createVolume(t, d, s.Source, "delegated")
	// Writes line N to its open log when /tmp/goN appears, then makes
	// /tmp/doneN (the container's own /tmp, not the volume).
	id := d.Docker(t, "run", "-d", "--stop-timeout", "1", "--network", "none", "-v", vol+":/data", image, "sh", "-c",
		`exec 3>>/data/log; n=0; while :; do if [ -e /tmp/go$n ]; then echo line$n >&3; touch /tmp/done$n; n=$((n+1)); fi; sleep 0.05; done`)
	t.Cleanup(func() { d.Try("rm", "-f", id) })
	line := func(n int) {
		t.Helper()
		sh(t, d, id, fmt.Sprintf("touch /tmp/go%d; while [ ! -e /tmp/done%d ]; do sleep 0.05; done", n, n))
	}
	line(0)
	killPlugin(t, d)
	line(1)
	line(2)
	d.Docker(t, "stop", id)
	mustHost(t, s.host("log"), "line0\nline1\nline2\n")
	// Nothing is left held: a new container's stop finds nothing to write.
	out, err := d.Try("run", "--rm", "--network", "none", "-v", vol+":/data", image, "sh", "-c", "cat /data/log && echo next >> /data/log")
	noStaleMount(t, out+fmt.Sprint(err))
	if err != nil || out != "line0\nline1\nline2" {
		t.Fatalf("a new container after the stop: %q, %v", out, err)
	}
	mustHost(t, s.host("log"), "line0\nline1\nline2\nnext\n")
	// The plugin's requests to its own mounts come from threads with file
	// tables of their own (plugin/ownmount), in the managed plugin too:
	// killed while one is served, it still goes.
	for _, line := range strings.Split(d.LogSince(off), "\n") {
		if strings.Contains(line, "shares the process's files") {
			t.Errorf("the managed plugin could not unshare its own-mount threads' file tables: %s", line)
		}
	}
}

// TestD4_UnmountIdempotentWithDockerCp: docker cp into a running container
// mounts its volumes again with the same mount ID and unmounts them after;
// the container's mount must survive that, and its stop still writes back.
func TestD4_UnmountIdempotentWithDockerCp(t *testing.T) {
	d := need(t)
	payload := filepath.Join(t.TempDir(), "payload")
	if err := os.WriteFile(payload, []byte("copied in\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, st := range []string{"cached", "delegated"} {
		t.Run(st, func(t *testing.T) {
			s := newShareSource(t)
			vol := createVolume(t, d, s.Source, st)
			id := runDetached(t, d, vol)
			sh(t, d, id, "echo first > /data/first")
			// a small file: a minute is plenty
			if _, _, err := d.RunTimeout(time.Minute, nil, "cp", payload, id+":/data/payload"); err != nil {
				t.Fatal(err)
			}
			out, err := d.Try("exec", id, "sh", "-c", "cat /data/payload /data/first && echo after > /data/after && ls /data")
			noStaleMount(t, out+fmt.Sprint(err))
			if err != nil {
				t.Fatalf("the container's mount after docker cp: %v", err)
			}
			if !strings.HasPrefix(out, "copied in\nfirst\n") {
				t.Errorf("after docker cp the container reads %q", out)
			}
			d.Docker(t, "cp", id+":/data/first", filepath.Join(t.TempDir(), "out"))
			d.Docker(t, "stop", "--time", "1", id)
			mustHost(t, s.host("payload"), "copied in\n")
			mustHost(t, s.host("after"), "after\n")
			out, err = d.Try("run", "--rm", "--network", "none", "-v", vol+":/data", image, "cat", "/data/after")
			noStaleMount(t, out+fmt.Sprint(err))
			if err != nil || out != "after" {
				t.Fatalf("a new container after the stop: %q, %v", out, err)
			}
			d.Docker(t, "rm", id)
		})
	}
}

// TestD4_WritebackRetriedWhenShareComesBack: the share vanishes (its sshd
// is killed) while a delegated container has unsynced changes; the stop
// cannot write them back: the plugin says which paths failed, keeps them,
// and writes them once the share is back.
func TestD4_WritebackRetriedWhenShareComesBack(t *testing.T) {
	d := need(t)
	s := newShareSource(t)
	vol := createVolume(t, d, s.Source, "delegated")
	id := d.Docker(t, "run", "-d", "--stop-timeout", "1", "--network", "none", "-v", vol+":/data", image, "sleep", "3600")
	t.Cleanup(func() { d.Try("rm", "-f", id) })
	sh(t, d, id, "ls -la /data >/dev/null")
	off := d.LogSize()

	if err := env.share.StopSSHD(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := env.share.StartSSHD(); err != nil {
				t.Errorf("restart the share's sshd: %v", err)
			}
		}
	})
	// The container keeps working on its local store while the share is gone.
	out, err := d.Try("exec", id, "sh", "-c", "echo kept > /data/kept-while-gone && cat /data/kept-while-gone")
	if err != nil || out != "kept" {
		t.Fatalf("delegated write while the share is gone: %q, %v", out, err)
	}
	start := time.Now()
	_, stopErr := d.Try("stop", id)
	t.Logf("docker stop with the share gone took %v (err %v)", time.Since(start).Round(time.Millisecond), stopErr)
	if _, err := os.Lstat(s.host("kept-while-gone")); err == nil {
		t.Fatalf("the file reached the host although the share was gone: the test did not test anything")
	}
	named := false
	for _, line := range strings.Split(d.LogSince(off), "\n") {
		if strings.Contains(line, "kept-while-gone") && strings.Contains(strings.ToLower(line), "fail") {
			named = true
		}
	}
	if !named {
		t.Errorf("no log line names the path that could not be written back (D4)")
	}

	if err := env.share.StartSSHD(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	took := waitHostFile(t, s.host("kept-while-gone"), "kept\n", 2*writebackDeadline)
	t.Logf("written back %v after the share came back", took)
	out, err = d.Try("run", "--rm", "--network", "none", "-v", vol+":/data", image, "cat", "/data/kept-while-gone")
	noStaleMount(t, out+fmt.Sprint(err))
	if err != nil || out != "kept" {
		t.Fatalf("volume after the share came back: %q, %v", out, err)
	}
}

// TestD4_ThePluginsOwnRequestsComeFromThreadsWithoutTheFuseDevice: the
// managed plugin, as Docker runs it, makes its requests to its own mounts
// (the refresh's, the restater's) from threads whose file table has no
// /dev/fuse, so that a plugin killed while it serves one goes (ownmount;
// its unit tests kill one). Where the kernel or Docker's profile for the
// plugin refused such a table, every thread would share the process's,
// /dev/fuse in it, and the plugin would say so in its log.
func TestD4_ThePluginsOwnRequestsComeFromThreadsWithoutTheFuseDevice(t *testing.T) {
	d := need(t)
	s := newShareSource(t)
	writeHost(t, s.host("f"), "x")
	vol := createVolume(t, d, s.Source, "cached")
	id := runDetached(t, d, vol)
	sh(t, d, id, "ls -l /data > /dev/null") // a listing: the restater's stats follow
	pid := bindstatePid(t)
	// fuseDevices counts a table's descriptors of /dev/fuse (char 10:229).
	fuseDevices := func(fdDir string) int {
		ents, err := os.ReadDir(fdDir)
		if err != nil {
			return -1
		}
		n := 0
		for _, e := range ents {
			var st syscall.Stat_t
			if syscall.Stat(filepath.Join(fdDir, e.Name()), &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFCHR && st.Rdev == 10<<8|229 {
				n++
			}
		}
		return n
	}
	if n := fuseDevices(fmt.Sprintf("/proc/%d/fd", pid)); n < 1 {
		t.Fatalf("the plugin's process has %d descriptors of /dev/fuse, want its mount's", n)
	}
	harness.Eventually(t, 30*time.Second, "a thread of the plugin without /dev/fuse (ownmount's)", func() (bool, string) {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return false, err.Error()
		}
		var own int
		for _, task := range tasks {
			if fuseDevices(fmt.Sprintf("/proc/%d/task/%s/fd", pid, task.Name())) == 0 {
				own++
			}
		}
		return own >= 2, fmt.Sprintf("%d of %d threads without it, want the refresh's and the restater's", own, len(tasks))
	})
	// The managed plugin logs through the daemon.
	if log := d.LogSince(0); strings.Contains(log, "share the process's files") {
		t.Fatal("the plugin says its own requests come from threads that share the process's files")
	}
}
