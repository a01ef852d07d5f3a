package fsys

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/internal/testenv"
)

// Mounting makes requests to the new mount itself: go-fuse's WaitMount
// opens a name in it, and the kernel first asks for the root's attributes
// (default_permissions), a GETATTR the plugin serves. A plugin killed while
// one is served stays, its mount hanging, unless the thread that asked has
// no /dev/fuse in its file table (package ownmount). So the thread that
// asked, seen while its request is served, must have no /dev/fuse open.
func TestD4_MountingAsksItsOwnMountFromAThreadWithoutTheDevice(t *testing.T) {
	testenv.RequireFUSE(t)
	st := newStoreOver(t, consistency.Cached, func(string) {})
	type asked struct {
		tid       uint32
		hasDevice bool
		err       error
	}
	var mu sync.Mutex
	var seen []asked
	testHookGetattr = func(rel string, tid uint32) {
		mu.Lock() // also orders this read of the hook before the test's reset
		defer mu.Unlock()
		if rel != "" {
			return
		}
		dir := fmt.Sprintf("/proc/self/task/%d/fd", tid)
		ents, err := os.ReadDir(dir)
		if os.IsNotExist(err) {
			return // another process's thread
		}
		a := asked{tid: tid, err: err}
		for _, e := range ents {
			if l, _ := os.Readlink(dir + "/" + e.Name()); l == "/dev/fuse" {
				a.hasDevice = true
			}
		}
		seen = append(seen, a)
	}
	mountStore(t, st)
	mu.Lock()
	defer mu.Unlock()
	testHookGetattr = nil
	if len(seen) == 0 {
		t.Fatal("mounting asked the root's attributes from no thread of this process: the test sees nothing of what it is for")
	}
	var bad []string
	for _, a := range seen {
		if a.err != nil || a.hasDevice {
			bad = append(bad, fmt.Sprintf("thread %d (/dev/fuse open: %v, %v)", a.tid, a.hasDevice, a.err))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("mounting asked its own mount from a thread with /dev/fuse in its file table: %s", strings.Join(bad, "; "))
	}
}
