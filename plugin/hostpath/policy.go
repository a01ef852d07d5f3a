package hostpath

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

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
//
// A source must be clean rather than cleaned here, so that what is checked is
// exactly what is opened and what the user reads back in `docker volume
// inspect`. Roots and denied paths are compared as cleaned absolute paths;
// empty or relative entries match nothing.
func (p Policy) Check(source string) error {
	switch {
	case source == "":
		return errors.New(`source is empty: give an absolute host path, e.g. "/home/you/project"`)
	case strings.IndexByte(source, 0) >= 0:
		return fmt.Errorf("source %q contains a NUL byte", source)
	case source[0] != '/':
		return fmt.Errorf("source %q must be an absolute path", source)
	}
	if c := path.Clean(source); c != source {
		return fmt.Errorf("source %q is not clean: write %q", source, c)
	}
	if source == "/" {
		return fmt.Errorf(`source "/" is the host's root: name a directory inside the allowed roots (%s)`, p.rootList())
	}
	allowed := false
	for _, root := range p.AllowedRoots {
		if within(root, source) {
			allowed = true
			break
		}
	}
	if !allowed {
		if len(p.AllowedRoots) == 0 {
			return fmt.Errorf("source %q is refused: no allowed roots are configured; set ALLOWED_ROOTS", source)
		}
		return fmt.Errorf("source %q is outside the allowed roots (%s); set ALLOWED_ROOTS to change them", source, p.rootList())
	}
	for _, d := range p.Denied {
		what := ""
		switch {
		case !isAbs(d):
			continue
		case path.Clean(d) == source:
			what = "is"
		case within(d, source):
			what = "is inside"
		case within(source, d):
			what = "contains"
		default:
			continue
		}
		return fmt.Errorf("source %q %s the denied path %s; a source may not be, contain or be inside any of: %s",
			source, what, path.Clean(d), strings.Join(p.deniedList(), ", "))
	}
	return nil
}

// within reports whether p (clean, absolute) is root or beneath it.
func within(root, p string) bool {
	if !isAbs(root) {
		return false
	}
	root = path.Clean(root)
	if root == "/" || p == root {
		return true
	}
	return len(p) > len(root) && p[len(root)] == '/' && p[:len(root)] == root
}

func isAbs(p string) bool { return strings.HasPrefix(p, "/") }

func (p Policy) rootList() string {
	if len(p.AllowedRoots) == 0 {
		return "none"
	}
	return strings.Join(p.AllowedRoots, ", ")
}

func (p Policy) deniedList() []string {
	var l []string
	for _, d := range p.Denied {
		if isAbs(d) {
			l = append(l, path.Clean(d))
		}
	}
	return l
}

// OpenSource checks source with Check, then opens it as a Root beneath
// hostPrefix (where the host's "/" is seen: "/host" in the managed plugin,
// "" when run as a plain process), refusing a symlink in ANY component of
// source: the Root is reached by openat2 from hostPrefix with
// RESOLVE_NO_SYMLINKS, and must be a directory.
//
// The Root's Path is source (the host's name for it), not hostPrefix+source,
// so that every later error names the path the user wrote.
func (p Policy) OpenSource(hostPrefix, source string) (*Root, error) {
	if err := p.Check(source); err != nil {
		return nil, err
	}
	prefix := hostPrefix
	if prefix == "" {
		prefix = "/"
	}
	pfd, err := openat(unix.AT_FDCWD, prefix, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("source %q: the host is not visible: %w", source, &os.PathError{Op: "open host prefix", Path: prefix, Err: err})
	}
	defer unix.Close(pfd)
	rel := source[1:]
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveBeneath}
	fd, err := openat2(pfd, rel, &how)
	if err != nil {
		return nil, sourceError(pfd, source, err)
	}
	return &Root{dir: source, fd: fd}, nil
}

// sourceError explains why source could not be opened beneath pfd.
func sourceError(pfd int, source string, err error) error {
	switch err {
	case unix.ELOOP:
		// Name the first component that is a symlink: every component before
		// it is a real directory, so lstat of each prefix in turn finds it.
		rel := source[1:]
		for i := 0; i <= len(rel); i++ {
			if i < len(rel) && rel[i] != '/' {
				continue
			}
			var st unix.Stat_t
			if unix.Fstatat(pfd, rel[:i], &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
				continue
			}
			target := ""
			buf := make([]byte, 4096)
			if n, e := unix.Readlinkat(pfd, rel[:i], buf); e == nil {
				target = fmt.Sprintf(" (to %q)", buf[:n])
			}
			return fmt.Errorf("source %q is refused: %q is a symlink%s; symlinks are not followed in a source, write the real path: %w: %w",
				source, "/"+rel[:i], target, ErrEscape, err)
		}
		return fmt.Errorf("source %q is refused: a component is a symlink; symlinks are not followed in a source, write the real path: %w: %w",
			source, ErrEscape, err)
	case unix.EXDEV:
		return fmt.Errorf("source %q is refused: it leads outside the host's root: %w: %w", source, ErrEscape, err)
	case unix.ENOENT:
		return fmt.Errorf("source %q does not exist on the host: create it first: %w", source, err)
	case unix.ENOTDIR:
		return fmt.Errorf("source %q is not a directory (or has a file on the way): %w", source, err)
	}
	return fmt.Errorf("source %q: open: %w", source, err)
}
