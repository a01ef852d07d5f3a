package store

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/writeback"
)

// rule C3: a cached writer is served from the host file only where the
// host's file system keeps a failed write with the file (a kernel file
// system). A local folder qualifies; a FUSE file system run by a process
// does not (TestC3_ShareErrorAtCloseFailsTheContainersClose mounts one and
// fails if its writers are served from the host).
func TestC3_WritersFromHostOnKernelFileSystems(t *testing.T) {
	d, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if ok, why := writersFromHost(int(d.Fd())); !ok {
		t.Fatalf("a local folder: not served from the host (%s)", why)
	}
}

// mountType finds a mount's type by its device, as the FUSE case of
// writersFromHost needs (virtiofs or a FUSE file system run by a process).
func TestMountTypeOfADevice(t *testing.T) {
	var st unix.Stat_t
	if err := unix.Stat("/proc", &st); err != nil {
		t.Fatal(err)
	}
	kind, err := mountType(unix.Major(st.Dev), unix.Minor(st.Dev))
	if err != nil || kind != "proc" {
		t.Fatalf("mount type of /proc: %q, %v; want proc", kind, err)
	}
	if _, err := mountType(4095, 1048575); err == nil {
		t.Fatal("a device no mount has: no error")
	}
}

// A fetch is the plugin reading the host file, not the container: the host
// keeps the atime the container saw (O_NOATIME). posixtest's FstatDeleted
// saw it move, once in ten runs, when a host-written file's store copy was
// fetched between two stats.
func TestFetchLeavesTheHostsAtime(t *testing.T) {
	old := time.Unix(1_000_000_000, 0)
	r := newStoreRig(t, consistency.Cached, writeback.Options{}, func(h string) {
		p := filepath.Join(h, "f")
		if err := os.WriteFile(p, []byte("content"), 0o644); err != nil {
			t.Fatal(err)
		}
		// An atime before the mtime: relatime moves it at the next read.
		if err := os.Chtimes(p, old, time.Now()); err != nil {
			t.Fatal(err)
		}
	})
	if err := r.s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	if !r.s.IsStub("f") {
		t.Fatal("f is not a stub after the populate: nothing to fetch")
	}
	if err := r.s.EnsureContent("f"); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(r.host, "f"), &st); err != nil {
		t.Fatal(err)
	}
	if got := time.Unix(st.Atim.Unix()); !got.Equal(old) {
		t.Fatalf("host atime after a fetch: %v, want %v (unchanged)", got, old)
	}
}
