package integration

// Fault injection (issue 5), run by `make test-faults` (BINDSTATE_FAULTS=1;
// skipped in a plain test-integration run): kill -9 of the managed plugin
// during delegated writes and during writeback, a daemon restart with
// running containers, the share going away / filling up / turning
// read-only, host and container editing the same file. Each check names
// what was acknowledged to the container and what reached the host.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bindstate/bindstate/integration/harness"
)

func needFaults(t *testing.T) *harness.Daemon {
	t.Helper()
	if os.Getenv("BINDSTATE_FAULTS") != "1" {
		t.Skip("fault injection: make test-faults (BINDSTATE_FAULTS=1)")
	}
	return need(t)
}

func faultEnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// record is bstool acklog's record i (see integration/internal/bstool).
func record(i int) string {
	head := fmt.Sprintf("rec %07d ", i)
	return head + strings.Repeat(string(rune('a'+i%26)), 1023-len(head)) + "\n"
}

// ackLog reads what acklog printed: the highest record whose write
// returned ("w I") and whose fsync returned ("s I"); -1 if none.
func ackLog(out string) (wrote, synced int, done bool) {
	wrote, synced = -1, -1
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 1 && f[0] == "done" {
			done = true
		}
		if len(f) != 2 {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		switch f[0] {
		case "w":
			wrote = max(wrote, n)
		case "s":
			synced = max(synced, n)
		}
	}
	return
}

// checkRecords reports how many of records 0..upto are missing or wrong on
// the host under dir, and any record beyond upto that is torn or out of
// place (a duplicate would shift the rest).
func checkRecords(dir string, upto int) (missing int, detail string) {
	files := map[int][]byte{}
	for k := 0; k < 8; k++ {
		b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("f%d", k)))
		files[k] = b
	}
	var first string
	for i := 0; i <= upto; i++ {
		b := files[i%8]
		off := (i / 8) * 1024
		if off+1024 > len(b) || string(b[off:off+1024]) != record(i) {
			missing++
			if first == "" {
				first = fmt.Sprintf("first missing/wrong record %d (f%d at %d, file has %d bytes)", i, i%8, off, len(b))
			}
		}
	}
	// beyond the acknowledged ones: whole records in place, at most one torn at the end
	for k, b := range files {
		for j := 0; (j+1)*1024 <= len(b); j++ {
			if i := j*8 + k; i > upto && string(b[j*1024:(j+1)*1024]) != record(i) {
				first += fmt.Sprintf("; f%d record %d (unacknowledged) is not record %d: duplicated or torn", k, j, i)
				missing++
				break
			}
		}
	}
	return missing, first
}

// bindstatePid is the pid of the suite's managed plugin's binary.
func bindstatePid(t *testing.T) int {
	t.Helper()
	return pluginPid(t, env.pluginID)
}

// killPlugin kills the plugin with SIGKILL and waits until the daemon has
// restarted it and it answers again.
func killPlugin(t *testing.T, d *harness.Daemon) time.Duration {
	t.Helper()
	old := bindstatePid(t)
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", old, err)
	}
	start := time.Now()
	harness.Eventually(t, 120*time.Second, "the daemon restarts the killed plugin", func() (bool, string) {
		if p := pluginProcess(env.pluginID); p == 0 || p == old {
			return false, "no new plugin process"
		}
		if _, err := d.Try("volume", "ls", "-q", "-f", "driver="+pluginName); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return time.Since(start)
}

// reusable checks that a volume works again with no manual step: a new
// container writes and reads, and (delegated) the write is on the host
// once it exits.
func reusable(t *testing.T, d *harness.Daemon, vol string, s src) {
	t.Helper()
	out, err := d.Try("run", "--rm", "--network", "none", "-v", vol+":/data", image, "sh", "-c", "echo again > /data/again && cat /data/again")
	if err != nil || out != "again" {
		t.Fatalf("the volume after the fault: %q %v; want it to work with no manual step", out, err)
	}
	waitHostFile(t, s.host("again"), "again\n", writebackDeadline)
}

// TestFault_D4_KillPluginDuringWrites: kill -9 of the plugin at a random
// point while a container writes records into a delegated mount (fsync
// every 64). Every record whose write returned in the container must reach
// the host once the daemon has restarted the plugin (journaled changes are
// resumed), none duplicated or torn, and the volume works again.
func TestFault_D4_KillPluginDuringWrites(t *testing.T) {
	d := needFaults(t)
	runs := faultEnvInt("BINDSTATE_FAULT_RUNS", 4)
	seed := int64(faultEnvInt("BINDSTATE_FAULT_SEED", 1))
	totalAcked, totalLost := 0, 0
	for run := 0; run < runs; run++ {
		t.Run(fmt.Sprint("run", run), func(t *testing.T) {
			rnd := rand.New(rand.NewSource(seed*1000 + int64(run)))
			delay := time.Duration(100+rnd.Intn(1500)) * time.Millisecond
			s := newLocalSource(t)
			if run%2 == 1 {
				s = newShareSource(t) // slow host: more left to write back
			}
			vol := createVolume(t, d, s.Source, "delegated")
			id := runDetached(t, d, vol, "bstool", "acklog", "/data", "6000", "64")
			time.Sleep(delay)
			back := killPlugin(t, d)
			code, _ := d.Try("wait", id)
			logs, _ := d.Try("logs", id)
			wrote, synced, done := ackLog(logs)
			d.Try("rm", "-f", id)
			t.Logf("seed %d run %d: killed after %v (source %s); container exit %s, acknowledged writes 0..%d, fsynced 0..%d, finished %v; plugin back after %v",
				seed, run, delay, filepath.Base(filepath.Dir(s.Source)), code, wrote, synced, done, back.Round(time.Millisecond))
			var missing int
			var detail string
			took := time.Now()
			deadline := time.Now().Add(writebackDeadline)
			for {
				missing, detail = checkRecords(s.Host, wrote)
				if missing == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(harness.PollInterval)
			}
			totalAcked += wrote + 1
			totalLost += missing
			if missing > 0 {
				t.Errorf("seed %d run %d: %d of %d acknowledged records not on the host %v after the restart: %s",
					seed, run, missing, wrote+1, writebackDeadline, detail)
			} else {
				t.Logf("all %d acknowledged records on the host %v after the restart", wrote+1, time.Since(took).Round(time.Millisecond))
			}
			reusable(t, d, vol, s)
		})
	}
	t.Logf("kill -9 during writes: %d runs (seed %d), %d acknowledged records, %d lost", runs, seed, totalAcked, totalLost)
}

// TestFault_D4_KillPluginDuringWriteback: the container writes records
// with no fsync and exits; while its exit flush writes them to the slow
// share, the plugin is killed. All of them must still reach the host.
func TestFault_D4_KillPluginDuringWriteback(t *testing.T) {
	d := needFaults(t)
	runs := max(1, faultEnvInt("BINDSTATE_FAULT_RUNS", 4)/2)
	seed := int64(faultEnvInt("BINDSTATE_FAULT_SEED", 1))
	totalAcked, totalLost, staleMounts := 0, 0, 0
	for run := 0; run < runs; run++ {
		t.Run(fmt.Sprint("run", run), func(t *testing.T) {
			rnd := rand.New(rand.NewSource(seed*2000 + int64(run)))
			delay := time.Duration(rnd.Intn(1200)) * time.Millisecond
			s := newShareSource(t)
			// Not createVolume: the removal is checked here, as part of the
			// test. A plugin killed inside Unmount is not sent that Unmount
			// again (or, by the stock engine, sent it empty:
			// moby/moby#39331): the restarted plugin ends a mount whose
			// Unmount it had recorded (releasing IDs in volumes.json,
			// TestRestartEndsAnUnmountCutShort), and Remove ends any other
			// (driver endLostUnmounts), or the volume would stay "in use"
			// for good.
			vol := "v-" + slug(t)
			d.Docker(t, "volume", "create", "-d", pluginName, "-o", "source="+s.Source, "-o", "state=delegated", vol)
			t.Cleanup(func() {
				if _, err := d.Try("volume", "rm", vol); err != nil {
					if strings.Contains(err.Error(), "in use by") {
						staleMounts++
					}
					t.Errorf("remove volume %s after the container is gone: %v", vol, err)
				}
			})
			id := d.Docker(t, "run", "-d", "--network", "none", "-v", vol+":/data", image, "bstool", "acklog", "/data", "3000", "0")
			t.Cleanup(func() { d.Try("rm", "-f", id) })
			harness.Eventually(t, 60*time.Second, "the container wrote everything", func() (bool, string) {
				out, _ := d.Try("logs", id)
				_, _, done := ackLog(out)
				return done, fmt.Sprint(len(out), " bytes of log")
			})
			// it exits now: the daemon's Unmount flushes; kill in the middle
			time.Sleep(delay)
			back := killPlugin(t, d)
			d.Try("wait", id)
			logs, _ := d.Try("logs", id)
			wrote, _, _ := ackLog(logs)
			var missing int
			var detail string
			deadline := time.Now().Add(writebackDeadline)
			for {
				missing, detail = checkRecords(s.Host, wrote)
				if missing == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(harness.PollInterval)
			}
			totalAcked += wrote + 1
			totalLost += missing
			t.Logf("seed %d run %d: killed %v after the last write; plugin back after %v; %d acknowledged, %d missing", seed, run, delay, back.Round(time.Millisecond), wrote+1, missing)
			if missing > 0 {
				t.Errorf("%d of %d acknowledged records not on the host: %s", missing, wrote+1, detail)
			}
			reusable(t, d, vol, s)
		})
	}
	t.Logf("kill -9 during writeback: %d runs (seed %d), %d acknowledged records, %d lost; volumes left \"in use\": %d", runs, seed, totalAcked, totalLost, staleMounts)
}

// TestFault_D4_C3_DaemonRestart: the daemon restarts while containers use a
// cached and a delegated mount: what they wrote is on the host, and the
// volumes work again afterwards.
func TestFault_D4_C3_DaemonRestart(t *testing.T) {
	d := needFaults(t)
	type one struct {
		s   src
		vol string
	}
	var vols []one
	for _, state := range []string{"cached", "delegated"} {
		s := newShareSource(t)
		vol := createVolume(t, d, s.Source, state)
		id := runDetached(t, d, vol, "sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done")
		sh(t, d, id, "echo "+state+" > /data/before-restart && dd if=/dev/urandom of=/data/blob bs=1k count=3000 2>/dev/null && sha256sum /data/blob | cut -d' ' -f1 > /data/blob.sum")
		vols = append(vols, one{s, vol})
	}
	start := time.Now()
	if err := d.Restart(); err != nil {
		t.Fatalf("daemon restart: %v", err)
	}
	bindstatePid(t)
	t.Logf("daemon restarted in %v", time.Since(start).Round(time.Millisecond))
	for i, v := range vols {
		state := []string{"cached", "delegated"}[i]
		waitHostFile(t, v.s.host("before-restart"), state+"\n", writebackDeadline)
		sum, _ := readHost(v.s.host("blob.sum"))
		if got := fileSHA(t, v.s.host("blob")); got != strings.TrimSpace(sum) {
			t.Errorf("%s: host blob sha %s, the container wrote %s", state, got, strings.TrimSpace(sum))
		}
		reusable(t, d, v.vol, v.s)
	}
}

// shareFault is one way the share turns unhealthy, and how it heals.
type shareFault struct {
	name       string
	errno      string // what a cached write fails with (text of the errno)
	break_     func(t *testing.T, s src)
	heal       func(t *testing.T, s src)
	dataKiB    int
	needsSetup func(t *testing.T, s src)
}

// TestFault_D4_C3_ShareUnhealthy: the share vanishes (sshd stopped), fills
// up (the folder is a 2 MiB tmpfs) or refuses writes (immutable): delegated
// writes keep landing locally, cached writes fail with the host's errno,
// the delegated exit flush reports the failure (Unmount error in the daemon
// log, naming the path), and once the share is healthy again the backlog is
// written: nothing lost, nothing duplicated, no leftovers.
func TestFault_D4_C3_ShareUnhealthy(t *testing.T) {
	d := needFaults(t)
	faults := []shareFault{
		{
			name: "sshd-stopped", errno: "",
			break_: func(t *testing.T, s src) {
				if err := env.share.StopSSHD(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { env.share.StartSSHD() })
			},
			heal: func(t *testing.T, s src) {
				if err := env.share.StartSSHD(); err != nil {
					t.Fatal(err)
				}
			},
			dataKiB: 512,
		},
		{
			name: "full", errno: "No space left on device",
			needsSetup: func(t *testing.T, s src) {
				if err := syscall.Mount("tmpfs", s.Host, "tmpfs", 0, "size=2m"); err != nil {
					t.Skipf("tmpfs: %v", err)
				}
				t.Cleanup(func() { syscall.Unmount(s.Host, syscall.MNT_DETACH) })
			},
			break_: func(t *testing.T, s src) {
				f, err := os.Create(s.host("filler"))
				if err != nil {
					t.Fatal(err)
				}
				f.Write(make([]byte, 1900<<10))
				f.Close()
			},
			heal: func(t *testing.T, s src) {
				if err := os.Remove(s.host("filler")); err != nil {
					t.Fatal(err)
				}
			},
			dataKiB: 1024,
		},
		{
			name: "read-only", errno: "Operation not permitted",
			break_: func(t *testing.T, s src) {
				if out, err := exec.Command("chattr", "+i", s.Host).CombinedOutput(); err != nil {
					t.Skipf("chattr +i: %v %s", err, out)
				}
				t.Cleanup(func() { exec.Command("chattr", "-i", s.Host).Run() })
			},
			heal: func(t *testing.T, s src) {
				if out, err := exec.Command("chattr", "-i", s.Host).CombinedOutput(); err != nil {
					t.Fatalf("chattr -i: %v %s", err, out)
				}
			},
			dataKiB: 512,
		},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			ds := newShareSource(t)
			cs := newShareSource(t)
			if f.needsSetup != nil {
				f.needsSetup(t, ds)
				f.needsSetup(t, cs)
			}
			dvol := createVolume(t, d, ds.Source, "delegated")
			cvol := createVolume(t, d, cs.Source, "cached")
			did := runDetached(t, d, dvol)
			cid := runDetached(t, d, cvol)
			// warm both (the root listed), then break the share
			sh(t, d, did, "ls /data >/dev/null")
			sh(t, d, cid, "ls /data >/dev/null")
			f.break_(t, ds)
			if f.name != "sshd-stopped" {
				f.break_(t, cs)
			}
			off := d.LogSize()
			write := fmt.Sprintf("dd if=/dev/urandom of=/data/payload bs=1k count=%d 2>/dev/null && sha256sum /data/payload | cut -d' ' -f1 > /data/payload.sum && echo small > /data/small", f.dataKiB)
			// delegated: lands locally
			if out, err := d.Try("exec", did, "sh", "-c", write); err != nil {
				t.Fatalf("delegated write with the share %s: %v %s; want it to land locally", f.name, err, out)
			}
			// cached: fails with the host's errno (dd's message kept), i.e.
			// what the same write through the share itself gets (sshfs maps
			// the server's errors: ENOSPC arrives as EIO, EPERM as EACCES)
			hostErr := ""
			if f.name != "sshd-stopped" {
				werr := os.WriteFile(filepath.Join(cs.Source, "probe"), make([]byte, f.dataKiB<<10), 0o644)
				var en syscall.Errno
				if errors.As(werr, &en) {
					hostErr = en.Error()
				}
				os.Remove(filepath.Join(cs.Source, "probe"))
				t.Logf("the same write through the share itself: %v", werr)
			}
			out, err := d.Try("exec", cid, "sh", "-c", strings.Replace(write, " 2>/dev/null", "", 1))
			if err == nil {
				t.Errorf("cached write with the share %s succeeded (%s); want the host's error", f.name, out)
			} else if hostErr != "" && !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(hostErr)) {
				t.Errorf("cached write with the share %s failed with %v; the share itself gives %q (C3: the host's errno)", f.name, err, hostErr)
			} else {
				t.Logf("cached write refused as on the host: %v", err)
			}
			// the exit flush reports the failure, naming the path
			stopOut, stopErr := d.Try("stop", "--time", "1", did)
			logs := d.LogSince(off)
			unmountErr := ""
			for _, l := range strings.Split(logs, "\n") {
				if strings.Contains(l, "Unmount") && strings.Contains(l, "payload") || strings.Contains(l, "writeback before unmount failed") && strings.Contains(l, "payload") {
					unmountErr = l
					break
				}
			}
			if unmountErr == "" {
				t.Errorf("no Unmount / writeback error naming payload in the daemon log after docker stop (stop: %q %v) (D4)", stopOut, stopErr)
			} else {
				t.Logf("D4 report: %.300s", unmountErr)
			}
			// ... and `bindstate status` names it: the log line above is what
			// D4 requires; status is checked too, but only reported (a gap,
			// see the report), not failed on
			volOut, verr := pluginStatus(t, dvol)
			allOut, aerr := pluginStatus(t, "")
			switch {
			case verr != nil || aerr != nil:
				t.Errorf("bindstate status: %v %s / %v %s", verr, volOut, aerr, allOut)
			case strings.Contains(volOut, "payload") || strings.Contains(allOut, "payload"):
				t.Logf("bindstate status names payload")
			default:
				t.Logf("GAP: neither `bindstate status %s` nor `bindstate status` names payload, which the stopped container left unwritten (only the log does): %.300s", dvol, volOut)
			}
			if st, err := d.Try("run", "--rm", "--network", "none", "-v", dvol+":/data", image, "cat", "/data/small"); err != nil || st != "small" {
				t.Errorf("delegated data while the share is %s, through a new container: %q %v", f.name, st, err)
			}
			// heal: the backlog is written, once
			f.heal(t, ds)
			if f.name != "sshd-stopped" {
				f.heal(t, cs)
			}
			took := waitHostFile(t, ds.host("small"), "small\n", 120*time.Second)
			harness.Eventually(t, 120*time.Second, "payload on the host with the container's hash", func() (bool, string) {
				sum, _ := readHost(ds.host("payload.sum"))
				got := fileSHA(t, ds.host("payload"))
				return sum != "" && got == strings.TrimSpace(sum), got + " vs " + sum
			})
			t.Logf("backlog on the host %v after the share was healthy again", took)
			filepath.Walk(ds.Host, func(p string, fi os.FileInfo, err error) error {
				if err == nil && strings.Contains(fi.Name(), ".bindstate-") {
					t.Errorf("leftover on the host: %s", p)
				}
				return nil
			})
			if out, err := d.Try("exec", cid, "sh", "-c", "echo ok > /data/healthy && cat /data/healthy"); err != nil || out != "ok" {
				t.Errorf("cached mount after the share healed: %q %v", out, err)
			}
		})
	}
}

// TestFault_D7_HostAndContainerEditBetweenSyncs: on a local source, the
// host and the container change the same file between syncs: the
// container's version is written, the host's kept aside, and it is logged.
func TestFault_D7_HostAndContainerEditBetweenSyncs(t *testing.T) {
	d := needFaults(t)
	s := newLocalSource(t)
	writeHost(t, s.host("c.txt"), "base")
	vol := createVolume(t, d, s.Source, "delegated", "rescan=1h")
	off := d.LogSize()
	id := runDetached(t, d, vol)
	if got := sh(t, d, id, "cat /data/c.txt"); got != "base" {
		t.Fatalf("container reads %q", got)
	}
	writeHost(t, s.host("c.txt"), "host-edit")
	sh(t, d, id, "echo container-edit > /data/c.txt")
	d.Docker(t, "stop", "--time", "1", id)
	mustHost(t, s.host("c.txt"), "container-edit\n")
	m, _ := filepath.Glob(s.host("c.txt.bindstate-conflict-*"))
	if len(m) != 1 {
		t.Fatalf("conflict copies: %v; want one", m)
	}
	mustHost(t, m[0], "host-edit")
	if l := d.LogSince(off); !strings.Contains(l, "host_copy") || !strings.Contains(l, "c.txt") {
		t.Errorf("no log line names the conflict")
	}
}

// pluginStatus runs `bindstate status` (the plugin's own binary) against the
// managed plugin's control socket.
func pluginStatus(t *testing.T, vol string) (string, error) {
	t.Helper()
	pid := bindstatePid(t)
	args := []string{"status", "--format", "json", "--socket", controlSocket(t, pid)}
	if vol != "" {
		args = append(args, vol)
	}
	out, err := exec.Command(fmt.Sprintf("/proc/%d/exe", pid), args...).CombinedOutput()
	return string(out), err
}

// TestFault_DaemonDown_ThePluginNeverWaitsForItsLog: while the daemon is
// down nobody reads the managed plugin's stderr (the containerd shim holds
// the fifo open and does not read it), and once the pipes are full a
// plain write to it blocks. The plugin logs from a queue of its own, so it
// serves on, with its log past the queue's limit dropped and counted; the
// daemon, back, reads what was kept and the notice of what was dropped.
// Each request here logs a line, as a failing check does while the share is
// gone: 6,000 of them are some 1.3 MB, ten times what the pipes hold, more
// than the queue keeps.
func TestFault_DaemonDown_ThePluginNeverWaitsForItsLog(t *testing.T) {
	d := needFaults(t)
	s := newShareSource(t)
	vol := createVolume(t, d, s.Source, "delegated")
	pid := bindstatePid(t)
	ctl := controlSocket(t, pid)

	off := d.LogSize()
	if err := d.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if d.Pid() == 0 {
			if err := d.Start(); err != nil {
				t.Errorf("start the daemon again: %v", err)
			}
		}
	})
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", ctl)
		},
	}}
	const requests = 6000
	for i := range requests {
		resp, err := client.Post("http://plugin/v1/flush?volume="+vol, "", nil)
		if err != nil {
			t.Fatalf("flush request %d of %d, the daemon down: %v (the plugin waits for its log to be read?)", i+1, requests, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("flush request %d: %s", i+1, resp.Status)
		}
	}

	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 60*time.Second, "the daemon's log has the plugin's notice of dropped records", func() (bool, string) {
		return strings.Contains(d.LogSince(off), "log records dropped here"), ""
	})
	// The plugin served every request above with the daemon down; whether
	// the daemon, back, keeps that process or starts the plugin again is
	// its own affair (Debian's docker.io starts it again).
	if got := bindstatePid(t); got != pid {
		t.Logf("the daemon started the plugin again (pid %d, then %d)", pid, got)
	}
	if n := strings.Count(d.LogSince(off), "flush requested over the control socket"); n == 0 || n >= requests {
		t.Errorf("%d of %d flush requests logged once the daemon was back; want those the queue kept: some, not all", n, requests)
	}
}

// controlSocket is a short path to the managed plugin's control socket,
// which is beneath its root (/proc/PID/root), at a path longer than a unix
// socket address may be: a symlink, which connect follows.
func controlSocket(t *testing.T, pid int) string {
	t.Helper()
	root := fmt.Sprintf("/proc/%d/root", pid)
	socks, _ := filepath.Glob(root + "/run/docker/plugins/bindstate-control/control.sock")
	more, _ := filepath.Glob(root + "/run/docker/plugins/*/bindstate-control/control.sock")
	socks = append(socks, more...)
	if len(socks) == 0 {
		t.Fatalf("no control socket under %s/run/docker/plugins", root)
	}
	dir, err := os.MkdirTemp("", "bsctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	link := filepath.Join(dir, "c")
	if err := os.Symlink(socks[0], link); err != nil {
		t.Fatal(err)
	}
	return link
}

// rule D4 across a daemon crash with live-restore (`dockerd
// --live-restore`: containers run on while the daemon is down, and it takes
// them back when it starts). The managed plugin runs on with them, the same
// process, so a running container's delegated volume is served through the
// outage and after it, with no remount; what the container wrote before,
// during and after is on the host once its stop, handled by the daemon
// that came back, returns. (Without live-restore the daemon stops the
// containers and starts the plugin again when it comes back: the
// other fault tests.)
func TestFault_D4_LiveRestoreKeepsThePluginAndAContainersVolume(t *testing.T) {
	lr := newLiveRestoreDaemon(t, needFaults(t))
	s := newShareSource(t)
	vol := createVolume(t, lr.d, s.Source, "delegated")
	cid := lr.runThroughACrash(t, vol+":/data")
	lr.d.Docker(t, "stop", cid) // the daemon that came back unmounts: the writeback
	for _, name := range []string{"before", "during", "after"} {
		mustHost(t, s.host(name+".txt"), name+"\n")
	}
}
