package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/hostpath"
	"github.com/bindstate/bindstate/plugin/internal/testenv"
	"github.com/bindstate/bindstate/plugin/writeback"
)

// rule C3: a cached writer is served from the host file only where the
// host's file system keeps a failed write with the file (a kernel file
// system). A local folder qualifies; a FUSE file system run by a process
// does not (TestC3_ShareErrorAtCloseFailsTheContainersClose mounts one and
// fails if its writers are served from the host).
func TestC3_WritersFromHostOnKernelFileSystems(t *testing.T) {
	d, err := hostpath.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if ok, why := writersFromHost(d); !ok {
		t.Fatalf("a local folder: not served from the host (%s)", why)
	}
}

// A fetch is the plugin reading the host file, not the container: the host
// keeps the atime the container saw (O_NOATIME). posixtest's FstatDeleted
// saw it move, once in ten runs, when a host-written file's store copy was
// fetched between two stats.
func TestFetchLeavesTheHostsAtime(t *testing.T) {
	old := time.Unix(1_000_000_000, 0)
	r := newStoreRig(t, consistency.Cached, writeback.Options{}, func(h string) {
		p := filepath.Join(h, "f")
		if err := os.WriteFile(p, []byte("content"), 0o644); err != nil {
			t.Fatal(err)
		}
		// An atime before the mtime: relatime moves it at the next read.
		if err := os.Chtimes(p, old, time.Now()); err != nil {
			t.Fatal(err)
		}
	})
	if err := r.s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	if !r.s.IsStub("f") {
		t.Fatal("f is not a stub after the populate: nothing to fetch")
	}
	if err := r.s.EnsureContent("f"); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(r.host, "f"), &st); err != nil {
		t.Fatal(err)
	}
	if got := time.Unix(st.Atim.Unix()); !got.Equal(old) {
		t.Fatalf("host atime after a fetch: %v, want %v (unchanged)", got, old)
	}
}

// rule D4: nothing a container saw succeed is lost. Over a source whose
// file system holds no extended attributes (sshfs; here ramfs) a delegated
// store used to keep a container's xattr, which no writeback could ever put
// on the host (the writeback logged the failure and went on). The store now
// refuses every xattr call as the source does (EOPNOTSUPP) and journals
// nothing; a local folder still takes them.
func TestD4_AnXattrTheSourceCannotHoldIsRefused(t *testing.T) {
	testenv.RequireRoot(t, "mounting ramfs")
	r := newStoreRig(t, consistency.Delegated, writeback.Options{Delay: time.Hour}, func(h string) {
		if err := unix.Mount("ramfs", h, "ramfs", 0, ""); err != nil {
			t.Fatalf("mount ramfs: %v", err)
		}
		t.Cleanup(func() { unix.Unmount(h, unix.MNT_DETACH) })
		if err := os.WriteFile(filepath.Join(h, "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	s, ctx := r.s, context.Background()
	if err := unix.Lsetxattr(filepath.Join(r.host, "f"), "user.a", []byte("v"), 0); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("the source takes an xattr (%v): not the file system this test needs", err)
	}
	if s.HostTakesXattrs() {
		t.Fatal("HostTakesXattrs over ramfs: true")
	}
	if err := s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	if err := s.Setxattr(ctx, "f", "user.a", []byte("v"), 0); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("Setxattr: %v; want EOPNOTSUPP, as the source answers", err)
	}
	if err := s.Removexattr(ctx, "f", "user.a"); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("Removexattr: %v; want EOPNOTSUPP", err)
	}
	if _, err := s.Getxattr("f", "user.a", nil); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("Getxattr: %v; want EOPNOTSUPP", err)
	}
	if _, err := s.Listxattr("f"); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("Listxattr: %v; want EOPNOTSUPP", err)
	}
	if st := s.Stats(); st.WriteBack.Dirty != 0 || !strings.HasPrefix(st.Xattrs, "refused") {
		t.Errorf("after the refused calls: %d paths dirty, xattrs %q; want none dirty, refused", st.WriteBack.Dirty, st.Xattrs)
	}
	if _, err := unix.Lgetxattr(filepath.Join(r.base, "tree", "f"), "user.a", nil); !errors.Is(err, unix.ENODATA) {
		t.Errorf("the store copy's user.a: %v; want none (ENODATA)", err)
	}

	local := openTestStore(t, consistency.Delegated, func(string) {})
	if !local.HostTakesXattrs() || !strings.HasPrefix(local.Stats().Xattrs, "kept") {
		t.Errorf("over a local folder: HostTakesXattrs %v, xattrs %q; want true, kept", local.HostTakesXattrs(), local.Stats().Xattrs)
	}
}
