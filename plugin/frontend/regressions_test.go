package frontend

// Small reproducers of the bugs the exerciser (exerciser_test.go) found, each
// checking the rule it broke; all fixed, kept so that they stay fixed.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// rule D2/D4 (delegated keeps the container's changes): a hard link made
// into a directory the container created and that is not on the host yet.
// Store.Link (plugin/store/ops.go) flushes the old name, then links on the
// host first (routeThrough), but never puts the new name's parent there:
// the host link fails with ENOENT and the container sees it fail.
func TestD2_LinkIntoDirectoryNotYetOnHost(t *testing.T) {
	r := newRig(t, consistency.Delegated, nil)
	if err := os.Mkdir(r.mntPath("newdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, r.mntPath("f"), "linked")
	err := os.Link(r.mntPath("f"), r.mntPath("newdir/f2"))
	if errors.Is(err, unix.ENOENT) {
		t.Fatalf("link into a directory not yet on the host fails: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	r.flush(t)
	var a, b unix.Stat_t
	if err := unix.Lstat(r.hostPath("f"), &a); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lstat(r.hostPath("newdir/f2"), &b); err != nil {
		t.Fatal(err)
	}
	if a.Ino != b.Ino || readFile(t, r.hostPath("newdir/f2")) != "linked" {
		t.Fatalf("host f and newdir/f2: inodes %d %d; want one file", a.Ino, b.Ino)
	}
}

// rule C3 (and C2): write-through changes made while the host refresh runs
// must not be undone or doubled by it. The refresher
// (plugin/syncer/refresh.go scanDir) plans from a host listing and a store
// listing taken outside the store's apply lock, and apply does not look at
// the host again under the lock: a container change that lands between the
// two listings is taken for a host edit (a link becomes a copy, a new entry
// is deleted, a chmod or a write is reverted to the host's older state).
func TestC3_RefreshRacesWithWriteThrough(t *testing.T) {
	r := newRig(t, consistency.Cached, nil) // rescan every 50ms
	deadline := time.Now().Add(3 * time.Second)
	var bad string
	for i := 0; time.Now().Before(deadline) && bad == ""; i++ {
		d := fmt.Sprintf("d%d", i)
		if err := os.Mkdir(r.mntPath(d), 0o755); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 20 && bad == "" && time.Now().Before(deadline); j++ {
			p := filepath.Join(d, fmt.Sprintf("f%d", j))
			writeFile(t, r.mntPath(p), "x")
			if err := os.Link(r.mntPath(p), r.mntPath(p+"-l")); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(r.mntPath(p), 0o600); err != nil {
				t.Fatal(err)
			}
			var st unix.Stat_t
			if err := unix.Lstat(r.mntPath(p+"-l"), &st); err != nil {
				bad = fmt.Sprintf("%s-l: %v", p, err)
			} else if st.Nlink != 2 || st.Mode&0o777 != 0o600 {
				bad = fmt.Sprintf("%s-l: nlink %d mode %o, want 2 and 600", p, st.Nlink, st.Mode&0o777)
			}
		}
	}
	if bad != "" {
		t.Fatalf("the host refresh undid a write-through change: %s", bad)
	}
}

// rule D2: fsync of a file returns once its data is on the host, whatever
// name it was written through. The journal lists a write under the name it
// was made through (b, held open so it is not written back on its own): an
// fsync through a must still carry it to the host.
func TestD2_FsyncThroughAnotherHardLink(t *testing.T) {
	r := newRig(t, consistency.Delegated, nil)
	writeFile(t, r.mntPath("a"), "v1")
	if err := os.Link(r.mntPath("a"), r.mntPath("b")); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(r.mntPath("a"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("+v2"); err != nil {
		t.Fatal(err)
	}
	g, err := os.Open(r.mntPath("b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
	g.Close()
	if got := readFile(t, r.hostPath("b")); got != "v1+v2" {
		t.Fatalf("after fsync of b (written through its link a) the host has %q, want %q", got, "v1+v2")
	}
}

// rule D7 (a conflict is a host change): writing back one name of a hard
// link rewrites the shared host inode in place (putFile, nlink > 1); the
// other names must not then look changed on the host.
func TestD7_HardLinkWritebackFakesConflict(t *testing.T) {
	r := newRig(t, consistency.Delegated, func(h string) {
		writeFile(t, filepath.Join(h, "a"), "v1")
		if err := os.Link(filepath.Join(h, "a"), filepath.Join(h, "b")); err != nil {
			t.Fatal(err)
		}
	})
	writeFile(t, r.mntPath("a"), "v2, longer")
	r.flush(t)
	writeFile(t, r.mntPath("b"), "v3")
	r.flush(t)
	if m, _ := filepath.Glob(r.hostPath("*.bindstate-conflict-*")); len(m) > 0 {
		t.Fatalf("no host edit, yet conflict copies %v (host a=%q b=%q)", m, readFile(t, r.hostPath("a")), readFile(t, r.hostPath("b")))
	}
	if readFile(t, r.hostPath("a")) != "v3" || readFile(t, r.hostPath("b")) != "v3" {
		t.Fatalf("host a=%q b=%q, want v3 for both names", readFile(t, r.hostPath("a")), readFile(t, r.hostPath("b")))
	}
}

// rule D4 (everything the container changed reaches the host): user xattrs.
// A file's go through its open host temp file (putXattrs; once they were
// read from the store under the temp name, where nothing exists, and none
// were copied); a directory's go by path (putAttrs).
func TestD4_XattrsReachHost(t *testing.T) {
	for _, kind := range []string{"file", "directory"} {
		t.Run(kind, func(t *testing.T) {
			r := newRig(t, consistency.Delegated, nil)
			if kind == "file" {
				writeFile(t, r.mntPath("x"), "x")
			} else if err := os.Mkdir(r.mntPath("x"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := unix.Setxattr(r.mntPath("x"), "user.bindstate", []byte(kind), 0); err != nil {
				t.Skipf("setxattr in the mount: %v", err)
			}
			r.flush(t)
			buf := make([]byte, 64)
			n, err := unix.Getxattr(r.hostPath("x"), "user.bindstate", buf)
			if err != nil || string(buf[:n]) != kind {
				t.Fatalf("host %s x has user.bindstate = %q, %v; want %q", kind, buf[:max(n, 0)], err, kind)
			}
		})
	}
}

// rule D4 (nothing the container did not change is lost): a file written
// back whole goes through a new host file renamed over the old one, and
// the store does not hold the host's xattrs (a populate does not copy
// them). The host's xattrs must outlive it, beside the container's own.
// Before, a container's write to a file took all its host xattrs away:
// "host x after the writeback: user.host = "", no data available".
func TestD4_HostXattrsOutliveTheContainersWrite(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			r := newRig(t, st, func(h string) {
				writeFile(t, filepath.Join(h, "x"), "host content")
				if err := unix.Setxattr(filepath.Join(h, "x"), "user.host", []byte("h"), 0); err != nil {
					t.Skipf("setxattr on the source: %v", err)
				}
			})
			if got := readFile(t, r.mntPath("x")); got != "host content" {
				t.Fatal(got)
			}
			writeFile(t, r.mntPath("x"), "the container's")
			if err := unix.Setxattr(r.mntPath("x"), "user.container", []byte("c"), 0); err != nil {
				t.Fatal(err)
			}
			r.flush(t)
			if got := readFile(t, r.hostPath("x")); got != "the container's" {
				t.Fatalf("host x: %q", got)
			}
			hostXattr(t, r, "x", "user.host", "h")
			hostXattr(t, r, "x", "user.container", "c")
		})
	}
}

// rule D4: an xattr the container removes is removed on the host by the
// writeback, whichever way the entry is written back: a file written back
// whole (the new host file must not get it back from the old one), a host
// file whose content the container never read (only its attributes go
// back), a directory. Before, only the first: "host f has user.c = "1"
// after the container removed it".
func TestD4_AnXattrTheContainerRemovedLeavesTheHost(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			r := newRig(t, st, func(h string) {
				writeFile(t, filepath.Join(h, "f"), "never read")
				if err := os.Mkdir(filepath.Join(h, "d"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := unix.Setxattr(filepath.Join(h, "f"), "user.probe", []byte("1"), 0); err != nil {
					t.Skipf("setxattr on the source: %v", err)
				}
			})
			writeFile(t, r.mntPath("w"), "written")
			names := []string{"w", "f", "d"}
			for _, n := range names {
				if err := unix.Setxattr(r.mntPath(n), "user.c", []byte("1"), 0); err != nil {
					t.Fatal(err)
				}
			}
			r.flush(t)
			for _, n := range names {
				hostXattr(t, r, n, "user.c", "1")
			}
			for _, n := range names {
				if err := unix.Removexattr(r.mntPath(n), "user.c"); err != nil {
					t.Fatal(err)
				}
			}
			writeFile(t, r.mntPath("w"), "written again")
			r.flush(t)
			for _, n := range names {
				hostXattr(t, r, n, "user.c", "")
			}
			hostXattr(t, r, "f", "user.probe", "1")
		})
	}
}

// hostXattr fails t unless the host's rel has xattr name with value want
// ("": none).
func hostXattr(t *testing.T, r *rig, rel, name, want string) {
	t.Helper()
	buf := make([]byte, 64)
	n, err := unix.Getxattr(r.hostPath(rel), name, buf)
	got := string(buf[:max(n, 0)])
	if want == "" && !errors.Is(err, unix.ENODATA) {
		t.Fatalf("host %s has %s = %q (%v) after the container removed it", rel, name, got, err)
	}
	if want != "" && (err != nil || got != want) {
		t.Fatalf("host %s after the writeback: %s = %q, %v; want %q", rel, name, got, err, want)
	}
}

// rule D7 (a conflict is a host change): the container renames a new file
// over one the host has and nobody changed on the host. The writeback must
// replace it, with no conflict copy; the replaced entry's base is lost in
// the store and the host's unchanged file is taken for a host edit.
func TestD7_RenameOverHostFileFakesConflict(t *testing.T) {
	r := newRig(t, consistency.Delegated, func(h string) { writeFile(t, filepath.Join(h, "target"), "old") })
	if got := readFile(t, r.mntPath("target")); got != "old" {
		t.Fatal(got)
	}
	writeFile(t, r.mntPath("tmp"), "new")
	if err := os.Rename(r.mntPath("tmp"), r.mntPath("target")); err != nil {
		t.Fatal(err)
	}
	r.flush(t)
	if got := readFile(t, r.hostPath("target")); got != "new" {
		t.Fatalf("host target = %q, want new", got)
	}
	if m, _ := filepath.Glob(r.hostPath("target.bindstate-conflict-*")); len(m) > 0 {
		t.Fatalf("the host changed nothing, yet conflict copy %v", m)
	}
}

// rule D4 (delegated changes stay local until writeback): renaming a
// symlink (or anything but a fetched regular file) into a directory the
// container made goes through to the host (Store.Rename, renamesLocally is
// false), after Flush(old, new) which never puts the new name's parent
// there: the host rename fails with ENOENT and the container sees it fail.
func TestD4_RenameSymlinkIntoDirectoryNotYetOnHost(t *testing.T) {
	r := newRig(t, consistency.Delegated, nil)
	if err := os.Symlink("target", r.mntPath("l")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(r.mntPath("newdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := os.Rename(r.mntPath("l"), r.mntPath("newdir/l"))
	if errors.Is(err, unix.ENOENT) {
		t.Fatalf("%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	r.flush(t)
	if tgt, err := os.Readlink(r.hostPath("newdir/l")); err != nil || tgt != "target" {
		t.Fatalf("host newdir/l: %q %v", tgt, err)
	}
}

// The kernel refuses to mix passthrough and ordinary opens of one file, and
// go-fuse makes every open of a file already open by passthrough a
// passthrough open too. A file held open by a reader (passthrough) must
// still open for writing, and its writes must be journaled and written back
// (rule D4) though the plugin never sees them; in any order, with both kept
// open, and what one writes the other reads.
func TestPassthroughAndOrdinaryOpensOfOneFileMix(t *testing.T) {
	r := newRig(t, consistency.Delegated, func(h string) { writeFile(t, filepath.Join(h, "f"), "host") })
	for i, order := range [][2]int{{os.O_RDONLY, os.O_RDWR}, {os.O_RDWR, os.O_RDONLY}, {os.O_RDONLY, os.O_WRONLY}, {os.O_WRONLY, os.O_RDWR}} {
		a, err := os.OpenFile(r.mntPath("f"), order[0], 0)
		if err != nil {
			t.Fatalf("first open (flags %#x): %v", order[0], err)
		}
		b, err := os.OpenFile(r.mntPath("f"), order[1], 0)
		if err != nil {
			a.Close()
			t.Fatalf("open with flags %#x while open with %#x: %v", order[1], order[0], err)
		}
		w, rd := a, b
		if order[0] == os.O_RDONLY {
			w, rd = b, a
		}
		payload := fmt.Sprintf("v%03d", i)
		if _, err := w.WriteAt([]byte(payload), 0); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := rd.ReadAt(buf, 0); err != nil || string(buf) != payload {
			t.Fatalf("case %d: the other handle reads %q (%v), want %q", i, buf, err, payload)
		}
		a.Close()
		b.Close()
		waitFor(t, "the write on the host", func() bool {
			r.flush(t)
			b, _ := os.ReadFile(r.hostPath("f"))
			return string(b) == payload
		})
	}
}

// rule D7 (a conflict is a host change, nothing else): the container removes
// a directory the host has and makes a file at its name. The host still has
// the directory it had, so writing the file back replaces it without keeping
// a conflict copy. The exerciser found this (seed 6, 3000 ops):
// rmdir kept no record of what the host had there, unlike unlink.
func TestD7_FileReplacingARemovedDirectoryIsNoConflict(t *testing.T) {
	r := newRig(t, consistency.Delegated, func(h string) {
		if err := os.MkdirAll(filepath.Join(h, "a", "e"), 0o755); err != nil {
			t.Fatal(err)
		}
	})
	if err := os.Remove(r.mntPath("a/e")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, r.mntPath("a/e"), "now a file")
	r.flush(t)
	if m, _ := filepath.Glob(r.hostPath("a/*.bindstate-conflict-*")); len(m) > 0 {
		t.Fatalf("no host edit, yet conflict copies %v", m)
	}
	if got := readFile(t, r.hostPath("a/e")); got != "now a file" {
		t.Fatalf("host a/e = %q, want the container's file", got)
	}
	assertNoConflictInMount(t, r, "a")
}

// rule D7: a symlink's base (kept in memory: user xattrs are not allowed on
// symlinks) must follow the directory it is in when the directory is renamed.
// Left at the old path, the symlink replaced by a file under the new name
// looked changed on the host: a conflict copy on both sides (exerciser seed 6).
func TestD7_SymlinkMovedWithItsDirectoryKeepsItsBase(t *testing.T) {
	r := newRig(t, consistency.Delegated, func(h string) {
		if err := os.Mkdir(filepath.Join(h, "d"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("nonexistent", filepath.Join(h, "d", "l")); err != nil {
			t.Fatal(err)
		}
	})
	// The store lists d (and learns the symlink's base) before the rename.
	if _, err := os.ReadDir(r.mntPath("d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(r.mntPath("d"), r.mntPath("e")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(r.mntPath("e/l")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, r.mntPath("e/l"), "a file now")
	r.flush(t)
	if m, _ := filepath.Glob(r.hostPath("e/*.bindstate-conflict-*")); len(m) > 0 {
		t.Fatalf("no host edit, yet conflict copies %v", m)
	}
	if got := readFile(t, r.hostPath("e/l")); got != "a file now" {
		t.Fatalf("host e/l = %q, want the container's file", got)
	}
	assertNoConflictInMount(t, r, "e")
}

// assertNoConflictInMount fails if a conflict copy shows in the mount's dir.
func assertNoConflictInMount(t *testing.T, r *rig, dir string) {
	t.Helper()
	if m, _ := filepath.Glob(r.mntPath(dir + "/*.bindstate-conflict-*")); len(m) > 0 {
		t.Fatalf("conflict copies in the mount: %v", m)
	}
}

// rule D4 (nothing lost): the container writes a file through one of its two
// names and removes that name before the write is written back. The journal
// lists the write under the removed name; the other name must still reach
// the host with it. Before, the removal was journaled too, and its writeback
// only removed the name: the write was lost.
func TestD4_WriteThroughARemovedHardLinkReachesTheOtherName(t *testing.T) {
	r := newRig(t, consistency.Delegated, func(h string) { writeFile(t, filepath.Join(h, "a"), "v1") })
	if err := os.Link(r.mntPath("a"), r.mntPath("b")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, r.mntPath("b"), "v2 through b")
	if err := os.Remove(r.mntPath("b")); err != nil {
		t.Fatal(err)
	}
	r.flush(t)
	if got := readFile(t, r.hostPath("a")); got != "v2 through b" {
		t.Fatalf("host a = %q, want the write made through b", got)
	}
	if _, err := os.Lstat(r.hostPath("b")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("host b still there (%v)", err)
	}
}

// rule D7: one name of a hard-linked file is renamed, then the file is
// written through another. The rename used to stay in the store and give
// the moved name the base of what it replaced, which is the one base (an
// xattr of the store file) of every name: the next writeback saw a host
// change that was not there, kept a conflict copy and split the link.
func TestD7_RenamingOneNameOfAHardLinkFakesNoConflict(t *testing.T) {
	r := newRig(t, consistency.Delegated, func(h string) { writeFile(t, filepath.Join(h, "a"), "v1") })
	readFile(t, r.mntPath("a")) // fetched: a file still only on the host is renamed there anyway
	if err := os.Link(r.mntPath("a"), r.mntPath("b")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(r.mntPath("b"), r.mntPath("c")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, r.mntPath("a"), "v2")
	r.flush(t)
	if m, _ := filepath.Glob(r.hostPath("*.bindstate-conflict-*")); len(m) > 0 {
		t.Fatalf("no host edit, yet conflict copies %v", m)
	}
	for _, name := range []string{"a", "c"} {
		if got := readFile(t, r.hostPath(name)); got != "v2" {
			t.Fatalf("host %s = %q, want v2", name, got)
		}
	}
	var sa, sc unix.Stat_t
	if unix.Lstat(r.hostPath("a"), &sa) != nil || unix.Lstat(r.hostPath("c"), &sc) != nil || sa.Ino != sc.Ino {
		t.Fatalf("host a and c are no longer one file (inodes %d, %d)", sa.Ino, sc.Ino)
	}
}

// rule D2 (a link is on the host at once): linking to a name the container
// removed, while the removal is still journaled, must not fail with EEXIST
// from the host's old entry there.
func TestD2_LinkOverANameRemovedOnlyInTheStore(t *testing.T) {
	r := newRig(t, consistency.Delegated, func(h string) {
		writeFile(t, filepath.Join(h, "f"), "f")
		writeFile(t, filepath.Join(h, "c"), "old c")
	})
	if err := os.Remove(r.mntPath("c")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(r.mntPath("f"), r.mntPath("c")); err != nil {
		t.Fatalf("link f -> c after removing c: %v", err)
	}
	if got := readFile(t, r.hostPath("c")); got != "f" {
		t.Fatalf("host c = %q, want f's content", got)
	}
}

// rule C3: a share may report a failed write only at close (sshfs
// acknowledges writes before the server has them; the share full shows as
// EIO from close). So the close of a cached file written through reaches the
// plugin (FLUSH), which makes the share flush the file and passes its error
// on (TestC3_ShareErrorAtCloseFailsTheContainersClose checks that error;
// TestFault_D4_C3_ShareUnhealthy/full, the errno over sshfs); every
// other close costs no request (FOPEN_NOFLUSH). Before, the first FLUSH was
// answered ENOSYS, which turned FLUSH off for the whole mount, and a cached
// write the share failed at close was reported to the container as done.
func TestC3_CloseOfAWrittenThroughFileReachesTheHost(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			r := newRig(t, st, func(h string) { writeFile(t, filepath.Join(h, "src.txt"), "from the host") })
			for range 3 {
				readFile(t, r.mntPath("src.txt"))
			}
			for i := range 3 {
				writeFile(t, r.mntPath(fmt.Sprintf("out%d", i)), "written")
			}
			got := r.front.Status().Ops["flush"]
			want := uint64(0)
			if st == consistency.Cached {
				want = 3 // one per close of a file written through, none for the reads
			}
			if got != want {
				t.Errorf("%s: %d closes reached the plugin, want %d (3 reads and 3 writes closed)", st, got, want)
			}
		})
	}
}

// A SETATTR reply carries the mount's attribute timeout, as a LOOKUP or
// GETATTR reply does: the attributes it returns are the store's, fresh.
// Before, go-fuse left it at 0, so the kernel asked again (GETATTR) at the
// next open or stat of every file that tar, cp -p or chmod -R had touched.
func TestStatAfterChmodCostsNoRequest(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			r := newRig(t, st, func(h string) { writeFile(t, filepath.Join(h, "f"), "f") })
			p := r.mntPath("f")
			readFile(t, p)
			if err := os.Chmod(p, 0o640); err != nil {
				t.Fatal(err)
			}
			before := r.front.Status().Ops["getattr"]
			for range 3 {
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != 0o640 {
					t.Fatalf("mode %v after chmod 640", fi.Mode())
				}
			}
			if got := r.front.Status().Ops["getattr"] - before; got != 0 {
				t.Errorf("%s: %d GETATTR requests for 3 stats right after a chmod, want 0", st, got)
			}
		})
	}
}

// rule D4: an ACL a delegated container sets (setfacl) reaches the host.
// The FUSE mount does not take POSIX ACLs itself (no FUSE_POSIX_ACL), so
// the kernel passes system.posix_acl_access to the plugin as an xattr,
// which the store keeps and the writeback copies like any other.
func TestD4_AnACLTheContainerSetReachesTheHost(t *testing.T) {
	r := newRig(t, consistency.Delegated, func(h string) {
		writeFile(t, filepath.Join(h, "probe"), "")
		if err := unix.Setxattr(filepath.Join(h, "probe"), "system.posix_acl_access", aclUser1000Read(), 0); err != nil {
			t.Skipf("the source takes no ACLs: %v", err)
		}
	})
	writeFile(t, r.mntPath("w"), "written")
	acl := aclUser1000Read()
	if err := unix.Setxattr(r.mntPath("w"), "system.posix_acl_access", acl, 0); err != nil {
		t.Fatalf("setfacl in the container: %v", err)
	}
	r.flush(t)
	buf := make([]byte, 256)
	n, err := unix.Getxattr(r.hostPath("w"), "system.posix_acl_access", buf)
	if err != nil || !bytes.Equal(buf[:n], acl) {
		t.Fatalf("host w's ACL after the writeback: %x (%v); want %x", buf[:max(n, 0)], err, acl)
	}
}

// aclUser1000Read is the xattr form of the ACL u::rw-,u:1000:r--,g::r--,
// m::r--,o::r-- (version 2; per entry a tag, permissions and an id).
func aclUser1000Read() []byte {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{0x01, 6, ^uint32(0)}, {0x02, 4, 1000}, {0x04, 4, ^uint32(0)}, {0x10, 4, ^uint32(0)}, {0x20, 4, ^uint32(0)}} {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}
