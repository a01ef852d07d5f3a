package store

import (
	"slices"
	"sync"
)

// rangeLog lets the writeback of a large file the container changed in a
// few places write those places, in place, instead of the whole file.
//
// A database keeps its log and tables in files of megabytes and changes a
// few pages of them per transaction, and fsyncs at every commit (rule D2:
// the fsync returns once the file is on the host). A Put copies the whole
// file to the host, so each commit cost a copy of a 16 MB WAL segment over
// the share: a PostgreSQL import of 2,000 transactions took more than 300 s
// on a delegated volume of sshfs, where it takes 1.5 s natively (make bench
// W5, before this).
//
// For each such file the log holds the byte ranges the container wrote
// since a Put began copying it whole (start), by path and store inode. The
// next Put takes them (take) and, if the host file is still what that Put
// left (its base matches: checked before, in putEntry), writes only those
// ranges, then the size and attributes (putRanges). The log only ever
// speeds a Put up; a Put that finds nothing here copies the whole file, so
// whatever the log does not see must make it forget the file:
//   - every other change to the path through the store (truncate,
//     fallocate, setattr, rename, unlink, link, create, xattrs: Store.do),
//     before and after it is made, so that a Put running meanwhile leaves
//     nothing for the next to trust;
//   - a writer the kernel serves by passthrough (File.KernelWrites): its
//     writes never reach the plugin. While one is open no file of that
//     inode is logged;
//   - a plugin restart: the log is in memory, and the journal's dirty
//     paths are then written back whole.
//
// A file written in place on the host may be seen there half written while
// the Put runs, as the container's own writes would be on a native mount;
// a Put that copies the whole file goes through a temporary file instead.
type rangeLog struct {
	mu    sync.Mutex
	files map[string]*loggedFile // by path
	inos  map[uint64]int         // how many of files are of each store inode
	// kernelWriters counts, by store inode, the open passthrough writers.
	kernelWriters map[uint64]int
}

// loggedFile is what the container wrote to one file since a Put began
// copying it whole.
type loggedFile struct {
	ino   uint64
	spans []span // sorted by off, neither overlapping nor touching
}

type span struct{ off, end int64 }

const (
	// minLoggedSize: smaller files are copied whole (one write, one round
	// trip more or less).
	minLoggedSize = 256 << 10
	// maxLoggedFiles bounds the log's memory; files past it are copied whole.
	maxLoggedFiles = 4096
	// maxSpans: a file written in more places than this is copied whole.
	maxSpans = 1024
)

func newRangeLog() *rangeLog {
	return &rangeLog{files: make(map[string]*loggedFile), inos: make(map[uint64]int), kernelWriters: make(map[uint64]int)}
}

// drop forgets rel. l.mu held.
func (l *rangeLog) drop(rel string) {
	f := l.files[rel]
	if f == nil {
		return
	}
	delete(l.files, rel)
	if l.inos[f.ino]--; l.inos[f.ino] <= 0 {
		delete(l.inos, f.ino)
	}
}

// start is called when a Put begins copying rel (store inode ino, size
// bytes) whole: from now on the ranges written to it are logged.
func (l *rangeLog) start(rel string, ino uint64, size int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.drop(rel)
	if size < minLoggedSize || l.kernelWriters[ino] > 0 || len(l.files) >= maxLoggedFiles {
		return
	}
	l.files[rel] = &loggedFile{ino: ino}
	l.inos[ino]++
}

// wrote logs a write of n bytes at off to store inode ino, known as rels.
func (l *rangeLog) wrote(rels []string, ino uint64, off, n int64) {
	if n <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, rel := range rels {
		f := l.files[rel]
		if f == nil {
			continue
		}
		if f.ino != ino {
			l.drop(rel)
			continue
		}
		f.spans = addSpan(f.spans, span{off, off + n})
		if len(f.spans) > maxSpans {
			l.drop(rel)
		}
	}
}

// addSpan merges s into spans (sorted, disjoint, not touching).
func addSpan(spans []span, s span) []span {
	i, _ := slices.BinarySearchFunc(spans, s.off, func(e span, off int64) int {
		switch {
		case e.end < off:
			return -1
		case e.off > off:
			return 1
		}
		return 0
	})
	// spans[i:] end at or after s.off; merge every one that s reaches.
	j := i
	for j < len(spans) && spans[j].off <= s.end {
		s.off = min(s.off, spans[j].off)
		s.end = max(s.end, spans[j].end)
		j++
	}
	return slices.Replace(spans, i, j, s)
}

// forget drops what is logged for rels: their next Put copies them whole.
func (l *rangeLog) forget(rels ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, rel := range rels {
		l.drop(rel)
	}
}

// take hands a Put of rel (store inode ino) the ranges written since the
// last, and logs on from nothing. ok is false if the log cannot tell:
// the Put must copy the whole file.
func (l *rangeLog) take(rel string, ino uint64) (spans []span, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.files[rel]
	if f == nil || f.ino != ino || l.kernelWriters[ino] > 0 {
		l.drop(rel)
		return nil, false
	}
	spans, f.spans = f.spans, nil
	return spans, true
}

// kernelWriter counts a passthrough writer of store inode ino opened (d 1)
// or closed (d -1). Opening one forgets every path of that inode.
func (l *rangeLog) kernelWriter(ino uint64, d int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kernelWriters[ino] += d; l.kernelWriters[ino] <= 0 {
		delete(l.kernelWriters, ino)
	}
	if d > 0 && l.inos[ino] > 0 {
		for rel, f := range l.files {
			if f.ino == ino {
				l.drop(rel)
			}
		}
	}
}
