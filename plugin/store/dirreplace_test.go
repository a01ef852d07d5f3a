package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/writeback"
)

// Rule D7 where the container replaces a directory it knew by a file. The
// host directory's mtime moved with the writeback's own entries in it, so
// it is no sign of a host edit: the file replaces it with no conflict copy
// (there was one; the exerciser found it: mkdir c, a file written into it
// and back, the file removed, rmdir c, a file c). A host directory that
// holds something the container never saw is kept aside, with it.
func TestD7_ADirectoryTheContainerReplacedByAFileIsNoConflict(t *testing.T) {
	withAndWithoutAHostFile(t, func(t *testing.T, hostAdds bool) {
		r := newStoreRig(t, consistency.Delegated, writeback.Options{Delay: time.Hour}, func(h string) {})
		ctx := context.Background()
		me := Owner{Uid: os.Getuid(), Gid: os.Getgid()}
		flush := func() {
			t.Helper()
			if err := r.s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.s.Mkdir(ctx, "c", 0o755, me); err != nil {
			t.Fatal(err)
		}
		flush()
		time.Sleep(10 * time.Millisecond) // the entries below move c's host mtime
		writeAsContainer(t, r.s, "c/e", "in c")
		flush()
		if err := r.s.Unlink(ctx, "c/e"); err != nil {
			t.Fatal(err)
		}
		if err := r.s.Rmdir(ctx, "c"); err != nil {
			t.Fatal(err)
		}
		writeAsContainer(t, r.s, "c", "now a file")
		if hostAdds {
			if err := os.WriteFile(filepath.Join(r.host, "c", "host-only"), []byte("host"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		flush()
		if got := readHostFile(t, filepath.Join(r.host, "c")); got != "now a file" {
			t.Fatalf("host c holds %q, want the container's file", got)
		}
		copies := conflictCopies(t, r.host, "c")
		switch {
		case !hostAdds && len(copies) != 0:
			t.Errorf("conflict copies of a directory only the writeback changed: %q", copies)
		case hostAdds && len(copies) != 1:
			t.Errorf("conflict copies %q of a directory holding a file the container never saw, want 1", copies)
		case hostAdds:
			if got := readHostFile(t, filepath.Join(r.host, copies[0], "host-only")); got != "host" {
				t.Errorf("the conflict copy's host-only holds %q", got)
			}
		}
	})
}

// withAndWithoutAHostFile runs test twice, as subtests: the host adding
// nothing, and the host adding a file where the container removed things.
func withAndWithoutAHostFile(t *testing.T, test func(t *testing.T, hostAdds bool)) {
	for _, hostAdds := range []bool{false, true} {
		name := "the host added nothing"
		if hostAdds {
			name = "the host added a file in it"
		}
		t.Run(name, func(t *testing.T) { test(t, hostAdds) })
	}
}

func readHostFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Rule D7 for a directory the container removed: the host's directory goes
// with what the container removed in it, but one holding a file the host
// added meanwhile (which the container never saw) is kept aside, the file
// in it, not removed with it.
func TestD7_ARemovedDirectoryHoldingWhatTheHostAddedIsKeptAside(t *testing.T) {
	withAndWithoutAHostFile(t, func(t *testing.T, hostAdds bool) {
		r := newStoreRig(t, consistency.Delegated, writeback.Options{Delay: time.Hour}, func(h string) {
			if err := os.MkdirAll(filepath.Join(h, "d", "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"d/a", "d/sub/b"} {
				if err := os.WriteFile(filepath.Join(h, f), []byte(f), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
		ctx := context.Background()
		for _, dir := range []string{"", "d", "d/sub"} {
			if err := r.s.EnsurePopulated(dir); err != nil {
				t.Fatal(err)
			}
		}
		// rm -rf d, as the container makes it: entries first.
		for _, f := range []string{"d/sub/b", "d/a"} {
			if err := r.s.Unlink(ctx, f); err != nil {
				t.Fatal(err)
			}
		}
		for _, dir := range []string{"d/sub", "d"} {
			if err := r.s.Rmdir(ctx, dir); err != nil {
				t.Fatal(err)
			}
		}
		if hostAdds {
			if err := os.WriteFile(filepath.Join(r.host, "d", "sub", "host-only"), []byte("host"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(r.host, "d")); !os.IsNotExist(err) {
			t.Errorf("host d after the container removed it: %v, want gone", err)
		}
		// Where the host's file went: into a conflict copy of d, or of
		// d/sub inside one, as the queue takes the two in either order.
		var kept, copies []string
		filepath.WalkDir(r.host, func(p string, e os.DirEntry, err error) error {
			if err == nil && strings.Contains(e.Name(), ".bindstate-conflict-") {
				copies = append(copies, p)
			}
			if err == nil && e.Name() == "host-only" && readHostFile(t, p) == "host" {
				kept = append(kept, p)
			}
			return nil
		})
		switch {
		case !hostAdds && len(copies) != 0:
			t.Errorf("conflict copies of a directory holding only what the container removed: %q", copies)
		case hostAdds && len(kept) != 1:
			t.Errorf("the file the host added: kept as %q, want in one conflict copy (copies %q)", kept, copies)
		}
	})
}

// The same, with the parent's removal written back first (two writeback
// workers may take the two in either order): the host's file was added in
// the subdirectory, so the parent's mtime is as the store saw it, and the
// parent went with everything in it. CI caught it once, under load
// (TestD7_ARemovedDirectoryHoldingWhatTheHostAddedIsKeptAside).
func TestD7_AParentsRemovalWrittenBackFirstKeepsWhatTheHostAddedBeneath(t *testing.T) {
	withAndWithoutAHostFile(t, func(t *testing.T, hostAdds bool) {
		r := newStoreRig(t, consistency.Delegated, writeback.Options{Delay: time.Hour}, func(h string) {
			if err := os.MkdirAll(filepath.Join(h, "d", "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(h, "d", "sub", "b"), []byte("b"), 0o644); err != nil {
				t.Fatal(err)
			}
		})
		ctx := context.Background()
		for _, dir := range []string{"", "d", "d/sub"} {
			if err := r.s.EnsurePopulated(dir); err != nil {
				t.Fatal(err)
			}
		}
		for _, step := range []func() error{
			func() error { return r.s.Unlink(ctx, "d/sub/b") },
			func() error { return r.s.Rmdir(ctx, "d/sub") },
			func() error { return r.s.Rmdir(ctx, "d") },
		} {
			if err := step(); err != nil {
				t.Fatal(err)
			}
		}
		if hostAdds {
			if err := os.WriteFile(filepath.Join(r.host, "d", "sub", "host-only"), []byte("host"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := (putter{r.s}).Put(ctx, "d"); err != nil {
			t.Fatal(err)
		}
		if err := r.s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		var kept []string
		filepath.WalkDir(r.host, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.Name() == "host-only" && readHostFile(t, p) == "host" {
				kept = append(kept, p)
			}
			return nil
		})
		_, dErr := os.Lstat(filepath.Join(r.host, "d"))
		switch {
		case !os.IsNotExist(dErr):
			t.Errorf("host d after the container removed it: %v, want gone", dErr)
		case hostAdds && len(kept) != 1:
			t.Errorf("the file the host added in d/sub: kept as %q, want in a conflict copy of d", kept)
		case !hostAdds && r.s.conflicts.Load() != 0:
			t.Errorf("%d conflict copies of a directory holding only what the container removed", r.s.conflicts.Load())
		}
	})
}

// rule D7: the writeback of a removed directory found the container had
// made it again meanwhile, with a file of its own: its host copy, which
// held only what the container had removed, was kept aside as a host edit
// (a spurious conflict copy). TestHostile_SymlinkSwapRacesWriteback met it
// about one run in 20.
func TestD7_ADirectoryMadeAgainWhileItsRemovalIsWrittenBackIsNoConflict(t *testing.T) {
	r := newStoreRig(t, consistency.Delegated, writeback.Options{Delay: time.Hour}, func(h string) {
		if err := os.MkdirAll(filepath.Join(h, "d"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(h, "d", "f"), []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	ctx := context.Background()
	for _, dir := range []string{"", "d"} {
		if err := r.s.EnsurePopulated(dir); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.s.Unlink(ctx, "d/f"); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Rmdir(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	testHookAbsent = func(rel string) { // on the test's goroutine: the Put is called below
		if rel != "d" {
			return
		}
		once.Do(func() {
			if err := r.s.Mkdir(ctx, "d", 0o755, Owner{Uid: os.Getuid(), Gid: os.Getgid()}); err != nil {
				t.Fatal(err)
			}
			writeAsContainer(t, r.s, "d/f", "new")
		})
	}
	t.Cleanup(func() { testHookAbsent = nil })
	if err := (putter{r.s}).Put(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if kept := conflictCopies(t, r.host, "d"); len(kept) > 0 {
		t.Errorf("the host holds %v: the container's own removed directory kept aside as a host edit", kept)
	}
	if got := readHostFile(t, filepath.Join(r.host, "d", "f")); got != "new" {
		t.Errorf("host d/f = %q, want the container's %q", got, "new")
	}
}

// rule D7: a Put that finds its parent missing on the host writes the
// parent first, and never removes it: if the container removed the
// parent meanwhile, that removal is the parent's own Put's, under the tree
// lock that waits for every Put beneath it. Taken by the Put beneath, which
// holds the parent shared only, it met another Put's temporary file in the
// host's directory and kept the directory aside as a host edit
// (TestHostile_SymlinkSwapRacesWriteback skipped on such a copy).
func TestD7_AWritebackBeneathADirectoryNeverRemovesIt(t *testing.T) {
	r := newStoreRig(t, consistency.Delegated, writeback.Options{Delay: time.Hour}, func(string) {})
	ctx := context.Background()
	if err := r.s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Mkdir(ctx, "d", 0o755, Owner{Uid: os.Getuid(), Gid: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	writeAsContainer(t, r.s, "d/f", "f")
	other := filepath.Join(r.host, "d", tmpPrefix+"g-1")
	var once sync.Once
	testHookParent = func(parent string) {
		if parent != "d" {
			return
		}
		once.Do(func() {
			// The container removes d; another Put beneath it has made d
			// on the host meanwhile and is writing its file there.
			if err := r.s.Unlink(ctx, "d/f"); err != nil {
				t.Error(err)
			}
			if err := r.s.Rmdir(ctx, "d"); err != nil {
				t.Error(err)
			}
			if err := os.Mkdir(filepath.Join(r.host, "d"), 0o755); err != nil {
				t.Error(err)
			}
			if err := os.WriteFile(other, []byte("being written"), 0o644); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(func() { testHookParent = nil })
	if err := (putter{r.s}).Put(ctx, "d/f"); err != nil {
		t.Fatal(err)
	}
	if got := readHostFile(t, other); got != "being written" {
		t.Errorf("the other Put's file in host d reads %q after a Put beneath d", got)
	}
	if kept := conflictCopies(t, r.host, "d"); len(kept) > 0 {
		t.Errorf("the host holds %v: a Put beneath d kept it aside", kept)
	}
}
