package driver

import (
	"errors"
	"fmt"
)

// Kind classifies a Driver error, so that the protocol adapter (whose wire
// format carries only a string) can tell a user's mistake from a failure of
// the plugin or the host.
type Kind int

const (
	// KindSystem: the plugin or the host failed (mount, disk, writeback).
	KindSystem Kind = iota
	// KindInvalid: the request was wrong (options, names); retrying it
	// unchanged fails the same way.
	KindInvalid
	// KindNotFound: no volume by that name.
	KindNotFound
	// KindInUse: the volume is mounted and cannot be removed.
	KindInUse
	// KindConflict: the volume exists with other options.
	KindConflict
)

func (k Kind) String() string {
	switch k {
	case KindInvalid:
		return "invalid parameter"
	case KindNotFound:
		return "not found"
	case KindInUse:
		return "in use"
	case KindConflict:
		return "conflict"
	default:
		return "system"
	}
}

// Error is an error returned by the Driver, with its Kind.
type Error struct {
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the Kind of err: that of the first *Error in its chain,
// KindSystem if there is none.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindSystem
}

// IsInvalid reports whether err is a user's mistake rather than a failure
// (invalid parameter, unknown volume, volume in use, conflicting create).
func IsInvalid(err error) bool { return err != nil && KindOf(err) != KindSystem }

func errorf(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Err: fmt.Errorf(format, args...)}
}

func notFound(name string) error {
	return errorf(KindNotFound, "no such volume %q", name)
}
