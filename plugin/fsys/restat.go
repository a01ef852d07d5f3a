package fsys

import (
	"sync"
	"time"

	"github.com/bindstate/bindstate/plugin/ownmount"
)

// restater puts back what the kernel drops of a directory's attributes after
// it lists the directory from us, and of a file's after it reads it from us.
//
// After every READDIR it sends (one not served from its own cache), the
// kernel marks the directory's atime stale (fuse_invalidate_atime), and the
// next stat of the directory, which asks for the atime, costs a GETATTR,
// whatever the attribute timeout. A cold `git status` lists each directory
// once, so the hot one after it paid a GETATTR per directory: 1,340 of the
// 1,383 requests of a hot git status on the bench tree, about half its time.
//
// So once a listing has ended, the restater stats the directory through the
// mount itself, a little later (after the kernel has marked it) and off the
// container's path: the GETATTR is answered then, and the container's next
// stat finds whole attributes in the kernel's cache. The cost moves from the
// next command to the idle time after the listing; there is no more of it.
//
// A READ does the same to a file (fuse_readpages_end): a cold `go list`
// reads each Go file once, and the hot one after it paid a GETATTR for each
// that it stats (481 of the 5,356 requests of a hot W1 of bench-quick). So a
// file whose last handle served a READ is restatted after its release.
// (A small file is read without READs since the prefill, and needs none.)
//
// It is an optimisation only: an entry it misses (queue full, a stat too
// early) costs the container one GETATTR, as before.
type restater struct {
	mountpoint string
	root       *ownmount.Root // the mount's root, for statAll; run's only, closed when it ends

	mu       sync.Mutex
	queue    []restat
	wake     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	stopped  chan struct{}
}

// restat is a directory waiting to be statted, and the how-manieth try.
type restat struct {
	n   *node
	try int
}

const (
	// restatDelay gives the kernel time to finish the listing (and mark the
	// atime stale) before the stat: the process that read the end of the
	// listing must be scheduled again first.
	restatDelay = 20 * time.Millisecond
	// restatTries: a stat that drew no GETATTR came too early (or the
	// attributes were whole again already) and is tried once more, later.
	restatTries = 2
	// maxRestats bounds the queue; past it directories are skipped.
	maxRestats = 4096
)

func newRestater(mountpoint string) *restater {
	r := &restater{mountpoint: mountpoint, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), stopped: make(chan struct{})}
	go r.run()
	return r
}

// add queues n: a directory whose listing just ended, or a file whose
// last handle served a READ.
func (r *restater) add(n *node) { r.push(restat{n: n}) }

func (r *restater) push(e restat) {
	r.mu.Lock()
	if len(r.queue) < maxRestats {
		r.queue = append(r.queue, e)
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// close stops the restater and waits for it: before the unmount, since a
// stat in flight holds the mount busy. Later calls (an unmount tried again)
// return at once.
func (r *restater) close() {
	r.stopOnce.Do(func() { close(r.stop) })
	<-r.stopped
}

func (r *restater) run() {
	defer close(r.stopped)
	defer func() {
		if r.root != nil {
			r.root.Close()
		}
	}()
	for {
		select {
		case <-r.stop:
			return
		case <-r.wake:
		}
		select {
		case <-r.stop:
			return
		case <-time.After(restatDelay):
		}
		r.mu.Lock()
		batch := r.queue
		r.queue = nil
		r.mu.Unlock()
		if retry := r.statAll(batch); len(retry) > 0 {
			time.AfterFunc(5*restatDelay, func() {
				for _, e := range retry {
					r.push(e)
				}
			})
		}
	}
}

// statAll stats each directory of batch through the mount, never through a
// symlink (the tree is the container's to shape), and returns those whose
// stat drew no GETATTR, to be tried again. The stats come from an ownmount
// thread, opened at the first batch and kept: a plugin killed while one is
// served must not be kept by it.
func (r *restater) statAll(batch []restat) []restat {
	if r.root == nil {
		root, err := ownmount.Open(r.mountpoint)
		if err != nil {
			return nil // unmounting
		}
		r.root = root
	}
	var nodes []restat
	var rels []string
	var before []uint64
	seen := make(map[*node]bool, len(batch))
	for _, e := range batch {
		if seen[e.n] {
			continue
		}
		seen[e.n] = true
		rel, ok := e.n.rel()
		if !ok {
			continue // removed meanwhile
		}
		nodes = append(nodes, e)
		rels = append(rels, rel)
		before = append(before, e.n.getattrs.Load())
	}
	errs, err := r.root.Lstats(rels)
	if err != nil {
		return nil
	}
	var retry []restat
	for i, e := range nodes {
		switch {
		case errs[i] != nil:
		case e.n.getattrs.Load() != before[i]:
			e.n.fs.store.CountOp("restat") // attributes put back
		case e.try+1 < restatTries:
			retry = append(retry, restat{n: e.n, try: e.try + 1})
		}
	}
	return retry
}
