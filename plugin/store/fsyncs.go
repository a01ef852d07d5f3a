package store

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// fsyncWaits are the container's fsyncs waiting for their paths' Puts
// (Store.Sync). A Put of a path someone waits on fsyncs the host file it
// wrote before closing it (finishHostFile), and the fsync is then not made
// again through a second open of the host file: on a share that open, the
// fsync and the close were three of a commit's ten or so round trips.
type fsyncWaits struct {
	mu      sync.Mutex
	waiting map[string][]*fsyncWait
}

// fsyncWait is one Store.Sync: the paths a Put has fsynced for it.
type fsyncWait struct {
	rels     []string
	dataOnly bool            // an fdatasync (Store.SyncData): times may follow later
	synced   map[string]bool // guarded by fsyncWaits.mu
}

// wait registers an fsync of rels (an fdatasync if dataOnly), to be ended
// with done.
func (w *fsyncWaits) wait(rels []string, dataOnly bool) *fsyncWait {
	f := &fsyncWait{rels: rels, dataOnly: dataOnly, synced: make(map[string]bool, len(rels))}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting == nil {
		w.waiting = make(map[string][]*fsyncWait)
	}
	for _, rel := range rels {
		w.waiting[rel] = append(w.waiting[rel], f)
	}
	return f
}

func (w *fsyncWaits) done(f *fsyncWait) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, rel := range f.rels {
		list := w.waiting[rel]
		for i, g := range list {
			if g == f {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(w.waiting, rel)
		} else {
			w.waiting[rel] = list
		}
	}
}

// wanted reports whether an fsync waits on rel, and whether each one
// waiting is an fdatasync (dataOnly): then the host file's content and size
// must be durable when the Put returns, but its times need not be there yet.
func (w *fsyncWaits) wanted(rel string) (want, dataOnly bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	list := w.waiting[rel]
	dataOnly = len(list) > 0
	for _, f := range list {
		dataOnly = dataOnly && f.dataOnly
	}
	return len(list) > 0, dataOnly
}

// synced tells the fsyncs waiting on rel now that the host file at rel
// was fsynced after the Put's last write to it: each one if that was a
// full fsync after the file's times were set (full), else only the
// fdatasyncs. One that began waiting after that write has either its data
// in the Put or its path dirty again, and so a Put of its own still to
// come. all reports whether no fsync waiting on rel is left out: a plain
// fsync that began waiting while a Put for fdatasyncs ran still needs the
// times, durable.
func (w *fsyncWaits) synced(rel string, full bool) (all bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	all = true
	for _, f := range w.waiting[rel] {
		if full || f.dataOnly {
			f.synced[rel] = true
		} else {
			all = false
		}
	}
	return all
}

// isSynced reports whether a Put fsynced rel for f.
func (w *fsyncWaits) isSynced(f *fsyncWait, rel string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return f.synced[rel]
}

// fsyncHost makes what was written to the host file f (at rel) durable on
// the host: fdatasync for a container's fdatasync (dataOnly), else fsync.
func fsyncHost(f *os.File, rel string, dataOnly bool) error {
	var err error
	if dataOnly {
		err = unix.Fdatasync(int(f.Fd()))
	} else {
		err = f.Sync()
	}
	if err == nil && testHookHostFsync != nil {
		testHookHostFsync(rel, dataOnly)
	}
	return err
}

// testHookHostFsync, if set (by tests), runs after each host fsync or
// fdatasync that fsyncHost made.
var testHookHostFsync func(rel string, dataOnly bool)
