package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
	for _, hostAdds := range []bool{false, true} {
		name := "the host added nothing"
		if hostAdds {
			name = "the host added a file in it"
		}
		t.Run(name, func(t *testing.T) {
			r := newStoreRig(t, consistency.Delegated, writeback.Options{Delay: time.Hour}, func(h string) {})
			ctx := context.Background()
			me := Owner{Uid: os.Getuid(), Gid: os.Getgid()}
			write := func(rel, content string) {
				t.Helper()
				f, err := r.s.Create(ctx, rel, unix.O_WRONLY, 0o644, me, func() (string, bool) { return rel, true })
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt(ctx, []byte(content), 0); err != nil {
					t.Fatal(err)
				}
				if err := f.Release(); err != nil {
					t.Fatal(err)
				}
			}
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
			write("c/e", "in c")
			flush()
			if err := r.s.Unlink(ctx, "c/e"); err != nil {
				t.Fatal(err)
			}
			if err := r.s.Rmdir(ctx, "c"); err != nil {
				t.Fatal(err)
			}
			write("c", "now a file")
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
}

func readHostFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
