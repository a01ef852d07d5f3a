package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/hostpath"
	"github.com/bindstate/bindstate/plugin/writeback"
)

// storeRig opens a store over a fresh host folder, and can close and reopen
// it on the same tree and journal: a plugin restart.
type storeRig struct {
	base, host string
	state      consistency.State
	opts       writeback.Options
	root       *hostpath.Root
	s          *Store
	shareWork  func() // Config.ShareWork; nil: none
}

func newStoreRig(t *testing.T, st consistency.State, opts writeback.Options, setup func(host string)) *storeRig {
	t.Helper()
	r := &storeRig{base: t.TempDir(), state: st, opts: opts}
	r.host = filepath.Join(r.base, "host")
	if err := os.Mkdir(r.host, 0o755); err != nil {
		t.Fatal(err)
	}
	setup(r.host)
	r.start(t)
	return r
}

// start opens r.host and the store over it, both closed at the test's end.
func (r *storeRig) start(t *testing.T) {
	t.Helper()
	root, err := hostpath.Open(r.host)
	if err != nil {
		t.Fatal(err)
	}
	r.root = root
	t.Cleanup(func() {
		if r.s != nil {
			r.s.Close()
		}
		root.Close()
	})
	r.open(t)
}

func (r *storeRig) open(t *testing.T) {
	t.Helper()
	s, err := Open(Config{
		Host: r.root, Tree: filepath.Join(r.base, "tree"), Journal: filepath.Join(r.base, "journal"),
		State: r.state, WriteBack: r.opts, ShareWork: r.shareWork,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.s = s
}

// restart closes the store, runs down (what happens on the host while the
// plugin is down), and opens it again.
func (r *storeRig) restart(t *testing.T, down func()) {
	t.Helper()
	err := r.s.Close()
	r.s = nil
	if err != nil {
		t.Fatal(err)
	}
	down()
	r.open(t)
}

// listNames lists dir, sorted.
func listNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// conflictCopies lists the host's conflict copies of name.
func conflictCopies(t *testing.T, host, name string) []string {
	t.Helper()
	var out []string
	for _, n := range listNames(t, host) {
		if strings.HasPrefix(n, name+".bindstate-conflict-") {
			out = append(out, n)
		}
	}
	return out
}

// Rule D7 across a restart: the tombstones (what the host had at a path the
// container removed or replaced) are journaled, so a plugin restarted before
// the writeback still tells a host edit from its own change. Before, it
// knew nothing after a restart: a host edit to a file the container deleted
// was removed with only a log line, and a symlink the container replaced
// got a needless conflict copy.
func TestD7_TombstonesSurviveARestart(t *testing.T) {
	// Nothing is written back on its own before the restart.
	r := newStoreRig(t, consistency.Delegated, writeback.Options{Delay: time.Hour}, func(h string) {
		os.WriteFile(filepath.Join(h, "edited"), []byte("host v1"), 0o644)
		os.WriteFile(filepath.Join(h, "untouched"), []byte("host"), 0o644)
		os.Symlink("t1", filepath.Join(h, "link"))
	})
	ctx := context.Background()
	if err := r.s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"edited", "untouched", "link"} {
		if err := r.s.Unlink(ctx, rel); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.s.Symlink(ctx, "t2", "link", Owner{Uid: os.Getuid(), Gid: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	r.restart(t, func() {
		// While the plugin is down, the host edits one of the deleted files.
		if err := os.WriteFile(filepath.Join(r.host, "edited"), []byte("host v2, longer"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	if _, err := os.Lstat(filepath.Join(r.host, "untouched")); !os.IsNotExist(err) {
		t.Errorf("host untouched: %v, want removed", err)
	}
	if got := conflictCopies(t, r.host, "untouched"); len(got) != 0 {
		t.Errorf("conflict copies of a file the host did not change: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(r.host, "edited")); !os.IsNotExist(err) {
		t.Errorf("host edited: %v, want removed (the container deleted it)", err)
	}
	copies := conflictCopies(t, r.host, "edited")
	if len(copies) != 1 {
		t.Fatalf("conflict copies of the file the host edited while the plugin was down: %q, want 1", copies)
	}
	if b, _ := os.ReadFile(filepath.Join(r.host, copies[0])); string(b) != "host v2, longer" {
		t.Errorf("conflict copy holds %q", b)
	}
	if target, err := os.Readlink(filepath.Join(r.host, "link")); err != nil || target != "t2" {
		t.Errorf("host link -> %q (%v), want t2", target, err)
	}
	if got := conflictCopies(t, r.host, "link"); len(got) != 0 {
		t.Errorf("conflict copies of the symlink only the container replaced: %q", got)
	}
}
