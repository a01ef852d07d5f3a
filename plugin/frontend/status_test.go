package frontend

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// What `bindstate status` and the metrics report is counted where the work
// happens: content fetched from the host (a miss), opens of content
// already local (hits), container operations by kind, files and bytes
// written back.
func TestStatusCountsTheWork(t *testing.T) {
	r := newRig(t, consistency.Delegated, func(h string) { writeFile(t, filepath.Join(h, "src.txt"), "from the host") })
	for range 3 {
		readFile(t, r.mntPath("src.txt")) // one fetch, then hits
	}
	if err := os.WriteFile(r.mntPath("out.bin"), make([]byte, 3000), 0o644); err != nil {
		t.Fatal(err)
	}
	before := r.front.Status()
	if before.DirtyBytes < 3000 {
		t.Errorf("dirty bytes %d before the flush, want at least 3000", before.DirtyBytes)
	}
	r.flush(t)
	s := r.front.Status()
	if s.Fetched != 1 || s.CacheHits < 2 {
		t.Errorf("fetched %d, cache hits %d: want 1 fetch and at least 2 hits for 3 reads of one host file", s.Fetched, s.CacheHits)
	}
	if s.WrittenFiles < 1 || s.WrittenBytes < 3000 {
		t.Errorf("written back %d files, %d bytes: want out.bin's 3000 bytes", s.WrittenFiles, s.WrittenBytes)
	}
	if s.Ops["open"] < 3 || s.Ops["create"] < 1 || s.Ops["lookup"] < 1 {
		t.Errorf("ops %v: want the opens, the create and the lookups counted", s.Ops)
	}
	// The kernel releases a closed file asynchronously, and a release counts
	// as a change (passthrough writes are not seen one by one): out.bin may
	// be due once more after the first flush.
	waitFor(t, "a flush leaving nothing to write", func() bool {
		r.flush(t)
		s = r.front.Status()
		return s.Dirty == 0
	})
	if s.DirtyBytes != 0 || len(s.FailedPaths) != 0 {
		t.Errorf("after a flush: %+v", s)
	}
}
