package store

import (
	"context"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// Host changes must raise inotify events inside the container, and only the
// kernel can raise them: so the syncer applies a host change by making the
// matching syscall through the FUSE mount itself. The FUSE layer must then
// tell that request apart from a container's, or it would write the change
// back to the host. It does so by the caller's thread id: the syncer makes
// those syscalls from OS threads it has locked and registered here.

// Threads is a set of OS thread ids whose FUSE requests are host-origin.
type Threads struct {
	mu  sync.RWMutex
	ids map[uint32]struct{}
}

// Has reports whether tid is a registered applier thread.
func (t *Threads) Has(tid uint32) bool {
	t.mu.RLock()
	_, ok := t.ids[tid]
	t.mu.RUnlock()
	return ok
}

// Run runs fn on a locked OS thread registered as host-origin for the
// duration of the call.
func (t *Threads) Run(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := uint32(unix.Gettid())
	t.mu.Lock()
	if t.ids == nil {
		t.ids = make(map[uint32]struct{})
	}
	t.ids[tid] = struct{}{}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.ids, tid)
		t.mu.Unlock()
	}()
	return fn()
}

type originKey struct{}

// HostOrigin marks ctx as carrying a change that brings a host edit into the
// store: it is made locally only, never written back, never journaled.
func HostOrigin(ctx context.Context) context.Context {
	return context.WithValue(ctx, originKey{}, true)
}

func isHostOrigin(ctx context.Context) bool {
	v, _ := ctx.Value(originKey{}).(bool)
	return v
}
