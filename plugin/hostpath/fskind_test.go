package hostpath

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// mountType finds a mount's type by its device, as the FUSE case of
// ServedByProcess needs (virtiofs or a FUSE file system run by a process).
func TestMountTypeOfADevice(t *testing.T) {
	var st unix.Stat_t
	if err := unix.Stat("/proc", &st); err != nil {
		t.Fatal(err)
	}
	kind, err := mountType(unix.Major(st.Dev), unix.Minor(st.Dev))
	if err != nil || kind != "proc" {
		t.Fatalf("mount type of /proc: %q, %v; want proc", kind, err)
	}
	if _, err := mountType(4095, 1048575); err == nil {
		t.Fatal("a device no mount has: no error")
	}
}

// On a file system that sets attributes by path (ServedByProcess: sshfs, where
// the server's chown and utimes follow a final symlink), Lchown and Utimes
// go through a descriptor of the entry and refuse a symlink, so its target
// is never touched. A local folder stands in for the share here; over a
// real one, TestHostile_ASymlinksOwnerAndTimesNeverReachItsTargetOverAShare
// (plugin/frontend).
func TestAttrsByPathRefuseASymlinkAndSetAFile(t *testing.T) {
	dir := t.TempDir()
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.kind.once.Do(func() { r.kind.byProcess = true })
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("f", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	mtime := unix.NsecToTimespec(1e18)
	if err := r.Lchown("l", 1234, 1234); !errors.Is(err, ErrSymlinkAttrs) || !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("lchown of a symlink: %v, want ErrSymlinkAttrs (EOPNOTSUPP)", err)
	}
	if err := r.Utimes("l", nil, &mtime); !errors.Is(err, ErrSymlinkAttrs) {
		t.Fatalf("utimes of a symlink: %v, want ErrSymlinkAttrs", err)
	}
	if err := r.Lchown("f", 1234, 1235); err != nil {
		t.Fatalf("lchown of a file: %v", err)
	}
	if err := r.Utimes("f", nil, &mtime); err != nil {
		t.Fatalf("utimes of a file: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, "f"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 1234 || st.Gid != 1235 || st.Mtim != mtime {
		t.Fatalf("the file after lchown and utimes: %d:%d, mtime %v; want 1234:1235, %v", st.Uid, st.Gid, st.Mtim, mtime)
	}
	if r.Lchown("../x", 0, 0) == nil || !errors.Is(r.Utimes("../x", nil, &mtime), ErrEscape) {
		t.Fatal("a path out of the root: no escape error")
	}
}
