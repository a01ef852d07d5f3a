// Package writeback owns the queue of store paths waiting to reach the host
// in the delegated state: it schedules, batches and retries their writeback
// and lets callers wait for it (Flush).
//
// Lock order: Queue.mu only; Put is never called with it held. Methods named
// _foo expect mu held.
//
// Each path moves through explicit states:
//
//	clean --MarkDirty--> dirty --(delay)--> writing --Put ok, gen unchanged--> clean
//	                       ^                   |--Put ok, gen changed---> dirty
//	                       |                   '--Put failed--> failed (retry with backoff, capped)
//	                       '------------------- MarkDirty (any state) bumps gen
//
// A path is marked clean only if no MarkDirty happened while its Put ran
// (generation check), so a write racing with its own writeback is never lost.
// Nothing is ever dropped: a failed path stays in the journal and is retried
// forever with capped backoff; Flush reports it.
package writeback

import (
	"context"
	"errors"
	"time"

	"github.com/bindstate/bindstate/plugin/journal"
)

// Putter makes the host match the store at one path (the store's current
// content, metadata, or absence). It must be safe for concurrent calls on
// different paths. A Putter must not call back into the Queue.
type Putter interface {
	Put(ctx context.Context, rel string) error
}

// Options tune a Queue. Zero values pick defaults.
type Options struct {
	Delay      time.Duration // how long a path stays dirty before writeback starts (default 1s)
	Workers    int           // parallel Puts (default 8)
	MaxBackoff time.Duration // cap on retry backoff (default 30s)
}

// FlushError names every path that could not be written back.
type FlushError struct {
	Failed map[string]error // rel -> last error
}

func (e *FlushError) Error() string { return "unimplemented" }

// Stats is a snapshot for status output and metrics.
type Stats struct {
	Dirty      int           // paths waiting or being written
	Failed     int           // paths whose last Put failed
	Written    uint64        // successful Puts since start
	OldestAge  time.Duration // age of the oldest unwritten change (writeback lag)
	LastError  string        // most recent Put failure, "" if none
	LastFailed string        // path of that failure
}

// Queue is safe for concurrent use.
type Queue struct{}

// New starts a Queue whose dirty set begins with j.Pending() (paths left by
// an earlier run are scheduled at once).
func New(j *journal.Journal, put Putter, opts Options) *Queue { return nil }

// MarkDirty records rel in the journal (before returning: the caller makes
// the change after this returns) and schedules its writeback.
func (q *Queue) MarkDirty(rel string) error { return errors.New("unimplemented") }

// IsDirty reports whether rel, or anything beneath it, has changes the host
// has not seen (the host-refresh worker leaves such paths alone).
func (q *Queue) IsDirty(rel string) bool { return false }

// Flush writes back every path dirty when it is called that equals one of
// prefixes or lies beneath one ("" = everything), without waiting for the
// delay, and returns when all of them are clean (nil) or have failed at least
// once since Flush started (*FlushError), or ctx ends (ctx.Err() joined with
// the list of paths still pending). Paths that fail stay queued and retried.
func (q *Queue) Flush(ctx context.Context, prefixes ...string) error {
	return errors.New("unimplemented")
}

// Stats returns a snapshot.
func (q *Queue) Stats() Stats { return Stats{} }

// Close stops the workers (in-flight Puts are cancelled and stay dirty).
func (q *Queue) Close() {}
