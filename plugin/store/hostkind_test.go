package store

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
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
