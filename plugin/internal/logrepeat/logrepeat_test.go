package logrepeat

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// records is a slog.Handler that keeps each record as
// "LEVEL msg k=v ...", attributes from WithAttrs first.
type records struct {
	mu    *sync.Mutex
	lines *[]string
	attrs string
}

func newRecords() records { return records{mu: new(sync.Mutex), lines: new([]string)} }

func (h records) Enabled(context.Context, slog.Level) bool { return true }

func (h records) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message + h.attrs
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	h.mu.Lock()
	*h.lines = append(*h.lines, line)
	h.mu.Unlock()
	return nil
}

func (h records) WithAttrs(as []slog.Attr) slog.Handler {
	for _, a := range as {
		h.attrs += " " + a.String()
	}
	return h
}

func (h records) WithGroup(string) slog.Handler { return h }

func (h records) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(*h.lines)
}

// clock is a hand-turned clock with the timers of a limiter on it.
type clock struct {
	now    time.Time
	timers []*timer
}

type timer struct {
	at      time.Time
	f       func()
	stopped bool
}

func (t *timer) Stop() bool { was := !t.stopped; t.stopped = true; return was }

// advance turns the clock by d and fires the timers due.
func (c *clock) advance(d time.Duration) {
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		if !t.stopped && !t.at.After(c.now) {
			t.stopped = true
			t.f()
		}
	}
}

func newTestHandler(next slog.Handler, c *clock) *Handler {
	h := NewLimit(next, 3, time.Minute)
	h.l.now = func() time.Time { return c.now }
	h.l.afterFunc = func(d time.Duration, f func()) stopper {
		t := &timer{at: c.now.Add(d), f: f}
		c.timers = append(c.timers, t)
		return t
	}
	return h
}

func TestRepeatsPastTheBurstAreCountedAndSaidWhenTheWindowEnds(t *testing.T) {
	rec := newRecords()
	c := &clock{now: time.Unix(1000, 0)}
	h := newTestHandler(rec, c)
	log := slog.New(h).With("volume", "v1")
	for i := range 1000 {
		log.Warn("sync failed", "path", fmt.Sprintf("f%d", i))
		c.advance(10 * time.Millisecond) // 1,000 in 10 s
	}
	want := []string{
		"WARN sync failed volume=v1 path=f0",
		"WARN sync failed volume=v1 path=f1",
		"WARN sync failed volume=v1 path=f2",
	}
	if got := rec.got(); !slices.Equal(got, want) {
		t.Fatalf("during the window:\n got %q\nwant %q", got, want)
	}
	c.advance(50 * time.Second) // the window ends
	want = append(want, "WARN sync failed volume=v1 path=f999 repeated=997 repeated_over=1m0s")
	if got := rec.got(); !slices.Equal(got, want) {
		t.Fatalf("at the end of the window:\n got %q\nwant %q", got, want)
	}
	// A new window: said in full again.
	log.Warn("sync failed", "path", "again")
	if got := rec.got(); got[len(got)-1] != "WARN sync failed volume=v1 path=again" {
		t.Fatalf("after the window: %q", got)
	}
}

func TestAWindowWithNoRepeatsPastTheBurstSaysNothingMore(t *testing.T) {
	rec := newRecords()
	c := &clock{now: time.Unix(1000, 0)}
	log := slog.New(newTestHandler(rec, c))
	for range 3 {
		log.Error("request failed", "op", "open")
	}
	c.advance(2 * time.Minute)
	log.Error("request failed", "op", "open")
	if got := rec.got(); len(got) != 4 || slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, "repeated") }) {
		t.Fatalf("got %q; want the four records as they were", got)
	}
}

func TestMessagesAndLevelsAreCountedApart(t *testing.T) {
	rec := newRecords()
	c := &clock{now: time.Unix(1000, 0)}
	log := slog.New(newTestHandler(rec, c))
	for range 5 {
		log.Warn("a")
		log.Error("a")
		log.Warn("b")
		log.Info("chatty") // below Warn: never held back
	}
	c.advance(time.Minute)
	got := rec.got()
	count := func(line string) int {
		n := 0
		for _, g := range got {
			if g == line {
				n++
			}
		}
		return n
	}
	for _, line := range []string{"WARN a", "ERROR a", "WARN b"} {
		if n := count(line); n != 3 {
			t.Errorf("%q said %d times in full; want 3", line, n)
		}
		if n := count(line + " repeated=2 repeated_over=1m0s"); n != 1 {
			t.Errorf("%q: %d summaries; want 1 (repeated=2)", line, n)
		}
	}
	if n := count("INFO chatty"); n != 5 {
		t.Errorf("info records: %d; want all 5", n)
	}
}

func TestCloseSaysWhatIsHeldAndPassesEverythingAfter(t *testing.T) {
	rec := newRecords()
	c := &clock{now: time.Unix(1000, 0)}
	h := newTestHandler(rec, c)
	log := slog.New(h)
	for i := range 5 {
		log.Warn("gave up waiting", "path", fmt.Sprint(i))
	}
	c.advance(5 * time.Second)
	h.Close()
	got := rec.got()
	if len(got) != 4 || got[3] != "WARN gave up waiting path=4 repeated=2 repeated_over=5s" {
		t.Fatalf("after Close: %q", got)
	}
	c.advance(time.Minute) // the stopped timer says nothing twice
	for range 5 {
		log.Warn("gave up waiting")
	}
	if n := len(rec.got()); n != 4+5 {
		t.Fatalf("%d records after Close; want every one passed (9)", n)
	}
}

func TestRepeatsFromManyGoroutinesAreAllCounted(t *testing.T) {
	rec := newRecords()
	h := NewLimit(rec, 2, time.Hour)
	log := slog.New(h)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				log.Warn("request failed", "n", g*100+i)
			}
		})
	}
	wg.Wait()
	h.Close()
	got := rec.got()
	if len(got) != 3 || !strings.Contains(got[2], " repeated=798 ") {
		t.Fatalf("got %q; want 2 records in full and one saying repeated=798", got)
	}
}
