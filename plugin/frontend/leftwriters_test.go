package frontend

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/internal/testenv"
)

// TestD4_AWriterTheKilledPluginLeftKeepsItsWrites: a delegated file open
// for writing only is served by passthrough, so a container process that
// has it open keeps writing to the store file after the plugin is killed,
// and each write succeeds. Rule D4: those writes must reach the host, at
// each flush while the process writes and once it closes the file, under
// the name the file has then. Before store/leftwriters.go, the restarted
// plugin wrote the path back once and then held it clean: nothing written
// after that reached the host (the host kept "first\nbefore\n").
func TestD4_AWriterTheKilledPluginLeftKeepsItsWrites(t *testing.T) {
	overLocalAndShare(t, func(t *testing.T, overShare bool) {
		r := newCrashRig(t, consistency.Delegated, overShare, "1h")
		host := func(rel string) string {
			b, err := os.ReadFile(filepath.Join(r.hostNow(t), rel))
			if err != nil {
				return "error: " + err.Error()
			}
			return string(b)
		}
		if err := os.WriteFile(r.mntPath("f"), []byte("first\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		w := keepOpen(t, r.mntPath("f"), os.O_WRONLY|os.O_APPEND)
		write := func(s string) {
			t.Helper()
			if _, err := w.WriteString(s); err != nil {
				t.Fatalf("write %q through the descriptor the killed plugin served: %v", s, err)
			}
		}
		write("before\n")

		if err := r.crash(0, false); err != nil {
			t.Fatal(err)
		}
		// The new run writes back what the journal had: the file as it
		// was at the kill.
		if err := r.front.Flush(bg()); err != nil {
			t.Fatal(err)
		}
		if got, want := host("f"), "first\nbefore\n"; got != want {
			t.Fatalf("host after the restart's flush: %q, want %q", got, want)
		}

		write("after the kill\n") // the kernel writes the store file itself
		if err := r.front.Flush(bg()); err != nil {
			t.Fatal(err)
		}
		if got, want := host("f"), "first\nbefore\nafter the kill\n"; got != want {
			t.Fatalf("host after a flush: %q, want %q: a write the container saw succeed after the kill did not reach the host", got, want)
		}
		if s := r.front.Status(); s.Dirty != 1 {
			t.Errorf("status while the killed run's writer still has the file open: %d dirty, want 1 (held)", s.Dirty)
		}

		// Renamed through the new mount: the hold goes along.
		if err := os.Rename(r.mntPath("f"), r.mntPath("g")); err != nil {
			t.Fatal(err)
		}
		if err := r.front.Flush(bg()); err != nil {
			t.Fatal(err)
		}
		write("after the rename\n")
		if err := r.front.Flush(bg()); err != nil {
			t.Fatal(err)
		}
		const all = "first\nbefore\nafter the kill\nafter the rename\n"
		if got := host("g"); got != all {
			t.Fatalf("host's g after a rename through the new mount and a flush: %q, want %q", got, all)
		}

		// Closed: the hold goes, and its release writes the file back.
		write("last\n")
		if err := w.Close(); err != nil {
			t.Logf("close of the descriptor the killed plugin served: %v", err)
		}
		waitFor(t, "nothing dirty once the writer closed its file", func() bool { return r.front.Status().Dirty == 0 })
		if got := host("g"); got != all+"last\n" {
			t.Fatalf("host's g once the writer closed it: %q, want %q", got, all+"last\n")
		}
		if got := readFile(t, r.mntPath("g")); got != all+"last\n" {
			t.Fatalf("the mount's g: %q, want %q", got, all+"last\n")
		}
		if _, err := os.Stat(filepath.Join(r.hostNow(t), "f")); !os.IsNotExist(err) {
			t.Fatalf("host's f after its rename: %v, want it gone", err)
		}
	})
}

// TestC3_AWriterTheKilledPluginLeftWritesTheHost: the cached side of
// TestD4_AWriterTheKilledPluginLeftKeepsItsWrites. Over a kernel file
// system a cached file open for writing only is served from the host file
// itself (store.File.HostPassthrough), so the process's writes after the
// kill go to the host at once (rule C3), and the mount of the new run shows
// them within the refresh interval, as any host change. Over sshfs every
// cached write goes through the plugin: after the kill it fails, and
// nothing the container did not see succeed is on the host.
func TestC3_AWriterTheKilledPluginLeftWritesTheHost(t *testing.T) {
	overLocalAndShare(t, func(t *testing.T, overShare bool) {
		r := newCrashRig(t, consistency.Cached, overShare, "50ms")
		hostF := filepath.Join(r.host, "f")
		writeFile(t, r.mntPath("f"), "first\n")
		w := keepOpen(t, r.mntPath("f"), os.O_WRONLY|os.O_APPEND)
		if _, err := w.WriteString("before\n"); err != nil {
			t.Fatal(err)
		}
		if err := r.crash(0, false); err != nil {
			t.Fatal(err)
		}
		_, err := w.WriteString("after the kill\n")
		want := "first\nbefore\nafter the kill\n"
		if overShare {
			if err == nil {
				t.Fatalf("a cached write over sshfs after the kill succeeded: it went through the dead plugin")
			}
			want = "first\nbefore\n"
		} else if err != nil {
			t.Fatalf("a cached write over a local folder after the kill, served from the host file: %v", err)
		}
		if got := readFile(t, hostF); got != want {
			t.Fatalf("host after the write: %q, want %q (C3: on the host when the write returns)", got, want)
		}
		waitFor(t, "the mount to show the host's file", func() bool { return readFile(t, r.mntPath("f")) == want })
	})
}

// overLocalAndShare runs test over a local folder and over an sshfs share
// (subtests "local", "sshfs").
func overLocalAndShare(t *testing.T, test func(t *testing.T, overShare bool)) {
	for _, overShare := range []bool{false, true} {
		name := "local"
		if overShare {
			name = "sshfs"
		}
		t.Run(name, func(t *testing.T) { test(t, overShare) })
	}
}

// TestD3_TheNewMountSeesWhatALeftWriterWrites: a writer the killed plugin
// left (TestD4_AWriterTheKilledPluginLeftKeepsItsWrites) changes the store
// file behind the new run's mount, whose kernel caches pages and
// attributes; rule D3 wants one coherent view, and the new mount shows the
// left writer's writes within a look of the store's (store/leftwriters.go).
// Found by the crash exerciser once it kept writers open across kills: the
// new mount kept the file's old size and pages, so a mapping of the file
// made after the append was cut at the old size at its msync (the "XY"
// was lost); here the new mount never showed the append at all. A mapping
// held across the left writer's change sees it too, with no request to
// ask.
func TestD3_TheNewMountSeesWhatALeftWriterWrites(t *testing.T) {
	overLocalAndShare(t, func(t *testing.T, overShare bool) {
		r := newCrashRig(t, consistency.Delegated, overShare, "1h")
		writeFile(t, r.mntPath("f"), "first\n")
		appender := keepOpen(t, r.mntPath("f"), os.O_WRONLY|os.O_APPEND)
		overwriter := keepOpen(t, r.mntPath("f"), os.O_WRONLY)
		if err := r.crash(0, false); err != nil {
			t.Fatal(err)
		}

		// A mapping made after the write.
		seen := readFile(t, r.mntPath("f")) // the new mount's kernel reads it
		const appended = "appended behind the mount\n"
		if _, err := appender.WriteString(appended); err != nil {
			t.Fatal(err)
		}
		size := len(seen) + len(appended)
		waitFor(t, "the new mount to show the left writer's append", func() bool {
			st, err := os.Stat(r.mntPath("f"))
			return err == nil && st.Size() == int64(size)
		})
		if err := mmapWriteIn(r.mntPath("f"), size, len(seen)+2, []byte("XY")); err != nil {
			t.Fatal(err)
		}
		want := seen + "apXYnded behind the mount\n"
		if got := readFile(t, r.mntPath("f")); got != want {
			t.Fatalf("the new mount reads %q after a mapping of it was written, want %q: its kernel kept pages or a size from before the left writer's write", got, want)
		}

		// A mapping held across the write (this process maps it: the
		// plugin serving it is another).
		fd, err := unix.Open(r.mntPath("f"), unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		mm, err := unix.Mmap(fd, 0, len(want), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(mm)
		if got := string(mm); got != want {
			t.Fatalf("the mapping holds %q, want %q", got, want)
		}
		if _, err := overwriter.WriteAt([]byte("FIRST"), 0); err != nil { // same size
			t.Fatal(err)
		}
		waitFor(t, "the mapping to show the left writer's overwrite", func() bool { return string(mm[:5]) == "FIRST" })
		if err := r.front.Flush(bg()); err != nil {
			t.Fatal(err)
		}
		if got, want := readFile(t, filepath.Join(r.hostNow(t), "f")), "FIRST"+want[5:]; got != want {
			t.Fatalf("host f = %q, want %q", got, want)
		}
	})
}

// keepOpen opens p with flag for the rest of the test (a writer that
// outlives a kill of the plugin); it is closed at the end.
func keepOpen(t *testing.T, p string, flag int) *os.File {
	t.Helper()
	f, err := os.OpenFile(p, flag, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// testenv.AbortFuse is how the crash exerciser ends a killed plugin that
// hangs (a fault it then reports); it must end the mount's connection, here
// a live one's.
func TestAbortFuseEndsTheConnection(t *testing.T) {
	r := newCrashRig(t, consistency.Delegated, false, "1h")
	writeFile(t, r.mntPath("f"), "x")
	if err := testenv.AbortFuse(r.mnt); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(r.mnt, &st); err != unix.ENOTCONN {
		t.Fatalf("statfs of the mount after the abort: %v, want ENOTCONN", err)
	}
	// The child then exits on its kill, and the next one mounts afresh.
	if r.child.kill() {
		t.Fatal("the child hung after its connection was aborted")
	}
	r.start(t)
	if got := readFile(t, r.mntPath("f")); got != "x" {
		t.Fatalf("after a restart the mount reads %q, want %q", got, "x")
	}
}
