package frontend

// One test (at least) per rule of ../shared/SEMANTICS.md, each through a real
// mount of a real host folder. Host edits are made directly in the host
// folder, as a user on the Mac side of a share would.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
)

var storeStates = []consistency.State{consistency.Cached, consistency.Delegated}

// rule K2: consistent is a plain bind: each side sees the other's changes at
// once, and no FUSE is involved.
func TestK2_ConsistentIsPlainBind(t *testing.T) {
	r := newRig(t, consistency.Consistent, nil)
	writeFile(t, r.mntPath("from-container"), "c")
	if got := readFile(t, r.hostPath("from-container")); got != "c" {
		t.Fatalf("host sees %q", got)
	}
	writeFile(t, r.hostPath("from-host"), "h")
	if got := readFile(t, r.mntPath("from-host")); got != "h" {
		t.Fatalf("container sees %q", got)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(r.mnt, &sfs); err != nil {
		t.Fatal(err)
	}
	const fuseMagic = 0x65735546
	if sfs.Type == fuseMagic {
		t.Fatal("consistent mount is served through FUSE; want a plain bind")
	}
}

// rule K1: consistent keeps C1-C4, i.e. also the D rules that apply to
// it: one view for all (D3) and writes on the host before the syscall
// returns (C3), which a plain bind gives by construction.
func TestK1_ConsistentKeepsCachedRules(t *testing.T) {
	r := newRig(t, consistency.Consistent, nil)
	if err := os.Mkdir(r.mntPath("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(r.mntPath("d"), r.mntPath("e")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.hostPath("e")); err != nil {
		t.Fatalf("rename not on host at once: %v", err)
	}
}

// rule C3: every cached change is on the host before the syscall returns.
func TestC3_CachedWritesReachHostBeforeReturn(t *testing.T) {
	r := newRig(t, consistency.Cached, func(h string) { writeFile(t, filepath.Join(h, "old"), "x") })
	writeFile(t, r.mntPath("f"), "hello")
	if got := readFile(t, r.hostPath("f")); got != "hello" {
		t.Fatalf("write: host has %q", got)
	}
	f, err := os.OpenFile(r.mntPath("f"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(" world"); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, r.hostPath("f")); got != "hello world" {
		t.Fatalf("append before close: host has %q", got)
	}
	f.Close()
	steps := []struct {
		what  string
		do    func() error
		check func() error
	}{
		{"mkdir", func() error { return os.Mkdir(r.mntPath("d"), 0o750) }, func() error { _, err := os.Stat(r.hostPath("d")); return err }},
		{"chmod", func() error { return os.Chmod(r.mntPath("f"), 0o600) }, func() error {
			fi, err := os.Stat(r.hostPath("f"))
			if err == nil && fi.Mode().Perm() != 0o600 {
				return errors.New("mode not on host")
			}
			return err
		}},
		{"symlink", func() error { return os.Symlink("f", r.mntPath("l")) }, func() error {
			tgt, err := os.Readlink(r.hostPath("l"))
			if err == nil && tgt != "f" {
				return errors.New("wrong target")
			}
			return err
		}},
		{"rename", func() error { return os.Rename(r.mntPath("f"), r.mntPath("d/g")) }, func() error { _, err := os.Stat(r.hostPath("d/g")); return err }},
		{"unlink", func() error { return os.Remove(r.mntPath("old")) }, func() error {
			if _, err := os.Stat(r.hostPath("old")); !errors.Is(err, os.ErrNotExist) {
				return errors.New("still on host")
			}
			return nil
		}},
		{"truncate", func() error { return os.Truncate(r.mntPath("d/g"), 2) }, func() error {
			if got := readFile(t, r.hostPath("d/g")); got != "he" {
				return errors.New("host has " + got)
			}
			return nil
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		if err := s.check(); err != nil {
			t.Fatalf("%s not on host when the syscall returned: %v", s.what, err)
		}
	}
}

// rule C3, failure side: a cached write the host refuses fails in the
// container with the host's errno, and the container's view is unchanged.
func TestC3_CachedWriteFailsWithHostErrno(t *testing.T) {
	r := newRig(t, consistency.Cached, nil)
	if err := os.Mkdir(r.hostPath("locked"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chattr", "+i", r.hostPath("locked")).CombinedOutput(); err != nil {
		t.Skipf("chattr +i unavailable: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", r.hostPath("locked")).Run() })
	err := os.WriteFile(r.mntPath("locked/f"), []byte("x"), 0o644)
	if !errors.Is(err, unix.EPERM) {
		t.Fatalf("want EPERM from the host, got %v", err)
	}
	if _, err := os.Stat(r.mntPath("locked/f")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused file exists in the container's view: %v", err)
	}
}

// rules C2 and D1 (C1: D1 holds for cached too), D6: a host edit reaches the
// container, with an inotify event, and what the container reads after the
// event is what the host had. A read-only volume (served without OPEN)
// gets them the same way.
func TestC2_D1_HostEditsArriveWithEvents(t *testing.T) {
	forStoreRigs(t, testHostEditsArriveWithEvents)
}

func testHostEditsArriveWithEvents(t *testing.T, st consistency.State, open rigOpener) {
	r := open(t, st, func(h string) { writeFile(t, filepath.Join(h, "edit.txt"), "v1") })
	if got := readFile(t, r.mntPath("edit.txt")); got != "v1" {
		t.Fatalf("initial read %q", got)
	}
	w := watch(t, r.mnt)
	writeFile(t, r.hostPath("new.txt"), "created on host")
	w.wait(t, unix.IN_CREATE, "new.txt")
	if got := readFile(t, r.mntPath("new.txt")); got != "created on host" {
		t.Fatalf("after IN_CREATE the container reads %q", got)
	}
	writeFile(t, r.hostPath("edit.txt"), "version two, longer")
	w.wait(t, unix.IN_MODIFY, "edit.txt")
	if got := readFile(t, r.mntPath("edit.txt")); got != "version two, longer" {
		t.Fatalf("after IN_MODIFY the container reads %q (rule D1)", got)
	}
	if err := os.Remove(r.hostPath("new.txt")); err != nil {
		t.Fatal(err)
	}
	w.wait(t, unix.IN_DELETE, "new.txt")
	if _, err := os.Stat(r.mntPath("new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after IN_DELETE: %v", err)
	}
}

// rule D6: a delegated mount still picks up host edits to paths the
// container has not modified, including in directories it listed before.
func TestD6_DelegatedSeesHostEditsOfUntouchedPaths(t *testing.T) {
	r := newRig(t, consistency.Delegated, func(h string) {
		os.MkdirAll(filepath.Join(h, "src/pkg"), 0o755)
		writeFile(t, filepath.Join(h, "src/pkg/a.go"), "package a")
	})
	if _, err := os.ReadDir(r.mntPath("src/pkg")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, r.mntPath("src/mine.txt"), "container's")
	writeFile(t, r.hostPath("src/pkg/b.go"), "package b")
	writeFile(t, r.hostPath("src/pkg/a.go"), "package a // edited")
	waitFor(t, "host edits in the container", func() bool {
		b, err1 := os.ReadFile(r.mntPath("src/pkg/b.go"))
		a, err2 := os.ReadFile(r.mntPath("src/pkg/a.go"))
		return err1 == nil && err2 == nil && string(b) == "package b" && string(a) == "package a // edited"
	})
	if got := readFile(t, r.mntPath("src/mine.txt")); got != "container's" {
		t.Fatalf("container's own file changed to %q", got)
	}
}

// rule D2: fsync returns only once the data is on the host.
func TestD2_DelegatedFsyncPutsDataOnHost(t *testing.T) {
	r := newRig(t, consistency.Delegated, nil)
	if err := os.MkdirAll(r.mntPath("a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(r.mntPath("a/b/data"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	payload := strings.Repeat("0123456789", 10000)
	if _, err := f.WriteString(payload); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	if got := readFile(t, r.hostPath("a/b/data")); got != payload {
		t.Fatalf("after fsync the host has %d bytes, want %d", len(got), len(payload))
	}
	// fsync of a directory puts its entries on the host.
	if err := os.WriteFile(r.mntPath("a/new"), []byte("n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(r.mntPath("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync dir: %v", err)
	}
	if got := readFile(t, r.hostPath("a/new")); got != "n" {
		t.Fatalf("after directory fsync the host has %q", got)
	}
}

// rule D4: a flush (what Unmount does when a container stops) puts every
// change on the host: content, directories, symlinks, renames, deletions,
// modes.
func TestD4_FlushPutsEveryChangeOnHost(t *testing.T) {
	r := newRig(t, consistency.Delegated, func(h string) {
		os.MkdirAll(filepath.Join(h, "keep/deep"), 0o755)
		writeFile(t, filepath.Join(h, "keep/deep/x"), "x")
		writeFile(t, filepath.Join(h, "gone"), "g")
		writeFile(t, filepath.Join(h, "renamed-from"), "r")
		os.MkdirAll(filepath.Join(h, "olddir/sub"), 0o755)
		writeFile(t, filepath.Join(h, "olddir/sub/f"), "f")
	})
	m := r.mntPath
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(m("new/tree/here"), 0o755))
	for i := 0; i < 50; i++ {
		writeFile(t, m(filepath.Join("new/tree/here", "f"+string(rune('a'+i%26))+string(rune('a'+i/26)))), strings.Repeat("z", i*100))
	}
	must(os.Symlink("../keep", m("new/link")))
	must(os.Remove(m("gone")))
	must(os.Rename(m("renamed-from"), m("renamed-to")))
	must(os.Rename(m("olddir"), m("newdir")))
	writeFile(t, m("newdir/sub/g"), "written after the dir rename")
	must(os.Chmod(m("keep/deep/x"), 0o600))
	writeFile(t, m("keep/deep/x"), "changed")
	r.flush(t)
	sameTree(t, "host after flush", treeOf(t, r.mnt), treeOf(t, r.host))
}

// rule D4, failure side: a writeback the host refuses is reported with the
// paths, nothing is dropped, and it lands once the host takes it again.
func TestD4_FailedWritebackIsReportedKeptAndRetried(t *testing.T) {
	r := newRig(t, consistency.Delegated, func(h string) { os.Mkdir(filepath.Join(h, "out"), 0o755) })
	writeFile(t, r.mntPath("out/result"), "precious")
	if out, err := exec.Command("chattr", "+i", r.hostPath("out")).CombinedOutput(); err != nil {
		t.Skipf("chattr +i unavailable: %v %s", err, out)
	}
	unlocked := false
	unlock := func() {
		if !unlocked {
			exec.Command("chattr", "-i", r.hostPath("out")).Run()
			unlocked = true
		}
	}
	t.Cleanup(unlock)
	fe := r.flushFailure(t) // against a refusing host
	if _, ok := fe.Failed["out/result"]; !ok || !strings.Contains(fe.Error(), "out/result") {
		t.Fatalf("error does not name the failed path: %v", fe)
	}
	if s := r.front.Status(); s.Dirty == 0 || s.Failed == 0 || s.LastError == "" || s.Errors == 0 ||
		!slices.Contains(s.FailedPaths, "out/result") || s.DirtyBytes < int64(len("precious")) {
		t.Fatalf("status hides the failure (want out/result among the failed paths, its bytes dirty): %+v", s)
	}
	if got := readFile(t, r.mntPath("out/result")); got != "precious" {
		t.Fatalf("container's data changed: %q", got)
	}
	unlock()
	r.flush(t)
	if got := readFile(t, r.hostPath("out/result")); got != "precious" {
		t.Fatalf("after retry the host has %q", got)
	}
}

// rule D4 across restarts: what is journaled when the plugin goes away is
// written back by the next run, even with no mount (Opener.Resume).
func TestD4_JournaledChangesSurviveRestart(t *testing.T) {
	r := newRig(t, consistency.Delegated, func(h string) { os.Mkdir(filepath.Join(h, "out"), 0o755) })
	if out, err := exec.Command("chattr", "+i", r.hostPath("out")).CombinedOutput(); err != nil {
		t.Skipf("chattr +i unavailable: %v %s", err, out)
	}
	writeFile(t, r.mntPath("out/kept"), "across restarts")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	r.front.Flush(ctx) // fails: the host refuses
	cancel()
	// A new Opener on the same state dir, as after a plugin restart.
	o2 := New(r.o.cfg)
	exec.Command("chattr", "-i", r.hostPath("out")).Run()
	// The old one must let go of the store first (one writer per journal).
	stopRig(t, r)
	if err := o2.Resume(context.Background(), r.spec); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "journaled write on the host after restart", func() bool {
		b, err := os.ReadFile(r.hostPath("out/kept"))
		return err == nil && string(b) == "across restarts"
	})
}

// rule D7: when host and container both change a path between syncs, the
// container's version is written and the host's is kept aside, never lost.
func TestD7_ConflictKeepsHostCopyAside(t *testing.T) {
	r := newRig(t, consistency.Delegated, func(h string) { writeFile(t, filepath.Join(h, "both.txt"), "base") })
	if got := readFile(t, r.mntPath("both.txt")); got != "base" {
		t.Fatal(got)
	}
	writeFile(t, r.mntPath("both.txt"), "container version")
	writeFile(t, r.hostPath("both.txt"), "host version!")
	r.flush(t)
	if got := readFile(t, r.hostPath("both.txt")); got != "container version" {
		t.Fatalf("host has %q", got)
	}
	matches, _ := filepath.Glob(r.hostPath("both.txt.bindstate-conflict-*"))
	if len(matches) != 1 || readFile(t, matches[0]) != "host version!" {
		t.Fatalf("host's copy not kept aside: %v", matches)
	}
	if r.front.Status().Conflicts != 1 {
		t.Fatalf("conflict not counted: %+v", r.front.Status())
	}
}

// rule D8: FIFOs and sockets go straight to the host, without waiting for a
// flush, and host ones show up as what they are.
func TestD8_SpecialFilesPassStraightThrough(t *testing.T) {
	r := newRig(t, consistency.Delegated, func(h string) {
		if err := unix.Mkfifo(filepath.Join(h, "host-fifo"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	if err := unix.Mkfifo(r.mntPath("fifo"), 0o640); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(r.hostPath("fifo"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		t.Fatalf("FIFO not on the host at once: %v mode %o", err, st.Mode)
	}
	if err := unix.Lstat(r.mntPath("host-fifo"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		t.Fatalf("host FIFO not seen as a FIFO: %v mode %o", err, st.Mode)
	}
	if err := os.Remove(r.mntPath("fifo")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lstat(r.hostPath("fifo"), &st); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("FIFO removal not on the host at once: %v", err)
	}
}

// rule D3 (and C1 for cached): one front per source and state serves every
// user, so two mount users see each other's writes at once. The driver
// hands the same front to every volume of a (source, state); here, two
// processes' views through it are one view.
func TestD3_OneViewForAllUsers(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			r := newRig(t, st, nil)
			if _, err := r.o.Open(context.Background(), r.spec); err == nil {
				t.Fatal("a second store for the same key was opened; want one shared store")
			}
			f, err := os.Create(r.mntPath("shared"))
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString("seen by all")
			defer f.Close()
			out, err := exec.Command("cat", r.mntPath("shared")).Output()
			if err != nil || string(out) != "seen by all" {
				t.Fatalf("another process reads %q, %v", out, err)
			}
		})
	}
}

// Nothing the container writes may reach outside the source on the host.
func TestContainerSymlinksNeverFollowedOnHost(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			r := newRig(t, st, nil)
			outside := t.TempDir()
			writeFile(t, filepath.Join(outside, "secret"), "untouched")
			if err := os.Symlink(outside, r.mntPath("escape")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("../../../../..", r.mntPath("up")); err != nil {
				t.Fatal(err)
			}
			r.flush(t)
			tgt, err := os.Readlink(r.hostPath("escape"))
			if err != nil || tgt != outside {
				t.Fatalf("host link: %q %v", tgt, err)
			}
			if got := readFile(t, filepath.Join(outside, "secret")); got != "untouched" {
				t.Fatalf("outside file changed: %q", got)
			}
			if _, err := os.ReadDir(r.mntPath("escape")); err != nil {
				// following a link inside the container's own namespace is the
				// kernel's business; it must simply not break the mount
				t.Logf("readdir through link: %v", err)
			}
		})
	}
}

// rule D2, through passthrough: a file created and kept open (a log, a
// database) is written back on every fsync, not only on the first. Its writes
// never reach the plugin (the kernel writes the store file itself), so the
// path must stay held dirty from create to release.
func TestD2_EveryFsyncOfAnOpenNewFileReachesHost(t *testing.T) {
	r := newRig(t, consistency.Delegated, nil)
	f, err := os.OpenFile(r.mntPath("app.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := 1; i <= 5; i++ {
		if _, err := f.Write(bytes.Repeat([]byte{'a' + byte(i)}, 100)); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if got := len(readFile(t, r.hostPath("app.log"))); got != 100*i {
			t.Fatalf("after fsync %d the host has %d bytes, want %d", i, got, 100*i)
		}
	}
}

// rules C2 and D6, for listings: directories are listed once and the kernel
// keeps the listing (FOPEN_CACHE_DIR), so a listing made before a change
// must not be what a later readdir returns, whether the change came from
// the container or from the host.
func TestC2_D6_ListingsFollowChanges(t *testing.T) {
	names := func(t *testing.T, p string) string {
		t.Helper()
		return strings.Join(listNames(t, p), " ")
	}
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			r := newRig(t, st, func(h string) {
				os.MkdirAll(filepath.Join(h, "d"), 0o755)
				writeFile(t, filepath.Join(h, "d/a"), "a")
				writeFile(t, filepath.Join(h, "d/b"), "b")
			})
			d := r.mntPath("d")
			for i := 0; i < 2; i++ { // the second listing comes from the kernel's cache
				if got := names(t, d); got != "a b" {
					t.Fatalf("listing %d: %q, want \"a b\"", i, got)
				}
			}
			// The container's own changes.
			writeFile(t, r.mntPath("d/c"), "c")
			if err := os.Rename(r.mntPath("d/a"), r.mntPath("d/z")); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(r.mntPath("d/b")); err != nil {
				t.Fatal(err)
			}
			if got := names(t, d); got != "c z" {
				t.Fatalf("after the container's create, rename and remove: %q, want \"c z\"", got)
			}
			// The host's, brought in by the syncer.
			writeFile(t, r.hostPath("d/h"), "from host")
			waitFor(t, "a file made on the host in a listed directory", func() bool {
				return names(t, d) == "c h z"
			})
			// And a listing read with a rewind in between (telldir/seekdir
			// are what ls -R and find do on big directories).
			f, err := os.Open(d)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			first, err := f.Readdirnames(1)
			if err != nil || len(first) != 1 {
				t.Fatalf("first entry: %v %v", first, err)
			}
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				t.Fatal(err)
			}
			all, err := f.Readdirnames(-1)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(all)
			if got := strings.Join(all, " "); got != "c h z" {
				t.Fatalf("after rewinddir: %q", got)
			}
		})
	}
}

// rule D2 for a database's files, through the mount: every fsync of a large
// file puts it on the host, whether the plugin saw its writes (O_RDWR, as a
// database opens its log and tables: the store writes back only the places
// written) or the kernel wrote it by passthrough (O_WRONLY: the plugin sees
// none of those writes, so that file goes back whole).
func TestD2_FsyncOfALargeFileWrittenInPlacesReachesHost(t *testing.T) {
	r := newRig(t, consistency.Delegated, nil)
	want := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	if err := os.WriteFile(r.mntPath("wal"), want, 0o600); err != nil {
		t.Fatal(err)
	}
	for i, flags := range []int{os.O_RDWR, os.O_WRONLY, os.O_RDWR} {
		f, err := os.OpenFile(r.mntPath("wal"), flags, 0)
		if err != nil {
			t.Fatal(err)
		}
		for j := range 3 {
			off := int64((i*3 + j) * 100_000)
			p := bytes.Repeat([]byte{byte('A' + i*3 + j)}, 8192)
			if _, err := f.WriteAt(p, off); err != nil {
				t.Fatal(err)
			}
			copy(want[off:], p)
			if err := f.Sync(); err != nil {
				t.Fatalf("fsync: %v", err)
			}
			if got := readFile(t, r.hostPath("wal")); got != string(want) {
				t.Fatalf("open %d (flags %#x), fsync %d: the host file differs from what was written", i, flags, j)
			}
		}
		f.Close()
	}
}

// Rule D2 (and D3's flush) for a file renamed while open for writing, as
// a database recycles its log files: each fsync puts what was written
// before it on the host under the file's new name, and so does a flush
// while it is still open. A writer the kernel serves by passthrough holds
// the name it opened dirty in the journal, and its writes reach the plugin
// only through that hold, which stayed on the old name: once the new name
// had been written back, an fsync wrote nothing more ("fsync 1 after the
// rename: the host's b lacks what was written"), and nothing in the
// journal named the file (a crash lost its writes). The hold now follows
// the file (store.Renamed).
func TestD2_AFileRenamedWhileOpenForWritingIsWrittenBackAtEachFsync(t *testing.T) {
	for _, flags := range []int{os.O_WRONLY, os.O_RDWR} {
		t.Run(fmt.Sprintf("flags %#x", flags), func(t *testing.T) {
			r := newRig(t, consistency.Delegated, nil)
			want := bytes.Repeat([]byte("0123456789abcdef"), 4096)
			f, err := os.OpenFile(r.mntPath("a"), flags|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close() // also when the test fails: an open file keeps the mount busy
			write := func(i int) {
				t.Helper()
				p := bytes.Repeat([]byte{byte('A' + i)}, 100)
				copy(want[i*1000:], p)
				if _, err := f.WriteAt(p, int64(i*1000)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := f.WriteAt(want, 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(r.mntPath("a"), r.mntPath("b")); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				write(i)
				if err := f.Sync(); err != nil {
					t.Fatalf("fsync %d: %v", i, err)
				}
				if got := readFile(t, r.hostPath("b")); got != string(want) {
					t.Fatalf("fsync %d after the rename: the host's b lacks what was written", i)
				}
			}
			write(3)
			r.flush(t)
			if got := readFile(t, r.hostPath("b")); got != string(want) {
				t.Fatal("a flush with the file still open: the host's b lacks what was written")
			}
			// The file is still open for writing: what its writer writes
			// next must be in the journal, under the name it has now (a
			// crash would otherwise lose it: the plugin sees no write of a
			// passthrough writer).
			if st := r.front.(*storeFront).ost.st; flags == os.O_WRONLY && !st.IsDirty("b") {
				t.Fatal("b, open for writing by passthrough, is not journaled after a flush: a crash would lose its next writes")
			}
			if _, err := os.Lstat(r.hostPath("a")); !os.IsNotExist(err) {
				t.Fatalf("the host's a after the rename's writeback: %v; want it gone", err)
			}
		})
	}
}

// Rule D2 for fdatasync, as a database commits: each one returns with the
// content on the host. Its times may come later (fdatasync does not ask
// for them; the host file keeps the times of the Put's own write meanwhile),
// and do: once written back, the host file has the container's.
func TestD2_FdatasyncOfALargeFileReachesHostAndItsTimesFollow(t *testing.T) {
	r := newRig(t, consistency.Delegated, nil)
	want := bytes.Repeat([]byte("fedcba9876543210"), 64<<10) // 1 MiB
	if err := os.WriteFile(r.mntPath("wal"), want, 0o600); err != nil {
		t.Fatal(err)
	}
	// The kernel sends that writer's RELEASE without waiting for it; while
	// the plugin has not had it, the file has a passthrough writer, whose
	// writes it cannot see, and every writeback copies it whole.
	waitFor(t, "the WriteFile's release", func() bool { return r.front.Status().Ops["release"] >= 1 })
	f, err := os.OpenFile(r.mntPath("wal"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // also when the test fails: an open file keeps the mount busy
	for j := range 5 {
		off := int64(j * 150_001)
		p := bytes.Repeat([]byte{byte('a' + j)}, 8192)
		if _, err := f.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
		copy(want[off:], p)
		wrote := time.Now()
		// Far more than the file systems' timestamp granularity: a host
		// mtime given at the Put's own write is then far from the
		// container's, which a write before this sleep set.
		time.Sleep(50 * time.Millisecond)
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			t.Fatalf("fdatasync: %v", err)
		}
		if got := readFile(t, r.hostPath("wal")); got != string(want) {
			t.Fatalf("fdatasync %d: the host file differs from what was written", j)
		}
		if j == 0 {
			continue // the first Put after the WriteFile's copies it whole, times and all
		}
		if mt := fileMtime(t, r.hostPath("wal")); !mt.After(wrote.Add(25 * time.Millisecond)) {
			t.Fatalf("fdatasync %d: the host file has the container's mtime (%v, written by %v): the Put set the times, a round trip more per commit", j, mt, wrote)
		}
	}
	f.Close()
	r.flush(t)
	if in, out := fileMtime(t, r.mntPath("wal")), fileMtime(t, r.hostPath("wal")); !in.Equal(out) {
		t.Fatalf("host mtime %v after the writeback, the container's %v", out, in)
	}
}

func fileMtime(t *testing.T, p string) time.Time {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.ModTime()
}
