package store

import (
	"errors"
	"sync"

	"golang.org/x/sys/unix"
)

// Read-ahead from the share. A container that lists a directory usually
// goes on into its subdirectories, and one that reads a file of a directory
// usually reads its siblings next (compilers, go list, indexers, test
// runners). Each listing and each fetch from a slow share is several round
// trips; the prefetcher starts the likely next ones in the background, side
// by side, so that the container's own requests find them done (or in
// flight: populate and fetch are once-only per path, under the same per-path
// locks, whoever asks first).
//
// It only ever does what a container request would do anyway (EnsurePopulated,
// EnsureContent), bounded: one level of subdirectories per listing, small
// files only, a fixed number of workers and a bounded queue whose overflow is
// dropped (a dropped item is fetched on demand as before). Each directory's
// read-ahead starts once, at the first listing of it or fetch in it, unless
// a part of it failed: then the next such request starts it again (the
// share may be back).
const (
	prefetchWorkers  = 8
	prefetchQueue    = 4096
	prefetchMaxSize  = 1 << 20 // larger files are fetched when opened
	prefetchMaxNames = 1 << 16 // directories remembered as done, then forgotten
)

type prefetchKind uint8

const (
	prefetchPopulate prefetchKind = iota // list a directory from the host
	prefetchSiblings                     // queue a directory's small stubs for fetching
	prefetchFetch                        // fetch one file's content
)

type prefetchJob struct {
	kind prefetchKind
	rel  string
}

type prefetcher struct {
	s    *Store
	jobs chan prefetchJob
	stop chan struct{}
	wg   sync.WaitGroup

	mu   sync.Mutex
	done map[string]struct{} // listedKey, siblingsKey of directories already handled
}

func newPrefetcher(s *Store) *prefetcher {
	p := &prefetcher{s: s, jobs: make(chan prefetchJob, prefetchQueue), stop: make(chan struct{}),
		done: make(map[string]struct{})}
	for range prefetchWorkers {
		p.wg.Go(p.work)
	}
	return p
}

// close stops the workers and waits for them (a fetch in progress ends first).
func (p *prefetcher) close() {
	close(p.stop)
	p.wg.Wait()
}

// once reports whether key is seen for the first time.
func (p *prefetcher) once(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.done[key]; ok {
		return false
	}
	if len(p.done) >= prefetchMaxNames {
		clear(p.done)
	}
	p.done[key] = struct{}{}
	return true
}

// forget makes key new again: its read-ahead failed.
func (p *prefetcher) forget(key string) {
	p.mu.Lock()
	delete(p.done, key)
	p.mu.Unlock()
}

func (p *prefetcher) queue(j prefetchJob) {
	select {
	case p.jobs <- j:
	default: // full: the container will ask for it itself
	}
}

// listed is called when the container lists dir: its subdirectories are
// listed from the host in the background.
func (p *prefetcher) listed(dir string, entries []string) {
	if len(entries) == 0 || !p.once(listedKey(dir)) {
		return
	}
	for _, name := range entries {
		p.queue(prefetchJob{prefetchPopulate, join(dir, name)})
	}
}

// fetched is called when the container's open fetched a file of dir: dir's
// other small files are fetched in the background.
func (p *prefetcher) fetched(dir string) {
	if p.once(siblingsKey(dir)) {
		p.queue(prefetchJob{prefetchSiblings, dir})
	}
}

func (p *prefetcher) work() {
	for {
		select {
		case <-p.stop:
			return
		case j := <-p.jobs:
			p.do(j)
		}
	}
}

func (p *prefetcher) do(j prefetchJob) {
	s := p.s
	var err error
	switch j.kind {
	case prefetchPopulate:
		err = s.EnsurePopulated(j.rel)
	case prefetchFetch:
		_, err = s.ensureContent(j.rel, nil)
	case prefetchSiblings:
		entries, lerr := s.local.ReadDir(j.rel)
		if lerr != nil {
			err = lerr
			break
		}
		for _, e := range entries {
			if e.Stat.Mode&unix.S_IFMT != unix.S_IFREG || e.Stat.Size > prefetchMaxSize {
				continue
			}
			rel := join(j.rel, e.Name)
			if s.IsStub(rel) {
				p.queue(prefetchJob{prefetchFetch, rel})
			}
		}
	}
	if err != nil {
		// Nothing is lost: the container's own request does it again and
		// reports its error. The directory's read-ahead is not done, though:
		// its key is given back, so that the next container request in it
		// starts it again. Kept, it would leave the directory without
		// read-ahead after a share that was gone came back, until the
		// remembered keys were cleared (prefetchMaxNames directories later).
		// Not for a name the host no longer has: that fails the same way
		// every time, and each fetching open in the directory would list it
		// again for nothing.
		s.log.Debug("read-ahead from the host", "path", j.rel, "err", err)
		if !errors.Is(err, unix.ENOENT) {
			p.forget(j.key())
		}
	}
	if testHookReadAhead != nil {
		testHookReadAhead(j.rel, err)
	}
}

// testHookReadAhead, if set (by tests), runs at the end of each read-ahead
// job with its path and its error.
var testHookReadAhead func(rel string, err error)

// listedKey and siblingsKey are the once-keys of a directory's two
// read-aheads: of its subdirectories' listings (listed), of its other small
// files (fetched).
func listedKey(dir string) string   { return "c:" + dir }
func siblingsKey(dir string) string { return "s:" + dir }

// key is the once-key of the container request that queued j (listed,
// fetched).
func (j prefetchJob) key() string {
	switch j.kind {
	case prefetchPopulate:
		return listedKey(dirOf(j.rel))
	case prefetchSiblings:
		return siblingsKey(j.rel)
	default: // prefetchFetch, queued by its directory's prefetchSiblings
		return siblingsKey(dirOf(j.rel))
	}
}
