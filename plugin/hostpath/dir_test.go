package hostpath

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestDirMakesEntriesInOneDirectory(t *testing.T) {
	f := newFixture(t)
	mustMkdir(t, f.p("d"))
	d, err := f.r.OpenDir("d")
	mustNil(t, err)
	defer d.Close()
	if d.Rel() != "d" {
		t.Errorf("Rel = %q", d.Rel())
	}

	fd, err := d.Create("file", 0o600)
	mustNil(t, err)
	if _, err := unix.Write(fd, []byte("x")); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if b, _ := os.ReadFile(f.p("d/file")); string(b) != "x" {
		t.Errorf("d/file = %q", b)
	}
	_, err = d.Create("file", 0o600)
	wantErrno(t, err, unix.EEXIST, f.p("d/file"))

	fd, err = d.Mkdir("sub", 0o700)
	mustNil(t, err)
	mustNil(t, unix.Fchmod(fd, 0o755))
	unix.Close(fd)
	if st, err := os.Stat(f.p("d/sub")); err != nil || !st.IsDir() || st.Mode().Perm() != 0o755 {
		t.Errorf("d/sub: %v %v", st, err)
	}
	_, err = d.Mkdir("sub", 0o700)
	wantErrno(t, err, unix.EEXIST, f.p("d/sub"))

	mustNil(t, d.Sync())
	mustNil(t, d.Setxattr("user.test", []byte("1"), 0))
	if n, err := unix.Getxattr(f.p("d"), "user.test", make([]byte, 8)); err != nil || n != 1 {
		t.Errorf("xattr on d: %d %v", n, err)
	}

	mustNil(t, d.Remove("file"))
	mustNil(t, d.Remove("sub"))
	if ents, _ := os.ReadDir(f.p("d")); len(ents) != 0 {
		t.Errorf("d not empty: %v", ents)
	}
}

// A Dir never follows a symlink: not to the directory, not as an entry,
// and a name with more than one component is refused.
func TestDirNeverFollowsASymlink(t *testing.T) {
	f := newFixture(t)
	mustMkdir(t, f.p("d"))
	if err := os.Symlink(f.outside, f.p("link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.victim, f.p("d/tofile")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.outside, f.p("d/todir")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.OpenDir("link"); err == nil {
		t.Fatal("OpenDir went through a symlink")
	}
	d, err := f.r.OpenDir("d")
	mustNil(t, err)
	defer d.Close()
	if _, err := d.Create("tofile", 0o600); !errors.Is(err, unix.EEXIST) {
		t.Errorf("Create over a symlink: %v, want EEXIST", err)
	}
	if _, err := d.Mkdir("todir", 0o700); !errors.Is(err, unix.EEXIST) {
		t.Errorf("Mkdir over a symlink: %v, want EEXIST", err)
	}
	for _, name := range []string{"", ".", "..", "todir/x", "../outside/new", "a\x00b"} {
		if _, err := d.Create(name, 0o600); !errors.Is(err, ErrEscape) {
			t.Errorf("Create(%q): %v, want ErrEscape", name, err)
		}
		if _, err := d.Mkdir(name, 0o700); !errors.Is(err, ErrEscape) {
			t.Errorf("Mkdir(%q): %v, want ErrEscape", name, err)
		}
		if err := d.Remove(name); !errors.Is(err, ErrEscape) {
			t.Errorf("Remove(%q): %v, want ErrEscape", name, err)
		}
	}
	f.assertOutsideIntact(t)
}
