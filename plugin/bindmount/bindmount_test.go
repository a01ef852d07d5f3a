package bindmount

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/hostpath"
	"github.com/bindstate/bindstate/plugin/internal/testenv"
)

// openPath opens dir as the Root would: O_PATH|O_DIRECTORY.
func openPath(t *testing.T, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// cleanupMount makes sure nothing stays mounted if a test fails half-way.
func cleanupMount(t *testing.T, target string) {
	t.Cleanup(func() {
		for range maxStack {
			if m, _ := IsMountpoint(target); !m {
				return
			}
			_ = unix.Unmount(target, unix.MNT_DETACH)
		}
	})
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestBindWriteBothSidesUnmount(t *testing.T) {
	testenv.RequireRoot(t, "mount(2)")
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "before"), "host")
	target := filepath.Join(t.TempDir(), "mnt", "key") // parent does not exist yet
	cleanupMount(t, target)

	if err := mountFd(openPath(t, src), target, false); err != nil {
		t.Fatal(err)
	}
	if m, err := IsMountpoint(target); err != nil || !m {
		t.Fatalf("IsMountpoint(%s) = %v, %v; want true", target, m, err)
	}
	if got := readFile(t, filepath.Join(target, "before")); got != "host" {
		t.Fatalf("read through bind = %q", got)
	}
	writeFile(t, filepath.Join(target, "from-container"), "c")
	if got := readFile(t, filepath.Join(src, "from-container")); got != "c" {
		t.Fatalf("host sees %q", got)
	}
	writeFile(t, filepath.Join(src, "from-host"), "h")
	if got := readFile(t, filepath.Join(target, "from-host")); got != "h" {
		t.Fatalf("container sees %q", got)
	}

	if err := Unmount(target); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target still there after Unmount: %v", err)
	}
	for name, want := range map[string]string{"before": "host", "from-container": "c", "from-host": "h"} {
		if got := readFile(t, filepath.Join(src, name)); got != want {
			t.Errorf("source %s = %q after unmount, want %q", name, got, want)
		}
	}
	if m, _ := IsMountpoint(target); m {
		t.Fatal("still a mountpoint")
	}
}

// The source is taken from the fd: renaming the source path and putting a
// symlink in its place after opening does not redirect the mount.
func TestBindFollowsFdNotPath(t *testing.T) {
	testenv.RequireRoot(t, "mount(2)")
	base := t.TempDir()
	src := filepath.Join(base, "src")
	other := filepath.Join(base, "other")
	for _, d := range []string{src, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(src, "mine"), "1")
	writeFile(t, filepath.Join(other, "secret"), "2")
	fd := openPath(t, src)
	if err := os.Rename(src, src+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, src); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "mnt")
	cleanupMount(t, target)
	if err := mountFd(fd, target, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(target, "mine")); err != nil {
		t.Errorf("mounted the wrong directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(target, "secret")); err == nil {
		t.Error("mount followed the swapped-in symlink")
	}
	if err := Unmount(target); err != nil {
		t.Fatal(err)
	}
}

// Mount through a hostpath.Root (Root.Fd).
func TestMountRoot(t *testing.T) {
	testenv.RequireRoot(t, "mount(2)")
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "f"), "x")
	root, err := hostpath.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	target := filepath.Join(t.TempDir(), "mnt")
	cleanupMount(t, target)
	if err := Mount(root, target); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(target, "f")); got != "x" {
		t.Fatalf("got %q", got)
	}
	if err := Unmount(target); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(src, "f")); got != "x" {
		t.Fatalf("source damaged: %q", got)
	}
}

// Mounting on a target that still holds a mount (from an earlier run)
// replaces it instead of stacking.
func TestMountReplacesStale(t *testing.T) {
	testenv.RequireRoot(t, "mount(2)")
	a, b := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(a, "a"), "a")
	writeFile(t, filepath.Join(b, "b"), "b")
	target := filepath.Join(t.TempDir(), "mnt")
	cleanupMount(t, target)
	if err := mountFd(openPath(t, a), target, false); err != nil {
		t.Fatal(err)
	}
	if err := mountFd(openPath(t, b), target, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(target, "b")); err != nil {
		t.Fatal(err)
	}
	if err := Unmount(target); err != nil {
		t.Fatal(err)
	}
	if m, _ := IsMountpoint(target); m {
		t.Fatal("a mount stayed behind")
	}
	if got := readFile(t, filepath.Join(a, "a")); got != "a" {
		t.Fatal("source a damaged")
	}
}

// A busy mount is detached lazily, and the data behind it stays.
func TestUnmountBusyDetaches(t *testing.T) {
	testenv.RequireRoot(t, "mount(2)")
	src := t.TempDir()
	target := filepath.Join(t.TempDir(), "mnt")
	cleanupMount(t, target)
	if err := mountFd(openPath(t, src), target, false); err != nil {
		t.Fatal(err)
	}
	// A mount beneath the target makes umount(2) of the target fail with
	// EBUSY (as a process using it would).
	inner := filepath.Join(target, "inner")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", inner, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	old := busyDelay
	busyDelay = 10 * time.Millisecond
	defer func() { busyDelay = old }()
	if err := Unmount(target); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(src, "inner")); err != nil {
		t.Fatalf("source lost its directory: %v", err)
	}
	// The bind is a slave: the tmpfs beneath it never reached the source.
	if m, _ := IsMountpoint(filepath.Join(src, "inner")); m {
		t.Fatal("nested mount leaked onto the source")
	}
}

// Unmount never deletes data: a target that is not a mountpoint and is not
// empty stays, with an error.
func TestUnmountNeverDeletesData(t *testing.T) {
	target := filepath.Join(t.TempDir(), "notamount")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(target, "precious"), "p")
	err := Unmount(target)
	if err == nil {
		t.Fatal("Unmount removed or accepted a non-empty directory")
	}
	if got := readFile(t, filepath.Join(target, "precious")); got != "p" {
		t.Fatal("data deleted")
	}
	// An empty, unmounted target is simply removed; a missing one is fine.
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Unmount(empty); err != nil {
		t.Fatal(err)
	}
	if err := Unmount(empty); err != nil {
		t.Fatalf("second Unmount: %v", err)
	}
}

func TestIsMountpoint(t *testing.T) {
	for path, want := range map[string]bool{"/": true, "/proc": true, "/proc/self": false} {
		got, err := IsMountpoint(path)
		if err != nil || got != want {
			t.Errorf("IsMountpoint(%q) = %v, %v; want %v", path, got, err, want)
		}
	}
	if got, err := IsMountpoint(t.TempDir()); err != nil || got {
		t.Errorf("IsMountpoint(tempdir) = %v, %v", got, err)
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{
		`/a\040b`:   "/a b",
		`/tab\011`:  "/tab\t",
		`/bs\134x`:  `/bs\x`,
		`/plain`:    "/plain",
		`/short\04`: `/short\04`,
	} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// A FUSE mount whose server is gone answers ENOTCONN; CleanupStale detaches
// it. Live mounts and plain directories are left alone.
func TestCleanupStaleDeadFuse(t *testing.T) {
	testenv.RequireRoot(t, "mount(2)")
	target := filepath.Join(t.TempDir(), "fuse")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	cleanupMount(t, target)
	// Two, stacked, as a read-only volume's mount leaves them (the FUSE
	// mount and the read-only bind of it, StackReadOnly).
	for range 2 {
		dev, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Skipf("no /dev/fuse: %v", err)
		}
		opts := "fd=" + strconv.Itoa(dev) + ",rootmode=40000,user_id=0,group_id=0"
		if err := unix.Mount("bindstate-test", target, "fuse.bindstate-test", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			unix.Close(dev)
			t.Skipf("cannot mount fuse: %v", err)
		}
		// Closing the device without answering INIT aborts the connection.
		unix.Close(dev)
	}
	var st unix.Stat_t
	if err := unix.Lstat(target, &st); !errors.Is(err, unix.ENOTCONN) {
		t.Fatalf("dead mount stat: %v, want ENOTCONN", err)
	}
	if err := CleanupStale(target); err != nil {
		t.Fatal(err)
	}
	if m, _ := IsMountpoint(target); m {
		t.Fatal("dead mount still there")
	}
	if err := unix.Lstat(target, &st); err != nil {
		t.Fatalf("mountpoint dir after cleanup: %v", err)
	}
	// Nothing to do on a plain directory or a missing path.
	if err := CleanupStale(target); err != nil {
		t.Fatal(err)
	}
	if err := CleanupStale(filepath.Join(target, "missing")); err != nil {
		t.Fatal(err)
	}
}

// A read-only bind stacked on a mount is read-only wherever mount
// propagation copies it: Docker binds the host's copy of the plugin's
// propagated mount into containers, not the plugin's own. (A bind made
// read-only after it is attached is read-only in its own namespace only.)
// A descriptor opened on the target before still writes to the mount
// beneath.
func TestStackReadOnlyIsReadOnlyWhereverItPropagates(t *testing.T) {
	testenv.RequireRoot(t, "mount(2)")
	base := t.TempDir()
	plugin, host := filepath.Join(base, "plugin"), filepath.Join(base, "host")
	for _, d := range []string{plugin, host} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// plugin stands for the plugin's propagated mount, host for the host's
	// view of it: peers of one shared mount.
	if err := unix.Mount("tmpfs", plugin, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	cleanupMount(t, plugin)
	if err := unix.Mount("", plugin, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(plugin, host, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	cleanupMount(t, host)
	vol := filepath.Join(plugin, "vol")
	if err := os.Mkdir(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(vol, "f"), "before")
	beneath, err := hostpath.Open(vol)
	if err != nil {
		t.Fatal(err)
	}
	defer beneath.Close()

	if err := StackReadOnly(vol); err != nil {
		t.Fatal(err)
	}
	cleanupMount(t, vol)
	cleanupMount(t, filepath.Join(host, "vol"))
	for _, p := range []string{filepath.Join(vol, "f"), filepath.Join(host, "vol", "f")} {
		if err := os.WriteFile(p, []byte("container"), 0o644); !errors.Is(err, unix.EROFS) {
			t.Errorf("write %s: %v, want EROFS", p, err)
		}
	}
	f, err := beneath.OpenFile("f", unix.O_WRONLY|unix.O_TRUNC, 0)
	if err != nil {
		t.Fatalf("open beneath the read-only bind: %v", err)
	}
	_, err = f.WriteString("plugin")
	f.Close()
	if err != nil {
		t.Fatalf("write beneath the read-only bind: %v", err)
	}
	if got := readFile(t, filepath.Join(host, "vol", "f")); got != "plugin" {
		t.Errorf("the host's view reads %q, want the plugin's write", got)
	}

	if err := UnmountTop(vol); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "vol", "f"), []byte("writable"), 0o644); err != nil {
		t.Errorf("the host's view after UnmountTop: %v, want writable again", err)
	}
}
