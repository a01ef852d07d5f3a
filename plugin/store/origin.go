package store

import (
	"context"
	"sync"
)

// Host changes must raise inotify events inside the container, and only the
// kernel can raise them: so the syncer applies a host change by making the
// matching syscall through the FUSE mount itself. The FUSE layer must then
// tell that request apart from a container's, or it would write the change
// back to the host. It does so by the caller's thread id: the syncer makes
// those syscalls from an OS thread of its own (ownmount's), registered here
// while it applies a change.

// Threads is a set of OS thread ids whose FUSE requests are host-origin.
type Threads struct {
	mu  sync.RWMutex
	ids map[uint32]int // how many During calls registered each
}

// Has reports whether tid is a registered applier thread.
func (t *Threads) Has(tid uint32) bool {
	t.mu.RLock()
	_, ok := t.ids[tid]
	t.mu.RUnlock()
	return ok
}

// During registers tid as host-origin while fn runs. The thread must live
// until fn returns: once a thread is gone its id can be given to another,
// maybe a container's process, whose requests would then be taken for the
// host's and never written back.
func (t *Threads) During(tid uint32, fn func() error) error {
	t.mu.Lock()
	if t.ids == nil {
		t.ids = make(map[uint32]int)
	}
	t.ids[tid]++
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		if t.ids[tid]--; t.ids[tid] == 0 {
			delete(t.ids, tid)
		}
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
