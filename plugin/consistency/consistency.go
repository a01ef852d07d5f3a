// Package consistency names the three per-mount states of the bind-mount
// consistency proposal (see ../shared/SEMANTICS.md) and parses what users type.
//
// States are an ordered enum compared by rank (as rclone's cache modes are):
// a stronger state gives the container fewer liberties. Where two mounts of
// one host tree overlap, the overlap follows the stronger one (rules C4, D5).
package consistency

import (
	"fmt"
	"strings"
)

// State is how a mount trades consistency for speed.
type State int

// Ordered from the most relaxed to the strictest: Stronger compares ranks.
const (
	// Delegated: the container's view is authoritative; writes reach the
	// host later (on sync, and before the container's stop is reported).
	Delegated State = iota + 1
	// Cached: the host's view is authoritative; container writes go through
	// to the host before the syscall returns, host changes may arrive late.
	Cached
	// Consistent: host and container always agree. A plain bind on Linux.
	Consistent
	// Default is consistent by another name, minus the overlap rules.
	Default
)

// names in the order they are listed to users.
var names = []struct {
	s    State
	name string
}{
	{Consistent, "consistent"},
	{Default, "default"},
	{Cached, "cached"},
	{Delegated, "delegated"},
}

// Valid lists the accepted spellings, for error messages and help text.
func Valid() []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n.name
	}
	return out
}

// Parse turns a user's value into a State. The empty string means Default.
// Any other value is refused with an error that lists the valid ones.
func Parse(v string) (State, error) {
	if v == "" {
		return Default, nil
	}
	for _, n := range names {
		if v == n.name {
			return n.s, nil
		}
	}
	return 0, fmt.Errorf("invalid state %q: valid states are %s", v, strings.Join(Valid(), ", "))
}

// String returns the user-facing name.
func (s State) String() string {
	for _, n := range names {
		if s == n.s {
			return n.name
		}
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// rank orders states by strength; Default ranks as Consistent.
func (s State) rank() int {
	if s == Default {
		return int(Consistent)
	}
	return int(s)
}

// Stronger returns whichever of a and b gives the stricter guarantee.
func Stronger(a, b State) State {
	if b.rank() > a.rank() {
		return b
	}
	return a
}

// NeedsStore reports whether the state is served from the local store through
// FUSE. Consistent and Default are plain binds (rule K2: zero cost).
func (s State) NeedsStore() bool { return s == Cached || s == Delegated }

// WritesBack reports whether container writes may be held back from the host
// (only Delegated; rule C3 forbids it for Cached).
func (s State) WritesBack() bool { return s == Delegated }
