package frontend

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/store"
)

func (r *rig) store(t *testing.T) *store.Store {
	t.Helper()
	r.o.mu.Lock()
	defer r.o.mu.Unlock()
	ost, ok := r.o.stores[r.spec.Key]
	if !ok {
		t.Fatal("no store open")
	}
	return ost.st
}

// Read-ahead from the share: reading one file of a directory fetches its
// other small files in the background, and listing a directory lists its
// subdirectories; large files wait until they are opened. What is fetched
// ahead is what the host has (the contents are compared).
func TestReadAheadFetchesSiblingsAndListsSubdirs(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			r := newRig(t, st, func(h string) {
				os.MkdirAll(filepath.Join(h, "d/sub/deeper"), 0o755)
				for i := range 10 {
					writeFile(t, filepath.Join(h, fmt.Sprintf("d/f%d", i)), fmt.Sprintf("file %d", i))
				}
				writeFile(t, filepath.Join(h, "d/big"), strings.Repeat("b", 2<<20))
				writeFile(t, filepath.Join(h, "d/sub/x"), "x")
			})
			s := r.store(t)
			if got := readFile(t, r.mntPath("d/f0")); got != "file 0" {
				t.Fatalf("d/f0: %q", got)
			}
			waitFor(t, "the other small files of d fetched ahead", func() bool {
				for i := range 10 {
					if s.IsStub(fmt.Sprintf("d/f%d", i)) {
						return false
					}
				}
				return true
			})
			time.Sleep(100 * time.Millisecond)
			if !s.IsStub("d/big") {
				t.Error("a 2 MiB file was fetched ahead; only small files should be")
			}
			if s.IsPopulated("d/sub") {
				t.Error("d/sub listed before anything listed d")
			}
			if _, err := os.ReadDir(r.mntPath("d")); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "d/sub listed ahead", func() bool { return s.IsPopulated("d/sub") })
			if s.IsPopulated("d/sub/deeper") {
				t.Error("read-ahead went two levels down")
			}
			for i := range 10 {
				p := fmt.Sprintf("d/f%d", i)
				if got := readFile(t, r.mntPath(p)); got != fmt.Sprintf("file %d", i) {
					t.Errorf("%s: %q", p, got)
				}
			}
			if got := readFile(t, r.mntPath("d/big")); len(got) != 2<<20 {
				t.Errorf("d/big: %d bytes", len(got))
			}
		})
	}
}
