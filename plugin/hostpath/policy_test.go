package hostpath

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestPolicyCheck(t *testing.T) {
	p := Policy{
		AllowedRoots: []string{"/home", "/srv/", "/work"},
		Denied:       []string{"/var/lib/docker", "/home/state", "/srv/data/plugin", "", "relative"},
	}
	for _, c := range []struct {
		source string
		want   []string // substrings of the error; nil: accepted
	}{
		{"/work", nil},
		{"/home", []string{"contains the denied path /home/state"}},
		{"/srv", []string{"contains the denied path /srv/data/plugin"}},
		{"/home/u/project", nil},
		{"/srv/other", nil},
		{"/work/x y/new\nline", nil},
		{"/home/statefull", nil}, // a sibling that shares a prefix is not inside

		{"", []string{"source is empty", "absolute"}},
		{"rel/x", []string{`source "rel/x" must be an absolute path`}},
		{"./home", []string{"must be an absolute path"}},
		{"/", []string{`source "/" is the host's root`, "/home, /srv/, /work"}},
		{"/home/a/../b", []string{`source "/home/a/../b" is not clean: write "/home/b"`}},
		{"/home/u/", []string{`is not clean: write "/home/u"`}},
		{"/home//u", []string{`write "/home/u"`}},
		{"/home/./u", []string{`write "/home/u"`}},
		{"/home/..", []string{`write "/"`}},
		{"/home/u\x00", []string{"NUL"}},
		{"/etc", []string{`source "/etc" is outside the allowed roots (/home, /srv/, /work); set ALLOWED_ROOTS to change them`}},
		{"/homes", []string{"outside the allowed roots"}},
		{"/hom", []string{"outside the allowed roots"}},
		{"/var/lib/docker/volumes", []string{"outside the allowed roots"}},
		{"/home/state", []string{`source "/home/state" is the denied path /home/state`, "/var/lib/docker, /home/state, /srv/data/plugin"}},
		{"/home/state/x", []string{"is inside the denied path /home/state"}},
		{"/srv/data/plugin/v", []string{"is inside the denied path /srv/data/plugin"}},
		{"/srv/data", []string{"contains the denied path /srv/data/plugin"}},
	} {
		err := p.Check(c.source)
		switch {
		case c.want == nil && err != nil:
			t.Errorf("Check(%q) = %v, want ok", c.source, err)
		case c.want != nil && err == nil:
			t.Errorf("Check(%q) accepted, want %q", c.source, c.want)
		case c.want != nil:
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check(%q) = %q, want it to contain %q", c.source, err, w)
				}
			}
		}
	}

	// Ancestors of a denied path are refused too.
	p2 := Policy{AllowedRoots: []string{"/"}, Denied: []string{"/var/lib/docker"}}
	for _, src := range []string{"/var", "/var/lib"} {
		if err := p2.Check(src); err == nil || !strings.Contains(err.Error(), "contains the denied path /var/lib/docker") {
			t.Errorf("Check(%q) = %v, want a denied ancestor", src, err)
		}
	}
	for _, src := range []string{"/var/lib/dock", "/var/lib/docker2", "/usr"} {
		if err := p2.Check(src); err != nil {
			t.Errorf("Check(%q) = %v", src, err)
		}
	}
	// No allowed roots: nothing is allowed, and the message says how to fix it.
	if err := (Policy{}).Check("/home/u"); err == nil || !strings.Contains(err.Error(), "ALLOWED_ROOTS") {
		t.Errorf("empty policy: %v", err)
	}
	// The defaults accept a home directory and refuse system paths.
	def := Policy{AllowedRoots: DefaultAllowedRoots, Denied: []string{"/var/lib/docker", "/proc", "/sys", "/dev", "/etc"}}
	if err := def.Check("/home/u/p"); err != nil {
		t.Error(err)
	}
	for _, src := range []string{"/etc", "/proc/1/root", "/var/lib/docker", "/usr/bin", "/root"} {
		if err := def.Check(src); err == nil {
			t.Errorf("default policy accepted %q", src)
		}
	}
}

// TestPolicyCheckDenyOverlap pins the three ways a source may overlap a
// denied path, all refused.
func TestPolicyCheckDenyOverlap(t *testing.T) {
	p := Policy{AllowedRoots: []string{"/data"}, Denied: []string{"/data/state"}}
	for src, want := range map[string]string{
		"/data/state":   "is the denied path",
		"/data/state/x": "is inside the denied path",
		"/data":         "contains the denied path",
	} {
		if err := p.Check(src); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check(%q) = %v, want %q", src, err, want)
		}
	}
	if err := p.Check("/data/x"); err != nil {
		t.Error(err)
	}
}

// hostTree builds a fake host "/" in a temp dir (as the managed plugin sees
// the host under /host) and returns its path.
func hostTree(t *testing.T) string {
	t.Helper()
	host := t.TempDir()
	mustMkdir(t, filepath.Join(host, "home/u/proj/sub"))
	mustWrite(t, filepath.Join(host, "home/u/proj/file"), "f")
	mustWrite(t, filepath.Join(host, "home/u/afile"), "")
	mustMkdir(t, filepath.Join(host, "etc"))
	mustWrite(t, filepath.Join(host, "etc/shadow"), "secret")
	mustSymlink(t, "proj", filepath.Join(host, "home/u/link"))
	mustSymlink(t, "/etc", filepath.Join(host, "home/u/etc"))
	mustSymlink(t, "../../etc", filepath.Join(host, "home/u/up"))
	mustSymlink(t, "/", filepath.Join(host, "home/root"))
	return host
}

func TestOpenSource(t *testing.T) {
	host := hostTree(t)
	p := Policy{AllowedRoots: []string{"/home"}, Denied: []string{"/home/state"}}

	r, err := p.OpenSource(host, "/home/u/proj")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Path() != "/home/u/proj" {
		t.Errorf("Path %q, want the host's name for it", r.Path())
	}
	st, err := r.Lstat("file")
	if err != nil || st.Size != 1 {
		t.Errorf("Lstat through the source: %v", err)
	}
	var want unix.Stat_t
	mustNil(t, unix.Stat(filepath.Join(host, "home/u/proj"), &want))
	if st, _ := r.Lstat(""); st.Ino != want.Ino {
		t.Error("opened the wrong directory")
	}

	for _, c := range []struct {
		source string
		want   []string
		errno  unix.Errno
		escape bool
	}{
		{"/home/u/link", []string{`source "/home/u/link"`, `"/home/u/link" is a symlink (to "proj")`, "real path"}, unix.ELOOP, true},
		{"/home/u/link/sub", []string{`"/home/u/link" is a symlink`}, unix.ELOOP, true},
		{"/home/u/etc", []string{`"/home/u/etc" is a symlink (to "/etc")`}, unix.ELOOP, true},
		{"/home/u/up", []string{"is a symlink"}, unix.ELOOP, true},
		{"/home/root/etc", []string{`"/home/root" is a symlink`}, unix.ELOOP, true},
		{"/home/u/missing", []string{`source "/home/u/missing" does not exist`}, unix.ENOENT, false},
		{"/home/u/afile", []string{"is not a directory"}, unix.ENOTDIR, false},
		{"/home/u/afile/x", []string{"is not a directory"}, unix.ENOTDIR, false},
	} {
		r, err := p.OpenSource(host, c.source)
		if err == nil {
			r.Close()
			t.Errorf("OpenSource(%q) succeeded", c.source)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("OpenSource(%q) = %q, want it to contain %q", c.source, err, w)
			}
		}
		if !errors.Is(err, c.errno) || errors.Is(err, ErrEscape) != c.escape {
			t.Errorf("OpenSource(%q) = %v: want errno %v, escape %v", c.source, err, c.errno, c.escape)
		}
	}

	// Policy refusals come first, before anything is opened.
	for _, src := range []string{"/etc", "/home/u/../../etc", "home/u", "/home/state"} {
		if r, err := p.OpenSource(host, src); err == nil {
			r.Close()
			t.Errorf("OpenSource(%q) succeeded", src)
		} else if err.Error() != p.Check(src).Error() {
			t.Errorf("OpenSource(%q) = %v, want the Check error", src, err)
		}
	}
	if _, err := p.OpenSource(filepath.Join(host, "nonexistent"), "/home/u/proj"); err == nil {
		t.Error("opened beneath a missing host prefix")
	}
}

// With no host prefix the source is opened from the real "/".
func TestOpenSourceNoPrefix(t *testing.T) {
	dir := t.TempDir()
	// t.TempDir may sit beneath a symlink (TMPDIR): use the real path, as a
	// user would have to.
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "f"), "x")
	p := Policy{AllowedRoots: []string{filepath.Dir(dir)}}
	for _, prefix := range []string{"", "/"} {
		r, err := p.OpenSource(prefix, dir)
		if err != nil {
			t.Fatalf("prefix %q: %v", prefix, err)
		}
		if r.Path() != dir {
			t.Errorf("Path %q", r.Path())
		}
		if _, err := r.Lstat("f"); err != nil {
			t.Error(err)
		}
		r.Close()
	}
	mustSymlink(t, dir, filepath.Join(filepath.Dir(dir), filepath.Base(dir)+"-link"))
	t.Cleanup(func() { os.Remove(dir + "-link") })
	if r, err := p.OpenSource("", dir+"-link"); err == nil {
		r.Close()
		t.Error("opened a symlinked source")
	}
}
