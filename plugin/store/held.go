package store

import (
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// heldFiles keeps the host descriptor of a file written in place for a
// container's fsync (putRanges) open for the next Put of it, for a while.
//
// A database commits by writing a page or two of its log and fsyncing it,
// hundreds of times a second, and each delegated fsync is a Put (rule D2).
// Opening the host file again for each is a share round trip per commit
// (sshfs: an SFTP open) and closing it another request: more than the
// write itself costs. Kept open, a commit's Put is the write, the fsync and
// the look at the result for the base.
//
// Only a descriptor just fsynced is kept: a share may report a write's
// error at the next fsync or close only (sshfs writes asynchronously), and
// after a successful fsync nothing written through it is unreported. A Put
// that does not fsync closes the descriptor as before, and so reads those
// errors at its close.
//
// A kept descriptor is used again only by a Put of the same path, in place,
// that finds the host file at that path what it left there: its base
// matches (putEntry) and it is the same file (inode). Any other Put of the
// path closes it first. It is closed after heldIdle without use, beyond
// heldMax descriptors (the least recently used first), and when the store
// closes.
type heldFiles struct {
	mu     sync.Mutex
	files  map[string]*heldFile // by path
	timer  *time.Timer          // the idle sweep, while any is kept
	closed bool
}

// heldFile is one kept host descriptor.
type heldFile struct {
	f    *os.File
	ino  uint64    // the host inode it is open on (from its fstat)
	used time.Time // when a Put kept it
}

const (
	// heldIdle: a file no Put wrote for this long is closed (a share sees
	// it open meanwhile, as it would a native writer's).
	heldIdle = 2 * time.Second
	// heldMax bounds the descriptors kept.
	heldMax = 64
)

// take hands a Put of rel the descriptor kept for it, if any: the Put owns
// it now, to use (reuse) and keep again (keep) or close.
func (h *heldFiles) take(rel string) *heldFile {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.files[rel]
	delete(h.files, rel)
	return f
}

// reuse returns the kept descriptor if it is open on hst, the host file at
// rel now; otherwise it closes it and returns nil.
func (f *heldFile) reuse(hst *unix.Stat_t) *os.File {
	if f == nil || f.f == nil {
		return nil
	}
	if f.ino != hst.Ino {
		f.close()
		return nil
	}
	dst := f.f
	f.f = nil // the caller's now
	return dst
}

// close closes the descriptor unless reuse handed it on.
func (f *heldFile) close() {
	if f != nil && f.f != nil {
		f.f.Close()
		f.f = nil
	}
}

// keep keeps dst, just fsynced and open on host inode ino, for the next Put
// of rel.
func (h *heldFiles) keep(rel string, dst *os.File, ino uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		dst.Close()
		return
	}
	if h.files == nil {
		h.files = make(map[string]*heldFile)
	}
	if old := h.files[rel]; old != nil {
		old.close() // cannot happen (one Put of a path at a time); never leak
	}
	if len(h.files) >= heldMax {
		h.closeOldest()
	}
	h.files[rel] = &heldFile{f: dst, ino: ino, used: time.Now()}
	if h.timer == nil {
		h.timer = time.AfterFunc(heldIdle, h.sweep)
	}
}

// closeOldest closes the least recently kept descriptor. h.mu held.
func (h *heldFiles) closeOldest() {
	var oldest string
	for rel, f := range h.files {
		if oldest == "" || f.used.Before(h.files[oldest].used) {
			oldest = rel
		}
	}
	h.files[oldest].close()
	delete(h.files, oldest)
}

// sweep closes the descriptors idle for heldIdle, and runs again while any
// is left.
func (h *heldFiles) sweep() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.timer = nil
	now := time.Now()
	for rel, f := range h.files {
		if now.Sub(f.used) >= heldIdle {
			f.close()
			delete(h.files, rel)
		}
	}
	if len(h.files) > 0 && !h.closed {
		h.timer = time.AfterFunc(heldIdle, h.sweep)
	}
}

// closeAll closes every kept descriptor, and those kept from now on at once.
func (h *heldFiles) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	for rel, f := range h.files {
		f.close()
		delete(h.files, rel)
	}
}

// count is how many descriptors are kept (for tests).
func (h *heldFiles) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.files)
}
