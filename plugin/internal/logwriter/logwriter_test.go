package logwriter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// gate is an output that blocks every Write until opened, as a pipe
// nobody reads does once full.
type gate struct {
	open chan struct{}
	mu   sync.Mutex
	buf  bytes.Buffer
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

func (g *gate) Write(p []byte) (int, error) {
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.Write(p)
}

func (g *gate) lines() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return strings.Split(strings.TrimSuffix(g.buf.String(), "\n"), "\n")
}

// writeAll writes each record from a goroutine and fails t if that does not
// return: the property under test is that Write never waits for out.
func writeAll(t *testing.T, w *Writer, recs []string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, r := range recs {
			w.Write([]byte(r))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("Write waited for an output nobody reads")
	}
}

func dropped(t *testing.T, line string) int {
	t.Helper()
	var n struct {
		Level, Msg string
		Dropped    int
	}
	if err := json.Unmarshal([]byte(line), &n); err != nil || n.Level != "WARN" || !strings.Contains(n.Msg, "dropped") || n.Dropped == 0 {
		t.Fatalf("%q: not a notice of dropped records (%v)", line, err)
	}
	return n.Dropped
}

// A record written while the output is blocked returns at once; past the
// limit records are dropped, and a notice where they were says how many.
func TestWriteNeverWaitsAndSaysWhatItDropped(t *testing.T) {
	out := newGate()
	w := New(out, 1000)
	var recs []string
	for i := range 500 {
		recs = append(recs, fmt.Sprintf("{\"msg\":\"record %03d\"}\n", i)) // 21 bytes
	}
	writeAll(t, w, recs)
	if w.Flush(50 * time.Millisecond) {
		t.Fatal("Flush reported everything written while the output was blocked")
	}
	close(out.open)
	if !w.Flush(10 * time.Second) {
		t.Fatal("Flush: not written out once the output was read")
	}
	lines := out.lines()
	var kept int
	for i, l := range lines[:len(lines)-1] {
		if l != strings.TrimSuffix(recs[i], "\n") {
			t.Fatalf("line %d = %q, want the records in order, %q", i, l, recs[i])
		}
		kept++
	}
	if n := dropped(t, lines[len(lines)-1]); kept+n != len(recs) || kept == 0 || kept > 1000/21+1 {
		t.Fatalf("%d records kept (limit 1000 bytes of 21-byte records) and %d said dropped; want %d in all", kept, n, len(recs))
	}
}

// Records dropped between two that were kept are counted where they were.
func TestADropNoticeStandsWhereTheRecordsWere(t *testing.T) {
	out := newGate()
	w := New(out, 100)
	writeAll(t, w, []string{
		"a\n",
		strings.Repeat("x", 120) + "\n", // over the limit alone: dropped
		strings.Repeat("y", 120) + "\n",
		"c\n",
	})
	close(out.open)
	if !w.Flush(10 * time.Second) {
		t.Fatal("Flush: not written out")
	}
	lines := out.lines()
	if len(lines) != 3 || lines[0] != "a" || lines[2] != "c" || dropped(t, lines[1]) != 2 {
		t.Fatalf("output %q; want a, a notice of 2 dropped, c", lines)
	}
	// Dropped after the last record kept: Flush says so.
	out2 := newGate()
	w2 := New(out2, 10)
	writeAll(t, w2, []string{"a\n", strings.Repeat("z", 20) + "\n"})
	close(out2.open)
	if !w2.Flush(10 * time.Second) {
		t.Fatal("Flush: not written out")
	}
	if lines := out2.lines(); len(lines) != 2 || lines[0] != "a" || dropped(t, lines[1]) != 1 {
		t.Fatalf("output %q; want a, then a notice of 1 dropped", lines)
	}
}

// Bytes written out make room again: the limit is on what waits, not on
// what was ever written.
func TestTheLimitIsOnWhatWaits(t *testing.T) {
	var out bytes.Buffer
	w := New(&out, 100)
	for i := range 50 {
		w.Write([]byte(fmt.Sprintf("record %02d\n", i))) // 10 bytes, 500 in all
		if !w.Flush(10 * time.Second) {
			t.Fatal("Flush: not written out")
		}
	}
	if got := strings.Count(out.String(), "\n"); got != 50 || strings.Contains(out.String(), "dropped") {
		t.Fatalf("%d records written, want all 50 and nothing dropped:\n%s", got, out.String())
	}
}

// Once the output is read again and the queue written out, the notice of
// what was dropped follows at once: no later record, no Flush needed.
func TestANoticeFollowsOnceTheOutputIsReadAgain(t *testing.T) {
	out := newGate()
	w := New(out, 10)
	writeAll(t, w, []string{"a\n", "b\n", strings.Repeat("c", 20) + "\n"})
	close(out.open)
	for start := time.Now(); len(out.lines()) < 3; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("output %q, 10 s after it was read again; want a, b, then a notice of 1 dropped", out.lines())
		}
	}
	if lines := out.lines(); lines[0] != "a" || lines[1] != "b" || dropped(t, lines[2]) != 1 {
		t.Fatalf("output %q; want a, b, then a notice of 1 dropped", lines)
	}
}
