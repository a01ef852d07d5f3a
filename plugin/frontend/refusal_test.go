package frontend

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

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
// change, leave the host's w as it was, and keep both to retry, so that
// they land, w's content with them, once the host takes the change.
//
// more, if set, runs in a delegated container after the change; the check
// it returns is given the failed writeback.
func refusedAtWriteback(t *testing.T, st consistency.State, c refusal, more func(r *rig) func(*writeback.FlushError)) {
	t.Helper()
	r := newRig(t, st, func(host string) {
		backing := t.TempDir()
		writeFile(t, filepath.Join(backing, "f"), "x")
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
