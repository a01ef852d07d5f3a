package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// The host refresh plans from a listing made without the store's lock; by
// the time it applies a change, the container may have changed the path
// itself (cached: through to the host, taking the host's new state as its
// base). RefreshEntry reads the host under the lock, so it never applies
// the listing's stale attributes, and then finds nothing new to bring in
// (rules C2, C3).
func TestRefreshAppliesTheHostAsItIsNow(t *testing.T) {
	s := openTestStore(t, consistency.Cached, func(h string) {
		os.WriteFile(filepath.Join(h, "f"), []byte("host"), 0o644)
	})
	if err := s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	mode := uint32(0o755)
	if err := s.Setattr(context.Background(), "f", Attrs{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	changed, err := s.RefreshEntry("f")
	if err != nil {
		t.Fatal(err)
	}
	if changed {
		t.Error("the container's own chmod, written through, was brought in again as a host change")
	}
	st, err := s.Lstat("f")
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o755 {
		t.Fatalf("after a refresh following the container's chmod, the store has mode %o, want 755", st.Mode&0o7777)
	}
}

// A file open for writing through to the host is left alone by the host
// refresh under every name it has: refreshing it under another name (a hard
// link) would change it under the writer (rule C3: what the container wrote
// is what it reads).
func TestBusyCoversEveryNameOfAFileOpenForWriting(t *testing.T) {
	s := openTestStore(t, consistency.Cached, func(h string) {
		os.WriteFile(filepath.Join(h, "f"), []byte("host"), 0o644)
		os.Link(filepath.Join(h, "f"), filepath.Join(h, "g"))
		os.WriteFile(filepath.Join(h, "other"), []byte("x"), 0o644)
	})
	if err := s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	f, err := s.Open(context.Background(), "f", unix.O_WRONLY, func() (string, bool) { return "f", true })
	if err != nil {
		t.Fatal(err)
	}
	if !s.Busy("f") || !s.Busy("g") {
		t.Fatalf("open for writing as f: busy f %v, g %v; want both", s.Busy("f"), s.Busy("g"))
	}
	if s.Busy("other") {
		t.Fatal("an unrelated file is busy")
	}
	if err := f.Release(); err != nil {
		t.Fatal(err)
	}
	if s.Busy("f") || s.Busy("g") {
		t.Fatal("still busy after release")
	}
}

// Listing a directory from the host into the store makes entries in the
// store's directory, which sets its mtime to now; the container is to see
// the host's mtime still (cached: the host's view is authoritative; rule C2
// for a directory the container has not changed), as it did before.
func TestC2_PopulatingKeepsTheHostsDirectoryMtime(t *testing.T) {
	for _, st := range []consistency.State{consistency.Cached, consistency.Delegated} {
		t.Run(st.String(), func(t *testing.T) {
			host := map[string]unix.Stat_t{}
			s := openTestStore(t, st, func(h string) {
				os.Mkdir(filepath.Join(h, "d"), 0o755)
				os.WriteFile(filepath.Join(h, "d", "f"), []byte("x"), 0o644)
				for i, dir := range []string{"d", ""} {
					old := time.Date(2001, 2, 3, 4, 5, 6, 7+i, time.UTC)
					os.Chtimes(filepath.Join(h, dir), old, old)
					var hs unix.Stat_t
					if err := unix.Lstat(filepath.Join(h, dir), &hs); err != nil {
						t.Fatal(err)
					}
					host[dir] = hs
				}
			})
			for _, dir := range []string{"", "d"} {
				if err := s.EnsurePopulated(dir); err != nil {
					t.Fatal(err)
				}
			}
			for _, dir := range []string{"", "d"} {
				got, err := s.Lstat(dir)
				if err != nil {
					t.Fatal(err)
				}
				if got.Mtim != host[dir].Mtim {
					t.Errorf("directory %q after it was listed into the store: mtime %v, the host has %v", dir, got.Mtim, host[dir].Mtim)
				}
			}
		})
	}
}

// The log of populated directories the host refresh reads (PopulatedSince)
// is bounded, and a reader that fell behind what it keeps is told so (it
// then looks at every directory): a tree the host keeps remaking would make
// it grow without end.
func TestPopulatedLogIsBoundedAndSaysWhatItLost(t *testing.T) {
	dirs := []string{"a", "b", "c", "d"}
	s := openTestStore(t, consistency.Cached, func(h string) {
		for _, d := range dirs {
			os.Mkdir(filepath.Join(h, d), 0o755)
		}
	})
	s.populatedMax = 3
	for _, d := range append([]string{""}, dirs...) {
		if err := s.EnsurePopulated(d); err != nil {
			t.Fatal(err)
		}
	}
	if got, next, complete := s.PopulatedSince(3); !complete || next != 5 || strings.Join(got, " ") != "c d" {
		t.Errorf("since the 3rd: %q, next %d, complete %v; want \"c d\", 5, true", got, next, complete)
	}
	if got, next, complete := s.PopulatedSince(0); complete || next != 5 || len(got) > 3 {
		t.Errorf("since the start, with at most 3 kept: %q, next %d, complete %v; want at most 3, 5, false", got, next, complete)
	}
	if got, next, complete := s.PopulatedSince(5); !complete || next != 5 || len(got) != 0 {
		t.Errorf("since the last: %q, next %d, complete %v; want none, 5, true", got, next, complete)
	}
	if len(s.populated) > s.populatedMax {
		t.Errorf("the log keeps %d directories, more than its bound %d", len(s.populated), s.populatedMax)
	}
}
