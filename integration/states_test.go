package integration

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/bindstate/bindstate/integration/harness"
)

// mountType is the file-system type of /data in container id.
func mountType(t *testing.T, d *harness.Daemon, id string) string {
	t.Helper()
	for _, line := range strings.Split(sh(t, d, id, "cat /proc/mounts"), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[1] == "/data" {
			return f[2]
		}
	}
	t.Fatalf("no /data in the container's /proc/mounts")
	return ""
}

// TestK2_ConsistentSeesBothWaysImmediately: consistent is a plain bind of
// the source (here the sshfs share itself, no FUSE of ours); container
// writes are on the host when the syscall returns; host edits are seen as
// soon as the share shows them.
func TestK2_ConsistentSeesBothWaysImmediately(t *testing.T) {
	d := need(t)
	for _, state := range []string{"consistent", "default"} {
		t.Run(state, func(t *testing.T) {
			s := newShareSource(t)
			vol := createVolume(t, d, s.Source, state)

			runOnce(t, d, vol, writeTreeScript)
			checkTree(t, s.Host)

			id := runDetached(t, d, vol)
			if typ := mountType(t, d, id); typ != "fuse.sshfs" {
				t.Errorf("/data is %q in the container: want the share itself (fuse.sshfs), a plain bind (K2)", typ)
			}
			sh(t, d, id, "echo from-container > /data/c && mkdir /data/cdir")
			mustHost(t, s.host("c"), "from-container\n")
			if fi, err := os.Stat(s.host("cdir")); err != nil || !fi.IsDir() {
				t.Errorf("host cdir: %v", err)
			}

			writeHost(t, s.host("fromhost"), "h1")
			took := waitContainerFile(t, d, id, "/data/fromhost", "h1", hostEditDeadline)
			t.Logf("host edit seen in the container after %v (through sshfs's own caching)", took)
		})
	}
}

// TestC3_CachedWritesReachHostBeforeReturn: every write, metadata change
// and directory change in a cached mount is on the host when the syscall
// (here: the docker exec / docker run running it) returns. No waiting.
func TestC3_CachedWritesReachHostBeforeReturn(t *testing.T) {
	d := need(t)
	s := newShareSource(t)
	vol := createVolume(t, d, s.Source, "cached")

	runOnce(t, d, vol, writeTreeScript)
	checkTree(t, s.Host)

	id := runDetached(t, d, vol)
	if typ := mountType(t, d, id); !strings.HasPrefix(typ, "fuse") || typ == "fuse.sshfs" {
		t.Errorf("/data is %q in the container: want the plugin's FUSE mount", typ)
	}
	sh(t, d, id, "echo a > /data/a")
	mustHost(t, s.host("a"), "a\n")
	sh(t, d, id, "echo more >> /data/a")
	mustHost(t, s.host("a"), "a\nmore\n")
	sh(t, d, id, "mkdir -p /data/x/y && mv /data/a /data/x/y/b")
	mustHost(t, s.host("x/y/b"), "a\nmore\n")
	if _, err := os.Lstat(s.host("a")); !os.IsNotExist(err) {
		t.Errorf("host a after rename: %v; want gone", err)
	}
	sh(t, d, id, "chmod 0640 /data/x/y/b")
	if fi, err := os.Stat(s.host("x/y/b")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("host x/y/b mode after chmod: %v %v; want 0640", fi, err)
	}
	sh(t, d, id, "truncate -s 1 /data/x/y/b")
	mustHost(t, s.host("x/y/b"), "a")
	sh(t, d, id, "rm -r /data/x")
	if _, err := os.Lstat(s.host("x")); !os.IsNotExist(err) {
		t.Errorf("host x after rm -r: %v; want gone", err)
	}
}

// watchLine matches a line of "bstool watch": EVENT NAME CONTENT.
func watchLines(out, name string) []string {
	var lines []string
	re := regexp.MustCompile(`^\S+ ` + regexp.QuoteMeta(name) + ` `)
	for _, l := range strings.Split(out, "\n") {
		if re.MatchString(l) {
			lines = append(lines, l)
		}
	}
	return lines
}

// startWatcher runs a container whose main process watches /data with
// inotify and prints each event with what the file reads right after it.
func startWatcher(t *testing.T, d *harness.Daemon, vol string) string {
	t.Helper()
	id := runDetached(t, d, vol, "bstool", "watch", "/data")
	harness.Eventually(t, hostEditDeadline, "watcher ready", func() (bool, string) {
		out, err := d.Try("logs", id)
		if err != nil {
			return false, err.Error()
		}
		return strings.HasPrefix(out, "ready"), out
	})
	return id
}

// TestC2_CachedHostEditsReachContainerWithEvents: an edit made directly on
// the host (in the share's backing dir: no inotify through sshfs) reaches a
// cached mount within a bounded time, raises an inotify event inside the
// container, and after the event the container reads the host's content.
// So does a read-only volume (-o readonly=true, served without OPEN), which
// refuses the container's writes.
func TestC2_CachedHostEditsReachContainerWithEvents(t *testing.T) {
	d := need(t)
	t.Run("writable", func(t *testing.T) { testCachedHostEditsReachContainer(t, d) })
	t.Run("readonly", func(t *testing.T) { testCachedHostEditsReachContainer(t, d, "readonly=true") })
}

func testCachedHostEditsReachContainer(t *testing.T, d *harness.Daemon, opts ...string) {
	s := newShareSource(t)
	writeHost(t, s.host("existing.txt"), "v1")
	writeHost(t, s.host("doomed.txt"), "doomed")
	vol := createVolume(t, d, s.Source, "cached", opts...)
	id := startWatcher(t, d, vol)
	if got := sh(t, d, id, "cat /data/existing.txt"); got != "v1" {
		t.Fatalf("container reads existing.txt = %q, want v1", got)
	}
	if len(opts) > 0 {
		_, err := d.Try("exec", id, "sh", "-c", "echo no > /data/existing.txt")
		if err == nil || !strings.Contains(err.Error(), "Read-only file system") {
			t.Errorf("a write in a read-only volume: %v; want it refused (Read-only file system)", err)
		}
		if st := d.Docker(t, "volume", "inspect", "-f", "{{.Status.readonly}}", vol); st != "true" {
			t.Errorf("docker volume inspect: Status.readonly %q, want true", st)
		}
	}

	// A different size: sftp carries mtimes in whole seconds, so an edit of
	// the same size within the same second cannot be seen through sshfs.
	writeHost(t, s.host("existing.txt"), "v2-edited")
	writeHost(t, s.host("new.txt"), "fresh")
	took := waitContainerFile(t, d, id, "/data/new.txt", "fresh", hostEditDeadline)
	t.Logf("new host file seen after %v", took)
	waitContainerFile(t, d, id, "/data/existing.txt", "v2-edited", hostEditDeadline)

	// A host-side delete and a new directory reach the container too, with events.
	if err := os.Remove(s.host("doomed.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(s.host("newdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, hostEditDeadline, "container sees the host's delete and mkdir", func() (bool, string) {
		out, err := d.Try("exec", id, "sh", "-c", "test -e /data/doomed.txt && echo doomed-still-there; test -d /data/newdir && echo newdir-there")
		return err == nil && out == "newdir-there", fmt.Sprint(out, err)
	})
	harness.Eventually(t, hostEditDeadline, "delete event in the container for doomed.txt", func() (bool, string) {
		out, _ := d.Try("logs", id)
		return slices.Contains(watchLines(out, "doomed.txt"), "delete doomed.txt -"), fmt.Sprintf("%q", watchLines(out, "doomed.txt"))
	})

	for name, want := range map[string]string{"new.txt": "fresh", "existing.txt": "v2-edited"} {
		harness.Eventually(t, hostEditDeadline, "inotify event in the container for host-edited "+name, func() (bool, string) {
			out, _ := d.Try("logs", id)
			lines := watchLines(out, name)
			for _, l := range lines {
				if strings.HasSuffix(l, " "+want) {
					return true, l
				}
			}
			return false, fmt.Sprintf("events for %s: %q", name, lines)
		})
	}
}

// TestD6_DelegatedHostChangeToUntouchedPathReachesContainer: a host edit to
// a path the container has not changed still reaches a delegated mount.
func TestD6_DelegatedHostChangeToUntouchedPathReachesContainer(t *testing.T) {
	d := need(t)
	s := newShareSource(t)
	writeHost(t, s.host("existing.txt"), "v1")
	vol := createVolume(t, d, s.Source, "delegated")
	id := startWatcher(t, d, vol)
	if got := sh(t, d, id, "cat /data/existing.txt"); got != "v1" {
		t.Fatalf("container reads existing.txt = %q, want v1", got)
	}
	// The container changes something else meanwhile (not synced).
	sh(t, d, id, "echo mine > /data/mine.txt")

	writeHost(t, s.host("existing.txt"), "v2-edited") // another size: see TestC2
	writeHost(t, s.host("new.txt"), "fresh")
	took := waitContainerFile(t, d, id, "/data/new.txt", "fresh", hostEditDeadline)
	t.Logf("new host file seen after %v", took)
	waitContainerFile(t, d, id, "/data/existing.txt", "v2-edited", hostEditDeadline)
	if got := sh(t, d, id, "cat /data/mine.txt"); got != "mine" {
		t.Errorf("container's own file after the host refresh: %q, want mine", got)
	}
	// D1: an event delivered for a path the container did not modify shows
	// the host's content of that moment: here the last event of each name
	// must show the final content.
	out, _ := d.Try("logs", id)
	for name, want := range map[string]string{"new.txt": "fresh", "existing.txt": "v2-edited"} {
		if lines := watchLines(out, name); len(lines) > 0 && !strings.HasSuffix(lines[len(lines)-1], " "+want) {
			t.Errorf("D1: last event for %s reads %q, want content %q", name, lines[len(lines)-1], want)
		}
	}
}

// TestD2_DelegatedSyncPutsDataOnHost: in a delegated mount fsync,
// fdatasync, msync(MS_SYNC) and fsync of a directory return only once the
// data (and, for a directory, its entries) is on the host. Each call has its
// own subtest, on its own mount.
//
// sync(2) and syncfs(2) are not barriers here: Linux sends FUSE_SYNCFS only
// to virtiofs servers, so a FUSE file system never hears of them. What is
// guaranteed is that after sync the data reaches the host within the
// writeback delay: the last subtest waits for that, with a deadline.
func TestD2_DelegatedSyncPutsDataOnHost(t *testing.T) {
	d := need(t)
	cases := []struct {
		name, script string
		want         map[string]string // host path -> content, right after
		gone         []string
		wait         bool // bounded wait instead of "right after"
	}{
		{"fsync", "echo c > /data/c && bstool fsync /data/c && bstool fsync /data",
			map[string]string{"c": "c\n"}, nil, false},
		{"fdatasync", "echo d > /data/d && bstool fdatasync /data/d && bstool fsync /data",
			map[string]string{"d": "d\n"}, nil, false},
		{"fsync-new-dirs", "mkdir -p /data/sub/deeper && echo b > /data/sub/deeper/b && bstool fsync /data/sub/deeper/b && bstool fsync /data/sub/deeper && bstool fsync /data/sub && bstool fsync /data",
			map[string]string{"sub/deeper/b": "b\n"}, nil, false},
		// the file and its entry are on the host first; then only msync
		{"msync", "echo old > /data/m && bstool fsync /data/m && bstool fsync /data && bstool msync /data/m mapped-text",
			map[string]string{"m": "mapped-text"}, nil, false},
		// fsync of the directory alone is the barrier for renames and removals
		{"fsync-dir-after-rename-and-rm", "echo e > /data/e && echo r > /data/r && bstool fsync /data/e && bstool fsync /data/r && bstool fsync /data && mv /data/e /data/e2 && rm /data/r && bstool fsync /data",
			map[string]string{"e2": "e\n"}, []string{"e", "r"}, false},
		{"sync-then-writeback-delay", "echo a > /data/a && mkdir /data/sd && echo b > /data/sd/b && sync",
			map[string]string{"a": "a\n", "sd/b": "b\n"}, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newShareSource(t)
			vol := createVolume(t, d, s.Source, "delegated")
			id := runDetached(t, d, vol)
			if typ := mountType(t, d, id); !strings.HasPrefix(typ, "fuse") || typ == "fuse.sshfs" {
				t.Errorf("/data is %q in the container: want the plugin's FUSE mount", typ)
			}
			sh(t, d, id, c.script)
			for p, want := range c.want {
				if c.wait {
					took := waitHostFile(t, s.host(p), want, writebackDeadline)
					t.Logf("%s on the host %v after sync returned", p, took)
				} else {
					mustHost(t, s.host(p), want)
				}
			}
			for _, p := range c.gone {
				if _, err := os.Lstat(s.host(p)); !os.IsNotExist(err) {
					t.Errorf("host %s: %v; want it gone", p, err)
				}
			}
		})
	}
}

// TestD4_DelegatedWritebackAtExit: everything a container changed in a
// delegated mount is on the host when its stop is reported (docker run
// returning, docker stop returning), with no sync in the container.
func TestD4_DelegatedWritebackAtExit(t *testing.T) {
	d := need(t)
	t.Run("run-rm", func(t *testing.T) {
		s := newShareSource(t)
		vol := createVolume(t, d, s.Source, "delegated")
		runOnce(t, d, vol, writeTreeScript)
		checkTree(t, s.Host)
	})
	t.Run("run", func(t *testing.T) {
		s := newShareSource(t)
		vol := createVolume(t, d, s.Source, "delegated")
		id := d.Docker(t, "run", "-d", "--network", "none", "-v", vol+":/data", image, "sh", "-c", writeTreeScript)
		t.Cleanup(func() { d.Try("rm", "-f", id) })
		if code := d.Docker(t, "wait", id); code != "0" {
			t.Fatalf("container exit status %s, want 0", code)
		}
		checkTree(t, s.Host)
	})
	t.Run("stop", func(t *testing.T) {
		s := newShareSource(t)
		vol := createVolume(t, d, s.Source, "delegated")
		id := runDetached(t, d, vol)
		sh(t, d, id, "mkdir /data/s && echo unsynced > /data/s/f && dd if=/dev/zero of=/data/s/zeros bs=1k count=2000 2>/dev/null")
		d.Docker(t, "stop", "--time", "1", id)
		mustHost(t, s.host("s/f"), "unsynced\n")
		if fi, err := os.Stat(s.host("s/zeros")); err != nil || fi.Size() != 2000*1024 {
			t.Fatalf("host s/zeros: %v %v; want 2048000 bytes", fi, err)
		}
	})
}

// TestD7_DelegatedConflictKeepsHostCopyAside: the host changes a file the
// container has also changed (and not yet written back): after writeback
// the container's version is in place, the host's is kept aside as
// NAME.bindstate-conflict-*, and a log line says so.
func TestD7_DelegatedConflictKeepsHostCopyAside(t *testing.T) {
	d := need(t)
	s := newShareSource(t)
	writeHost(t, s.host("c.txt"), "base")
	// rescan=1h: the plugin must not pick the host edit up before the
	// writeback, so that the conflict is certain to happen there.
	vol := createVolume(t, d, s.Source, "delegated", "rescan=1h")
	off := d.LogSize()
	id := runDetached(t, d, vol)
	if got := sh(t, d, id, "cat /data/c.txt"); got != "base" {
		t.Fatalf("container reads %q, want base", got)
	}
	writeHost(t, s.host("c.txt"), "host-edit")
	// The plugin sees the host only through sshfs, which caches attributes
	// (~20 s): wait until the edit shows through the share's mountpoint, as
	// the plugin will see it at writeback, before the container writes.
	took := waitShareShows(t, s.Source+"/c.txt", int64(len("host-edit")))
	t.Logf("host edit visible through sshfs after %v", took)
	sh(t, d, id, "echo container-edit > /data/c.txt")
	d.Docker(t, "stop", "--time", "1", id)

	mustHost(t, s.host("c.txt"), "container-edit\n")
	ents, err := os.ReadDir(s.Host)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	found := false
	for _, e := range ents {
		names = append(names, e.Name())
		if strings.HasPrefix(e.Name(), "c.txt.bindstate-conflict-") {
			if got, _ := readHost(s.host(e.Name())); got == "host-edit" {
				found = true
			} else {
				t.Errorf("conflict copy %s holds %q, want host-edit", e.Name(), got)
			}
		}
	}
	if !found {
		t.Errorf("no c.txt.bindstate-conflict-* holding the host's edit; host dir has %q", names)
	}
	// The test's own names contain "conflict": look at lines naming c.txt.
	logged := false
	for _, line := range strings.Split(d.LogSince(off), "\n") {
		l := strings.ReplaceAll(strings.ToLower(line), "delegatedconflictkeepshostcopyaside", "x")
		if strings.Contains(l, "conflict") && strings.Contains(l, "c.txt") {
			logged = true
		}
	}
	if !logged {
		t.Errorf("no log line names the conflict on c.txt (D7: never lost without a log line)")
	}
}

// TestD8_SpecialFilesPassThrough: FIFOs, sockets and device nodes made in a
// cached or delegated mount are created on the host at once (and removed
// there at once).
// On the sshfs share, which cannot hold a FIFO, the container gets the
// same refusal as with a plain bind, and nothing stands in for it.
func TestD8_SpecialFilesPassThrough(t *testing.T) {
	d := need(t)
	for _, state := range []string{"cached", "delegated"} {
		t.Run(state+"/local", func(t *testing.T) {
			s := newLocalSource(t)
			vol := createVolume(t, d, s.Source, state)
			id := runDetached(t, d, vol)
			sh(t, d, id, "mkfifo /data/p && bstool mksock /data/sock && mknod /data/null c 1 3")
			for name, want := range map[string]os.FileMode{"p": os.ModeNamedPipe, "sock": os.ModeSocket, "null": os.ModeDevice | os.ModeCharDevice} {
				fi, err := os.Lstat(s.host(name))
				if err != nil {
					t.Errorf("host %s right after the container made it: %v", name, err)
					continue
				}
				if fi.Mode().Type() != want {
					t.Errorf("host %s is %v, want type %v", name, fi.Mode().Type(), want)
				}
			}
			sh(t, d, id, "rm /data/p /data/sock /data/null")
			for _, name := range []string{"p", "sock", "null"} {
				if _, err := os.Lstat(s.host(name)); !os.IsNotExist(err) {
					t.Errorf("host %s right after the container removed it: %v; want it gone", name, err)
				}
			}
		})
		// A FIFO made on the host is not the host's pipe inside a FUSE
		// mount (the kernel attaches the pipe to the FUSE inode): a known
		// limit, documented by the lead; not checked here.
	}

	t.Run("share", func(t *testing.T) {
		ref := newShareSource(t)
		refVol := createVolume(t, d, ref.Source, "consistent")
		refOut, refErr := d.Try("run", "--rm", "--network", "none", "-v", refVol+":/data", image, "bstool", "mkfifo", "/data/p")
		if refErr == nil {
			t.Skipf("the share accepted a FIFO (%s): nothing to compare", refOut)
		}
		errno := regexp.MustCompile(`errno \d+`).FindString(refErr.Error())
		for _, state := range []string{"cached", "delegated"} {
			s := newShareSource(t)
			vol := createVolume(t, d, s.Source, state)
			id := runDetached(t, d, vol)
			out, err := d.Try("exec", id, "bstool", "mkfifo", "/data/p")
			if err == nil {
				t.Errorf("%s: mkfifo on the share succeeded in the container (%s) but the share cannot hold a FIFO (consistent: %v)", state, out, refErr)
			} else if errno != "" && !strings.Contains(err.Error(), errno) {
				t.Errorf("%s: mkfifo failed with %v; consistent failed with %s", state, err, errno)
			}
			if out, err := d.Try("exec", id, "sh", "-c", "test -e /data/p && ls -l /data/p"); err == nil {
				t.Errorf("%s: a stand-in for the refused FIFO exists in the container: %s", state, out)
			}
		}
	})
}

// TestD3_TwoContainersShareOneView: two containers mounting the same source
// in the same state (through two volumes) see each other's writes at once,
// with no sync.
func TestD3_TwoContainersShareOneView(t *testing.T) {
	d := need(t)
	for _, state := range []string{"consistent", "cached", "delegated"} {
		t.Run(state, func(t *testing.T) {
			s := newShareSource(t)
			va := createVolume(t, d, s.Source, state)
			vb := "v-" + slug(t) + "-b"
			d.Docker(t, "volume", "create", "-d", pluginName, "-o", "source="+s.Source, "-o", "state="+state, vb)
			t.Cleanup(func() { d.Try("volume", "rm", "-f", vb) })
			a := runDetached(t, d, va)
			b := runDetached(t, d, vb)

			sh(t, d, a, "echo fromA > /data/x")
			if got := sh(t, d, b, "cat /data/x"); got != "fromA" {
				t.Fatalf("B reads %q right after A wrote fromA", got)
			}
			sh(t, d, b, "mkdir /data/dir && echo fromB > /data/dir/y && mv /data/x /data/dir/x")
			if got := sh(t, d, a, "cat /data/dir/y /data/dir/x; test -e /data/x && echo still-there || true"); got != "fromB\nfromA" {
				t.Fatalf("A reads %q right after B's changes, want fromB, fromA and x moved", got)
			}
			sh(t, d, a, "echo appended >> /data/dir/y")
			if got := sh(t, d, b, "cat /data/dir/y"); got != "fromB\nappended" {
				t.Fatalf("B reads %q after A appended", got)
			}
		})
	}
}

// mkfifo makes a FIFO at path (host side).
func mkfifo(path string) error { return syscall.Mkfifo(path, 0o644) }
