// Package testenv skips tests the machine cannot run: most of the plugin's
// tests mount (FUSE, bind mounts, ramfs) or change owners, which only root
// can do. CI runs them all as root; a developer's unprivileged `go test`
// runs the rest and reports these as skipped, with what they need.
package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// RequireRoot skips t unless it runs as root; why is what needs it
// ("chown", "mounting ramfs").
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip(why + " needs root")
	}
}

// RequireFUSE skips t unless it can mount a FUSE file system: root, and
// /dev/fuse (a container without the device cannot).
func RequireFUSE(t testing.TB) {
	t.Helper()
	RequireRoot(t, "a FUSE mount")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("a FUSE mount needs /dev/fuse: " + err.Error())
	}
}

// AbortFuse aborts the FUSE connection of the mount at mp, through the
// kernel's fusectl file system (mounted for it in a temporary directory if
// the host has not): every request waiting on it ends, ENOTCONN. It is how a
// test ends a killed server that did not go, so that the fault is reported
// rather than the run hung.
func AbortFuse(mp string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	conn := ""
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 4 && f[4] == mp {
			if majMin := strings.SplitN(f[2], ":", 2); len(majMin) == 2 && majMin[0] == "0" {
				conn = majMin[1] // the connection is named by its device number
			}
		}
	}
	if conn == "" {
		return fmt.Errorf("no FUSE mount on %s", mp)
	}
	ctl := "/sys/fs/fuse/connections"
	if _, err := os.Stat(filepath.Join(ctl, conn)); err != nil {
		dir, err := os.MkdirTemp("", "fusectl-")
		if err != nil {
			return err
		}
		defer os.Remove(dir)
		if err := syscall.Mount("none", dir, "fusectl", 0, ""); err != nil {
			return fmt.Errorf("mount fusectl: %w", err)
		}
		defer syscall.Unmount(dir, syscall.MNT_DETACH)
		ctl = dir
	}
	return os.WriteFile(filepath.Join(ctl, conn, "abort"), []byte("1"), 0o200)
}
