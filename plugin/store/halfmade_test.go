package store

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/writeback"
)

// A rename made on the host first (here of a file with two names, which
// both states rename on the host at once) is recorded while the host has
// it and the store not yet, and the record goes once both have it. A
// plugin killed between the halves leaves the record: the next Open makes
// the rename in the store too, so the file keeps its two names, as on the
// host (without the record, the refresh brought the host's new name in as
// a file of one name: the crash exerciser's `rename a -> h (over existing:
// true), cut by a kill`). A record of a rename the host did not make is
// dropped, and the store left as it was.
func TestD4_C3_ARenameCutByAKillIsFinishedAtTheNextOpen(t *testing.T) {
	for _, st := range []consistency.State{consistency.Cached, consistency.Delegated} {
		t.Run(st.String(), func(t *testing.T) {
			// Nothing written back while the test looks at the journal.
			r := newStoreRig(t, st, writeback.Options{Delay: time.Hour, MaxDelay: time.Hour}, func(h string) {
				os.WriteFile(filepath.Join(h, "a"), []byte("linked"), 0o644)
				os.Link(filepath.Join(h, "a"), filepath.Join(h, "b"))
				os.WriteFile(filepath.Join(h, "x"), []byte("single"), 0o644)
			})
			ctx := context.Background()
			if err := r.s.EnsurePopulated(""); err != nil {
				t.Fatal(err)
			}
			if lst, err := r.s.Lstat("a"); err != nil || lst.Nlink != 2 {
				t.Fatalf("the store's a: nlink %d, %v; want 2 (a and b)", lst.Nlink, err)
			}
			records := func() []string {
				ents, _ := os.ReadDir(r.s.halfMade.dir)
				var out []string
				for _, e := range ents {
					b, _ := os.ReadFile(filepath.Join(r.s.halfMade.dir, e.Name()))
					out = append(out, strings.ReplaceAll(string(b), "\x00", " -> "))
				}
				return out
			}
			var between []string
			testHookRenameHalves = func(string) { between = records() }
			t.Cleanup(func() { testHookRenameHalves = nil })
			if err := r.s.Rename(ctx, "a", "c", 0); err != nil {
				t.Fatal(err)
			}
			if len(between) != 1 || between[0] != "a -> c" {
				t.Fatalf("records between the rename's halves: %q, want [a -> c]", between)
			}
			if got := records(); len(got) != 0 {
				t.Fatalf("records after the rename: %q, want none", got)
			}
			testHookRenameHalves = nil

			// What a kill between the halves of `rename c -> d` leaves:
			// its record, and the host's half; in delegated, c held dirty
			// (a writer of it open when the plugin was killed).
			if st == consistency.Delegated {
				if err := r.s.markDirty("c"); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := r.s.halfMade.begin("c", "d"); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(r.host, "c"), filepath.Join(r.host, "d")); err != nil {
				t.Fatal(err)
			}
			// And of `rename x -> y`, killed before the host's.
			if _, err := r.s.halfMade.begin("x", "y"); err != nil {
				t.Fatal(err)
			}
			var putMu sync.Mutex
			var put []string
			testHookPut = func(rel string) {
				putMu.Lock()
				defer putMu.Unlock()
				put = append(put, rel)
			}
			t.Cleanup(func() { testHookPut = nil })
			r.restart(t, func() {})
			if _, err := r.s.Lstat("c"); err == nil {
				t.Errorf("the store still has c after the next Open")
			}
			if lst, err := r.s.Lstat("d"); err != nil || lst.Nlink != 2 {
				t.Errorf("the store's d after the next Open: nlink %d, %v; want the file of two names (d and b)", lst.Nlink, err)
			}
			if st == consistency.Delegated {
				// What the journal held under c is held under d, its name
				// now: dirty, or written back already.
				if err := r.s.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				putMu.Lock()
				gotPut := slices.Contains(put, "d")
				putMu.Unlock()
				if !gotPut {
					t.Errorf("d was not written back after the next Open (Puts: %q): what the journal held under c must be held under d, its name now", put)
				}
			}
			if _, err := r.s.Lstat("x"); err != nil {
				t.Errorf("the store's x after the next Open, whose rename the host never made: %v", err)
			}
			if _, err := r.s.Lstat("y"); err == nil {
				t.Errorf("the store has y, a rename the host never made")
			}
			if got := records(); len(got) != 0 {
				t.Errorf("records after the next Open: %q, want none", got)
			}
		})
	}
}
