package frontend

import (
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// Config.ShareWork reaches every store the Opener opens: a container's first
// listing and first read of a file, through the mount, are share work (the
// plugin runs on every CPU meanwhile, package cpus). A store opened without
// it would leave the plugin on one CPU through a cold walk.
func TestShareWorkReachesTheStores(t *testing.T) {
	for _, st := range []consistency.State{consistency.Cached, consistency.Delegated} {
		t.Run(st.String(), func(t *testing.T) {
			var calls atomic.Int64
			r := newConfiguredRig(t, st, "1h", func(h string) { writeFile(t, filepath.Join(h, "f"), "from the host") },
				func(c *Config) { c.ShareWork = func() { calls.Add(1) } })
			if names := listNames(t, r.mnt); len(names) != 1 || names[0] != "f" {
				t.Fatalf("the container lists %v, want [f]", names)
			}
			if got := readFile(t, r.mntPath("f")); got != "from the host" {
				t.Fatalf("the container reads %q", got)
			}
			if calls.Load() == 0 {
				t.Fatal("a cold listing and read through the mount did not call Config.ShareWork")
			}
		})
	}
}
