package syncer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// records is a slog.Handler that keeps each record as "LEVEL msg k=v ...".
type records struct{ got *[]string }

func (records) Enabled(context.Context, slog.Level) bool { return true }
func (h records) Handle(_ context.Context, r slog.Record) error {
	s := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		s += fmt.Sprintf(" %s=%v", a.Key, a.Value)
		return true
	})
	*h.got = append(*h.got, s)
	return nil
}
func (h records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h records) WithGroup(string) slog.Handler      { return h }

// A share gone for five minutes, checked every second, gets a record when
// the looks start failing, one a minute while they do (with how many have),
// and one when they work again: not one per look.
func TestARunOfFailedLooksIsSaidOnceAMinute(t *testing.T) {
	var got []string
	f := failureReport{log: slog.New(records{&got})}
	gone := errors.New("lstat d: transport endpoint is not connected")
	start := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	f.look(at(0), "check", nil)
	for s := 1; s <= 300; s++ {
		f.look(at(s), "check", gone)
	}
	f.look(at(301), "sweep", nil)
	f.look(at(302), "check", nil)
	f.look(at(303), "check", gone)

	want := []string{
		"WARN host refresh failed kind=check err=" + gone.Error(),
		"WARN host refresh still failing kind=check err=" + gone.Error() + " failed_looks=61 failing_for=1m0s",
		"WARN host refresh still failing kind=check err=" + gone.Error() + " failed_looks=121 failing_for=2m0s",
		"WARN host refresh still failing kind=check err=" + gone.Error() + " failed_looks=181 failing_for=3m0s",
		"WARN host refresh still failing kind=check err=" + gone.Error() + " failed_looks=241 failing_for=4m0s",
		"INFO host refresh works again kind=sweep failed_looks=300 failing_for=5m0s",
		"WARN host refresh failed kind=check err=" + gone.Error(),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
