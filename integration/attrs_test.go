package integration

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tree of TestC3_D4_FileKindsReachHost, made in a container: xattrs,
// hard links, a sparse file, a 200 MiB file, renames over existing files,
// ownership set by root in the container.
const kindsScript = `set -e
cd /data
echo x > x && bstool setxattr x user.bindstate hello
echo h > h1 && ln h1 h2 && ln h1 sub/h3
truncate -s 64M sparse && printf tail >> sparse && printf head | dd of=sparse conv=notrunc 2>/dev/null
dd if=/dev/urandom of=big bs=1M count=200 2>/dev/null
sha256sum big | cut -d' ' -f1 > big.sum
echo new > tmp1 && mv -f tmp1 target
mkdir -p d1 && echo in-d1 > d1/f && mkdir -p d2 && mv -T d1 d2
echo owned > owned && chown 1234:5678 owned && mkdir od && chown 4321:8765 od && ln -s owned ol && chown -h 99:98 ol
`

// TestC3_D4_FileKindsReachHost: what a container writes through a cached or
// delegated mount is on the host once the container has exited (C3: at
// once; D4: before the stop is reported), compared with the host: xattrs,
// hard links, a sparse file, a large file, renames over existing files and
// directories, and ownership set by root in the container.
func TestC3_D4_FileKindsReachHost(t *testing.T) {
	d := need(t)
	for _, state := range []string{"cached", "delegated"} {
		for _, where := range []string{"local", "share"} {
			t.Run(state+"/"+where, func(t *testing.T) {
				var s src
				if where == "local" {
					s = newLocalSource(t)
				} else {
					s = newShareSource(t)
				}
				// existing on the host before: renamed over in the container
				if err := os.WriteFile(s.host("target"), []byte("old\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(s.host("d2"), 0o755); err != nil {
					t.Fatal(err)
				}
				// sub exists on the host: a link into a directory the container
				// made
				if err := os.Mkdir(s.host("sub"), 0o755); err != nil {
					t.Fatal(err)
				}
				vol := createVolume(t, d, s.Source, state)
				script := kindsScript
				if where == "share" {
					// sftp has no xattrs: the volume refuses them as the plain
					// bind does (EOPNOTSUPP), rather than keep one in the
					// store that no writeback can put on the host (D4)
					script = strings.Replace(script, " && bstool setxattr x user.bindstate hello",
						" && { bstool setxattr x user.bindstate hello 2>&1 || true; }", 1)
					// sftp's setstat follows symlinks: lchown through sshfs changes
					// the target (a plain bind does the same)
					script = strings.Replace(script, " && ln -s owned ol && chown -h 99:98 ol", "", 1)
				}
				out := runOnce(t, d, vol, script)
				if where == "share" && !strings.Contains(out, "errno 95") {
					t.Errorf("setxattr on the share through a %s volume: %q; want EOPNOTSUPP (errno 95), as the plain bind answers", state, out)
				}

				// a rename over a file the host has: no host edit, so no
				// conflict copy (rule D7), and the host ends with the new file
				if got, _ := readHost(s.host("target")); got != "new\n" {
					t.Errorf("host target = %q after mv -f tmp1 target, want %q", got, "new\n")
				}
				mustHost(t, s.host("d2/f"), "in-d1\n")
				if _, err := os.Lstat(s.host("tmp1")); !os.IsNotExist(err) {
					t.Errorf("host tmp1 after the rename over target: %v; want gone", err)
				}
				if _, err := os.Lstat(s.host("d1")); !os.IsNotExist(err) {
					t.Errorf("host d1 after the rename over d2: %v; want gone", err)
				}

				if where == "local" {
					buf := make([]byte, 64)
					n, err := unix.Lgetxattr(s.host("x"), "user.bindstate", buf)
					if err != nil || string(buf[:n]) != "hello" {
						t.Errorf("host x xattr user.bindstate: %q, %v; want hello", buf[:max(n, 0)], err)
					}
				}

				// hard links: one inode with three names
				var st1, st2, st3 syscall.Stat_t
				e1, e2, e3 := syscall.Lstat(s.host("h1"), &st1), syscall.Lstat(s.host("h2"), &st2), syscall.Lstat(s.host("sub/h3"), &st3)
				if e1 != nil || e2 != nil || e3 != nil {
					t.Errorf("host hard links: %v %v %v", e1, e2, e3)
				} else if where == "local" && (st1.Ino != st2.Ino || st1.Ino != st3.Ino || st1.Nlink != 3) {
					// (sshfs does not show the server's inode numbers)
					t.Errorf("host h1, h2, sub/h3: inodes %d %d %d nlink %d; want one inode with 3 links", st1.Ino, st2.Ino, st3.Ino, st1.Nlink)
				} else if where == "share" && st1.Nlink != 3 {
					t.Errorf("host h1 nlink %d; want 3", st1.Nlink)
				}
				for _, p := range []string{"h1", "h2", "sub/h3"} {
					mustHost(t, s.host(p), "h\n")
				}

				// sparse: size and content; holes are logged, not required
				var sp syscall.Stat_t
				if err := syscall.Stat(s.host("sparse"), &sp); err != nil {
					t.Errorf("host sparse: %v", err)
				} else {
					if want := int64(64<<20 + 4); sp.Size != want {
						t.Errorf("host sparse size %d, want %d", sp.Size, want)
					}
					checkSparseContent(t, s.host("sparse"))
					t.Logf("host sparse: %d bytes, %d allocated (sparse kept: %v)", sp.Size, sp.Blocks*512, sp.Blocks*512 < 1<<20)
				}

				// large: same hash as in the container
				want, _ := readHost(s.host("big.sum"))
				if got := fileSHA(t, s.host("big")); got != strings.TrimSpace(want) {
					t.Errorf("host big: sha256 %s, the container wrote %s", got, strings.TrimSpace(want))
				}

				// ownership
				owners := map[string][2]uint32{"owned": {1234, 5678}, "od": {4321, 8765}}
				if where == "local" {
					owners["ol"] = [2]uint32{99, 98}
				}
				for p, want := range owners {
					var st syscall.Stat_t
					if err := syscall.Lstat(s.host(p), &st); err != nil {
						t.Errorf("host %s: %v", p, err)
					} else if st.Uid != want[0] || st.Gid != want[1] {
						t.Errorf("host %s owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, want[0], want[1])
					}
				}
				// no leftovers of the writeback
				filepath.Walk(s.Host, func(p string, fi os.FileInfo, err error) error {
					if err == nil && strings.Contains(fi.Name(), ".bindstate-conflict-") {
						t.Errorf("host has a conflict copy though the host changed nothing: %s", p)
					} else if err == nil && strings.Contains(fi.Name(), ".bindstate-") {
						t.Errorf("host has a writeback leftover: %s", p)
					}
					return nil
				})
			})
		}
	}
}

func checkSparseContent(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	head := make([]byte, 4)
	tail := make([]byte, 4)
	f.ReadAt(head, 0)
	f.ReadAt(tail, 64<<20)
	if string(head) != "head" || string(tail) != "tail" {
		t.Errorf("host sparse: head %q tail %q", head, tail)
	}
	mid := make([]byte, 1<<20)
	if _, err := f.ReadAt(mid, 32<<20); err != nil {
		t.Error(err)
	}
	for _, b := range mid {
		if b != 0 {
			t.Errorf("host sparse: non-zero byte in the hole")
			break
		}
	}
}

func fileSHA(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// TestD4_LinksSurviveAWriteRightAfterTheLink: a delegated file that the
// container links and then writes at once is still one file under both
// names on the host once the container has exited (D4: the host gets what
// the container has). On a share the writeback cannot trust the host's link
// count of the first name: sshfs shows each name as its own inode, and it
// (and the kernel above it) keeps that name's attributes from before the
// link for a while.
// A file judged not linked is replaced (temporary file, rename), which cuts
// it from its other names; the store's link count, which Link keeps in
// step with the host's, decides instead.
func TestD4_LinksSurviveAWriteRightAfterTheLink(t *testing.T) {
	d := need(t)
	for _, where := range []string{"local", "share"} {
		t.Run(where, func(t *testing.T) {
			var s src
			if where == "local" {
				s = newLocalSource(t)
			} else {
				s = newShareSource(t)
			}
			vol := createVolume(t, d, s.Source, "delegated")
			runOnce(t, d, vol, "set -e; cd /data; echo h > h1 && ln h1 h2 && echo more >> h1")
			var st1, st2 syscall.Stat_t
			if err := syscall.Lstat(s.host("h1"), &st1); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Lstat(s.host("h2"), &st2); err != nil {
				t.Fatal(err)
			}
			if st1.Ino != st2.Ino || st1.Nlink != 2 {
				t.Errorf("host h1, h2: inodes %d %d, h1 nlink %d; want one inode with 2 links; the host has: %s",
					st1.Ino, st2.Ino, st1.Nlink, hostInodes(s.host(".")))
			}
			for _, p := range []string{"h1", "h2"} {
				mustHost(t, s.host(p), "h\nmore\n")
			}
			// A write through the other name, in the next container: both
			// names have it on the host, and since the host changed nothing,
			// no copy is kept aside (D7).
			runOnce(t, d, vol, "set -e; cd /data; echo again >> h2")
			for _, p := range []string{"h1", "h2"} {
				mustHost(t, s.host(p), "h\nmore\nagain\n")
			}
			if names, _ := filepath.Glob(s.host("*.bindstate-*")); len(names) > 0 {
				t.Errorf("host has %q though the host changed nothing", names)
			}
		})
	}
}

// rule D7 for a hard-linked file on sshfs, once its cache has let go: a
// container writes through one name (written back in place, so the host's
// other name has it too), and a later one through the other. sshfs gives
// each name an inode number of its own and a link count of 1, so the host
// cannot tell which names are one file; what the writeback recorded of the
// host (the base) must hold for the other name too, or the second
// writeback takes the host file for one the host changed and keeps a copy
// aside: a conflict with no host edit. (The store keeps the base on its
// file, one inode for every name; TestD4_LinksSurviveAWriteRightAfterTheLink
// is the same within sshfs's cache time.)
func TestD7_ALinkedFileWrittenThroughEachNameInTurnKeepsNoConflictCopy(t *testing.T) {
	d := need(t)
	s := newShareSource(t)
	vol := createVolume(t, d, s.Source, "delegated")
	runOnce(t, d, vol, "set -e; cd /data; echo h > h1 && ln h1 h2")
	runOnce(t, d, vol, "set -e; cd /data; echo more >> h1")
	for _, p := range []string{"h1", "h2"} {
		mustHost(t, s.host(p), "h\nmore\n")
	}
	// sshfs keeps a path's attributes for 20 s (cache_timeout): past that,
	// the writeback sees the host as it is.
	time.Sleep(22 * time.Second)
	runOnce(t, d, vol, "set -e; cd /data; echo again >> h2")
	for _, p := range []string{"h1", "h2"} {
		mustHost(t, s.host(p), "h\nmore\nagain\n")
	}
	if names, _ := filepath.Glob(s.host("*.bindstate-*")); len(names) > 0 {
		t.Errorf("host has %q though the host changed nothing", names)
	}
}

// hostInodes lists dir's entries with their inode numbers and link counts,
// for a failure message: which names share a file.
func hostInodes(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range ents {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir, e.Name()), &st); err == nil {
			fmt.Fprintf(&b, "%s (inode %d, %d links) ", e.Name(), st.Ino, st.Nlink)
		}
	}
	return b.String()
}
