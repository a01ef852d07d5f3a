package store

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/internal/testshare"
	"github.com/bindstate/bindstate/plugin/writeback"
)

// Rule D4's other side: a run killed between writing a file back under its
// temporary name and renaming it over the target left that file on the
// host, in the user's folder, for good (found by the frontend's
// TestExerciserCrash_D4_C3 over sshfs: three .bindstate-tmp-* files after
// the final flush). The next run removes it at its first Put into that
// directory, and leaves alone the temporary files of another store of the
// same folder (TestTemporaryNamesSayWhichStoreAndRunMadeThem: and its
// own, in flight).
func TestD4_ATemporaryFileAKilledRunLeftOnTheHostIsRemoved(t *testing.T) {
	// Nothing is written back on its own: the restart comes first.
	r := newStoreRig(t, consistency.Delegated, writeback.Options{Delay: time.Hour}, func(string) {})
	if err := r.s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	writeAsContainer(t, r.s, "f", "the container's")
	// What the Put of f leaves when the plugin is killed before its rename,
	// and what another store of the same folder has in flight.
	left := r.s.tmp.name("f")
	other := newTmpTags(filepath.Join(r.base, "another-tree")).name("f")
	for _, name := range []string{left, other} {
		if err := os.WriteFile(filepath.Join(r.host, name), []byte("half writ"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r.restart(t, func() {})
	if err := r.s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(r.host, "f")); err != nil || string(b) != "the container's" {
		t.Fatalf("host f = %q (%v), want the container's", b, err)
	}
	if got, want := listNames(t, r.host), []string{other, "f"}; !slices.Equal(got, want) {
		t.Fatalf("host holds %q, want %q: the earlier run's %q removed, the other store's kept", got, want, left)
	}
}

// Rule D7 across a kill: a Put killed after renaming the container's
// version into place on the host, before recording it as the base, left
// the next run taking the host's copy for a host edit (a spurious conflict
// copy: three in 24 runs of TestExerciserCrash_D4_C3 over sshfs). The mark
// the Put leaves on the store file tells the next run that version is its
// own; a host edit made after the kill is still kept aside.
func TestD7_AHostFileAKilledPutRenamedIntoPlaceIsNoHostEdit(t *testing.T) {
	for _, hostEditAfter := range []bool{false, true} {
		name := "the host holds the killed Put's version"
		if hostEditAfter {
			name = "the host edited it after the kill"
		}
		t.Run(name, func(t *testing.T) {
			r := newStoreRig(t, consistency.Delegated, writeback.Options{Delay: time.Hour}, func(string) {})
			ctx := context.Background()
			if err := r.s.EnsurePopulated(""); err != nil {
				t.Fatal(err)
			}
			writeAsContainer(t, r.s, "f", "v1")
			if err := r.s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			writeAsContainer(t, r.s, "f", "the container's v2")
			// What the killed Put did: v2 renamed into place with the
			// store file's times, and the mark made before the rename;
			// not the base it records after.
			st := lstat(t, filepath.Join(r.base, "tree", "f"))
			hostF := filepath.Join(r.host, "f")
			tmp := filepath.Join(r.host, ".tmp")
			if err := os.WriteFile(tmp, []byte("the container's v2"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(tmp, time.Unix(st.Atim.Unix()), time.Unix(st.Mtim.Unix())); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, hostF); err != nil {
				t.Fatal(err)
			}
			hst := lstat(t, hostF)
			r.s.markWriting("f", &hst)
			r.restart(t, func() {
				if hostEditAfter {
					time.Sleep(10 * time.Millisecond) // a new mtime
					if err := os.WriteFile(hostF, []byte("the host's edit"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			})
			if err := r.s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(hostF); err != nil || string(b) != "the container's v2" {
				t.Fatalf("host f = %q (%v), want the container's v2", b, err)
			}
			copies := conflictCopies(t, r.host, "f")
			if hostEditAfter {
				if len(copies) != 1 || readHost(t, r.host, copies[0]) != "the host's edit" {
					t.Fatalf("conflict copies %q: want the host's edit kept aside (rule D7)", copies)
				}
			} else if len(copies) != 0 {
				t.Fatalf("conflict copies %q of the container's own version: want none", copies)
			}
			if _, err := r.s.Local().Getxattr("f", xattrWriting, make([]byte, 64)); err == nil {
				t.Fatalf("the store file is still marked after its Put recorded the base")
			}
		})
	}
}

// The test above for a symlink, over a real sshfs share: a symlink cannot
// carry the mark's xattr, so the journal keeps it. Without it the next
// run's Put compared targets, and sshfs refuses to tell one that is
// absolute or has ".." in it: the container's own symlink was kept aside
// as a host edit (a spurious conflict copy, base_known=false, found by
// TestExerciserCrash_D4_C3 in CI: "conflict copies [l.bindstate-conflict-...]
// of the container's own symlink: want none"). A host edit made after the
// kill is still kept aside.
func TestD7_AHostSymlinkAKilledPutRenamedIntoPlaceIsNoHostEdit(t *testing.T) {
	base := t.TempDir()
	share := testshare.SSHFS(t, base)
	r := &storeRig{base: base, host: share.Mount, state: consistency.Delegated, opts: writeback.Options{Delay: time.Hour}}
	r.start(t)
	ctx := context.Background()
	if err := r.s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	const target = "../elsewhere/bin" // sshfs refuses to tell it
	me := Owner{Uid: os.Getuid(), Gid: os.Getgid()}
	for _, name := range []string{"l", "edited"} {
		if err := r.s.Symlink(ctx, target, name, me); err != nil {
			t.Fatal(err)
		}
		// What the killed Put did: the symlink made under a temporary
		// name and marked, then renamed into place; not the base it
		// records after.
		tmp := filepath.Join(share.Mount, ".tmp-"+name)
		if err := os.Symlink(target, tmp); err != nil {
			t.Fatal(err)
		}
		hst := lstat(t, tmp)
		r.s.markWriting(name, &hst)
		if err := os.Rename(tmp, filepath.Join(share.Mount, name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Readlink(filepath.Join(share.Mount, "l")); err == nil {
		t.Fatal("the share tells the target: the test needs one it refuses")
	}
	// A host edit after the kill, before the next run: another symlink in
	// place of one (made through the share, which then forgets what it
	// cached of the name).
	edited := filepath.Join(share.Mount, "edited") // a target of another size: sftp keeps whole seconds
	if err := os.Remove(edited); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("the host's target", edited); err != nil {
		t.Fatal(err)
	}
	r.kill(t)
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"l", "edited"} {
		if got, err := os.Readlink(filepath.Join(share.HostDir, name)); err != nil || got != target {
			t.Errorf("host %s -> %q (%v), want %q", name, got, err, target)
		}
	}
	if copies := conflictCopies(t, share.HostDir, "l"); len(copies) != 0 {
		t.Errorf("conflict copies %q of the container's own symlink: want none", copies)
	}
	copies := conflictCopies(t, share.HostDir, "edited")
	if len(copies) != 1 {
		t.Fatalf("conflict copies of the symlink the host edited: %q, want one (rule D7)", copies)
	}
	if got, _ := os.Readlink(filepath.Join(share.HostDir, copies[0])); got != "the host's target" {
		t.Errorf("the conflict copy %s -> %q, want the host's target", copies[0], got)
	}
	if marks := r.s.journal.Writing(); len(marks) != 0 {
		t.Errorf("writing marks left in the journal after the Puts recorded the bases: %q", marks)
	}

	// The Put marks before its rename, in the journal.
	var marked bool
	testHookPutWritten = func(rel string) {
		_, marked = r.s.journal.Writing()[rel]
	}
	t.Cleanup(func() { testHookPutWritten = nil })
	if err := r.s.Symlink(ctx, target, "m", me); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if !marked {
		t.Error("a symlink's Put renamed it into place unmarked")
	}
	if marks := r.s.journal.Writing(); len(marks) != 0 {
		t.Errorf("writing marks left in the journal after the Put recorded the base: %q", marks)
	}
}

func readHost(t *testing.T, host, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(host, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The tags of a temporary name: the same store's other runs are told from
// this one, other stores from this store.
func TestTemporaryNamesSayWhichStoreAndRunMadeThem(t *testing.T) {
	a1, a2, b := newTmpTags("/state/stores/a/tree"), newTmpTags("/state/stores/a/tree"), newTmpTags("/state/stores/b/tree")
	for a2.run == a1.run {
		a2 = newTmpTags("/state/stores/a/tree")
	}
	long := string(slices.Repeat([]byte("n"), 250))
	for _, rel := range []string{"f", "d/e/f", long, "d/" + long} {
		mine := filepath.Base(a1.name(rel))
		if len(mine) > 255 {
			t.Fatalf("%q: name %d bytes long", rel, len(mine))
		}
		if !IsTemporary(mine) {
			t.Errorf("%q: %q is not a temporary name to the refresh", rel, mine)
		}
		if a1.leftBehind(mine) {
			t.Errorf("%q: the run's own %q taken for a leftover", rel, mine)
		}
		if !a2.leftBehind(mine) {
			t.Errorf("%q: the next run does not take %q for its store's leftover", rel, mine)
		}
		if b.leftBehind(mine) {
			t.Errorf("%q: another store takes %q for its own", rel, mine)
		}
	}
	for _, name := range []string{"f", ".bindstate-tmp-f-dn76n3nktn07", ".bindstate-tmp-" + a1.store, ".fuse_hidden0001"} {
		if a2.leftBehind(name) {
			t.Errorf("%q taken for a leftover", name)
		}
	}
}
