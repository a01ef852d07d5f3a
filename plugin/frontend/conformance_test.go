package frontend

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/internal/testenv"
)

// notFileSystemChecks are posixtest checks that say nothing about a file
// system's behaviour, with the reason. Everything else must pass on the
// reference (a plain directory on the test's disk) and on both FUSE states.
var notFileSystemChecks = map[string]struct {
	reason    string
	onMounts  bool // still run on the mounts
	reference bool // still run on the reference
}{
	// It expects a second POSIX lock from the same process to conflict; on
	// ext4 (and on Linux generally) it does not, so ext4 fails it too.
	"FcntlFlockLocksFile": {reason: "expects lock behaviour no Linux file system has (ext4 fails it)"},
	// It attacks a FUSE server's own path walk with symlink swaps: meaningful
	// on the mounts, and a plain directory "fails" it by design.
	"OpenSymlinkRace": {reason: "checks the FUSE server's path walk", onMounts: true},
}

// TestConformance runs go-fuse's POSIX checks against a plain directory (the
// reference) and against the cached and delegated mounts, each check in a
// fresh directory.
func TestConformance(t *testing.T) {
	testenv.RequireFUSE(t)
	names := make([]string, 0, len(posixtest.All))
	for n := range posixtest.All {
		names = append(names, n)
	}
	sort.Strings(names)
	targets := []struct {
		name string
		dir  func(t *testing.T) string
	}{
		{"reference", func(t *testing.T) string { return t.TempDir() }},
		{"cached", func(t *testing.T) string { return newRig(t, consistency.Cached, nil).mnt }},
		{"delegated", func(t *testing.T) string { return newRig(t, consistency.Delegated, nil).mnt }},
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			root := tg.dir(t)
			for _, n := range names {
				if ex, ok := notFileSystemChecks[n]; ok {
					if (tg.name == "reference" && !ex.reference) || (tg.name != "reference" && !ex.onMounts) {
						t.Logf("not run: %s: %s", n, ex.reason)
						continue
					}
				}
				dir := filepath.Join(root, n)
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				t.Run(n, func(t *testing.T) { posixtest.All[n](t, dir) })
			}
		})
	}
}
