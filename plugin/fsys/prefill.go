package fsys

import (
	"sync"

	"golang.org/x/sys/unix"
)

// Prefill: a small file opened for reading has its content handed to the
// kernel's page cache with the open (FUSE_NOTIFY_STORE), so that its reads
// find it there and send no READ.
//
// A READ is a round trip like any other (about 40 us on the bench VM, where
// reading a small file from the store copy is 2 us), and a cold pass over a
// tree (the read half of an untar-and-read, a first go list) paid one for
// each file it read, on top of the OPEN. A READ also makes the kernel mark
// the file's atime stale (fuse_readpages_end), so the next stat of it costs
// a GETATTR, which the restater then had to put back; a page stored by
// notification does neither.
//
// The pages must never be older than the file. The kernel itself writes a
// file's pages on the way to a WRITE (before the plugin has the data), so
// a store racing a writer could put back the old content over the new. So
// a file is prefilled only while it has no handle open for writing, under
// opensMu, which a writing open takes before its OPEN reply lets any write
// start. The other changes to a file's content are the host's, brought in
// by the refresh (Mount.Invalidate), and truncates (SETATTR): both bump
// contentGen under contentMu. A prefill notes the generation before it
// reads the file and holds contentMu (read) across its check of it and its
// store, so a prefill whose read may have come before such a change either
// lands before the change's own invalidation (which then drops it, or the
// kernel truncates its pages after the SETATTR reply) or sees the new
// generation and stores nothing.
//
// It is an optimisation only: a page the kernel does not have when it is
// read (reclaimed, never stored) costs a READ, as before.

// prefillMax is the largest file prefilled: the kernel's first readahead
// (128 KiB, the mount's negotiated readahead) would fetch as much with one
// READ. Larger files are read by READ requests, in readahead windows.
const prefillMax = 128 << 10

// prefillBufs hold a file's content between its read and its store.
var prefillBufs = sync.Pool{New: func() any { b := make([]byte, prefillMax); return &b }}

// prefillStamp names a version of a file's content as the store copy has it
// (its inode, size, times) and the content generation it was stored under:
// a file whose stamp is the one last stored is in the kernel's cache
// already, as far as the plugin knows, and is not stored again at each
// open (a hot run opens every file again).
type prefillStamp struct {
	ino, gen     uint64
	size         int64
	mtime, ctime unix.Timespec
}

// prefill stores the content of h's file in the kernel's page cache for n,
// if the file is small and no handle has it open for writing. h is a
// read-only handle served by the plugin (not passthrough).
func (f *filesystem) prefill(n *node, h *handle) {
	n.opensMu.Lock()
	defer n.opensMu.Unlock()
	if n.writeOpens > 0 {
		return
	}
	fd := h.fd()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size <= 0 || st.Size > prefillMax {
		return
	}
	f.contentMu.RLock()
	gen := f.contentGen
	f.contentMu.RUnlock()
	stamp := prefillStamp{ino: st.Ino, gen: gen, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
	if n.prefilled == stamp {
		return
	}
	bp := prefillBufs.Get().(*[]byte)
	defer prefillBufs.Put(bp)
	buf := (*bp)[:st.Size]
	if !readNoAtime(fd, buf) {
		return
	}
	if testHookPrefillRead != nil {
		testHookPrefillRead()
	}
	// Not held across the read: a change's contentChanged need not wait
	// for it, and one made meanwhile shows in the generation.
	f.contentMu.RLock()
	defer f.contentMu.RUnlock()
	if f.contentGen != gen {
		return
	}
	if errno := n.WriteCache(0, buf); errno != 0 {
		f.log.Debug("prefill", "path", h.file.Rel(), "err", errno)
		return
	}
	n.prefilled = stamp
	f.store.CountOp("prefill")
}

// testHookPrefillRead, if set (by tests), runs in a prefill between its
// read of the file and its store into the kernel's cache.
var testHookPrefillRead func()

// contentChanged tells prefills that a file's content may have changed
// other than through a handle open for writing (a truncate, the host's
// change brought in), and runs drop, which makes the kernel forget what it
// cached of it, under the same lock: see prefill.
func (f *filesystem) contentChanged(drop func()) {
	f.contentMu.Lock()
	defer f.contentMu.Unlock()
	f.contentGen++
	if drop != nil {
		drop()
	}
}

// readNoAtime reads all of buf from fd at 0 without touching the file's
// atime: an open that reads nothing must leave it as it was, as on a native
// file system (the container's reads of what is stored here are served by
// the kernel, which keeps no atime of its own for a FUSE file). fd is the
// handle's, not yet handed to the kernel, so O_NOATIME set for the read
// affects no other reader. False if it could not (a short read: changed
// under us; O_NOATIME refused): READs serve the file then.
func readNoAtime(fd int, buf []byte) bool {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return false
	}
	if fl&unix.O_NOATIME == 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_NOATIME); err != nil {
			return false
		}
		defer unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl)
	}
	k, err := unix.Pread(fd, buf, 0)
	return err == nil && k == len(buf)
}
