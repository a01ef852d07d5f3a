// Package logrepeat keeps the records a container can cause at will from
// filling the plugin's log.
//
// A failed request is logged where it fails (package fsys: "request
// failed", "sync failed: writeback to the host failed"), with the path and
// the error, and that record is what a user reads to learn why a
// container's fsync got EIO. But a container can fail requests as fast as it
// makes them: a database that fsyncs in a loop while the share is gone, a
// build that opens every file of a full store. A record for each, thousands
// a second, would bury everything else (bindstate logs keeps the latest
// 2,000 records) and fill the daemon's log, which is the plugin's output.
//
// Handler passes every record on, except that of the warnings and errors
// with one message it passes the first Burst of a Window in full; the
// rest of that window are held back and counted, and when the window ends
// one record says how many there were, with the attributes (the path, the
// error) of the last of them. Records below Warn pass unlimited: debug
// output asked for is wanted whole.
package logrepeat

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Defaults for New: the first ten records of a message in a minute are
// said in full (enough to see which paths fail and why), then one a minute.
const (
	DefaultBurst  = 10
	DefaultWindow = time.Minute
)

// Handler is a slog.Handler that limits repeated warnings and errors; see
// the package comment. The handlers its WithAttrs and WithGroup return
// share its counts. Close says what is still held back.
type Handler struct {
	next slog.Handler
	l    *limiter
}

// limiter is the state every handler derived from one New shares.
type limiter struct {
	burst  int
	window time.Duration
	now    func() time.Time
	// afterFunc starts the timer that ends a window with records held
	// back (time.AfterFunc; tests replace it).
	afterFunc func(time.Duration, func()) stopper

	mu     sync.Mutex
	msgs   map[msgKey]*run
	closed bool
}

type stopper interface{ Stop() bool }

// msgKey is what makes records repeats of each other: the message at one
// level. The attributes (the path, the error) are what varies.
type msgKey struct {
	level slog.Level
	msg   string
}

// run counts the records of one message in the current window.
type run struct {
	start time.Time // when the window began
	said  int       // records passed in full in it
	held  int       // records held back in it
	last  slog.Record
	next  slog.Handler // the handler last was given to (its attributes and groups)
	timer stopper      // ends the window while held > 0
}

// New returns a Handler passing records to next, saying at most
// DefaultBurst records of a message each DefaultWindow in full.
func New(next slog.Handler) *Handler {
	return NewLimit(next, DefaultBurst, DefaultWindow)
}

// Logger is a slog.Logger whose records go through a Handler, and which
// can Close it.
type Logger struct {
	*slog.Logger
	h *Handler
}

// Wrap returns a Logger that logs as log does, with repeats limited.
func Wrap(log *slog.Logger) *Logger {
	h := New(log.Handler())
	return &Logger{Logger: slog.New(h), h: h}
}

// Close closes the Logger's Handler: see Handler.Close.
func (l *Logger) Close() { l.h.Close() }

// NewLimit is New with the burst and window given.
func NewLimit(next slog.Handler, burst int, window time.Duration) *Handler {
	return &Handler{next: next, l: &limiter{
		burst: burst, window: window, now: time.Now,
		afterFunc: func(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) },
		msgs:      make(map[msgKey]*run),
	}}
}

// Enabled reports whether the handler passed to handles level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle passes r on, or holds it back as a repeat.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.next.Handle(ctx, r)
	}
	l := h.l
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return h.next.Handle(ctx, r)
	}
	key := msgKey{r.Level, r.Message}
	now := l.now()
	ru := l.msgs[key]
	if ru == nil || now.Sub(ru.start) >= l.window && ru.held == 0 {
		// A new window. (One whose repeats are held ends with its timer,
		// which says them: the record that finds it over cannot, as it
		// would come before the summary of the records it follows.)
		ru = &run{start: now}
		l.msgs[key] = ru
	}
	if ru.said < l.burst {
		ru.said++
		l.mu.Unlock()
		return h.next.Handle(ctx, r)
	}
	ru.held++
	ru.last, ru.next = r.Clone(), h.next
	if ru.timer == nil {
		ru.timer = l.afterFunc(ru.start.Add(l.window).Sub(now), func() { l.end(key, ru) })
	}
	l.mu.Unlock()
	return nil
}

// end ends ru's window: it says the records held back in it, and the
// message's next record begins a new window.
func (l *limiter) end(key msgKey, ru *run) {
	l.mu.Lock()
	if l.msgs[key] != ru || ru.held == 0 {
		l.mu.Unlock()
		return
	}
	delete(l.msgs, key)
	l.mu.Unlock()
	l.say(ru)
}

// say passes on the last record held back in ru, marked with how many
// were (itself included) and over how long.
func (l *limiter) say(ru *run) {
	r := ru.last
	r.Time = l.now()
	r.AddAttrs(slog.Int("repeated", ru.held),
		slog.String("repeated_over", r.Time.Sub(ru.start).Round(time.Millisecond).String()))
	ru.next.Handle(context.Background(), r)
}

// Close says what is held back now, stops the timers, and from then on
// passes every record: a mount's log ends with its failures counted.
func (h *Handler) Close() {
	l := h.l
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	var held []*run
	for _, ru := range l.msgs {
		if ru.held > 0 {
			if ru.timer != nil {
				ru.timer.Stop()
			}
			held = append(held, ru)
		}
	}
	l.msgs = nil
	l.mu.Unlock()
	for _, ru := range held {
		l.say(ru)
	}
}

// WithAttrs returns a handler with attrs that shares h's counts.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(attrs), l: h.l}
}

// WithGroup returns a handler with the group that shares h's counts.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), l: h.l}
}
