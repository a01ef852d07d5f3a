package bindmount

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/internal/testenv"
)

const deadFuseEnv = "BINDSTATE_DEAD_FUSE_HELPER"

// A server that served for a while and then died (the plugin killed) leaves
// a mount whose root's attributes the kernel still holds: lstat of it
// succeeds from that cache, without a request, so it cannot tell a dead
// mount from a live one. CleanupStale must still detach it; before, the
// restarted plugin mounted on top of it, and each crash left one more dead
// mount beneath the volume's mountpoint (found by TestExerciserCrash_D4_C3).
func TestCleanupStaleDeadFuseWhoseRootAttributesTheKernelKept(t *testing.T) {
	testenv.RequireRoot(t, "mount(2)")
	testenv.RequireFUSE(t)
	target := filepath.Join(t.TempDir(), "fuse")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	cleanupMount(t, target)
	cmd := exec.Command(os.Args[0], "-test.run=^TestDeadFuseHelperServes$", "-test.count=1")
	cmd.Env = append(os.Environ(), deadFuseEnv+"="+target)
	cmd.Stderr = os.Stderr
	if _, err := cmd.StdinPipe(); err != nil { // held open: the helper serves until killed
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "serving" {
				ready <- true
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("the serving helper exited: %v", cmd.Wait())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the serving helper did not mount in 30 s")
	}
	var st unix.Stat_t
	if err := unix.Lstat(target, &st); err != nil { // the kernel keeps the root's attributes now
		t.Fatalf("stat of the live mount: %v", err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	// What makes this case: the dead mount's root still stats fine.
	if err := unix.Lstat(target, &st); err != nil {
		t.Fatalf("stat of the dead mount's root: %v; want it answered from the kernel's cache (this test's case)", err)
	}
	if err := CleanupStale(target); err != nil {
		t.Fatal(err)
	}
	if m, _ := IsMountpoint(target); m {
		t.Fatal("the dead mount is still there: CleanupStale took it for a live one")
	}
}

// TestDeadFuseHelperServes is the helper of the test above: it serves an
// empty FUSE file system on the directory its environment names, with
// attributes valid for an hour, until killed. It does nothing in a normal
// run.
func TestDeadFuseHelperServes(t *testing.T) {
	target := os.Getenv(deadFuseEnv)
	if target == "" {
		t.Skip("only as a helper process")
	}
	hour := time.Hour
	server, err := fs.Mount(target, &fs.Inode{}, &fs.Options{
		AttrTimeout:  &hour,
		EntryTimeout: &hour,
		MountOptions: fuse.MountOptions{DirectMount: true, Name: "bindstate-test"},
	})
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	fmt.Println("serving")
	os.Stdin.Read(make([]byte, 1)) // until killed (or the test's end closes stdin)
	if err := server.Unmount(); err != nil && !errors.Is(err, unix.EINVAL) {
		t.Fatal(err)
	}
}
