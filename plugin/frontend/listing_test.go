package frontend

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// A hot listing (git status, go list) must cost no request: the kernel opens
// directories on its own (no OPENDIR, no RELEASEDIR) and serves a listing it
// has read once from its cache (no READDIR) until the directory changes
// (TestC2_D6_ListingsFollowChanges checks that it does not outlive one).
func TestHotListingCostsNoRequest(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			r := newRig(t, st, func(h string) {
				for i := range 3 {
					writeFile(t, filepath.Join(h, fmt.Sprint("f", i)), "x")
				}
			})
			want := []string{"f0", "f1", "f2"}
			if got := listNames(t, r.mnt); !slices.Equal(got, want) {
				t.Fatalf("first listing %v, want %v", got, want)
			}
			ops := func() uint64 {
				o := r.front.Status().Ops
				return o["opendir"] + o["readdir"]
			}
			before := ops()
			for range 3 {
				if got := listNames(t, r.mnt); !slices.Equal(got, want) {
					t.Fatalf("hot listing %v, want %v", got, want)
				}
			}
			if got := ops() - before; got != 0 {
				t.Errorf("%s: 3 hot listings of one directory cost %d opendir/readdir requests, want 0", st, got)
			}
		})
	}
}

// rule D3: processes listing one directory at once each see every entry
// exactly once. The kernel reads a long directory in several requests and
// the plugin keeps one listing per directory between them, so two readers
// taking turns make it start over and seek.
func TestD3_InterleavedListingsSeeEveryEntryOnce(t *testing.T) {
	const n = 600 // dozens of READDIRPLUS replies
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("file-with-a-longish-name-%04d", i))
	}
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			r := newRig(t, st, func(h string) {
				if err := os.Mkdir(filepath.Join(h, "d"), 0o755); err != nil {
					t.Fatal(err)
				}
				for _, name := range want {
					writeFile(t, filepath.Join(h, "d", name), "")
				}
			})
			for round := range 2 { // cold (from the store), then hot (from the kernel's cache)
				a, b := openDirFd(t, r.mntPath("d")), openDirFd(t, r.mntPath("d"))
				var gotA, gotB []string
				for doneA, doneB := false, false; !doneA || !doneB; {
					if !doneA {
						doneA = getdentsOnce(t, a, &gotA)
					}
					if !doneB {
						doneB = getdentsOnce(t, b, &gotB)
					}
				}
				for who, got := range map[string][]string{"first": gotA, "second": gotB} {
					slices.Sort(got)
					if !slices.Equal(got, want) {
						t.Fatalf("round %d: the %s reader saw %d entries (%d distinct), want the %d files once each",
							round, who, len(got), len(slices.Compact(slices.Clone(got))), n)
					}
				}
			}
		})
	}
}

func openDirFd(t *testing.T, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// getdentsOnce reads one small batch of entries from fd into names (without
// . and ..) and reports whether the listing has ended.
func getdentsOnce(t *testing.T, fd int, names *[]string) bool {
	t.Helper()
	buf := make([]byte, 512) // a few entries per call
	n, err := unix.Getdents(fd, buf)
	if err != nil {
		t.Fatalf("getdents: %v", err)
	}
	_, _, *names = unix.ParseDirent(buf[:n], -1, *names)
	return n == 0
}

// After the kernel lists a directory from the plugin it marks the
// directory's atime stale, so the next stat of the directory would cost a
// GETATTR whatever the attribute timeout (a hot git status after a cold one
// paid one per directory of the tree). The plugin stats a directory whose
// listing ended through the mount itself, off the container's path, so the
// container's stat then costs none; and what it gets is still right.
func TestStatAfterListingCostsNoRequest(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			r := newRig(t, st, func(h string) {
				if err := os.MkdirAll(filepath.Join(h, "d", "e"), 0o750); err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(h, "d", "e", "f"), "x")
			})
			ops := func(kind string) uint64 { return r.front.Status().Ops[kind] }
			for _, dir := range []string{"d", "d/e"} {
				restats := ops("restat")
				if got := listNames(t, r.mntPath(dir)); len(got) == 0 {
					t.Fatalf("listing %q: empty", dir)
				}
				waitFor(t, fmt.Sprintf("the plugin's stat of %q after its listing", dir), func() bool {
					return ops("restat") > restats
				})
				before := ops("getattr")
				var got unix.Stat_t
				if err := unix.Lstat(r.mntPath(dir), &got); err != nil {
					t.Fatal(err)
				}
				if n := ops("getattr") - before; n != 0 {
					t.Errorf("%s: a stat of %q after its listing cost %d GETATTR requests, want 0", st, dir, n)
				}
				var host unix.Stat_t
				if err := unix.Lstat(r.hostPath(dir), &host); err != nil {
					t.Fatal(err)
				}
				if got.Mode != host.Mode || got.Mtim != host.Mtim {
					t.Errorf("%s: stat of %q after its listing: mode %o mtime %v, the host has %o %v",
						st, dir, got.Mode, got.Mtim, host.Mode, host.Mtim)
				}
			}
		})
	}
}

// The kernel marks a file's atime stale after it reads the file from the
// plugin, as it does a directory's after a listing: the stat of every file
// a cold build read cost a GETATTR in the next, hot, build. The plugin
// stats a file whose last handle served a READ, off the container's path,
// so the container's stat then costs none; in a read-only volume, where
// no handle is released, after each READ.
func TestStatAfterReadingCostsNoRequest(t *testing.T) {
	forStoreRigs(t, testStatAfterReadingCostsNoRequest)
}

func testStatAfterReadingCostsNoRequest(t *testing.T, st consistency.State, open rigOpener) {
	// Larger than a prefill (fsys), which would leave no READ.
	content := "package f\n" + strings.Repeat("// a comment\n", 20000)
	r := open(t, st, func(h string) { writeFile(t, filepath.Join(h, "f.go"), content) })
	ops := func(kind string) uint64 { return r.front.Status().Ops[kind] }
	restats := ops("restat")
	if got := readFile(t, r.mntPath("f.go")); got != content {
		t.Fatalf("read %d bytes, want %d", len(got), len(content))
	}
	if ops("read") == 0 {
		t.Fatal("the read was not served by the plugin: nothing to test")
	}
	waitFor(t, "the plugin's stat of f.go after its read", func() bool { return ops("restat") > restats })
	before := ops("getattr")
	var got, host unix.Stat_t
	if err := unix.Lstat(r.mntPath("f.go"), &got); err != nil {
		t.Fatal(err)
	}
	if n := ops("getattr") - before; n != 0 {
		t.Errorf("%s: a stat of a file after reading it cost %d GETATTR requests, want 0", st, n)
	}
	if err := unix.Lstat(r.hostPath("f.go"), &host); err != nil {
		t.Fatal(err)
	}
	if got.Size != host.Size || got.Mtim != host.Mtim {
		t.Errorf("%s: stat after reading: size %d mtime %v, the host has %d %v", st, got.Size, got.Mtim, host.Size, host.Mtim)
	}
}
