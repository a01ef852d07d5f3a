package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bindstate/bindstate/integration/harness"
)

// TestTheShareWithSHARE_RTTIsThatMuchSlowerPerRequest runs contrib/share.sh
// as the bench does (SHARE_RTT), with a real sshd and sshfs: each request to
// the share takes the added round trip at least, and `down` stops the delay
// line it started.
func TestTheShareWithSHARE_RTTIsThatMuchSlowerPerRequest(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: share.sh runs a private sshd and an sshfs mount")
	}
	for _, tool := range []string{"/usr/sbin/sshd", "sshfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (contrib/install-deps.sh installs it)", tool)
		}
	}
	bin := filepath.Join(t.TempDir(), "delayline")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	script, err := filepath.Abs("../share.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	share, err := harness.StartShare(script, filepath.Join(dir, "H"), filepath.Join(dir, "S"), "SHARE_RTT=20", "DELAYLINE="+bin)
	if err != nil {
		t.Fatal(err)
	}
	downed := false
	t.Cleanup(func() {
		if !downed {
			share.Down()
		}
	})

	env, err := share.Vars()
	if err != nil {
		t.Fatal(err)
	}
	if env["SHARE_RTT_MS"] != "20" || env["SHARE_PORT"] == env["SHARE_SSHD_PORT"] {
		t.Fatalf("share.sh env: SHARE_RTT_MS=%q, SHARE_PORT=%q, SHARE_SSHD_PORT=%q: want 20 and the delay line's own port",
			env["SHARE_RTT_MS"], env["SHARE_PORT"], env["SHARE_SSHD_PORT"])
	}
	pidText, err := os.ReadFile(filepath.Join(env["SHARE_STATE"], "delayline.pid"))
	if err != nil {
		t.Fatalf("the delay line's pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil {
		t.Fatalf("the delay line's pid file: %v", err)
	}

	// A file written on the host is read through the share, and each request
	// for a name sshfs has not seen waits for the added round trip.
	if err := os.WriteFile(share.Host("f"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(share.Source("f")); err != nil || string(b) != "hello" {
		t.Fatalf("reading f through the share: %q, %v", b, err)
	}
	for i := range 5 {
		start := time.Now()
		_, err := os.Lstat(share.Source("missing-" + strconv.Itoa(i)))
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("lstat of a missing name through the share: %v", err)
		}
		if took := time.Since(start); took < 20*time.Millisecond {
			t.Fatalf("a request to the share took %v, want at least the added 20 ms", took)
		}
	}

	if err := share.Down(); err != nil {
		t.Fatal(err)
	}
	downed = true
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the delay line (pid %d) still runs after share.sh down", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
