package frontend

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// TestConformance runs go-fuse's POSIX checks against a plain directory (the
// reference) and against the cached and delegated mounts, each check in a
// fresh directory. A check that fails on the reference is not held against
// the mounts.
func TestConformance(t *testing.T) {
	requireFUSE(t)
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
	refFailed := map[string]bool{}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			root := tg.dir(t)
			for _, n := range names {
				if tg.name != "reference" && refFailed[n] {
					continue
				}
				dir := filepath.Join(root, n)
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				ok := t.Run(n, func(t *testing.T) { posixtest.All[n](t, dir) })
				if !ok && tg.name == "reference" {
					refFailed[n] = true
				}
			}
		})
	}
}
