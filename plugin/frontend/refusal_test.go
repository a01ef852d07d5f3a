package frontend

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/writeback"
)

// refusal is a change a container makes to a file that the host's file
// system refuses for now (a go-fuse loopback made to), for
// refusedAtWriteback.
type refusal struct {
	what   string                                     // the change, as a failed writeback names it ("user.big", "chmod 0666")
	node   func(rd *fs.LoopbackRoot) fs.InodeEmbedder // the host's nodes, which refuse it until allow
	make   func(path string) error                    // the container's change of the file at path
	answer error                                      // the host's answer to it, while it refuses
	allow  func()                                     // the host takes the change from now on
	landed func(t *testing.T, r *rig, name string)    // checks that the host's name has it
}

// refusedAtWriteback checks rule D4 for a change c that the host refuses,
// in state st. The container makes it to f, a host file it never read
// (only attributes go back), and to w, one it wrote (copied back whole). A
// cached container gets the host's answer itself (C3). A delegated one
// keeps the change; its writeback must fail for both paths, naming the
// change, leave the host's w as it was (a rewritten file lands whole or
// not at all) but set f's other attributes (its times), and keep both to
// retry, so that they land, w's content with them, once the host takes
// the change.
//
// more, if set, runs in a delegated container after the change; the check
// it returns is given the failed writeback.
func refusedAtWriteback(t *testing.T, st consistency.State, c refusal, more func(r *rig) func(*writeback.FlushError)) {
	t.Helper()
	r := newRig(t, st, func(host string) {
		backing := t.TempDir()
		// Larger than the read-ahead fetches: f stays unfetched.
		writeFile(t, filepath.Join(backing, "f"), strings.Repeat("x", 2<<20))
		writeFile(t, filepath.Join(backing, "w"), "old")
		mountHost(t, host, backing, "refusing", c.node)
	})
	writeFile(t, r.mntPath("w"), "written")
	for _, name := range []string{"f", "w"} {
		err := c.make(r.mntPath(name))
		if st == consistency.Cached {
			if !errors.Is(err, c.answer) {
				t.Fatalf("%s of %s in a cached container: %v; want %v, the host's answer", c.what, name, err, c.answer)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s of %s in a delegated container: %v; want it kept for the writeback", c.what, name, err)
		}
	}
	if st == consistency.Cached {
		return
	}
	// f's other attributes go back all the same: the refused change fails
	// its Put after the rest is set.
	t0 := time.Unix(1600000000, 0)
	if err := os.Chtimes(r.mntPath("f"), t0, t0); err != nil {
		t.Fatal(err)
	}
	var check func(*writeback.FlushError)
	if more != nil {
		check = more(r)
	}
	failed := r.flushFailure(t) // while the host refuses the change
	for _, name := range []string{"f", "w"} {
		if e := failed.Failed[name]; e == nil || !strings.Contains(e.Error(), c.what) {
			t.Errorf("flush while the host refuses %s: %v; want a failure of %s naming it", c.what, failed, name)
		}
	}
	if got := readFile(t, r.hostPath("w")); got != "old" {
		t.Errorf("host w = %q while its writeback fails; want the host's own %q", got, "old")
	}
	if r.store(t).IsStub("f") {
		if fi, err := os.Stat(r.hostPath("f")); err != nil || !fi.ModTime().Equal(t0) {
			t.Errorf("host f's modification time while its writeback fails: %v (%v); want the container's %v: the refused %s held back the rest",
				fi.ModTime(), err, t0, c.what)
		}
	} else {
		t.Errorf("f was fetched: the test no longer checks a file whose attributes alone go back (putAttrs)")
	}
	if check != nil {
		check(failed)
	}
	c.allow() // the kept changes go on retry
	r.flush(t)
	for _, name := range []string{"f", "w"} {
		c.landed(t, r, name)
	}
	if got := readFile(t, r.hostPath("w")); got != "written" {
		t.Errorf("host w = %q after the retry; want %q", got, "written")
	}
}
