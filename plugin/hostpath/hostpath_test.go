package hostpath

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/internal/testenv"
)

// fixture is a Root at base/root with a sibling base/outside holding a
// victim file that no operation through the Root may ever touch.
type fixture struct {
	base, dir, outside, victim string
	r                          *Root
}

// keptParents, when above 0, makes newFixture's Root keep that many parent
// directories open (TestKeptParentsKeepEveryGuarantee runs tests so).
var keptParents int

func newFixture(t *testing.T) *fixture {
	t.Helper()
	base := t.TempDir()
	f := &fixture{base: base, dir: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	f.victim = filepath.Join(f.outside, "victim")
	mustMkdir(t, f.dir)
	mustMkdir(t, f.outside)
	mustWrite(t, f.victim, "precious")
	if err := os.Chmod(f.victim, 0o640); err != nil {
		t.Fatal(err)
	}
	r, err := Open(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	r.KeepParents(keptParents)
	t.Cleanup(func() { r.Close() })
	f.r = r
	return f
}

// p is the host path of rel beneath the root.
func (f *fixture) p(rel string) string { return filepath.Join(f.dir, rel) }

// assertOutsideIntact fails if anything beneath base/outside changed.
func (f *fixture) assertOutsideIntact(t *testing.T) {
	t.Helper()
	ents, err := os.ReadDir(f.outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "victim" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("outside was modified: it holds %q", names)
	}
	var st unix.Stat_t
	if err := unix.Lstat(f.victim, &st); err != nil {
		t.Fatalf("victim: %v", err)
	}
	if st.Mode != unix.S_IFREG|0o640 || st.Uid != uint32(os.Getuid()) || st.Nlink != 1 {
		t.Errorf("victim attributes changed: mode %o uid %d nlink %d", st.Mode, st.Uid, st.Nlink)
	}
	if b, err := os.ReadFile(f.victim); err != nil || string(b) != "precious" {
		t.Errorf("victim content changed: %q %v", b, err)
	}
	if n, _ := unix.Llistxattr(f.victim, make([]byte, 1024)); n > 0 {
		t.Errorf("victim got xattrs")
	}
}

func mustMkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantErrno checks err matches errno and is a path error naming wantPath
// (when not empty).
func wantErrno(t *testing.T, err error, errno unix.Errno, wantPath string) {
	t.Helper()
	if !errors.Is(err, errno) {
		t.Fatalf("got %v, want %v", err, errno)
	}
	if wantPath == "" {
		return
	}
	var pe *os.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		if pe.Path != wantPath {
			t.Errorf("error path %q, want %q", pe.Path, wantPath)
		}
	case errors.As(err, &le):
		if le.Old != wantPath && le.New != wantPath {
			t.Errorf("error paths %q, %q; want %q", le.Old, le.New, wantPath)
		}
	default:
		t.Errorf("%T is neither *os.PathError nor *os.LinkError", err)
	}
}

func TestOpen(t *testing.T) {
	base := t.TempDir()
	mustMkdir(t, filepath.Join(base, "d"))
	mustWrite(t, filepath.Join(base, "f"), "")
	mustSymlink(t, "d", filepath.Join(base, "l"))

	r, err := Open(filepath.Join(base, "d") + "/")
	if err != nil {
		t.Fatal(err)
	}
	if r.Path() != filepath.Join(base, "d") {
		t.Errorf("Path %q", r.Path())
	}
	if r.Fd() < 0 {
		t.Error("Fd < 0 on an open root")
	}
	mustNil(t, r.Close())
	if r.Fd() != -1 {
		t.Error("Fd still set after Close")
	}
	mustNil(t, r.Close())

	for _, bad := range []string{"rel/dir", filepath.Join(base, "l"), filepath.Join(base, "f"), filepath.Join(base, "missing")} {
		if r, err := Open(bad); err == nil {
			r.Close()
			t.Errorf("Open(%q) succeeded", bad)
		}
	}
}

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"": "", ".": "", "./": "", "a": "a", "a/b": "a/b", "./a": "a", "a/": "a",
		"a//b": "a/b", "a/./b": "a/b", "a/b/.": "a/b", ".//a//.//b//": "a/b",
		"...": "...", "..a": "..a", "a..": "a..", "a/..b": "a/..b", `a\..\b`: `a\..\b`,
		"new\nline": "new\nline", "\xff\xfe": "\xff\xfe",
	} {
		got, err := Clean(in)
		if err != nil || got != want {
			t.Errorf("Clean(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"/", "/a", "//a", "..", "../a", "a/..", "a/../b", "./..", "a/b/../../..", "a\x00b", "\x00"} {
		got, err := Clean(in)
		if !errors.Is(err, ErrEscape) {
			t.Errorf("Clean(%q) = %q, %v; want ErrEscape", in, got, err)
			continue
		}
		var pe *os.PathError
		if !errors.As(err, &pe) || pe.Path != in {
			t.Errorf("Clean(%q): error %#v does not name the path", in, err)
		}
	}
}

func TestLstat(t *testing.T) {
	f := newFixture(t)
	mustMkdir(t, f.p("d"))
	mustWrite(t, f.p("d/file"), "12345")
	mustSymlink(t, "/etc/passwd", f.p("d/link"))

	st, err := f.r.Lstat("d/file")
	mustNil(t, err)
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != 5 {
		t.Errorf("d/file: mode %o size %d", st.Mode, st.Size)
	}
	st, err = f.r.Lstat("d/link")
	mustNil(t, err)
	if st.Mode&unix.S_IFMT != unix.S_IFLNK || st.Size != int64(len("/etc/passwd")) {
		t.Errorf("d/link followed: mode %o", st.Mode)
	}
	for _, rel := range []string{"", ".", "./"} {
		st, err = f.r.Lstat(rel)
		mustNil(t, err)
		var want unix.Stat_t
		mustNil(t, unix.Stat(f.dir, &want))
		if st.Ino != want.Ino || st.Dev != want.Dev {
			t.Errorf("Lstat(%q) is not the root", rel)
		}
	}
	_, err = f.r.Lstat("d/missing")
	wantErrno(t, err, unix.ENOENT, f.p("d/missing"))
	_, err = f.r.Lstat("missing")
	wantErrno(t, err, unix.ENOENT, f.p("missing"))
	_, err = f.r.Lstat("d/file/x")
	wantErrno(t, err, unix.ENOTDIR, f.p("d/file/x"))
	if !strings.Contains(err.Error(), "lstat") {
		t.Errorf("error %q does not name the op", err)
	}
}

func TestOpenFile(t *testing.T) {
	f := newFixture(t)
	mustMkdir(t, f.p("d"))
	fl, err := f.r.OpenFile("d/new", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o600)
	mustNil(t, err)
	if fl.Name() != f.p("d/new") {
		t.Errorf("file name %q", fl.Name())
	}
	if _, err := fl.WriteString("hello"); err != nil {
		t.Fatal(err)
	}
	mustNil(t, fl.Close())
	if b, _ := os.ReadFile(f.p("d/new")); string(b) != "hello" {
		t.Errorf("content %q", b)
	}
	_, err = f.r.OpenFile("d/new", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o600)
	wantErrno(t, err, unix.EEXIST, f.p("d/new"))

	// A plain open is blocking again (O_NONBLOCK is only used for the check)
	// and close-on-exec.
	fl, err = f.r.OpenFile("d/new", unix.O_RDONLY, 0)
	mustNil(t, err)
	fl2, err := f.r.OpenFile("d/new", unix.O_RDWR|unix.O_NONBLOCK, 0)
	mustNil(t, err)
	for _, c := range []struct {
		f      *os.File
		wantNB bool
	}{{fl, false}, {fl2, true}} {
		fd := c.f.Fd()
		fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		mustNil(t, err)
		if nb := fl&unix.O_NONBLOCK != 0; nb != c.wantNB {
			t.Errorf("O_NONBLOCK %v, want %v", nb, c.wantNB)
		}
		fdfl, err := unix.FcntlInt(fd, unix.F_GETFD, 0)
		mustNil(t, err)
		if fdfl&unix.FD_CLOEXEC == 0 {
			t.Error("not close-on-exec")
		}
	}
	fl.Close()
	fl2.Close()

	// The root itself, and a directory.
	for _, rel := range []string{"", "d"} {
		fl, err = f.r.OpenFile(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		mustNil(t, err)
		fl.Close()
	}

	// What the kernel hands a FUSE server: a create's mode carries the file
	// type, and open flags can carry bits openat ignores (__FMODE_EXEC, 040,
	// when a file is run). Both are taken as openat takes them.
	fl, err = f.r.OpenFile("d/made", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, unix.S_IFREG|0o640)
	mustNil(t, err)
	fl.Close()
	if st, err := os.Stat(f.p("d/made")); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("created with mode S_IFREG|0640: %v, %v", st, err)
	}
	const fmodeExec = 0o40
	fl, err = f.r.OpenFile("d/made", unix.O_RDONLY|fmodeExec, 0)
	mustNil(t, err)
	fl.Close()

	// A final symlink is never followed.
	mustSymlink(t, f.victim, f.p("d/link"))
	_, err = f.r.OpenFile("d/link", unix.O_RDWR|unix.O_TRUNC, 0)
	wantErrno(t, err, unix.ELOOP, f.p("d/link"))
	if errors.Is(err, ErrEscape) {
		t.Error("a final symlink is not an escape")
	}
	_, err = f.r.OpenFile("d/link", unix.O_CREAT|unix.O_WRONLY, 0o644)
	wantErrno(t, err, unix.ELOOP, f.p("d/link"))

	// A FIFO (or device) is refused, without blocking on the FIFO.
	mustNil(t, unix.Mkfifo(f.p("d/fifo"), 0o644))
	done := make(chan error, 1)
	go func() {
		_, err := f.r.OpenFile("d/fifo", unix.O_RDONLY, 0)
		done <- err
	}()
	select {
	case err := <-done:
		wantErrno(t, err, unix.ENXIO, f.p("d/fifo"))
	case <-time.After(5 * time.Second):
		t.Fatal("OpenFile blocked on a FIFO")
	}
	if os.Getuid() == 0 {
		mustNil(t, unix.Mknod(f.p("d/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
		_, err = f.r.OpenFile("d/null", unix.O_RDONLY, 0)
		wantErrno(t, err, unix.ENXIO, f.p("d/null"))
	}
	f.assertOutsideIntact(t)
}

// Every operation refuses "..", absolute paths and NUL bytes before any
// syscall, with ErrEscape in a path error.
func TestEscapesRefused(t *testing.T) {
	f := newFixture(t)
	mustMkdir(t, f.p("d"))
	mustWrite(t, f.p("d/ok"), "ok")
	bad := []string{"..", "../outside/victim", "d/../../outside/victim", "/etc/passwd", f.victim, "d/\x00x", "..\x00"}
	for _, rel := range bad {
		for name, op := range ops(f.r, "d/ok") {
			err := op(rel)
			if !errors.Is(err, ErrEscape) {
				t.Errorf("%s(%q): %v, want ErrEscape", name, rel, err)
				continue
			}
			var pe *os.PathError
			var le *os.LinkError
			if !errors.As(err, &pe) && !errors.As(err, &le) {
				t.Errorf("%s(%q): %T is not a path error", name, rel, err)
			}
		}
	}
	f.assertOutsideIntact(t)
	if b, _ := os.ReadFile(f.p("d/ok")); string(b) != "ok" {
		t.Error("d/ok changed")
	}
}

// ops is every operation of a Root as a function of one rel; two-path
// operations use other as their second path, in both positions.
func ops(r *Root, other string) map[string]func(rel string) error {
	buf := make([]byte, 256)
	return map[string]func(string) error{
		"Lstat":        func(rel string) error { _, err := r.Lstat(rel); return err },
		"ReadDir":      func(rel string) error { _, err := r.ReadDir(rel); return err },
		"ReadDirTypes": func(rel string) error { _, err := r.ReadDirTypes(rel); return err },
		"OpenFile": func(rel string) error {
			f, err := r.OpenFile(rel, unix.O_RDWR|unix.O_CREAT, 0o666)
			if err == nil {
				f.Close()
			}
			return err
		},
		"Mkdir":       func(rel string) error { return r.Mkdir(rel, 0o777) },
		"Mknod":       func(rel string) error { return r.Mknod(rel, unix.S_IFIFO|0o666, 0) },
		"Symlink":     func(rel string) error { return r.Symlink("x", rel) },
		"Readlink":    func(rel string) error { _, err := r.Readlink(rel); return err },
		"LinkOld":     func(rel string) error { return r.Link(rel, other+".link") },
		"LinkNew":     func(rel string) error { return r.Link(other, rel) },
		"RenameOld":   func(rel string) error { return r.Rename(rel, other+".moved", 0) },
		"RenameNew":   func(rel string) error { return r.Rename(other, rel, 0) },
		"Remove":      func(rel string) error { return r.Remove(rel) },
		"RemoveAll":   func(rel string) error { return r.RemoveAll(rel) },
		"Chmod":       func(rel string) error { return r.Chmod(rel, 0o777) },
		"Lchown":      func(rel string) error { return r.Lchown(rel, 4321, 4321) },
		"Utimes":      func(rel string) error { return r.Utimes(rel, &unix.Timespec{}, &unix.Timespec{}) },
		"Truncate":    func(rel string) error { return r.Truncate(rel, 0) },
		"Getxattr":    func(rel string) error { _, err := r.Getxattr(rel, "user.x", buf); return err },
		"Setxattr":    func(rel string) error { return r.Setxattr(rel, "trusted.x", []byte("1"), 0) },
		"Listxattr":   func(rel string) error { _, err := r.Listxattr(rel, buf); return err },
		"Removexattr": func(rel string) error { return r.Removexattr(rel, "user.x") },
	}
}

// A symlink in the middle of a path is never followed, wherever it points:
// to "/", to "..", to an absolute path outside, or even to a directory
// inside the root.
func TestSymlinkInMiddleRefused(t *testing.T) {
	f := newFixture(t)
	mustMkdir(t, f.p("inside"))
	mustWrite(t, f.p("inside/victim"), "precious")
	mustWrite(t, f.p("ok"), "ok")
	mustSymlink(t, "/", f.p("slash"))
	mustSymlink(t, "..", f.p("up"))
	mustSymlink(t, f.outside, f.p("abs"))
	mustSymlink(t, "inside", f.p("rel"))
	mustMkdir(t, f.p("d"))
	mustSymlink(t, "../..", f.p("d/upup"))
	paths := []string{
		"up/outside/victim", "up/outside/new", "abs/victim", "abs/new",
		"slash" + f.victim, "slash" + f.outside + "/new", "rel/victim", "d/upup/outside/victim",
	}
	for _, rel := range paths {
		for name, op := range ops(f.r, "ok") {
			err := op(rel)
			if !errors.Is(err, unix.ELOOP) || !errors.Is(err, ErrEscape) {
				t.Errorf("%s(%q): %v, want ELOOP and ErrEscape", name, rel, err)
			}
		}
	}
	f.assertOutsideIntact(t)
	if b, _ := os.ReadFile(f.p("inside/victim")); string(b) != "precious" {
		t.Error("inside/victim changed through a symlink")
	}
}

// A symlink as the final component is acted on as the link itself.
func TestFinalSymlinkActedOnAsLink(t *testing.T) {
	f := newFixture(t)
	mustSymlink(t, f.victim, f.p("l"))
	mustSymlink(t, f.outside, f.p("dl"))

	st, err := f.r.Lstat("l")
	mustNil(t, err)
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Fatalf("Lstat followed the link: mode %o", st.Mode)
	}
	if target, err := f.r.Readlink("l"); err != nil || target != f.victim {
		t.Errorf("Readlink = %q, %v", target, err)
	}
	_, err = f.r.OpenFile("l", unix.O_RDONLY, 0)
	wantErrno(t, err, unix.ELOOP, f.p("l"))
	wantErrno(t, f.r.Truncate("l", 0), unix.ELOOP, f.p("l"))
	wantErrno(t, f.r.Chmod("l", 0o777), unix.EOPNOTSUPP, f.p("l"))
	// O_DIRECTORY|O_NOFOLLOW on a symlink: the kernel says ENOTDIR.
	_, err = f.r.ReadDir("dl")
	wantErrno(t, err, unix.ENOTDIR, f.p("dl"))
	wantErrno(t, f.r.Mkdir("l", 0o755), unix.EEXIST, f.p("l"))

	// Times and owner change on the link, not on the victim.
	mtime := unix.NsecToTimespec(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	mustNil(t, f.r.Utimes("l", nil, &mtime))
	st, _ = f.r.Lstat("l")
	if st.Mtim != mtime {
		t.Errorf("link mtime %v, want %v", st.Mtim, mtime)
	}
	if os.Getuid() == 0 {
		mustNil(t, f.r.Lchown("l", 4321, 4322))
		st, _ = f.r.Lstat("l")
		if st.Uid != 4321 || st.Gid != 4322 {
			t.Errorf("link owner %d:%d", st.Uid, st.Gid)
		}
		// trusted.* may be set on a link (as root); it lands on the link.
		mustNil(t, f.r.Setxattr("l", "trusted.t", []byte("v"), 0))
		if n, err := unix.Lgetxattr(f.p("l"), "trusted.t", make([]byte, 8)); err != nil || n != 1 {
			t.Errorf("trusted xattr not on the link: %d %v", n, err)
		}
	}
	// The kernel refuses user.* xattrs on symlinks: that error comes back.
	wantErrno(t, f.r.Setxattr("l", "user.x", []byte("v"), 0), unix.EPERM, f.p("l"))
	_, err = f.r.Getxattr("l", "user.x", make([]byte, 8))
	wantErrno(t, err, unix.ENODATA, f.p("l"))

	// Link, Rename, Remove and RemoveAll work on the link itself.
	mustNil(t, f.r.Link("l", "l2"))
	st, _ = f.r.Lstat("l2")
	if st.Mode&unix.S_IFMT != unix.S_IFLNK || st.Nlink != 2 {
		t.Errorf("hard link of a symlink: mode %o nlink %d", st.Mode, st.Nlink)
	}
	mustNil(t, f.r.Rename("l2", "l3", 0))
	mustNil(t, f.r.Remove("l3"))
	mustNil(t, f.r.Rename("l", "moved", unix.RENAME_NOREPLACE))
	mustNil(t, f.r.Remove("moved"))
	mustNil(t, f.r.RemoveAll("dl"))
	if _, err := os.Lstat(f.p("dl")); !os.IsNotExist(err) {
		t.Errorf("dl still there: %v", err)
	}
	f.assertOutsideIntact(t)
}

// listingFixture makes directory sub with entries of every kind and of hard
// names, and returns their names.
func listingFixture(t *testing.T, f *fixture) []string {
	t.Helper()
	long := strings.Repeat("x", 255)
	names := []string{"b", "a", "c.d", "new\nline", "\xff\xfeinvalid", long, ".hidden", "dir", "link", "fifo"}
	mustMkdir(t, f.p("sub"))
	for _, n := range names {
		switch n {
		case "dir":
			mustMkdir(t, f.p("sub/dir"))
		case "link":
			mustSymlink(t, "/", f.p("sub/link"))
		case "fifo":
			mustNil(t, unix.Mkfifo(f.p("sub/fifo"), 0o600))
		default:
			mustWrite(t, f.p("sub/"+n), n)
		}
	}
	return names
}

// lstatListed checks that a listing of the fixture's "sub" (fn) gave its
// names, sorted, and returns an lstat of each listed entry, in the
// listing's order, for the caller to compare with what the listing said.
func lstatListed(t *testing.T, f *fixture, fn string, listed, names []string) []unix.Stat_t {
	t.Helper()
	want := slices.Clone(names)
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Errorf("%s = %q\nwant %q", fn, listed, want)
	}
	sts := make([]unix.Stat_t, len(listed))
	for i, name := range listed {
		mustNil(t, unix.Lstat(f.p("sub/"+name), &sts[i]))
	}
	return sts
}

func TestReadDir(t *testing.T) {
	f := newFixture(t)
	names := listingFixture(t, f)
	ents, err := f.r.ReadDir("sub")
	mustNil(t, err)
	listed := make([]string, len(ents))
	for i, e := range ents {
		listed[i] = e.Name
	}
	for i, want := range lstatListed(t, f, "ReadDir", listed, names) {
		if e := ents[i]; e.Stat.Ino != want.Ino || e.Stat.Mode != want.Mode || e.Stat.Size != want.Size {
			t.Errorf("%q: stat %o/%d, want %o/%d", e.Name, e.Stat.Mode, e.Stat.Size, want.Mode, want.Size)
		}
	}

	// The root, an empty directory, errors.
	ents, err = f.r.ReadDir("")
	mustNil(t, err)
	if len(ents) != 1 || ents[0].Name != "sub" {
		t.Errorf("ReadDir(root) = %v", ents)
	}
	ents, err = f.r.ReadDir("sub/dir")
	if err != nil || len(ents) != 0 {
		t.Errorf("empty dir: %v, %v", ents, err)
	}
	// ReadDirTypes reads the same way (Root.listing).
	for name, list := range map[string]func(string) error{
		"ReadDir":      func(rel string) error { _, err := f.r.ReadDir(rel); return err },
		"ReadDirTypes": func(rel string) error { _, err := f.r.ReadDirTypes(rel); return err },
	} {
		t.Log(name)
		wantErrno(t, list("sub/b"), unix.ENOTDIR, f.p("sub/b"))
		wantErrno(t, list("sub/link"), unix.ENOTDIR, f.p("sub/link")) // never followed
		wantErrno(t, list("missing"), unix.ENOENT, f.p("missing"))
	}

	// A big directory takes more than one getdents buffer.
	mustMkdir(t, f.p("big"))
	for i := range 3000 {
		mustWrite(t, f.p("big/"+strings.Repeat("n", 40)+itoa(i)), "")
	}
	ents, err = f.r.ReadDir("big")
	if err != nil || len(ents) != 3000 {
		t.Errorf("big dir: %d entries, %v", len(ents), err)
	}
	if !slices.IsSortedFunc(ents, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) }) {
		t.Error("big dir not sorted")
	}
}

// ReadDirTypes gives what ReadDir gives of each entry but its lstat: the
// name, the inode number and the type, sorted by name, from getdents alone.
func TestReadDirTypes(t *testing.T) {
	f := newFixture(t)
	names := listingFixture(t, f)
	ents, err := f.r.ReadDirTypes("sub")
	mustNil(t, err)
	listed := make([]string, len(ents))
	for i, e := range ents {
		listed[i] = e.Name
	}
	for i, want := range lstatListed(t, f, "ReadDirTypes", listed, names) {
		if e := ents[i]; e.Ino != want.Ino || e.Type != want.Mode&unix.S_IFMT {
			t.Errorf("%q: ino %d type %o, want %d %o", e.Name, e.Ino, e.Type, want.Ino, want.Mode&unix.S_IFMT)
		}
	}

	ents, err = f.r.ReadDirTypes("sub/dir")
	if err != nil || len(ents) != 0 {
		t.Errorf("empty dir: %v, %v", ents, err)
	}

	// A big directory takes more than one getdents buffer (TestReadDir
	// checks the count and the order).
	mustMkdir(t, f.p("big"))
	for i := range 3000 {
		mustWrite(t, f.p("big/"+itoa(i)), "")
	}
	ents, err = f.r.ReadDirTypes("big")
	if err != nil || len(ents) != 3000 {
		t.Fatalf("big dir: %d entries, %v", len(ents), err)
	}
	for _, e := range ents {
		if e.Type != unix.S_IFREG || e.Ino == 0 {
			t.Fatalf("big dir entry %+v", e)
		}
	}
}

// ReadDirTypes does not lstat an entry getdents typed: seen at a mount
// point, where getdents gives the inode of the directory beneath the mount
// and lstat that of the mounted root.
func TestReadDirTypesDoesNotStatTypedEntries(t *testing.T) {
	testenv.RequireRoot(t, "mounting")
	f := newFixture(t)
	mustMkdir(t, f.p("d"))
	mustMkdir(t, f.p("d/mnt"))
	var beneath unix.Stat_t
	mustNil(t, unix.Lstat(f.p("d/mnt"), &beneath))
	if err := unix.Mount("tmpfs", f.p("d/mnt"), "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("no tmpfs mount here: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(f.p("d/mnt"), unix.MNT_DETACH) })
	var mounted unix.Stat_t
	mustNil(t, unix.Lstat(f.p("d/mnt"), &mounted))
	if mounted.Ino == beneath.Ino {
		t.Skip("the mounted root has the same inode number as the directory beneath")
	}
	ents, err := f.r.ReadDirTypes("d")
	mustNil(t, err)
	if len(ents) != 1 || ents[0].Name != "mnt" || ents[0].Type != unix.S_IFDIR {
		t.Fatalf("ReadDirTypes = %+v", ents)
	}
	if ents[0].Ino != beneath.Ino {
		t.Errorf("inode %d: that of an lstat (%d), not getdents' (%d): the entry was stat'ed", ents[0].Ino, mounted.Ino, beneath.Ino)
	}
}

// An entry a file system lists without a type (DT_UNKNOWN) gets it, and its
// inode number, from an lstat; one gone by then is left out.
func TestReadDirTypesStatsEntriesWithoutAType(t *testing.T) {
	f := newFixture(t)
	mustMkdir(t, f.p("d"))
	mustMkdir(t, f.p("d/sub"))
	mustWrite(t, f.p("d/file"), "x")
	mustSymlink(t, "/", f.p("d/link"))
	fd, err := unix.Open(f.p("d"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	mustNil(t, err)
	defer unix.Close(fd)
	got, failed, err := new(Root).statUntyped(fd, []DirEntry{{Name: "file"}, {Name: "gone"}, {Name: "sub"}, {Name: "link", Ino: 7, Type: unix.S_IFIFO}})
	if err != nil {
		t.Fatalf("statUntyped: %s: %v", failed, err)
	}
	var fileSt, subSt unix.Stat_t
	mustNil(t, unix.Lstat(f.p("d/file"), &fileSt))
	mustNil(t, unix.Lstat(f.p("d/sub"), &subSt))
	want := []DirEntry{{"file", fileSt.Ino, unix.S_IFREG}, {"sub", subSt.Ino, unix.S_IFDIR}, {"link", 7, unix.S_IFIFO}}
	if !slices.Equal(got, want) {
		t.Errorf("statUntyped = %+v\nwant %+v (a typed entry is left as given)", got, want)
	}

	// The records as getdents writes them: "." and ".." left out, and
	// DT_UNKNOWN as no type.
	var buf []byte
	rec := func(ino uint64, typ byte, name string) {
		n := (19 + len(name) + 1 + 7) &^ 7
		r := make([]byte, n)
		binary.NativeEndian.PutUint64(r[0:], ino)
		binary.NativeEndian.PutUint16(r[16:], uint16(n))
		r[18] = typ
		copy(r[19:], name)
		buf = append(buf, r...)
	}
	rec(1, unix.DT_DIR, ".")
	rec(2, unix.DT_DIR, "..")
	rec(3, unix.DT_REG, "f")
	rec(4, unix.DT_UNKNOWN, "u")
	rec(5, unix.DT_LNK, "a-longer-name")
	ents := appendDirents(nil, buf)
	wantEnts := []DirEntry{{"f", 3, unix.S_IFREG}, {"u", 4, 0}, {"a-longer-name", 5, unix.S_IFLNK}}
	if !slices.Equal(ents, wantEnts) {
		t.Errorf("appendDirents = %+v\nwant %+v", ents, wantEnts)
	}
}

func itoa(i int) string {
	return string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
}

func TestHostileNames(t *testing.T) {
	f := newFixture(t)
	for _, n := range []string{"new\nline", "\xff\xfe\xfd", "tab\there", "sp ace", "back\\slash", "-dash", strings.Repeat("y", 255), "dir\n/x"} {
		rel := n
		if strings.Contains(n, "/") {
			mustNil(t, f.r.Mkdir(n[:strings.IndexByte(n, '/')], 0o755))
		}
		fl, err := f.r.OpenFile(rel, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
		if err != nil {
			t.Errorf("create %q: %v", n, err)
			continue
		}
		fl.Close()
		if _, err := os.Lstat(f.p(rel)); err != nil {
			t.Errorf("%q not created where expected: %v", n, err)
		}
		moved := rel[:min(len(rel), 200)] + "\n2"
		mustNil(t, f.r.Rename(rel, moved, 0))
		mustNil(t, f.r.Remove(moved))
	}
	long := strings.Repeat("z", 256)
	wantErrno(t, f.r.Mkdir(long, 0o755), unix.ENAMETOOLONG, f.p(long))
	_, err := f.r.OpenFile(long, unix.O_CREAT|unix.O_WRONLY, 0o644)
	wantErrno(t, err, unix.ENAMETOOLONG, f.p(long))
	wantErrno(t, f.r.Symlink("x", "a/"+long), unix.ENOENT, "")
	f.assertOutsideIntact(t)
}

func TestMkdirMknodSymlinkReadlink(t *testing.T) {
	f := newFixture(t)
	mustNil(t, f.r.Mkdir("d", 0o750))
	mustNil(t, f.r.Mkdir("d/e", 0o700))
	wantErrno(t, f.r.Mkdir("d", 0o750), unix.EEXIST, f.p("d"))
	wantErrno(t, f.r.Mkdir("", 0o750), unix.EEXIST, f.dir)
	wantErrno(t, f.r.Mkdir("x/y", 0o750), unix.ENOENT, f.p("x/y"))
	st, _ := f.r.Lstat("d/e")
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Errorf("d/e mode %o", st.Mode)
	}

	mustNil(t, f.r.Mknod("d/fifo", unix.S_IFIFO|0o640, 0))
	st, _ = f.r.Lstat("d/fifo")
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		t.Errorf("fifo mode %o", st.Mode)
	}
	if os.Getuid() == 0 {
		dev := unix.Mkdev(1, 3)
		mustNil(t, f.r.Mknod("d/null", unix.S_IFCHR|0o600, dev))
		st, _ = f.r.Lstat("d/null")
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != dev {
			t.Errorf("char dev: mode %o rdev %x", st.Mode, st.Rdev)
		}
	}

	// Targets are stored verbatim, however hostile, and read back in full.
	for i, target := range []string{"../../../../etc/shadow", "/", "new\nline", "\xff", strings.Repeat("t/", 700)} {
		rel := "d/l" + itoa(i)
		mustNil(t, f.r.Symlink(target, rel))
		got, err := f.r.Readlink(rel)
		if err != nil || got != target {
			t.Errorf("Readlink(%s) = %q, %v; want %q", rel, got, err, target)
		}
		if got, _ := os.Readlink(f.p(rel)); got != target {
			t.Errorf("on disk %q", got)
		}
	}
	wantErrno(t, f.r.Symlink("x", "d/e"), unix.EEXIST, f.p("d/e"))
	_, err := f.r.Readlink("d/e")
	wantErrno(t, err, unix.EINVAL, f.p("d/e"))
	_, err = f.r.Readlink("")
	wantErrno(t, err, unix.EINVAL, f.dir)
}

func TestLink(t *testing.T) {
	f := newFixture(t)
	mustMkdir(t, f.p("a"))
	mustMkdir(t, f.p("b"))
	mustWrite(t, f.p("a/f"), "x")
	mustNil(t, f.r.Link("a/f", "b/g"))
	st, _ := f.r.Lstat("b/g")
	if st.Nlink != 2 {
		t.Errorf("nlink %d", st.Nlink)
	}
	wantErrno(t, f.r.Link("a/f", "b/g"), unix.EEXIST, f.p("b/g"))
	wantErrno(t, f.r.Link("a/missing", "b/h"), unix.ENOENT, f.p("a/missing"))
	wantErrno(t, f.r.Link("a", "b/dirlink"), unix.EPERM, f.p("a"))
}

func TestRename(t *testing.T) {
	f := newFixture(t)
	mustMkdir(t, f.p("a"))
	mustMkdir(t, f.p("b"))
	mustWrite(t, f.p("a/x"), "x")
	mustWrite(t, f.p("b/y"), "y")

	wantErrno(t, f.r.Rename("a/x", "b/y", unix.RENAME_NOREPLACE), unix.EEXIST, f.p("b/y"))
	mustNil(t, f.r.Rename("a/x", "b/y", unix.RENAME_EXCHANGE))
	if b, _ := os.ReadFile(f.p("a/x")); string(b) != "y" {
		t.Errorf("exchange: a/x = %q", b)
	}
	if b, _ := os.ReadFile(f.p("b/y")); string(b) != "x" {
		t.Errorf("exchange: b/y = %q", b)
	}
	mustNil(t, f.r.Rename("a/x", "b/y", 0))
	if b, _ := os.ReadFile(f.p("b/y")); string(b) != "y" {
		t.Errorf("replace: b/y = %q", b)
	}
	if _, err := os.Lstat(f.p("a/x")); !os.IsNotExist(err) {
		t.Error("a/x still there")
	}
	// within one directory (one open of it serves both names)
	mustWrite(t, f.p("b/z"), "z")
	mustNil(t, f.r.Rename("b/z", "b/w", 0))
	if b, _ := os.ReadFile(f.p("b/w")); string(b) != "z" {
		t.Errorf("rename within b: b/w = %q", b)
	}
	if _, err := os.Lstat(f.p("b/z")); !os.IsNotExist(err) {
		t.Error("b/z still there")
	}
	mustNil(t, f.r.Rename("b/w", "b/w2", unix.RENAME_NOREPLACE))
	mustNil(t, f.r.Rename("b/y", "top", 0))
	mustNil(t, f.r.Rename("b", "a/b", 0))
	wantErrno(t, f.r.Rename("missing", "z", 0), unix.ENOENT, f.p("missing"))
	if err := f.r.Rename("", "z", 0); err == nil {
		t.Error("renamed the root")
	}
}

func TestRemove(t *testing.T) {
	f := newFixture(t)
	mustMkdir(t, f.p("d/e"))
	mustWrite(t, f.p("d/f"), "")
	mustNil(t, f.r.Remove("d/f"))
	wantErrno(t, f.r.Remove("d"), unix.ENOTEMPTY, f.p("d"))
	mustNil(t, f.r.Remove("d/e"))
	mustNil(t, f.r.Remove("d"))
	wantErrno(t, f.r.Remove("d"), unix.ENOENT, f.p("d"))
	wantErrno(t, f.r.Remove(""), unix.EBUSY, f.dir)
	wantErrno(t, f.r.Remove("."), unix.EBUSY, f.dir)
	if _, err := os.Stat(f.dir); err != nil {
		t.Fatal("root removed")
	}
}

func TestRemoveAll(t *testing.T) {
	f := newFixture(t)
	mustMkdir(t, f.p("t/a/b/c"))
	mustWrite(t, f.p("t/a/f"), "")
	mustWrite(t, f.p("t/a/b/c/g"), "")
	mustSymlink(t, f.outside, f.p("t/a/outlink"))
	mustSymlink(t, "/", f.p("t/a/b/slash"))
	mustNil(t, unix.Mkfifo(f.p("t/a/fifo"), 0o600))
	mustMkdir(t, f.p("t/ro/inner"))
	mustWrite(t, f.p("t/ro/inner/x"), "")
	mustNil(t, os.Chmod(f.p("t/ro"), 0o500))
	t.Cleanup(func() { os.Chmod(f.p("t/ro"), 0o755) })
	mustWrite(t, f.p("keep"), "")

	err := f.r.RemoveAll("t")
	if os.Getuid() != 0 {
		// Without root the read-only directory cannot be emptied.
		os.Chmod(f.p("t/ro"), 0o755)
		err = f.r.RemoveAll("t")
	}
	mustNil(t, err)
	if _, err := os.Lstat(f.p("t")); !os.IsNotExist(err) {
		t.Errorf("t still there: %v", err)
	}
	if _, err := os.Lstat(f.p("keep")); err != nil {
		t.Error("keep removed")
	}
	mustNil(t, f.r.RemoveAll("t"))
	mustNil(t, f.r.RemoveAll("missing/deeper/still"))
	mustWrite(t, f.p("file"), "")
	mustNil(t, f.r.RemoveAll("file"))
	if _, err := os.Lstat(f.p("file")); !os.IsNotExist(err) {
		t.Error("file still there")
	}
	for _, rel := range []string{"", ".", "./"} {
		wantErrno(t, f.r.RemoveAll(rel), unix.EBUSY, f.dir)
	}
	if _, err := os.Stat(f.p("keep")); err != nil {
		t.Fatal("root emptied")
	}
	f.assertOutsideIntact(t)
}

func TestRemoveAllDeep(t *testing.T) {
	f := newFixture(t)
	rel := "deep"
	mustNil(t, f.r.Mkdir(rel, 0o755))
	for i := range 200 {
		rel += "/d"
		mustNil(t, f.r.Mkdir(rel, 0o755))
		if i%50 == 0 {
			mustNil(t, f.r.Symlink(f.outside, rel+"/out"))
			fl, err := f.r.OpenFile(rel+"/f", unix.O_CREAT|unix.O_WRONLY, 0o644)
			mustNil(t, err)
			fl.Close()
		}
	}
	if _, err := f.r.Lstat(rel); err != nil {
		t.Fatal(err)
	}
	mustNil(t, f.r.RemoveAll("deep"))
	if _, err := os.Lstat(f.p("deep")); !os.IsNotExist(err) {
		t.Errorf("deep still there: %v", err)
	}
	f.assertOutsideIntact(t)
}

func TestChmodLchownUtimesTruncate(t *testing.T) {
	f := newFixture(t)
	mustMkdir(t, f.p("d"))
	mustWrite(t, f.p("d/f"), "0123456789")

	mustNil(t, f.r.Chmod("d/f", 0o4751))
	st, _ := f.r.Lstat("d/f")
	if st.Mode&07777 != 0o4751 {
		t.Errorf("mode %o", st.Mode&07777)
	}
	mustNil(t, f.r.Chmod("d", 0o700))
	st, _ = f.r.Lstat("d")
	if st.Mode&07777 != 0o700 {
		t.Errorf("dir mode %o", st.Mode&07777)
	}
	mustNil(t, f.r.Chmod("", 0o711))
	st, _ = f.r.Lstat("")
	if st.Mode&07777 != 0o711 {
		t.Errorf("root mode %o", st.Mode&07777)
	}
	wantErrno(t, f.r.Chmod("d/missing", 0o700), unix.ENOENT, f.p("d/missing"))
	// The slow path (kernels without fchmodat2) gives the same answers.
	dfd, err := unix.Open(f.p("d"), unix.O_PATH|unix.O_DIRECTORY, 0)
	mustNil(t, err)
	defer unix.Close(dfd)
	mustNil(t, chmodByFd(dfd, "f", 0o640))
	st, _ = f.r.Lstat("d/f")
	if st.Mode&07777 != 0o640 {
		t.Errorf("chmodByFd: mode %o", st.Mode&07777)
	}
	mustSymlink(t, f.victim, f.p("d/l"))
	if err := chmodByFd(dfd, "l", 0o777); err != unix.EOPNOTSUPP {
		t.Errorf("chmodByFd on a symlink: %v", err)
	}

	if os.Getuid() == 0 {
		mustNil(t, f.r.Lchown("d/f", 1001, -1))
		mustNil(t, f.r.Lchown("d/f", -1, 1002))
		st, _ = f.r.Lstat("d/f")
		if st.Uid != 1001 || st.Gid != 1002 {
			t.Errorf("owner %d:%d", st.Uid, st.Gid)
		}
	}
	wantErrno(t, f.r.Lchown("d/missing", -1, -1), unix.ENOENT, f.p("d/missing"))

	at := unix.Timespec{Sec: 1000, Nsec: 5}
	mt := unix.Timespec{Sec: 2000, Nsec: 7}
	mustNil(t, f.r.Utimes("d/f", &at, &mt))
	st, _ = f.r.Lstat("d/f")
	if st.Atim != at || st.Mtim != mt {
		t.Errorf("times %v %v", st.Atim, st.Mtim)
	}
	mt2 := unix.Timespec{Sec: 3000}
	mustNil(t, f.r.Utimes("d/f", nil, &mt2))
	st, _ = f.r.Lstat("d/f")
	if st.Atim != at || st.Mtim != mt2 {
		t.Errorf("nil atime changed it: %v %v", st.Atim, st.Mtim)
	}
	mustNil(t, f.r.Utimes("d/f", &mt2, nil))
	st, _ = f.r.Lstat("d/f")
	if st.Atim != mt2 || st.Mtim != mt2 {
		t.Errorf("nil mtime changed it: %v %v", st.Atim, st.Mtim)
	}

	mustNil(t, f.r.Truncate("d/f", 3))
	if b, _ := os.ReadFile(f.p("d/f")); string(b) != "012" {
		t.Errorf("truncated to %q", b)
	}
	mustNil(t, f.r.Truncate("d/f", 5))
	if b, _ := os.ReadFile(f.p("d/f")); string(b) != "012\x00\x00" {
		t.Errorf("extended to %q", b)
	}
	wantErrno(t, f.r.Truncate("d", 0), unix.EISDIR, f.p("d"))
	wantErrno(t, f.r.Truncate("d/missing", 0), unix.ENOENT, f.p("d/missing"))
	mustNil(t, unix.Mkfifo(f.p("d/fifo"), 0o600))
	if err := f.r.Truncate("d/fifo", 0); err == nil {
		t.Error("truncated a FIFO")
	}
	f.assertOutsideIntact(t)
}

func TestXattr(t *testing.T) {
	f := newFixture(t)
	mustMkdir(t, f.p("d"))
	mustWrite(t, f.p("d/f"), "")
	for _, rel := range []string{"d/f", "d", "", "top"} {
		if rel == "top" {
			mustWrite(t, f.p("top"), "")
		}
		t.Run("rel="+rel, func(t *testing.T) {
			if err := f.r.Setxattr(rel, "user.a", []byte("value-a"), 0); errors.Is(err, unix.EOPNOTSUPP) {
				t.Skip("no user xattrs here")
			} else {
				mustNil(t, err)
			}
			mustNil(t, f.r.Setxattr(rel, "user.b", nil, 0))
			wantErrno(t, f.r.Setxattr(rel, "user.a", []byte("x"), unix.XATTR_CREATE), unix.EEXIST, f.join(rel))
			wantErrno(t, f.r.Setxattr(rel, "user.c", []byte("x"), unix.XATTR_REPLACE), unix.ENODATA, f.join(rel))

			// The value landed on the entry itself (checked by path).
			buf := make([]byte, 64)
			n, err := unix.Lgetxattr(f.join(rel), "user.a", buf)
			if err != nil || string(buf[:n]) != "value-a" {
				t.Errorf("on disk: %q %v", buf[:max(n, 0)], err)
			}
			n, err = f.r.Getxattr(rel, "user.a", nil)
			if err != nil || n != 7 {
				t.Errorf("size query: %d %v", n, err)
			}
			n, err = f.r.Getxattr(rel, "user.a", buf)
			if err != nil || string(buf[:n]) != "value-a" {
				t.Errorf("Getxattr: %q %v", buf[:max(n, 0)], err)
			}
			_, err = f.r.Getxattr(rel, "user.a", make([]byte, 2))
			wantErrno(t, err, unix.ERANGE, f.join(rel))

			n, err = f.r.Listxattr(rel, buf)
			mustNil(t, err)
			var names []string
			for _, s := range bytes.Split(bytes.TrimSuffix(buf[:n], []byte{0}), []byte{0}) {
				if bytes.HasPrefix(s, []byte("user.")) {
					names = append(names, string(s))
				}
			}
			slices.Sort(names)
			if !slices.Equal(names, []string{"user.a", "user.b"}) {
				t.Errorf("Listxattr = %q", names)
			}
			if n, err := f.r.Listxattr(rel, nil); err != nil || n < len("user.a\x00user.b\x00") {
				t.Errorf("list size query: %d %v", n, err)
			}

			mustNil(t, f.r.Removexattr(rel, "user.a"))
			_, err = f.r.Getxattr(rel, "user.a", buf)
			wantErrno(t, err, unix.ENODATA, f.join(rel))
			wantErrno(t, f.r.Removexattr(rel, "user.a"), unix.ENODATA, f.join(rel))
			mustNil(t, f.r.Removexattr(rel, "user.b"))
		})
	}
	_, err := f.r.Getxattr("d/missing", "user.a", nil)
	wantErrno(t, err, unix.ENOENT, f.p("d/missing"))
	f.assertOutsideIntact(t)
}

func (f *fixture) join(rel string) string { return f.r.join(rel) }

// Errors carry the op and the full host path, and the errno for the kernel.
func TestErrorShape(t *testing.T) {
	f := newFixture(t)
	_, err := f.r.Lstat("a/b")
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Op != "lstat" || pe.Path != f.dir+"/a/b" || pe.Err != unix.ENOENT {
		t.Errorf("got %#v", err)
	}
	err = f.r.Rename("x", "y/z", 0)
	var le *os.LinkError
	if !errors.As(err, &le) || le.Op != "rename" || le.Old != f.dir+"/x" || le.New != f.dir+"/y/z" || !errors.Is(err, unix.ENOENT) {
		t.Errorf("got %#v", err)
	}
	r, err := Open("/")
	mustNil(t, err)
	defer r.Close()
	if _, err := r.Lstat("no/such/thing"); !errors.As(err, &pe) || pe.Path != "/no/such/thing" {
		t.Errorf("root-of-host path: %v", err)
	}
}

// One goroutine keeps swapping a directory for a symlink to outside while
// others create entries beneath it: nothing may ever appear outside.
func TestRaceSwapDirForSymlink(t *testing.T) {
	f := newFixture(t)
	mustMkdir(t, f.p("d"))
	mustSymlink(t, f.outside, f.p("s"))
	mustMkdir(t, f.p("e/d"))
	mustSymlink(t, f.base, f.p("e/s"))

	deadline := time.Now().Add(2 * time.Second)
	stop := make(chan struct{})
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			// Atomically exchange the directory and the symlink, at both
			// levels, so every lookup sees one or the other.
			if err := unix.Renameat2(unix.AT_FDCWD, f.p("d"), unix.AT_FDCWD, f.p("s"), unix.RENAME_EXCHANGE); err != nil {
				t.Error(err)
				return
			}
			if err := unix.Renameat2(unix.AT_FDCWD, f.p("e/d"), unix.AT_FDCWD, f.p("e/s"), unix.RENAME_EXCHANGE); err != nil {
				t.Error(err)
				return
			}
			swaps.Add(1)
		}
	})
	var made, refused atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				name := "w" + itoa(w) + "-" + itoa(i%17576)
				var err error
				switch i % 6 {
				case 0:
					var fl *os.File
					fl, err = f.r.OpenFile("d/"+name, unix.O_CREAT|unix.O_WRONLY|unix.O_TRUNC, 0o644)
					if err == nil {
						fl.Close()
					}
				case 1:
					err = f.r.Mkdir("d/"+name, 0o755)
				case 2:
					err = f.r.Symlink("x", "d/"+name)
				case 3:
					err = f.r.Mknod("e/d/"+name, unix.S_IFIFO|0o600, 0)
				case 4:
					err = f.r.Setxattr("d/victim", "trusted.x", []byte("1"), 0)
				case 5:
					err = f.r.Truncate("e/d/outside/victim", 0)
				}
				switch {
				case err == nil:
					made.Add(1)
				case errors.Is(err, ErrEscape):
					refused.Add(1)
				}
			}
		})
	}
	time.Sleep(time.Until(deadline))
	close(stop)
	wg.Wait()
	t.Logf("%d swaps, %d entries made inside, %d refused as escapes", swaps.Load(), made.Load(), refused.Load())
	if made.Load() == 0 || refused.Load() == 0 || swaps.Load() == 0 {
		t.Error("the race did not happen both ways; the test proves nothing")
	}
	// Put things back the right way round, then check.
	if st, err := os.Lstat(f.p("d")); err == nil && st.Mode()&os.ModeSymlink != 0 {
		mustNil(t, unix.Renameat2(unix.AT_FDCWD, f.p("d"), unix.AT_FDCWD, f.p("s"), unix.RENAME_EXCHANGE))
	}
	f.assertOutsideIntact(t)
	ents, _ := os.ReadDir(f.base)
	for _, e := range ents {
		if e.Name() != "root" && e.Name() != "outside" {
			t.Errorf("created outside the root: %s", filepath.Join(f.base, e.Name()))
		}
	}
}

// The hot path stays cheap: a single-component Lstat costs no more than the
// kernel's copy of the name.
func TestHotPathAllocs(t *testing.T) {
	f := newFixture(t)
	mustMkdir(t, f.p("d"))
	mustWrite(t, f.p("d/f"), "")
	mustWrite(t, f.p("f"), "")
	for _, c := range []struct {
		name string
		max  float64
		fn   func()
	}{
		{"Lstat single", 1, func() { f.r.Lstat("f") }},
		{"Lstat nested", 2, func() { f.r.Lstat("d/f") }},
		{"Utimes single", 1, func() { f.r.Utimes("f", nil, nil) }},
		{"Chmod nested", 2, func() { f.r.Chmod("d/f", 0o644) }},
	} {
		if n := testing.AllocsPerRun(200, c.fn); n > c.max {
			t.Errorf("%s: %v allocations, want at most %v", c.name, n, c.max)
		}
	}
}

func BenchmarkLstat(b *testing.B) {
	dir := b.TempDir()
	os.MkdirAll(filepath.Join(dir, "a/b/c"), 0o755)
	os.WriteFile(filepath.Join(dir, "f"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "a/b/c/f"), nil, 0o644)
	r, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	for _, rel := range []string{"f", "a/b/c/f"} {
		b.Run(rel, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Lstat(rel); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkOpenFile(b *testing.B) {
	dir := b.TempDir()
	os.MkdirAll(filepath.Join(dir, "a/b/c"), 0o755)
	os.WriteFile(filepath.Join(dir, "a/b/c/f"), nil, 0o644)
	r, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	b.ReportAllocs()
	for b.Loop() {
		fl, err := r.OpenFile("a/b/c/f", unix.O_RDONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		fl.Close()
	}
}

// RemoveAll descends only into real directories: if a directory is swapped
// for a symlink between its rmdir and its listing, the walk refuses to enter
// (and the next round unlinks the link). emptyDir is that step.
func TestRemoveAllNeverDescendsSymlink(t *testing.T) {
	f := newFixture(t)
	mustSymlink(t, f.outside, f.p("l"))
	mustWrite(t, f.p("file"), "")
	for _, name := range []string{"l", "file"} {
		openErr, err := emptyDir(f.r.Fd(), name)
		if openErr != unix.ELOOP && openErr != unix.ENOTDIR || err != nil {
			t.Errorf("emptyDir(%q) = %v, %v; want it refused", name, openErr, err)
		}
	}
	mustNil(t, removeAllAt(f.r.Fd(), "l"))
	f.assertOutsideIntact(t)
}
