// Package testenv skips tests the machine cannot run: most of the plugin's
// tests mount (FUSE, bind mounts, ramfs) or change owners, which only root
// can do. CI runs them all as root; a developer's unprivileged `go test`
// runs the rest and reports these as skipped, with what they need.
package testenv

import (
	"os"
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
