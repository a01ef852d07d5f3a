package frontend

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// A read-only volume is a read-only mount in every state: the kernel
// refuses a write at the open, as on a read-only bind, and nothing reaches
// the host; what the host has is read.
func TestReadOnlyVolumeIsAReadOnlyMount(t *testing.T) {
	for _, st := range []consistency.State{consistency.Consistent, consistency.Cached, consistency.Delegated} {
		t.Run(st.String(), func(t *testing.T) {
			r := newReadOnlyRig(t, st, func(h string) {
				writeFile(t, h+"/f", "host")
				if err := os.Mkdir(h+"/d", 0o755); err != nil {
					t.Fatal(err)
				}
			})
			var sfs unix.Statfs_t
			if err := unix.Statfs(r.mnt, &sfs); err != nil {
				t.Fatal(err)
			}
			if sfs.Flags&unix.ST_RDONLY == 0 {
				t.Errorf("statfs of the mount: flags %#x, want ST_RDONLY", sfs.Flags)
			}
			for range 2 {
				if got := readFile(t, r.mntPath("f")); got != "host" {
					t.Fatalf("read %q", got)
				}
			}
			if n := r.front.Status().Ops["open"]; n != 0 {
				t.Errorf("%d OPENs reached the plugin: the volume is not served without OPEN", n)
			}
			if _, err := os.OpenFile(r.mntPath("f"), os.O_WRONLY, 0); !errors.Is(err, unix.EROFS) {
				t.Errorf("open for writing: %v, want EROFS", err)
			}
			if err := os.WriteFile(r.mntPath("d/new"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
				t.Errorf("create: %v, want EROFS", err)
			}
			if err := os.Remove(r.mntPath("f")); !errors.Is(err, unix.EROFS) {
				t.Errorf("remove: %v, want EROFS", err)
			}
			if got := readFile(t, r.hostPath("f")); got != "host" {
				t.Errorf("the host's file is now %q", got)
			}
			if names := listNames(t, r.hostPath("d")); len(names) != 0 {
				t.Errorf("the host's directory now holds %v", names)
			}
			if w := r.front.Status().Writers; st != consistency.Consistent && w != "none: the volume is read-only" {
				t.Errorf("status says writers are served %q", w)
			}
		})
	}
}

// Rule K2 holds for a read-only consistent volume: it is a bind of the
// source, only read-only.
func TestK2_AReadOnlyConsistentVolumeIsABind(t *testing.T) {
	r := newReadOnlyRig(t, consistency.Consistent, nil)
	writeFile(t, r.hostPath("f"), "now")
	if got := readFile(t, r.mntPath("f")); got != "now" {
		t.Fatalf("the host's write read through the volume at once: %q", got)
	}
}
