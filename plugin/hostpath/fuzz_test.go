package hostpath

import (
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
)

// FuzzClean: Clean never panics; what it accepts comes out canonical (no
// "..", no leading "/", no NUL, no empty or "." component), is a fixed point,
// and is what path.Clean makes of it; what it refuses is refused with
// ErrEscape and really did hold "..", a leading "/" or a NUL.
func FuzzClean(f *testing.F) {
	for _, s := range []string{
		"", ".", "./", "a", "a/b", "a//b/", "./a/./b/.", "..", "../a", "a/..", "a/../b",
		"/", "/a", "//a", "a\x00b", "...", "..a", "a..", "a/..b/c", "new\nline", "\xff\xfe",
		strings.Repeat("a/", 100), strings.Repeat("../", 10) + "etc/passwd", `a\..\b`, ". /..",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := Clean(in)
		if err != nil {
			if !errors.Is(err, ErrEscape) {
				t.Fatalf("Clean(%q): error %v is not ErrEscape", in, err)
			}
			if !strings.HasPrefix(in, "/") && !strings.Contains(in, "\x00") && !slices.Contains(strings.Split(in, "/"), "..") {
				t.Fatalf("Clean(%q) refused a harmless path", in)
			}
			return
		}
		if strings.HasPrefix(out, "/") || strings.Contains(out, "\x00") {
			t.Fatalf("Clean(%q) = %q", in, out)
		}
		for _, c := range strings.Split(out, "/") {
			if out != "" && (c == "" || c == "." || c == "..") {
				t.Fatalf("Clean(%q) = %q has component %q", in, out, c)
			}
		}
		if again, err := Clean(out); err != nil || again != out {
			t.Fatalf("Clean(Clean(%q)) = %q, %v; want %q", in, again, err, out)
		}
		if want := strings.TrimPrefix(path.Clean("/"+in), "/"); out != want {
			t.Fatalf("Clean(%q) = %q, path.Clean says %q", in, out, want)
		}
		if canonical(in) && out != in {
			t.Fatalf("Clean(%q) changed a canonical path to %q", in, out)
		}
	})
}

// FuzzPolicyCheck: Check never panics and never accepts a source that is not
// absolute and clean, or that is outside every allowed root, or that
// overlaps a denied path. The model below is written independently of
// Check: it compares components, not string prefixes.
func FuzzPolicyCheck(f *testing.F) {
	for _, s := range []string{
		"/", "", "/home", "/home/u", "/homes", "/home/../etc", "/home/u/", "/srv/data",
		"/srv/data/state", "/srv/data/state/x", "/srv", "/srv/dat", "/etc", "//home", "/home//u",
		"/home/./u", "/home/u\x00", "home/u", "/home/\xff", "/Users/x", "/home/u/..",
	} {
		f.Add(s)
	}
	p := Policy{AllowedRoots: []string{"/home", "/srv/data/", "/Users"}, Denied: []string{"/srv/data/state", "/home/u/.cache"}}
	comps := func(s string) []string { return strings.Split(strings.TrimPrefix(s, "/"), "/") }
	// under reports whether a is b or beneath it, component by component.
	under := func(a, b string) bool {
		ca, cb := comps(a), comps(b)
		if len(ca) < len(cb) {
			return false
		}
		for i := range cb {
			if ca[i] != cb[i] {
				return false
			}
		}
		return true
	}
	f.Fuzz(func(t *testing.T, src string) {
		err := p.Check(src)
		if err != nil {
			if !strings.Contains(err.Error(), "source") {
				t.Fatalf("Check(%q): error %q does not name the source", src, err)
			}
			return
		}
		if !strings.HasPrefix(src, "/") || src == "/" || strings.Contains(src, "\x00") {
			t.Fatalf("Check accepted %q", src)
		}
		for _, c := range comps(src) {
			if c == "" || c == "." || c == ".." {
				t.Fatalf("Check accepted unclean %q", src)
			}
		}
		if !under(src, "/home") && !under(src, "/srv/data") && !under(src, "/Users") {
			t.Fatalf("Check accepted %q outside the allowed roots", src)
		}
		for _, d := range p.Denied {
			if under(src, d) || under(d, src) {
				t.Fatalf("Check accepted %q overlapping denied %q", src, d)
			}
		}
	})
}
