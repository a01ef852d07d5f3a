package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/internal/testenv"
)

// A Put takes the host parent directory to be there and looks at it only
// when the Put fails for want of it. A parent the host removed since an
// earlier writeback is written back again, with the file (rule D4: the host
// gets the container's tree).
func TestD4_PutWritesBackAParentTheHostRemoved(t *testing.T) {
	s := openTestStore(t, consistency.Delegated, func(string) {})
	ctx := context.Background()
	if err := s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	me := Owner{Uid: os.Getuid(), Gid: os.Getgid()}
	for _, d := range []string{"d", "d/e"} {
		if err := s.Mkdir(ctx, d, 0o755, me); err != nil {
			t.Fatal(err)
		}
	}
	writeAsContainer(t, s, "d/e/f", "first")
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	host := s.Host().Path()
	if err := os.RemoveAll(filepath.Join(host, "d")); err != nil {
		t.Fatal(err)
	}
	writeAsContainer(t, s, "d/e/f", "second")
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("flush after the host removed the file's directories: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(host, "d/e/f")); err != nil || string(b) != "second" {
		t.Fatalf("host d/e/f = %q (%v), want %q", b, err, "second")
	}
}

// hostChown looks before it changes: an owner the host entry has already is
// not set again (a chown is a round trip on a share, two on sshfs), and one
// it has not is. The host's ctime tells whether a chown ran: any chown sets
// it, even to the owner the file has.
func TestHostChownLeavesAnOwnerThatIsRight(t *testing.T) {
	s := openTestStore(t, consistency.Cached, func(h string) {
		os.WriteFile(filepath.Join(h, "f"), []byte("x"), 0o644)
	})
	host := filepath.Join(s.Host().Path(), "f")
	before := lstatAfterTick(t, host)
	s.hostChown("f", Owner{Uid: os.Getuid(), Gid: os.Getgid()}, nil)
	if after := lstat(t, host); after.Ctim != before.Ctim {
		t.Fatalf("chown to the owner the host file has ran (ctime %v -> %v)", before.Ctim, after.Ctim)
	}
	testenv.RequireRoot(t, "changing a file's owner")
	s.hostChown("f", Owner{Uid: 4242, Gid: 4343}, nil)
	if st := lstat(t, host); st.Uid != 4242 || st.Gid != 4343 {
		t.Fatalf("host owner %d:%d, want 4242:4343", st.Uid, st.Gid)
	}
}

// lstat is unix.Lstat of path, failing t on an error.
func lstat(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// lstatAfterTick is lstat of path, then a wait past the coarse clock's next
// tick: a change to path after it returns shows in its ctime.
func lstatAfterTick(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	st := lstat(t, path)
	time.Sleep(20 * time.Millisecond)
	return st
}

// putAttrs sets only the owner, mode and times the host entry does not have
// already (each set is a round trip on a share): given what the host has,
// it changes nothing there (the host's ctime stays), and a mode that
// differs is set.
func TestPutAttrsSetsOnlyWhatDiffers(t *testing.T) {
	s := openTestStore(t, consistency.Delegated, func(h string) {
		os.Mkdir(filepath.Join(h, "d"), 0o755)
	})
	host := filepath.Join(s.Host().Path(), "d")
	have := lstatAfterTick(t, host)
	want := have
	if err := s.putAttrs("d", &want, &have); err != nil {
		t.Fatal(err)
	}
	if now := lstat(t, host); now.Ctim != have.Ctim {
		t.Fatalf("attributes the host directory had were set again (ctime %v -> %v)", have.Ctim, now.Ctim)
	}
	want.Mode = want.Mode&^07777 | 0o700
	if err := s.putAttrs("d", &want, &have); err != nil {
		t.Fatal(err)
	}
	if now := lstat(t, host); now.Mode&07777 != 0o700 {
		t.Fatalf("host mode %o, want 700", now.Mode&07777)
	}
}

// rule D4: the writeback copies the xattrs a container set, and reports the
// first the host refuses after trying the others; it leaves out the store's
// bookkeeping and the label a security module gives every store file (the
// store directory's SELinux or Smack label, not the container's choice).
func TestD4_WritebackCopiesTheContainersXattrsOnly(t *testing.T) {
	names := []byte("user.a\x00security.selinux\x00" + XattrPrefix + "base\x00security.SMACK64\x00user.refused\x00trusted.b\x00" +
		"system.posix_acl_access\x00security.capability\x00")
	var set []string
	err := copyXattrs(names, notWrittenBack,
		func(name string, buf []byte) (int, error) { return copy(buf, name), nil },
		func(name string, val []byte) error {
			if string(val) != name {
				t.Errorf("set %s to %q; want the value get gave", name, val)
			}
			if name == "user.refused" {
				return unix.ENOSPC
			}
			set = append(set, name)
			return nil
		})
	if !errors.Is(err, unix.ENOSPC) || !strings.Contains(err.Error(), "user.refused") {
		t.Errorf("copy with user.refused refused by the host: %v; want ENOSPC naming user.refused", err)
	}
	if want := []string{"user.a", "trusted.b", "system.posix_acl_access", "security.capability"}; !slices.Equal(set, want) {
		t.Errorf("xattrs copied to the host: %q; want %q", set, want)
	}
}

// rule D4, through a writeback: a file the container wrote, whose store copy
// carries a security module's label (set here as SELinux would at its
// creation in the store) beside an xattr the container set, reaches the
// host with the container's xattr and without the store's label.
func TestD4_TheStoresLabelIsNotWrittenBack(t *testing.T) {
	s := openTestStore(t, consistency.Delegated, func(string) {})
	writeAsContainer(t, s, "f", "content")
	local := filepath.Join(s.Local().Path(), "f")
	if err := unix.Setxattr(local, "security.selinux", []byte("system_u:object_r:store_t:s0"), 0); err != nil {
		t.Skipf("cannot label the store file (a security module checks labels here): %v", err)
	}
	if err := s.Setxattr(context.Background(), "f", "user.a", []byte("mine"), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(s.Host().Path(), "f")
	buf := make([]byte, 64)
	if n, err := unix.Getxattr(host, "user.a", buf); err != nil || string(buf[:n]) != "mine" {
		t.Fatalf("host f's user.a: %q, %v; want %q", buf[:max(n, 0)], err, "mine")
	}
	if n, err := unix.Getxattr(host, "security.selinux", buf); !errors.Is(err, unix.ENODATA) {
		t.Fatalf("host f has security.selinux = %q (%v) after the writeback: the store's label, written back", buf[:max(n, 0)], err)
	}
}
