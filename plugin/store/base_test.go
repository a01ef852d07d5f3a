package store

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/writeback"
)

// A base reads back as it was written, in at most 20 bytes (what fits
// beside a stub mark in an ext4 inode), and a base in the text form of
// stores and journals written before still reads.
func TestBaseRoundTripsAndReadsTheTextFormBefore(t *testing.T) {
	for _, b := range []Base{
		{Mode: unix.S_IFREG | 0o644, Size: 5000, Mtime: time.Date(2026, 11, 27, 12, 0, 0, 123456789, time.UTC).UnixNano()},
		{Mode: unix.S_IFREG | unix.S_ISUID | 0o755, Size: 1 << 40, Mtime: 1},
		{Mode: unix.S_IFDIR | unix.S_ISGID | unix.S_ISVTX | 0o777, Size: 4096, Mtime: -1_000_000_000}, // before 1970
		{Mode: unix.S_IFLNK | 0o777, Size: 7, Mtime: 0},
	} {
		p := b.encode()
		if len(p) > 20 {
			t.Errorf("%v is %d bytes encoded, more than the 20 that fit in an ext4 inode beside the stub mark", b, len(p))
		}
		if got, ok := decodeBase(p); !ok || got != b {
			t.Errorf("%v encoded and decoded is %v (ok %v)", b, got, ok)
		}
	}
	if got, ok := decodeBase([]byte("v1 100644 12 345")); !ok || got != (Base{Mode: 0o100644, Size: 12, Mtime: 345}) {
		t.Errorf("the text form of a base written before reads as %v (ok %v)", got, ok)
	}
	for _, bad := range []string{"", "v2 100644 12 345", "v1 100644 12", "\x02short", "\x03" + strings.Repeat("x", baseLen-1)} {
		if got, ok := decodeBase([]byte(bad)); ok {
			t.Errorf("%q read as base %v", bad, got)
		}
	}
}

// A store file made by a populate (a stub with its base) and a populated
// directory keep their xattrs in the inode on ext4: no xattr block each.
// With the text base they took 4 KiB of disk each (st_blocks 8 more), 400
// MB for a 100k-file source, and a block allocation per entry listed.
func TestAStubAndAPopulatedDirectoryTakeNoXattrBlock(t *testing.T) {
	r := newStoreRig(t, consistency.Cached, writeback.Options{}, func(h string) {
		if err := os.MkdirAll(filepath.Join(h, "d", "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(h, "d", "f"), make([]byte, 5000), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	tree := filepath.Join(r.base, "tree")
	requireInodeXattrs(t, tree)
	for _, dir := range []string{"", "d", "d/sub"} {
		if err := r.s.EnsurePopulated(dir); err != nil {
			t.Fatal(err)
		}
	}
	if !r.s.IsStub("d/f") {
		t.Fatal("d/f is not a stub after the populate")
	}
	bare := filepath.Join(r.base, "bare")
	if err := os.Mkdir(bare, 0o755); err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]int64{"d/f": 0, "d/sub": lstat(t, bare).Blocks} {
		if got := lstat(t, filepath.Join(tree, rel)).Blocks; got != want {
			t.Errorf("store %s takes %d blocks of 512 bytes, want %d: its xattrs took a block of their own", rel, got, want)
		}
	}
}

// requireInodeXattrs skips t unless dir is on ext4 and a file there keeps a
// small xattr in its inode (inodes of 256 bytes or more): elsewhere xattrs
// go where the file system puts them.
func requireInodeXattrs(t *testing.T, dir string) {
	t.Helper()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type != unix.EXT4_SUPER_MAGIC {
		t.Skipf("the store is on a file system of type %#x, not ext4", fs.Type)
	}
	probe := filepath.Join(dir, "probe")
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(probe)
	if err := unix.Setxattr(probe, "user.probe", []byte("x"), 0); errors.Is(err, unix.EOPNOTSUPP) {
		t.Skip("no user xattrs here")
	} else if err != nil {
		t.Fatal(err)
	}
	if lstat(t, probe).Blocks != 0 {
		t.Skip("this ext4 keeps no xattr in the inode (128-byte inodes)")
	}
}

// A store records its format; one written before formats were recorded
// (bases as text) is opened and given this plugin's; one of a newer format
// than this plugin's (a downgrade) is refused with what to do, and is left
// as it was, its journal included.
func TestAStoreOfANewerFormatIsRefused(t *testing.T) {
	r := newStoreRig(t, consistency.Delegated, writeback.Options{Delay: time.Hour}, func(h string) {})
	tree := filepath.Join(r.base, "tree")
	format := func() string {
		t.Helper()
		b := make([]byte, 16)
		n, err := unix.Getxattr(tree, xattrFormat, b)
		if err != nil {
			t.Fatalf("the store's format: %v", err)
		}
		return string(b[:n])
	}
	if got := format(); got != strconv.Itoa(storeFormat) {
		t.Fatalf("a new store records format %q, want %d", got, storeFormat)
	}
	r.restart(t, func() {
		if err := unix.Removexattr(tree, xattrFormat); err != nil { // as a store from before
			t.Fatal(err)
		}
	})
	if got := format(); got != strconv.Itoa(storeFormat) {
		t.Fatalf("a store from before formats were recorded was given %q, want %d", got, storeFormat)
	}
	if err := r.s.Close(); err != nil {
		t.Fatal(err)
	}
	r.s = nil
	newer := strconv.Itoa(storeFormat + 1)
	if err := unix.Setxattr(tree, xattrFormat, []byte(newer), 0); err != nil {
		t.Fatal(err)
	}
	journal, err := os.ReadFile(filepath.Join(r.base, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(Config{Host: r.root, Tree: tree, Journal: filepath.Join(r.base, "journal"), State: consistency.Delegated})
	if err == nil || !strings.Contains(err.Error(), "newer bindstate") || !strings.Contains(err.Error(), "formats 1 to "+strconv.Itoa(storeFormat)) {
		t.Fatalf("opening a store of format %s: %v; want a refusal naming the formats this plugin reads", newer, err)
	}
	if got := format(); got != newer {
		t.Errorf("the refused store's format is %q now, want %s left alone", got, newer)
	}
	if after, _ := os.ReadFile(filepath.Join(r.base, "journal")); string(after) != string(journal) {
		t.Error("the refused store's journal changed")
	}
}
