package store

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/writeback"
)

// The store says when it starts work on the share (Config.ShareWork: the
// plugin runs on every CPU meanwhile, package cpus), and only then: what it
// answers from the local store alone must not call it, or the plugin would
// never go back to one CPU while a container reads a hot tree.
func TestShareWorkIsCalledForWorkOnTheShareOnly(t *testing.T) {
	r := newStoreRig(t, consistency.Delegated, writeback.Options{}, func(h string) {
		if err := os.WriteFile(filepath.Join(h, "f"), []byte("hello"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	var calls atomic.Int64
	r.shareWork = func() { calls.Add(1) }
	r.restart(t, func() {}) // open again, with the hook
	s := r.s

	step := func(what string, share bool, do func() error) {
		t.Helper()
		before := calls.Load()
		if err := do(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		switch after := calls.Load(); {
		case share && after == before:
			t.Errorf("%s works on the share, but ShareWork was not called", what)
		case !share && after != before:
			t.Errorf("%s needs nothing from the share, but ShareWork was called %d times", what, after-before)
		}
	}
	step("listing the root from the share", true, func() error { return s.EnsurePopulated("") })
	step("the root, listed already", false, func() error { return s.EnsurePopulated("") })
	step("fetching f", true, func() error { return s.EnsureContent("f") })
	step("f, fetched already", false, func() error { return s.EnsureContent("f") })
	step("writing f back", true, func() error { return putter{s}.Put(context.Background(), "f") })
}
