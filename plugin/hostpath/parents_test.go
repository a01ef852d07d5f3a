package hostpath

import (
	"errors"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Keeping parents open changes how a directory is reached, not what may be
// reached: every test of confinement, symlinks and errors passes as well
// with them kept. TestRaceSwapDirForSymlink even swaps directories behind
// the Root's back, which a Root that keeps parents is not meant for: it
// still never acts outside.
func TestKeptParentsKeepEveryGuarantee(t *testing.T) {
	keptParents = 4
	t.Cleanup(func() { keptParents = 0 })
	for name, test := range map[string]func(*testing.T){
		"Lstat": TestLstat, "OpenFile": TestOpenFile, "EscapesRefused": TestEscapesRefused,
		"SymlinkInMiddleRefused": TestSymlinkInMiddleRefused, "FinalSymlinkActedOnAsLink": TestFinalSymlinkActedOnAsLink,
		"ReadDir": TestReadDir, "HostileNames": TestHostileNames, "MkdirMknodSymlinkReadlink": TestMkdirMknodSymlinkReadlink,
		"Link": TestLink, "Rename": TestRename, "Remove": TestRemove, "RemoveAll": TestRemoveAll,
		"RemoveAllDeep": TestRemoveAllDeep, "ChmodLchownUtimesTruncate": TestChmodLchownUtimesTruncate,
		"Xattr": TestXattr, "RaceSwapDirForSymlink": TestRaceSwapDirForSymlink,
		"DirMakesEntriesInOneDirectory": TestDirMakesEntriesInOneDirectory, "DirNeverFollowsASymlink": TestDirNeverFollowsASymlink,
	} {
		t.Run(name, test)
	}
}

// keptFixture is a fixture whose Root keeps n parents, with a file at
// a/b/f that an Lstat has made the Root keep a/b for.
func keptFixture(t *testing.T, n int) *fixture {
	t.Helper()
	f := newFixture(t)
	f.r.KeepParents(n)
	mustMkdir(t, f.p("a/b"))
	mustWrite(t, f.p("a/b/f"), "old")
	_, err := f.r.Lstat("a/b/f")
	mustNil(t, err)
	if k := f.r.parents.kept(); k != 1 {
		t.Fatalf("%d directories kept after an Lstat of a/b/f, want 1 (a/b)", k)
	}
	return f
}

// A kept directory is what an operation uses: one renamed behind the Root's
// back is still found under its old name. That is why only a tree nothing
// else changes may keep its parents, and why the Root forgets on its own
// renames and removals (the tests below).
func TestKeptParentIsUsedInsteadOfAnotherLookup(t *testing.T) {
	f := keptFixture(t, 4)
	if err := os.Rename(f.p("a"), f.p("z")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.Lstat("a/b/f"); err != nil {
		t.Errorf("Lstat a/b/f after a rename behind the Root's back: %v; want the kept a/b (now z/b) used", err)
	}
}

// After a rename through the Root, the old name is looked up again: a new
// a/b is not mistaken for the one that moved to z/b.
func TestKeptParentsForgetRenamedDirectories(t *testing.T) {
	for moved, movedF := range map[string]string{"a": "z/b/f", "a/b": "z/f"} {
		t.Run(moved, func(t *testing.T) {
			f := keptFixture(t, 4)
			mustNil(t, f.r.Rename(moved, "z", 0))
			mustMkdir(t, f.p("a/b"))
			mustWrite(t, f.p("a/b/g"), "new")
			if _, err := f.r.Lstat("a/b/g"); err != nil {
				t.Errorf("Lstat a/b/g (in the new a/b): %v", err)
			}
			_, err := f.r.Lstat("a/b/f")
			wantErrno(t, err, unix.ENOENT, f.p("a/b/f"))
			// and the moved directory is found where it went
			if _, err := f.r.Lstat(movedF); err != nil {
				t.Errorf("Lstat %s, in the moved directory: %v", movedF, err)
			}
		})
	}
}

// A directory renamed over a kept one (or exchanged with it) is what the
// name holds afterwards.
func TestKeptParentsForgetDirectoriesRenamedOver(t *testing.T) {
	t.Run("replace", func(t *testing.T) {
		f := keptFixture(t, 4)
		mustMkdir(t, f.p("w"))
		mustWrite(t, f.p("w/g"), "w")
		mustNil(t, f.r.Remove("a/b/f"))
		_, err := f.r.Lstat("a/b/f") // a/b, now empty, stays kept
		wantErrno(t, err, unix.ENOENT, f.p("a/b/f"))
		mustNil(t, f.r.Rename("w", "a/b", 0))
		if _, err := f.r.Lstat("a/b/g"); err != nil {
			t.Errorf("Lstat a/b/g after w was renamed over a/b: %v", err)
		}
	})
	t.Run("exchange", func(t *testing.T) {
		f := keptFixture(t, 4)
		mustMkdir(t, f.p("c/d"))
		mustWrite(t, f.p("c/d/g"), "g")
		_, err := f.r.Lstat("c/d/g")
		mustNil(t, err)
		mustNil(t, f.r.Rename("a/b", "c/d", unix.RENAME_EXCHANGE))
		for rel, want := range map[string]string{"a/b/g": "g", "c/d/f": "old"} {
			if _, err := f.r.Lstat(rel); err != nil {
				t.Errorf("Lstat %s after the exchange: %v", rel, err)
			}
			fl, err := f.r.OpenFile(rel, unix.O_RDONLY, 0)
			mustNil(t, err)
			b := make([]byte, 8)
			n, _ := fl.Read(b)
			fl.Close()
			if string(b[:n]) != want {
				t.Errorf("%s holds %q, want %q", rel, b[:n], want)
			}
		}
	})
}

// After a directory is removed through the Root (Remove, RemoveAll, or a
// Dir's Remove) and made again, the new one is used.
func TestKeptParentsForgetRemovedDirectories(t *testing.T) {
	for name, remove := range map[string]func(f *fixture) error{
		"Remove": func(f *fixture) error {
			if err := f.r.Remove("a/b/f"); err != nil {
				return err
			}
			return f.r.Remove("a/b")
		},
		"RemoveAll": func(f *fixture) error { return f.r.RemoveAll("a") },
		"Dir.Remove": func(f *fixture) error {
			if err := f.r.Remove("a/b/f"); err != nil {
				return err
			}
			d, err := f.r.OpenDir("a")
			if err != nil {
				return err
			}
			defer d.Close()
			return d.Remove("b")
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := keptFixture(t, 4)
			mustNil(t, remove(f))
			mustMkdir(t, f.p("a/b"))
			mustNil(t, f.r.Mkdir("a/b/new", 0o755))
			if _, err := os.Lstat(f.p("a/b/new")); err != nil {
				t.Errorf("Mkdir a/b/new after a/b was removed and made again: not there (%v)", err)
			}
		})
	}
}

// The number of directories kept is bounded, and Close closes them.
func TestKeptParentsAreBoundedAndClosed(t *testing.T) {
	f := newFixture(t)
	f.r.KeepParents(3)
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		mustNil(t, err)
		return len(ents)
	}
	before := fds()
	for i := range 20 {
		d := "d" + strconv.Itoa(i) + "/e"
		mustMkdir(t, f.p(d))
		_, err := f.r.Lstat(d + "/missing")
		wantErrno(t, err, unix.ENOENT, f.p(d+"/missing"))
	}
	if k := f.r.parents.kept(); k != 3 {
		t.Errorf("%d directories kept, want 3", k)
	}
	if n := fds() - before; n != 3 {
		t.Errorf("%d more fds open, want 3", n)
	}
	// the most recently used are the ones kept
	f.r.parents.mu.Lock()
	for _, i := range []int{17, 18, 19} {
		if f.r.parents.byRel["d"+strconv.Itoa(i)+"/e"] == nil {
			t.Errorf("d%d/e not kept", i)
		}
	}
	f.r.parents.mu.Unlock()
	mustNil(t, f.r.Close())
	if n := fds() - before; n != -1 {
		t.Errorf("after Close %d fds more than before, want -1 (the Root's own)", n)
	}
}

// A directory opened while a rename ran is used for that operation and not
// kept: what it opened may be what moved away.
func TestKeptParentsDoNotKeepWhatMovedWhileOpening(t *testing.T) {
	f := newFixture(t)
	f.r.KeepParents(4)
	mustMkdir(t, f.p("a/b"))
	mustWrite(t, f.p("a/b/f"), "old")
	f.r.parents.opened = func(dir string) {
		f.r.parents.opened = nil
		// between the open of a/b and keeping it: a moves away, a new a/b
		mustNil(t, f.r.Rename("a", "z", 0))
		mustMkdir(t, f.p("a/b"))
		mustWrite(t, f.p("a/b/g"), "new")
	}
	if _, err := f.r.Lstat("a/b/f"); err != nil {
		t.Fatalf("Lstat a/b/f, which raced with the rename: %v (the directory it opened holds f)", err)
	}
	if _, err := f.r.Lstat("a/b/g"); err != nil {
		t.Errorf("Lstat a/b/g in the new a/b: %v; the moved directory was kept as a/b", err)
	}
	_, err := f.r.Lstat("a/b/f")
	wantErrno(t, err, unix.ENOENT, f.p("a/b/f"))
}

// Operations racing with renames and removals through the Root leave no
// kept directory that is not what its name holds, and no data race (-race).
// It fails when a rename does not forget; the narrower race of a directory
// opened while a rename ran is TestKeptParentsDoNotKeepWhatMovedWhileOpening's.
func TestKeptParentsStayTrueUnderConcurrentRenames(t *testing.T) {
	f := newFixture(t)
	f.r.KeepParents(8)
	for i := range 4 {
		mustMkdir(t, f.p("p"+strconv.Itoa(i)+"/q"))
	}
	deadline := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	var renames, ops int
	wg.Go(func() {
		for i := 0; time.Now().Before(deadline); i++ {
			a, b := "p"+strconv.Itoa(i%4), "p"+strconv.Itoa((i+1)%4)
			if err := f.r.Rename(a, b, unix.RENAME_EXCHANGE); err != nil {
				t.Error(err)
				return
			}
			if i%3 == 0 {
				// remove and make again, so a stale fd would be a dead directory
				if err := f.r.RemoveAll(b + "/q"); err != nil {
					t.Error(err)
					return
				}
				if err := f.r.Mkdir(b+"/q", 0o755); err != nil {
					t.Error(err)
					return
				}
			}
			renames++
		}
	})
	var mu sync.Mutex
	for w := range 3 {
		wg.Go(func() {
			n := 0
			for i := 0; time.Now().Before(deadline); i++ {
				dir := "p" + strconv.Itoa((i+w)%4) + "/q"
				if _, err := f.r.Lstat(dir + "/x"); err != nil && !errors.Is(err, unix.ENOENT) {
					t.Error(err)
					return
				}
				n++
			}
			mu.Lock()
			ops += n
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("%d renames, %d lookups", renames, ops)
	// Every kept fd is the directory its name holds now.
	p := f.r.parents
	p.mu.Lock()
	defer p.mu.Unlock()
	for rel, e := range p.byRel {
		var kept, now unix.Stat_t
		mustNil(t, unix.Fstat(e.fd, &kept))
		if err := unix.Fstatat(f.r.Fd(), rel, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Errorf("kept %s, which is gone: %v", rel, err)
			continue
		}
		if kept.Ino != now.Ino || kept.Dev != now.Dev {
			t.Errorf("kept %s is inode %d, but %s is inode %d now", rel, kept.Ino, rel, now.Ino)
		}
	}
}
