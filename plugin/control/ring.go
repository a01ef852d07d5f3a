package control

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// DefaultRingSize is how many log records the plugin keeps for `bindstate logs`.
const DefaultRingSize = 2000

// LogRecord is one structured log line kept by a Ring.
type LogRecord struct {
	Time    time.Time      `json:"time"`
	Level   string         `json:"level"`
	Message string         `json:"msg"`
	Attrs   map[string]any `json:"attrs,omitempty"` // groups as nested maps
	Seq     uint64         `json:"seq"`             // increases by one per record kept
}

// Ring keeps the most recent log records in memory. Its Handler passes every
// record on to another handler and keeps a copy.
type Ring struct {
	mu   sync.Mutex
	buf  []LogRecord
	next int    // index of the slot written next, once buf is full
	seq  uint64 // records kept so far
}

// NewRing returns a Ring holding at most size records (DefaultRingSize if
// size <= 0).
func NewRing(size int) *Ring {
	if size <= 0 {
		size = DefaultRingSize
	}
	return &Ring{buf: make([]LogRecord, 0, size)}
}

func (r *Ring) add(rec LogRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	rec.Seq = r.seq
	if len(r.buf) < cap(r.buf) {
		r.buf = append(r.buf, rec)
		return
	}
	r.buf[r.next] = rec
	r.next = (r.next + 1) % len(r.buf)
}

// Records returns the kept records, oldest first, with sequence number
// greater than after.
func (r *Ring) Records(after uint64) []LogRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]LogRecord, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	out = append(out, r.buf[:r.next]...)
	i, _ := slices.BinarySearchFunc(out, after+1, func(rec LogRecord, seq uint64) int {
		switch {
		case rec.Seq < seq:
			return -1
		case rec.Seq > seq:
			return 1
		}
		return 0
	})
	return out[i:]
}

// Handler returns a slog.Handler that keeps each record it handles in r and
// passes it to next (if not nil). It handles what next would (Info and up
// if next is nil).
func (r *Ring) Handler(next slog.Handler) slog.Handler {
	return &ringHandler{ring: r, next: next}
}

type ringHandler struct {
	ring   *Ring
	next   slog.Handler
	attrs  []slog.Attr // from WithAttrs, already in their groups
	groups []string    // from WithGroup: where later attrs go
}

func (h *ringHandler) Enabled(ctx context.Context, l slog.Level) bool {
	if h.next == nil {
		return l >= slog.LevelInfo
	}
	return h.next.Enabled(ctx, l)
}

func (h *ringHandler) Handle(ctx context.Context, rec slog.Record) error {
	attrs := map[string]any{}
	for _, a := range h.attrs {
		putAttr(attrs, a)
	}
	inner := attrs
	for _, g := range h.groups {
		m, _ := inner[g].(map[string]any)
		if m == nil {
			m = map[string]any{}
			inner[g] = m
		}
		inner = m
	}
	rec.Attrs(func(a slog.Attr) bool {
		putAttr(inner, a)
		return true
	})
	pruneEmpty(attrs)
	lr := LogRecord{Time: rec.Time, Level: rec.Level.String(), Message: rec.Message}
	if len(attrs) > 0 {
		lr.Attrs = attrs
	}
	h.ring.add(lr)
	if h.next != nil {
		return h.next.Handle(ctx, rec)
	}
	return nil
}

// putAttr stores a in m, as JSON would show it.
func putAttr(m map[string]any, a slog.Attr) {
	v := a.Value.Resolve()
	if a.Key == "" && v.Kind() != slog.KindGroup {
		return
	}
	switch v.Kind() {
	case slog.KindGroup:
		dst := m
		if a.Key != "" {
			sub, _ := m[a.Key].(map[string]any)
			if sub == nil {
				sub = map[string]any{}
				m[a.Key] = sub
			}
			dst = sub
		}
		for _, ga := range v.Group() {
			putAttr(dst, ga)
		}
	case slog.KindDuration:
		m[a.Key] = v.Duration().String()
	case slog.KindTime:
		m[a.Key] = v.Time()
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			m[a.Key] = err.Error()
		} else {
			m[a.Key] = v.Any()
		}
	default:
		m[a.Key] = v.Any()
	}
}

func pruneEmpty(m map[string]any) {
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			pruneEmpty(sub)
			if len(sub) == 0 {
				delete(m, k)
			}
		}
	}
}

func (h *ringHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return h
	}
	c := *h
	if h.next != nil {
		c.next = h.next.WithAttrs(as)
	}
	// Wrap in the current groups so that they land where slog puts them.
	c.attrs = slices.Clone(h.attrs)
	for _, a := range as {
		for i := len(h.groups) - 1; i >= 0; i-- {
			a = slog.Attr{Key: h.groups[i], Value: slog.GroupValue(a)}
		}
		c.attrs = append(c.attrs, a)
	}
	return &c
}

func (h *ringHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	if h.next != nil {
		c.next = h.next.WithGroup(name)
	}
	c.groups = append(slices.Clone(h.groups), name)
	return &c
}
