// Package logwriter is the plugin's log output: a writer that never makes
// the goroutine logging wait for whoever reads it.
//
// A managed plugin's stderr is a pipe into a fifo the Docker daemon reads.
// The containerd shim between them holds the fifo open for reading, so
// that the plugin's writes never fail, but does not read it itself. While
// the daemon is down (killed, restarting, being upgraded; with
// live-restore, containers run on meanwhile) nobody reads, and once the
// pipes' buffers (about 128 KiB) are full a plain write blocks: the FUSE
// request, the writeback or the Unmount that logged a line would wait for
// the daemon, and a container's syscall with them. A share that is gone
// logs a line at each failed check, so a long outage while the daemon is
// down would do it.
//
// Writer queues each record and writes it out from a goroutine of its own.
// Past a limit of bytes queued, it drops records and counts them, and says
// in a record of its own how many were dropped, where they were: before the
// next record kept, or once it has caught up with its output. The records go to the control socket's ring
// too (bindstate logs), which drops nothing but the oldest.
package logwriter

import (
	"bytes"
	"io"
	"log/slog"
	"sync"
	"time"
)

// Writer is an io.Writer for line-oriented log output (one record per
// Write, as log/slog's handlers make them) whose Write never blocks on its
// output. Make one with New.
type Writer struct {
	out   io.Writer
	limit int // bytes queued before records are dropped

	mu      sync.Mutex
	queue   [][]byte // records and drop notices, oldest first
	queued  int      // bytes in queue and in the batch being written
	dropped int      // records dropped since the last notice
	writing bool     // the writer goroutine holds a batch it has not written yet
	wake    chan struct{}
	idle    *sync.Cond // signalled when queue is empty and nothing is being written
}

// New returns a Writer that writes to out from a goroutine of its own,
// queueing at most limit bytes of records while out is slow or blocked.
func New(out io.Writer, limit int) *Writer {
	w := &Writer{out: out, limit: limit, wake: make(chan struct{}, 1)}
	w.idle = sync.NewCond(&w.mu)
	go w.run()
	return w
}

// Write queues a copy of p, or drops it if limit bytes are queued already.
// It never fails and never waits for out.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.queued+len(p) > w.limit {
		w.dropped++
		return len(p), nil
	}
	if w.dropped > 0 {
		// The dropped records came before this one: say so here.
		w.noteDropped()
	}
	w.push(append([]byte(nil), p...))
	return len(p), nil
}

// push queues rec and wakes the writer goroutine. w.mu is held.
func (w *Writer) push(rec []byte) {
	w.queue = append(w.queue, rec)
	w.queued += len(rec)
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// noteDropped queues a notice of the records dropped since the last one
// (over the limit: it is small, and the one trace of what was lost).
// w.mu is held.
func (w *Writer) noteDropped() {
	w.push(dropNotice(w.dropped))
	w.dropped = 0
}

// Flush waits until everything queued (and a notice of what was dropped)
// has been written to out, or until timeout. It reports whether it all
// was: a plugin stopping while nobody reads its output must still stop.
func (w *Writer) Flush(timeout time.Duration) bool {
	done := make(chan struct{})
	go func() {
		w.mu.Lock()
		if w.dropped > 0 {
			w.noteDropped()
		}
		for len(w.queue) > 0 || w.writing {
			w.idle.Wait()
		}
		w.mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false // the goroutine above ends when out takes the rest
	}
}

func (w *Writer) run() {
	for range w.wake {
		w.mu.Lock()
		batch := w.queue
		w.queue = nil
		w.writing = len(batch) > 0
		w.mu.Unlock()
		n := 0
		for _, rec := range batch {
			w.out.Write(rec) // a failed write has nowhere else to go
			n += len(rec)
		}
		w.mu.Lock()
		w.queued -= n
		w.writing = false
		if len(w.queue) == 0 && w.dropped > 0 {
			// Caught up: whatever was dropped came after all that was
			// written. Say so now, not at the next record, which may be
			// long in coming.
			w.noteDropped()
		}
		if len(w.queue) > 0 {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		} else {
			w.idle.Broadcast()
		}
		w.mu.Unlock()
	}
}

// dropNotice is a record saying that n records were dropped where it
// stands, made by the JSON handler the plugin logs with (its layout, not a
// copy of it).
func dropNotice(n int) []byte {
	var b bytes.Buffer
	slog.New(slog.NewJSONHandler(&b, nil)).Warn("log records dropped here: nobody was reading the plugin's output (is the Docker daemon down?); bindstate logs has the latest", "dropped", n)
	return b.Bytes()
}
