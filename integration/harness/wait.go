package harness

import (
	"testing"
	"time"
)

// PollInterval is how often Eventually looks again.
var PollInterval = 200 * time.Millisecond

// Eventually calls check until it reports true or timeout passes; then it
// fails t with what and check's last observation. Every wait in the tests
// goes through here: a deadline, never a sleep as an assertion.
func Eventually(t testing.TB, timeout time.Duration, what string, check func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ok, last := check()
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last seen: %s", what, timeout, last)
		}
		time.Sleep(PollInterval)
	}
}
