package fsys

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/internal/logrepeat"
)

// messages is a slog.Handler that keeps each record's message and, if it
// has one, its repeated count.
type messages struct {
	mu   *sync.Mutex
	msgs *[]string
}

func (h messages) Enabled(context.Context, slog.Level) bool { return true }
func (h messages) Handle(_ context.Context, r slog.Record) error {
	m := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "repeated" {
			m += fmt.Sprintf(" (repeated %d)", a.Value.Int64())
		}
		return true
	})
	h.mu.Lock()
	*h.msgs = append(*h.msgs, m)
	h.mu.Unlock()
	return nil
}
func (h messages) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h messages) WithGroup(string) slog.Handler      { return h }

func (h messages) count(m string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(slices.DeleteFunc(slices.Clone(*h.msgs), func(s string) bool { return s != m }))
}

// A request that fails in a way the plugin did not foresee is EIO and a
// record naming it; a container repeating it (each request costs it
// nothing) gets the first records in full and then a count of the rest,
// said when the mount stops at the latest, not a record per request.
func TestFailedRequestsRepeatedWithoutEndAreCountedNotEachLogged(t *testing.T) {
	st := newOneFileStore(t, consistency.Delegated, "x")
	rec := messages{mu: new(sync.Mutex), msgs: new([]string)}
	m, err := New(st, filepath.Join(t.TempDir(), "mnt"), Options{Log: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	const failed = 100
	for i := range failed {
		if e := m.root.fs.errno(fmt.Errorf("an error the plugin did not foresee"), "open", fmt.Sprintf("f%d", i)); e != syscall.EIO {
			t.Fatalf("errno %v; want EIO", e)
		}
	}
	if n := rec.count("request failed"); n != logrepeat.DefaultBurst {
		t.Fatalf("%d records for %d failed requests; want the first %d", n, failed, logrepeat.DefaultBurst)
	}
	if err := m.Unmount(); err != nil {
		t.Fatal(err)
	}
	if n := rec.count(fmt.Sprintf("request failed (repeated %d)", failed-logrepeat.DefaultBurst)); n != 1 {
		t.Fatalf("after the unmount, records %q; want one counting the %d held back", *rec.msgs, failed-logrepeat.DefaultBurst)
	}
}
