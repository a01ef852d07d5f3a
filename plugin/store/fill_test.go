package store

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/hostpath"
	"github.com/bindstate/bindstate/plugin/internal/testenv"
	"github.com/bindstate/bindstate/plugin/writeback"
)

// hostEntry is what the host has at one path, for the populate tests.
type hostEntry struct {
	dir      bool
	mode     uint32 // permission, set-ID and sticky bits
	uid, gid int
}

// rule C2: what a listing puts in the store has the host's attributes, so
// the container's view of each entry matches the host. A populate makes most
// entries with their mode and owner from the start (no chmod, no chown);
// each case here is one where creating alone would get them wrong: a mode
// the umask clears, set-ID and sticky bits (a chown clears them), another
// owner, a read-only file, and store directories whose new entries get
// their mode from a default ACL or their group from the directory.
func TestC2_APopulatedEntryHasTheHostsModeAndOwner(t *testing.T) {
	testenv.RequireRoot(t, "chown")
	entries := map[string]hostEntry{
		"plain":   {mode: 0o644},
		"exec":    {mode: 0o755},
		"dir":     {dir: true, mode: 0o755},
		"wide":    {mode: 0o666},
		"widedir": {dir: true, mode: 0o777},
		"setuid":  {mode: 0o4755},
		"setgid":  {mode: 0o2750},
		"sticky":  {dir: true, mode: 0o1777},
		"ro":      {mode: 0o444},
		"rodir":   {dir: true, mode: 0o555},
		"theirs":  {mode: 0o644, uid: 1234, gid: 5678},
		"theirs2": {dir: true, mode: 0o750, uid: 1234, gid: 0},
	}
	mk := func(t *testing.T, at string, e hostEntry) {
		t.Helper()
		var err error
		if e.dir {
			err = os.Mkdir(at, 0o700)
		} else {
			err = os.WriteFile(at, []byte("content"), 0o600)
		}
		if err == nil {
			err = os.Lchown(at, e.uid, e.gid)
		}
		if err == nil {
			err = unix.Chmod(at, e.mode) // after the chown: it clears set-ID bits
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	s := openTestStore(t, consistency.Cached, func(h string) {
		for _, d := range []string{"acl", "sgid"} {
			if err := os.Mkdir(filepath.Join(h, d), 0o755); err != nil {
				t.Fatal(err)
			}
			for name, e := range entries {
				mk(t, filepath.Join(h, d, name), e)
			}
		}
		for name, e := range entries {
			mk(t, filepath.Join(h, name), e)
		}
	})
	if umask, ok := processUmask(); !ok || umask&0o022 == 0 {
		t.Logf("umask %o: the cases of a mode the umask clears test nothing here", umask)
	}
	if err := s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	store := s.Local().Path()

	// The store directory "acl" gets a default ACL that leaves new entries
	// only their owner's bits; "sgid" is set-group-ID, with another group.
	aclSet := true
	if err := unix.Setxattr(filepath.Join(store, "acl"), "system.posix_acl_default", ownerOnlyACL(), 0); err != nil {
		if !errors.Is(err, unix.EOPNOTSUPP) {
			t.Fatal(err)
		}
		aclSet = false
		t.Log("no ACLs on this file system: the default ACL case is not tested")
	}
	sg := filepath.Join(store, "sgid")
	if err := os.Chown(sg, 0, 4321); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sg, 0o755|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"acl", "sgid"} {
		if err := s.EnsurePopulated(d); err != nil {
			t.Fatal(err)
		}
	}

	check := func(rel string, e hostEntry) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(store, rel), &st); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if got := st.Mode & 0o7777; got != e.mode {
			t.Errorf("%s: store mode %o, want the host's %o", rel, got, e.mode)
		}
		if int(st.Uid) != e.uid || int(st.Gid) != e.gid {
			t.Errorf("%s: store owner %d:%d, want the host's %d:%d", rel, st.Uid, st.Gid, e.uid, e.gid)
		}
		var host unix.Stat_t
		if err := unix.Lstat(filepath.Join(s.Host().Path(), rel), &host); err != nil {
			t.Fatal(err)
		}
		if st.Mtim != host.Mtim {
			t.Errorf("%s: store mtime %v, want the host's %v", rel, st.Mtim, host.Mtim)
		}
		if b, ok := s.Base(rel); !ok || b != baseOf(&host) {
			t.Errorf("%s: base %+v (%v), want %+v", rel, b, ok, baseOf(&host))
		}
	}
	for name, e := range entries {
		check(name, e)
		if aclSet {
			check("acl/"+name, e)
		}
		check("sgid/"+name, e)
	}
}

// A populate sets a created entry's mode and owner only where creating it
// did not give them: for a tree of the plugin's owner in plain modes, it
// makes each entry without a chmod or a chown (two of the eight syscalls of
// each file it adopts). TestC2_APopulatedEntryHasTheHostsModeAndOwner
// checks that what it skips is right.
func TestAPopulateSkipsTheChmodAndChownCreatingGave(t *testing.T) {
	umask, ok := processUmask()
	if !ok || umask&0o022 == 0 {
		t.Skipf("umask %o: a mode it clears cannot be told from one it keeps", umask)
	}
	s := openTestStore(t, consistency.Cached, func(h string) {
		for name, mode := range map[string]os.FileMode{"plain": 0o644, "wide": 0o666} {
			if err := os.WriteFile(filepath.Join(h, name), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(h, name), mode); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Mkdir(filepath.Join(h, "dir"), 0o755); err != nil {
			t.Fatal(err)
		}
	})
	type set struct{ owner, mode bool }
	got := map[string]set{}
	testHookAdopt = func(rel string, owner, mode bool) { got[rel] = set{owner, mode} }
	t.Cleanup(func() { testHookAdopt = nil })
	if err := s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	want := map[string]set{"plain": {}, "dir": {}, "wide": {mode: true}}
	for rel, w := range want {
		if g, ok := got[rel]; !ok || g != w {
			t.Errorf("%s: set owner, mode = %+v (adopted: %v), want %+v", rel, g, ok, w)
		}
	}
}

// ownerOnlyACL is a default ACL (system.posix_acl_default) of user::rwx,
// group::---, other::---.
func ownerOnlyACL() []byte {
	const version = 2
	b := binary.LittleEndian.AppendUint32(nil, version)
	for _, e := range []struct{ tag, perm uint16 }{{0x01, 7}, {0x04, 0}, {0x20, 0}} { // USER_OBJ, GROUP_OBJ, OTHER
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, 0xffffffff) // ACL_UNDEFINED_ID
	}
	return b
}

// What creating an entry in a store directory gives it: the permission bits
// less the umask, unless the directory is set-group-ID or has a default ACL,
// and the plugin's owner where the directory has the plugin's group; only
// then does adoptIn skip the chmod and the chown (two of the eight syscalls
// of each file a listing adopts).
func TestBirthSaysWhatACreatedEntryKeeps(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	umask, ok := processUmask()
	if !ok {
		t.Fatal("the umask could not be read from /proc/self/status")
	}
	old := unix.Umask(0o022)
	unix.Umask(old)
	if umask != uint32(old) {
		t.Fatalf("umask read as %o, the process has %o", umask, old)
	}
	b := birthIn(fd, &st)
	if b == nil {
		t.Fatal("a plain directory: nothing known about what is created in it")
	}
	me := &unix.Stat_t{Uid: uint32(os.Geteuid()), Gid: uint32(os.Getegid())}
	other := &unix.Stat_t{Uid: me.Uid + 1, Gid: me.Gid}
	if !b.owns(me) || b.owns(other) {
		t.Errorf("owns: the plugin's own owner %v, another %v", b.owns(me), b.owns(other))
	}
	// A directory of another group: on a file system mounted with grpid
	// its new entries get that group, so the owner is set.
	theirs := st
	theirs.Gid = st.Gid + 1
	if b := birthIn(fd, &theirs); b == nil || b.owns(me) || !b.keeps(0o700) {
		t.Errorf("a directory of another group: %+v (owned: want false; the mode is still known)", b)
	}
	for mode, want := range map[uint32]bool{
		0o644 | umask&0o777: umask&0o777 == 0, // what the umask clears needs a chmod
		0o4755:              false,
		0o1777:              false,
		0o700:               true,
	} {
		if got := b.keeps(mode); got != want {
			t.Errorf("keeps(%o) = %v, want %v (umask %o)", mode, got, want, umask)
		}
	}
	if os.Geteuid() == 0 {
		if !b.keeps(0o444 &^ umask) {
			t.Error("as root, a read-only mode is kept from the start")
		}
		sgid := st
		sgid.Mode |= unix.S_ISGID
		if birthIn(fd, &sgid) != nil {
			t.Error("a set-group-ID directory: its entries' group and bits are the directory's, not known")
		}
		if err := unix.Fsetxattr(fd, "system.posix_acl_default", ownerOnlyACL(), 0); err == nil {
			if birthIn(fd, &st) != nil {
				t.Error("a directory with a default ACL: its entries' mode is the ACL's, not known")
			}
		}
	}
	var nothing *birth
	if nothing.keeps(0o644) || nothing.owns(me) {
		t.Error("nil birth: everything is set")
	}
}

// BenchmarkPopulateAndList is a cold listing of a directory of 1,000 small
// files: the populate that adopts them into a fresh store, then the
// listing the container reads. Both are local here; over a share the host
// half costs more, and this is the plugin's own half.
func BenchmarkPopulateAndList(b *testing.B) {
	host := b.TempDir()
	for i := range 1000 {
		if err := os.WriteFile(filepath.Join(host, "f"+strconv.Itoa(i)), []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	root, err := hostpath.Open(host)
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	for i := 0; b.Loop(); i++ {
		dir := filepath.Join(b.TempDir(), strconv.Itoa(i))
		s, err := Open(Config{Host: root, Tree: filepath.Join(dir, "tree"), Journal: filepath.Join(dir, "journal"), State: consistency.Cached})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.ReadDir(""); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.Close()
		os.RemoveAll(dir)
		b.StartTimer()
	}
}

// rules C2 and D1: a populate cut short by a crash leaves entries it had not
// finished: a file created but not yet marked a stub (it would read empty),
// or marked but without the host's attributes and base, and an empty
// directory without them. The directory is not marked populated, so the
// next start lists it again; that listing makes those entries again from
// the host instead of keeping them as the container's own. (The sweep
// leaves an entry without a base alone: a container made it.)
func TestC2_APopulateCutShortIsDoneAgain(t *testing.T) {
	mtime := time.Unix(1_000_000_000, 0)
	for _, state := range []consistency.State{consistency.Cached, consistency.Delegated} {
		t.Run(state.String(), func(t *testing.T) {
			r := newStoreRig(t, state, writeback.Options{}, func(h string) {
				for _, p := range []string{"d", "d/sub"} {
					if err := os.Mkdir(filepath.Join(h, p), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				for _, f := range []string{"d/created", "d/marked", "d/done"} {
					p := filepath.Join(h, f)
					if err := os.WriteFile(p, []byte("host content"), 0o644); err != nil {
						t.Fatal(err)
					}
					if err := os.Chtimes(p, mtime, mtime); err != nil {
						t.Fatal(err)
					}
				}
			})
			if err := r.s.EnsurePopulated(""); err != nil {
				t.Fatal(err)
			}
			// d/done: adopted whole before the crash, and its content
			// fetched since. It has a base, so it is kept as it is (not
			// made a stub again, to be fetched once more).
			d, err := r.s.local.OpenDir("d")
			if err != nil {
				t.Fatal(err)
			}
			hst := lstat(t, filepath.Join(r.host, "d/done"))
			err = r.s.adoptIn(d, "done", &hst, nil)
			d.Close()
			if err != nil {
				t.Fatal(err)
			}
			if err := r.s.EnsureContent("d/done"); err != nil {
				t.Fatal(err)
			}
			tree := filepath.Join(r.base, "tree")
			r.restart(t, func() {
				// What the steps of adoptIn leave when the plugin dies
				// after them: created; created and marked a stub.
				if err := os.WriteFile(filepath.Join(tree, "d/created"), nil, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(tree, "d/marked"), nil, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := unix.Setxattr(filepath.Join(tree, "d/marked"), xattrStub, nil, 0); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(filepath.Join(tree, "d/marked"), int64(len("host content"))); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(filepath.Join(tree, "d/sub"), 0o700); err != nil {
					t.Fatal(err)
				}
			})
			s, ctx := r.s, context.Background()
			if err := s.EnsurePopulated("d"); err != nil {
				t.Fatal(err)
			}
			if s.IsStub("d/done") {
				t.Error("d/done, adopted whole and fetched before the crash, is a stub again after the populate")
			}
			for _, name := range []string{"created", "marked", "done"} {
				rel, want := "d/"+name, "host content"
				f, err := s.Open(ctx, rel, unix.O_RDONLY, func() (string, bool) { return rel, true })
				if err != nil {
					t.Fatal(err)
				}
				got := readAll(t, f)
				f.Release()
				if got != want {
					t.Errorf("%s reads %q after the populate, want %q", rel, got, want)
				}
			}
			for _, rel := range []string{"d/created", "d/marked", "d/done", "d/sub"} {
				st, err := s.Lstat(rel)
				if err != nil {
					t.Fatal(err)
				}
				if st.Mode&0o777 != 0o755 && st.Mode&0o777 != 0o644 {
					t.Errorf("%s has mode %o after the populate, want the host's", rel, st.Mode&0o777)
				}
				if _, ok := s.Base(rel); !ok {
					t.Errorf("%s has no base after the populate", rel)
				}
			}
		})
	}
}
