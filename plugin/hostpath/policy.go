package hostpath

import "errors"

// DefaultAllowedRoots are the host trees a source may live in unless the
// plugin is configured otherwise (ALLOWED_ROOTS): where users keep projects
// and where VMs mount the folders of their Mac or Windows host.
var DefaultAllowedRoots = []string{"/home", "/Users", "/mnt", "/media", "/srv", "/opt", "/tmp", "/var/tmp", "/work"}

// Policy decides which host directories may be used as sources.
type Policy struct {
	// AllowedRoots: a source must be one of these or beneath one.
	AllowedRoots []string
	// Denied: never a source, nor beneath one, nor an ancestor of one
	// (the plugin's own state dir, Docker's data root, /proc, /sys, /dev).
	Denied []string
}

// Check validates a source as the user wrote it, before anything is opened:
// absolute, already clean (no "..", ".", "//", trailing "/"), not "/", inside
// an allowed root, not overlapping a denied path. Errors say what was wrong
// and what is valid, e.g.
//
//	source "/etc" is outside the allowed roots (/home, /Users, ...); set ALLOWED_ROOTS to change them
func (p Policy) Check(source string) error { return errors.New("unimplemented") }

// OpenSource checks source with Check, then opens it as a Root beneath
// hostPrefix (where the host's "/" is seen: "/host" in the managed plugin,
// "" when run as a plain process), refusing a symlink in ANY component of
// source: the Root is reached by openat2 from hostPrefix with
// RESOLVE_NO_SYMLINKS, and must be a directory.
func (p Policy) OpenSource(hostPrefix, source string) (*Root, error) {
	return nil, errors.New("unimplemented")
}
