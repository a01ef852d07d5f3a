package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"
)

func TestRingKeepsTheLatest(t *testing.T) {
	r := NewRing(3)
	log := slog.New(r.Handler(nil))
	for i := range 5 {
		log.Info(fmt.Sprint("m", i))
	}
	log.Debug("not kept: below the level")
	recs := r.Records(0)
	if len(recs) != 3 || recs[0].Message != "m2" || recs[2].Message != "m4" || recs[0].Seq != 3 || recs[2].Seq != 5 {
		t.Fatalf("%+v", recs)
	}
	if recs := r.Records(4); len(recs) != 1 || recs[0].Message != "m4" {
		t.Fatalf("after 4: %+v", recs)
	}
	if recs := r.Records(5); len(recs) != 0 {
		t.Fatalf("after 5: %+v", recs)
	}
	if recs := NewRing(2).Records(0); len(recs) != 0 {
		t.Fatalf("empty: %+v", recs)
	}
}

// The ring keeps the same structure the JSON log shows, and passes every
// record on.
func TestRingAttrs(t *testing.T) {
	r := NewRing(10)
	var out bytes.Buffer
	log := slog.New(r.Handler(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})))
	log = log.With("volume", "v1")
	log.WithGroup("req").With("op", "mount").Debug("hello", "path", "a/b", "err", errors.New("boom"),
		"took", 1500*time.Millisecond, slog.Group("", "inline", 1), slog.Group("empty"))
	recs := r.Records(0)
	if len(recs) != 1 {
		t.Fatalf("%+v", recs)
	}
	got, _ := json.Marshal(recs[0].Attrs)
	want := `{"req":{"err":"boom","inline":1,"op":"mount","path":"a/b","took":"1.5s"},"volume":"v1"}`
	if string(got) != want || recs[0].Level != "DEBUG" || recs[0].Message != "hello" || recs[0].Time.IsZero() {
		t.Fatalf("attrs %s\nwant  %s\n%+v", got, want, recs[0])
	}
	var line map[string]any
	if err := json.Unmarshal(out.Bytes(), &line); err != nil || line["volume"] != "v1" || line["req"].(map[string]any)["path"] != "a/b" {
		t.Fatalf("passed on: %q %v", out.String(), err)
	}
	if !r.Handler(nil).Enabled(context.Background(), slog.LevelInfo) || r.Handler(nil).Enabled(context.Background(), slog.LevelDebug) {
		t.Fatal("default level is info")
	}
}
