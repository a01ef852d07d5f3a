package frontend

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/syncer"
)

// rules C5 and D6, at the cost of a rescan: a directory found as it was at
// the last scan, on the host and in the store, is not compared entry by entry
// again (on a large tree that comparison was most of the plugin's idle CPU),
// yet every host change is still brought in: an in-place edit that leaves
// the directory's own mtime alone, a name made in a subdirectory listed after
// its parent was found unchanged, and changes beside an entry the container
// holds (which keep the directory from counting as in sync).
func TestC5_D6_RescanSkipsDirectoriesInSync(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			// The front's own refresher waits an hour: the test scans itself.
			r := newRescanRig(t, st, "1h", func(h string) {
				os.MkdirAll(filepath.Join(h, "d"), 0o755)
				os.MkdirAll(filepath.Join(h, "e"), 0o755)
				writeFile(t, filepath.Join(h, "d/a"), "v1")
				writeFile(t, filepath.Join(h, "d/b"), "b1")
				writeFile(t, filepath.Join(h, "e/x"), "x1")
			})
			ref := ownRefresher(t, r, false)
			scanOnce := func(what string) syncer.ScanStats {
				t.Helper()
				s, err := ref.Scan(context.Background())
				if err != nil {
					t.Fatalf("%s: scan: %v", what, err)
				}
				return s
			}
			scan := func(what string, wantDirs, wantUnchanged int) syncer.ScanStats {
				t.Helper()
				s := scanOnce(what)
				if s.Dirs != wantDirs || s.Unchanged != wantUnchanged {
					t.Fatalf("%s: scanned %d directories, %d unchanged; want %d, %d unchanged", what, s.Dirs, s.Unchanged, wantDirs, wantUnchanged)
				}
				return s
			}
			edit := func(rel, content string, mtime time.Time) {
				t.Helper()
				writeFile(t, r.hostPath(rel), content)
				if err := os.Chtimes(r.hostPath(rel), mtime, mtime); err != nil {
					t.Fatal(err)
				}
			}
			later := time.Now().Add(time.Hour)

			listNames(t, r.mntPath("d")) // "" and "d" are populated, "e" not yet
			scan("first scan", 2, 0)
			scan("nothing changed", 2, 2)

			// The same size, in place: d's own mtime does not move.
			edit("d/a", "v2", later)
			if s := scan("after an in-place edit on the host", 2, 1); s.Applied != 1 {
				t.Fatalf("in-place edit: %d changes brought in, want 1", s.Applied)
			}
			if got := readFile(t, r.mntPath("d/a")); got != "v2" {
				t.Fatalf("after the scan the container reads %q, want the host's \"v2\"", got)
			}
			// Bringing a change in moved the store's side: one more full
			// comparison finds the directory in sync.
			scan("after the edit was brought in", 2, 1)
			scan("settled after the edit", 2, 2)

			// A name made on the host: the sweep lists the root (which
			// gives d the host's new mtime) before d (which makes the
			// name): d keeps the host's mtime.
			writeFile(t, r.hostPath("d/n"), "n")
			if s := scanOnce("after a file was made in d"); s.Applied < 2 {
				t.Fatalf("after a file was made in d: %+v; want d's new mtime and d/n brought in", s)
			}
			sameMtime(t, r, "d")
			// And removed: the same.
			if err := os.Remove(r.hostPath("d/n")); err != nil {
				t.Fatal(err)
			}
			if s := scanOnce("after d/n was removed on the host"); s.Applied < 2 {
				t.Fatalf("after d/n was removed: %+v; want d's new mtime and d/n's removal brought in", s)
			}
			sameMtime(t, r, "d")
			waitFor(t, "all directories in sync after d/n", func() bool {
				return scanOnce("settling after d/n").Unchanged == 2
			})

			// A directory listed after its parent was last compared.
			listNames(t, r.mntPath("e"))
			edit("e/x", "x2", later)
			scan("with e populated", 3, 2)
			if got := readFile(t, r.mntPath("e/x")); got != "x2" {
				t.Fatalf("e/x in the container: %q, want the host's \"x2\"", got)
			}
			scan("after e's edit was brought in", 3, 2)
			scan("settled after e's edit", 3, 3)

			// The container's change to a file: d's listing and its store
			// directory stay as they were.
			writeFile(t, r.mntPath("d/a"), "c3")

			if st == consistency.Delegated {
				// Not on the host yet, and left alone by every plan: d
				// may stay skipped.
				scan("after the container's change to d/a", 3, 3)
			} else {
				// Written through: d's listing on the host moved.
				scan("after the container's change to d/a", 3, 2)
			}
			// The host changes d/b beside it: d is compared in full.
			edit("d/b", "b2", later.Add(time.Hour))
			scan("beside the container's change", 3, 2)
			if got := readFile(t, r.mntPath("d/b")); got != "b2" {
				t.Fatalf("d/b in the container: %q, want the host's \"b2\"", got)
			}
			r.flush(t)
			if got := readFile(t, r.hostPath("d/a")); got != "c3" {
				t.Fatalf("the container's d/a on the host: %q", got)
			}
			// Writing back moved d's listing (and d's mtime, in the root's
			// listing): a scan or two compare them, then all is in sync.
			// (cached: the file stays open for writing through, and left
			// alone, until the kernel's release of it, which comes after
			// close returns)
			waitFor(t, "all directories in sync after the writeback", func() bool {
				return scanOnce("after the writeback").Unchanged == 3
			})
			if got := readFile(t, r.mntPath("d/a")); got != "c3" {
				t.Fatalf("the container's own d/a became %q", got)
			}
		})
	}
}

// Rules C5 and D6 on a new volume: what the container lists is listed from
// the host then, so checks watch it from the first one on, with no sweep
// first (which listed the whole tree again during the container's first
// walk of it, a cold git status or go list, on the same share). A directory
// whose host mtime is too recent to trust is listed again; a name made on
// the host afterwards arrives at the next check.
func TestC5_D6_ANewVolumeIsWatchedFromItsFirstListing(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			long := time.Now().Add(-time.Hour)
			r := newRescanRig(t, st, "1h", func(h string) {
				for _, d := range []string{"d", "e", "g"} {
					os.MkdirAll(filepath.Join(h, d), 0o755)
					writeFile(t, filepath.Join(h, d, "a"), d+"1")
				}
				// An hour old, so not racy; g was changed just now.
				for _, d := range []string{"d", "e", ""} {
					if err := os.Chtimes(filepath.Join(h, d), long, long); err != nil {
						t.Fatal(err)
					}
				}
			})
			ref := ownRefresher(t, r, false)
			check := func(what string, wantChecked, wantDirs int) syncer.ScanStats {
				t.Helper()
				return checkDirs(t, ref, what, wantChecked, wantDirs)
			}
			for _, d := range []string{"", "d", "e", "g"} {
				listNames(t, r.mntPath(d))
			}
			// The root, d and e are watched as listed; g, too recent to
			// trust, is listed again. No sweep has run.
			check("the first check", 0, 1)
			// All four are watched now: a name made in d moves its mtime,
			// and the next check lists d and the root (g, listed with a
			// recent mtime, is listed at every check until it is not).
			check("nothing changed", 4, 1)
			writeFile(t, r.hostPath("d/new"), "n")
			check("after a file was made in d", 4, 3)
			if got := readFile(t, r.mntPath("d/new")); got != "n" {
				t.Fatalf("d/new in the container: %q, want the host's \"n\"", got)
			}
			sameMtime(t, r, "d")
		})
	}
}

// Rules C5 and D6, when the refresher runs on its own: on a new volume its
// first look is a check, so no sweep lists the container's first walk again
// while it runs; a volume listed into before the refresher started (a
// plugin restart: what changed on the host meanwhile is not known) starts
// with a sweep.
func TestC5_D6_ANewVolumesFirstLookIsACheck(t *testing.T) {
	for _, c := range []struct {
		name     string
		listed   bool // the root listed before the refresher starts
		wantKind string
	}{
		{"new volume", false, "check"},
		{"listed before", true, "sweep"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRescanRig(t, consistency.Cached, "1h", func(h string) {
				os.MkdirAll(filepath.Join(h, "d"), 0o755)
			})
			if c.listed {
				if _, err := os.Stat(r.mntPath("d")); err != nil { // lists the root
					t.Fatal(err)
				}
			}
			f := r.front.(*storeFront)
			looks := make(chan string, 16)
			ref := syncer.NewRefresher(f.ost.st, f.mnt, f.mount, nil, 10*time.Millisecond, slog.New(lookRecorder{looks}))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { ref.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			select {
			case kind := <-looks:
				if kind != c.wantKind {
					t.Fatalf("the first look was a %s, want a %s", kind, c.wantKind)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no look in 10 s")
			}
		})
	}
}

// lookRecorder is a slog.Handler that sends the kind of each look the
// refresher logs ("host refresh", at debug level) to looks, and drops the
// rest (a full channel drops them too).
type lookRecorder struct{ looks chan<- string }

func (lookRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h lookRecorder) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "host refresh" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "kind" {
			select {
			case h.looks <- a.Value.String():
			default:
			}
			return false
		}
		return true
	})
	return nil
}
func (h lookRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h lookRecorder) WithGroup(string) slog.Handler      { return h }

// rules C5 and D6, between sweeps: a check stats only the watched
// directories on the host and lists those whose mtime moved, so a name made
// on the host arrives at the next check. A change within the same tick of
// the host's clock as the last listing (sftp keeps whole seconds) is not
// missed (racy mtimes are listed again), a directory with a recent host
// change is listed at every check (edits come in bursts, and an edit in place
// leaves the directory's mtime alone), and a directory the container lists
// after the sweep is watched from the next check on.
func TestC5_D6_ChecksFindNameChangesBetweenSweeps(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			long := time.Now().Add(-time.Hour)
			setMtime := func(p string, mtime time.Time) {
				t.Helper()
				if err := os.Chtimes(p, mtime, mtime); err != nil {
					t.Fatal(err)
				}
			}
			r := newRescanRig(t, st, "1h", func(h string) {
				for _, d := range []string{"d", "e", "f", "g"} {
					os.MkdirAll(filepath.Join(h, d), 0o755)
				}
				writeFile(t, filepath.Join(h, "d/a"), "d1")
				writeFile(t, filepath.Join(h, "e/a"), "e1")
				writeFile(t, filepath.Join(h, "g/a"), "g1")
				// An hour old, so not racy; g was changed just now.
				for _, d := range []string{"d", "e", "f", ""} {
					setMtime(filepath.Join(h, d), long)
				}
			})
			// Listed into before the refresher starts (as after a plugin
			// restart): its first look is the sweep. (For a new volume's,
			// see TestC5_D6_ANewVolumeIsWatchedFromItsFirstListing.)
			if _, err := os.Stat(r.mntPath("d")); err != nil { // lists the root
				t.Fatal(err)
			}
			ref := ownRefresher(t, r, false)
			check := func(what string, wantChecked, wantDirs int) syncer.ScanStats {
				t.Helper()
				return checkDirs(t, ref, what, wantChecked, wantDirs)
			}
			// inSameTick makes rel on the host without moving its
			// directory's mtime, as a change in the same tick of the
			// host's clock as the last one does.
			inSameTick := func(rel, content string) {
				t.Helper()
				dir := filepath.Dir(r.hostPath(rel))
				before, err := os.Stat(dir)
				if err != nil {
					t.Fatal(err)
				}
				writeFile(t, r.hostPath(rel), content)
				setMtime(dir, before.ModTime())
			}
			sees := func(rel, want string) {
				t.Helper()
				if got := readFile(t, r.mntPath(rel)); got != want {
					t.Fatalf("%s in the container: %q, want the host's %q", rel, got, want)
				}
			}

			for _, d := range []string{"d", "e", "g"} {
				listNames(t, r.mntPath(d))
			}
			check("before any sweep", 0, 0)
			if _, err := ref.Scan(context.Background()); err != nil {
				t.Fatal(err)
			}
			// g's mtime is too recent to trust: listed again.
			check("after the sweep", 4, 1)

			// A change in g in the same tick of the host's clock as the
			// last listing: g's mtime does not move.
			inSameTick("g/b", "g2")
			check("after a file made in g in the same tick", 4, 1)
			sees("g/b", "g2")
			// g's mtime moves (back an hour): g is listed, and so is its
			// parent, whose listing holds g's attributes.
			setMtime(r.hostPath("g"), long)
			check("after g's mtime moved", 4, 2)

			// A name made on the host moves d's mtime: d and its parent are
			// listed (and g, which had a host change a moment ago).
			writeFile(t, r.hostPath("d/new"), "n")
			check("after a file was made in d", 4, 3)
			sees("d/new", "n")
			sameMtime(t, r, "d")

			// An edit in place in e, where the host changed nothing
			// lately: not listed by a check (d, g and the root, which had
			// host changes, are); it arrives with the sweep.
			sees("e/a", "e1") // in the store now
			writeFile(t, r.hostPath("e/a"), "e2")
			setMtime(r.hostPath("e/a"), long.Add(time.Minute))
			check("after an edit in place in e", 4, 3)
			sees("e/a", "e1")
			if _, err := ref.Scan(context.Background()); err != nil {
				t.Fatal(err)
			}
			sees("e/a", "e2")
			// Now e had a host change too: its next edit in place arrives
			// at a check.
			writeFile(t, r.hostPath("e/a"), "e3")
			setMtime(r.hostPath("e/a"), long.Add(2*time.Minute))
			check("after a second edit in place in e", 4, 4)
			sees("e/a", "e3")

			// f, listed by the container after the sweep, is watched from
			// the next check on. Its mtime is older than the last check,
			// so nothing changed in it since its listing: it is not
			// listed again (after a walk of a large tree, that was most
			// of the refresher's work), nor stat'ed twice (4 checked:
			// the 4 watched before; d, e, g and the root are hot).
			listNames(t, r.mntPath("f"))
			check("after f was listed", 4, 4)
			writeFile(t, r.hostPath("f/y"), "y")
			check("after a file was made in f", 5, 5)
			sees("f/y", "y")

			// h, made on the host and listed by the container, then
			// changed in the same tick: its mtime is too recent to trust,
			// so the check that finds it populated lists it.
			if err := os.Mkdir(r.hostPath("h"), 0o755); err != nil {
				t.Fatal(err)
			}
			check("after h was made", 5, 5)
			listNames(t, r.mntPath("h"))
			inSameTick("h/z", "z")
			check("after h was listed and changed", 5, 6)
			sees("h/z", "z")
		})
	}
}

// rules C5 and D6, for the files a container works with: an edit in place
// on the host (how VS Code saves) moves no directory's mtime, so checks of
// directories miss it until the next sweep, a minute or more away on a large
// tree. Checks also stat the files the container opened lately, so an edit
// to one arrives at the next check.
func TestC5_D6_ChecksFindEditsInPlaceToFilesInUse(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			long := time.Now().Add(-time.Hour)
			r := newRescanRig(t, st, "1h", func(h string) {
				for _, d := range []string{"d", "e"} {
					os.MkdirAll(filepath.Join(h, d), 0o755)
					writeFile(t, filepath.Join(h, d, "a"), d+"1")
				}
				for _, p := range []string{"d/a", "e/a", "d", "e", ""} { // not racy
					os.Chtimes(filepath.Join(h, p), long, long)
				}
			})
			ref := ownRefresher(t, r, true)
			check := func(what string, wantFiles, wantDirs int) {
				t.Helper()
				if s := runCheck(t, ref, what); s.Files != wantFiles || s.Dirs != wantDirs {
					t.Fatalf("%s: %d files in use stat'ed, %d directories listed; want %d, %d", what, s.Files, s.Dirs, wantFiles, wantDirs)
				}
			}
			// editInPlace writes over rel on the host: its directory's
			// mtime stays, the file's moves (to a time not racy).
			editInPlace := func(rel, content string, minutes int) {
				t.Helper()
				writeFile(t, r.hostPath(rel), content)
				at := long.Add(time.Duration(minutes) * time.Minute)
				if err := os.Chtimes(r.hostPath(rel), at, at); err != nil {
					t.Fatal(err)
				}
			}
			sees := func(rel, want string) {
				t.Helper()
				if got := readFile(t, r.mntPath(rel)); got != want {
					t.Fatalf("%s in the container: %q, want %q", rel, got, want)
				}
			}

			sees("d/a", "d1") // opened: in use
			listNames(t, r.mntPath("e"))
			if _, err := ref.Scan(context.Background()); err != nil {
				t.Fatal(err)
			}
			// Only d/a is stat'ed: e/a was never opened (its content is
			// not in the store yet; its first open reads the host's).
			check("after the sweep", 1, 0)

			editInPlace("d/a", "d2", 1)
			check("after an edit in place to d/a", 1, 1)
			sees("d/a", "d2")

			sees("e/a", "e1") // opened: in use from now on
			editInPlace("e/a", "e2", 1)
			// d had a host change a moment ago: it is listed at every
			// check for a while, so d/a is not stat'ed on its own.
			check("after an edit in place to e/a", 1, 2)
			sees("e/a", "e2")

			editInPlace("e/a", "e3", 2)
			check("after a second edit in place to e/a", 0, 2)
			sees("e/a", "e3")
		})
	}
}

// rules C5 and D6, when checks cannot know what to look at: a check learns
// of directories populated since the last look from the store's log, which
// keeps the most recent ones only. When more were populated in between than
// it keeps (a container walking a large tree while a check was far apart),
// the check sweeps instead, so a host change in one the log forgot arrives
// at that check, not at the next sweep.
func TestC5_D6_ChecksSweepWhenThePopulateLogOverflowed(t *testing.T) {
	defer func(n int) { populatedLog = n }(populatedLog)
	populatedLog = 2
	dirs := []string{"a", "b", "c", "d", "e"}
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			long := time.Now().Add(-time.Hour)
			r := newRescanRig(t, st, "1h", func(h string) {
				for _, d := range dirs {
					os.MkdirAll(filepath.Join(h, d), 0o755)
					writeFile(t, filepath.Join(h, d, "x"), d)
				}
				for _, d := range append(dirs, "") { // not racy
					os.Chtimes(filepath.Join(h, d), long, long)
				}
			})
			ref := ownRefresher(t, r, false)
			listThenSweep(t, r, ref, "") // the root is populated: the sweep watches it
			// Five directories populated after the sweep; the log keeps
			// the last two (d, e) and has forgotten a.
			for _, d := range dirs {
				listNames(t, r.mntPath(d))
			}
			writeFile(t, r.hostPath("a/new"), "n") // moves a's mtime
			s, err := ref.Check(context.Background())
			if err != nil {
				t.Fatalf("check: %v", err)
			}
			if b, err := os.ReadFile(r.mntPath("a/new")); err != nil || string(b) != "n" {
				t.Fatalf("a/new in the container after the check: %q (%v), want the host's \"n\"; the check listed %d directories", b, err, s.Dirs)
			}
		})
	}
}

// rules C5 and D6, when the host replaces a directory with a symlink: the
// watched directories beneath it are reached through a symlink now, which
// the plugin never follows. They are gone from the tree, as a removed
// directory is, not a failure of the check (which the front logs at every
// check until the next sweep), and the container sees the symlink.
func TestC5_D6_ADirectoryReplacedByASymlinkIsGone(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			long := time.Now().Add(-time.Hour)
			r := newRescanRig(t, st, "1h", func(h string) {
				os.MkdirAll(filepath.Join(h, "g/s"), 0o755)
				os.MkdirAll(filepath.Join(h, "other"), 0o755)
				writeFile(t, filepath.Join(h, "g/s/a"), "a")
				for _, d := range []string{"g/s", "g", "other", ""} { // not racy
					os.Chtimes(filepath.Join(h, d), long, long)
				}
			})
			ref := ownRefresher(t, r, false)
			listThenSweep(t, r, ref, "", "g", "g/s")
			if err := os.RemoveAll(r.hostPath("g")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("other", r.hostPath("g")); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ {
				if _, err := ref.Check(context.Background()); err != nil {
					t.Fatalf("check %d after g became a symlink: %v; want no failure (a host change)", i+1, err)
				}
			}
			if got, err := os.Readlink(r.mntPath("g")); err != nil || got != "other" {
				t.Fatalf("g in the container: %q (%v), want the host's symlink to \"other\"", got, err)
			}
		})
	}
}

// rule D6, when the container removes a watched directory (or puts a file
// in its place) and the writeback has not reached the host yet: the host
// still has the directory, the store no longer does. That is the
// container's change standing until writeback, not a failure of the check
// (which the front logs at every check while the directory stays watched).
func TestD6_ADirectoryTheContainerRemovedIsNotAFailure(t *testing.T) {
	r, ref := settledRig(t, consistency.Delegated, map[string]string{"d/a": "d", "e/a": "e"}, "", "d", "e")
	// A host change in d and e: both are listed at every check for a while
	// (hot), their parent only once.
	writeFile(t, r.hostPath("d/x"), "x")
	writeFile(t, r.hostPath("e/x"), "x")
	if _, err := ref.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(r.mntPath("d")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(r.mntPath("e")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, r.mntPath("e"), "a file now")
	_, err := ref.Check(context.Background())
	for _, d := range []string{"d", "e"} {
		if fi, serr := os.Stat(r.hostPath(d)); serr != nil || !fi.IsDir() {
			t.Skipf("the writeback reached the host before the check (%s: %v): nothing left to test", d, serr)
		}
	}
	if err != nil {
		t.Fatalf("check after the container removed d and replaced e by a file: %v; want no failure", err)
	}
}

// ownRefresher is a refresher of r's front that the test drives itself
// (Scan, Check; the rig's own waits an hour), stat'ing the files the
// container opened if inUse.
func ownRefresher(t *testing.T, r *rig, inUse bool) *syncer.Refresher {
	f := r.front.(*storeFront)
	var u *syncer.InUse
	if inUse {
		u = f.inUse
	}
	return syncer.NewRefresher(f.ost.st, f.mnt, f.mount, u, time.Hour, testLogger(t))
}

// checkDirs runs one Check of ref and fails t unless it stat'ed
// wantChecked watched directories and listed wantDirs.
func checkDirs(t *testing.T, ref *syncer.Refresher, what string, wantChecked, wantDirs int) syncer.ScanStats {
	t.Helper()
	s := runCheck(t, ref, what)
	if s.Checked != wantChecked || s.Dirs != wantDirs {
		t.Fatalf("%s: %d directories checked, %d listed; want %d, %d", what, s.Checked, s.Dirs, wantChecked, wantDirs)
	}
	return s
}

// runCheck runs one Check of ref, failing t if it fails.
func runCheck(t *testing.T, ref *syncer.Refresher, what string) syncer.ScanStats {
	t.Helper()
	s, err := ref.Check(context.Background())
	if err != nil {
		t.Fatalf("%s: check: %v", what, err)
	}
	return s
}

// listThenSweep lists dirs through the mount, which populates them, and
// sweeps with ref, which watches them from then on.
func listThenSweep(t *testing.T, r *rig, ref *syncer.Refresher, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		listNames(t, r.mntPath(d))
	}
	if _, err := ref.Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// settledRig is a rig of state st whose refresh the test drives itself
// (ownRefresher), over a host tree of files (path: content, directories
// made as needed) with every entry dated an hour back, so that no mtime is
// too recent to trust (racy), and dirs listed through the mount and swept.
func settledRig(t *testing.T, st consistency.State, files map[string]string, dirs ...string) (*rig, *syncer.Refresher) {
	t.Helper()
	long := time.Now().Add(-time.Hour)
	r := newRescanRig(t, st, "1h", func(h string) {
		for p, content := range files {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(h, p)), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(h, p), content)
		}
		// A Chtimes leaves the parent's mtime alone: any order will do.
		filepath.Walk(h, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Chtimes(p, long, long)
		})
	})
	ref := ownRefresher(t, r, false)
	listThenSweep(t, r, ref, dirs...)
	return r, ref
}

// sameMtime fails t unless the container sees rel's mtime as the host has it.
func sameMtime(t *testing.T, r *rig, rel string) {
	t.Helper()
	h, err := os.Stat(r.hostPath(rel))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := os.Stat(r.mntPath(rel)); err != nil || !c.ModTime().Equal(h.ModTime()) {
		t.Fatalf("%s's mtime in the container: %v (%v), the host's is %v", rel, c.ModTime(), err, h.ModTime())
	}
}

// rules C5 and D6, as the front runs them: sweeps go on after the first, so
// an edit in place in a directory with no recent host change (which no check
// lists: its mtime does not move) still arrives.
func TestC5_D6_EditsInPlaceArriveWithTheSweeps(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			long := time.Now().Add(-time.Hour)
			r := newRig(t, st, func(h string) {
				os.MkdirAll(filepath.Join(h, "d"), 0o755)
				writeFile(t, filepath.Join(h, "d/a"), "v1")
				for _, d := range []string{"d", ""} { // not racy
					os.Chtimes(filepath.Join(h, d), long, long)
				}
			})
			if got := readFile(t, r.mntPath("d/a")); got != "v1" {
				t.Fatalf("d/a in the container: %q", got)
			}
			// Past the first sweep, and past d's first check (it was
			// populated just now) at the rig's 50 ms interval.
			time.Sleep(500 * time.Millisecond)
			writeFile(t, r.hostPath("d/a"), "v2")
			if err := os.Chtimes(r.hostPath("d/a"), long.Add(time.Minute), long.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "an edit in place on the host, in the container", func() bool {
				return readFile(t, r.mntPath("d/a")) == "v2"
			})
		})
	}
}

// rules C2 and D6, across a crash: the refresh brings a host create in by
// making the entry through the mount and then giving it the host's
// attributes and base. A plugin that died in between left an entry without
// a base in a directory already populated, which the next sweep took for
// the container's own and left alone for good: a file that read empty, a
// directory with mode 0700. The next sweep finishes it from the host.
func TestC2_D6_AHostCreateCutShortIsFinishedByTheNextSweep(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			r, ref := settledRig(t, st, map[string]string{"d/a": "a"}, "", "d")

			// New on the host, and made in the store as far as a create
			// from the host gets before its attributes and base.
			writeFile(t, r.hostPath("d/new"), "host content")
			if err := os.Mkdir(r.hostPath("d/sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, r.hostPath("d/sub/x"), "x")
			local := r.front.(*storeFront).ost.st.Local()
			f, err := local.OpenFile("d/new", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
			if err := local.Mkdir("d/sub", 0o700); err != nil {
				t.Fatal(err)
			}

			if _, err := ref.Scan(context.Background()); err != nil {
				t.Fatalf("sweep after the cut-short creates: %v", err)
			}
			if got := readFile(t, r.mntPath("d/new")); got != "host content" {
				t.Fatalf("d/new reads %q after the sweep, want the host's %q", got, "host content")
			}
			for rel, want := range map[string]os.FileMode{"d/new": 0o644, "d/sub": 0o755} {
				fi, err := os.Lstat(r.mntPath(rel))
				if err != nil || fi.Mode().Perm() != want {
					t.Fatalf("%s in the container: %v (%v), want mode %v as on the host", rel, fi.Mode(), err, want)
				}
			}
			if got := listNames(t, r.mntPath("d/sub")); len(got) != 1 || got[0] != "x" {
				t.Fatalf("d/sub lists %q, want the host's [x]", got)
			}
			// Finished for good: the next sweep finds nothing to bring in.
			s, err := ref.Scan(context.Background())
			if err != nil || s.Applied != 0 {
				t.Fatalf("second sweep: %d changes brought in (%v), want none", s.Applied, err)
			}
			sameMtime(t, r, "d/new")
		})
	}
}

// rule C2: a host edit brought in carries the host's mtime into the
// container, for a file it had read (whose new content is fetched at once)
// and for one it had not (a stub: only the size changes). The refresh
// truncates the file through the mount for the IN_MODIFY; that truncate
// used to set the store's mtime to the time of the refresh.
func TestC2_AHostEditArrivesWithTheHostsMtime(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			r, ref := settledRig(t, st, map[string]string{"d/read": "v1", "d/stub": "v1"}, "", "d")
			if got := readFile(t, r.mntPath("d/read")); got != "v1" {
				t.Fatalf("d/read in the container: %q", got)
			}
			edited := time.Now().Add(-30 * time.Minute) // not the settled tree's time
			for _, rel := range []string{"d/read", "d/stub"} {
				writeFile(t, r.hostPath(rel), "version 2")
				if err := os.Chtimes(r.hostPath(rel), edited, edited); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := ref.Scan(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, rel := range []string{"d/read", "d/stub"} {
				if got := readFile(t, r.mntPath(rel)); got != "version 2" {
					t.Fatalf("%s in the container after the sweep: %q, want the host's edit", rel, got)
				}
				sameMtime(t, r, rel)
			}
		})
	}
}

// Rules C5 and D6 for symlinks: the host retargeting a symlink or removing
// one reaches the container. A symlink cannot carry the base xattr, so its
// base is kept in memory (store.EntryBase), and the refresh read the xattr
// only: every symlink looked like one the container had made, and no host
// change to one ever arrived ("timed out waiting for l to point to b").
func TestC5_D6_AHostSymlinkRetargetedOrRemovedArrives(t *testing.T) {
	forStoreRigs(t, func(t *testing.T, st consistency.State, open rigOpener) {
		r := open(t, st, func(h string) {
			for _, name := range []string{"l", "m"} {
				if err := os.Symlink("a", filepath.Join(h, name)); err != nil {
					t.Fatal(err)
				}
			}
		})
		for _, name := range []string{"l", "m"} {
			if got, err := os.Readlink(r.mntPath(name)); err != nil || got != "a" {
				t.Fatalf("%s in the container: %q %v, want the host's \"a\"", name, got, err)
			}
		}
		retargetAndRemove(t, r)
	})
}

// retargetAndRemove points the host's symlink l to b, removes its symlink
// m, and waits for both changes to reach the container.
func retargetAndRemove(t *testing.T, r *rig) {
	t.Helper()
	if err := os.Remove(r.hostPath("l")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("b", r.hostPath("l")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(r.hostPath("m")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "l to point to b", func() bool {
		got, _ := os.Readlink(r.mntPath("l"))
		return got == "b"
	})
	waitFor(t, "m to be gone", func() bool {
		_, err := os.Lstat(r.mntPath("m"))
		return os.IsNotExist(err)
	})
}

// Rules C5 and D6 for symlinks across a restart: a cached store keeps
// symlink bases in memory only, so after a restart its symlinks have none.
// The sweep gives one with the host's target the host's base, and brings a
// retarget or a removal in as for any symlink. Without that (Plan left a
// symlink without a base to writeback, as the container's): "timed out
// waiting for l to point to b". A delegated store keeps them in its journal.
func TestC5_D6_AHostSymlinkChangeArrivesAfterARestart(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			r := newRig(t, st, func(h string) {
				for _, name := range []string{"l", "m", "n"} {
					if err := os.Symlink("a", filepath.Join(h, name)); err != nil {
						t.Fatal(err)
					}
				}
			})
			if got := strings.Join(listNames(t, r.mnt), " "); got != "l m n" {
				t.Fatalf("listed: %q", got)
			}
			r = restartRig(t, r)
			retargetAndRemove(t, r)
			if got, err := os.Readlink(r.mntPath("n")); err != nil || got != "a" {
				t.Fatalf("n, unchanged on the host, in the container: %q %v", got, err)
			}
		})
	}
}

// stopRig closes r's front and its stores, as a plugin going away does
// (one Opener at a time may have a store's journal).
func stopRig(t *testing.T, r *rig) {
	t.Helper()
	if err := r.front.Close(bg()); err != nil {
		t.Fatal(err)
	}
	r.o.mu.Lock()
	for k, s := range r.o.stores {
		if s.drain != nil {
			s.drain()
		}
		r.o.closeStore(k, s)
	}
	r.o.mu.Unlock()
}

// restartRig closes r's front and its store, as a plugin going away does,
// and opens the same volume again with a new Opener on the same state
// directory, as the next run does.
func restartRig(t *testing.T, r *rig) *rig {
	t.Helper()
	return restartRigAfter(t, r, nil)
}

// restartRigAfter is restartRig with between (if not nil) run while the
// volume is closed: what a run killed at some point left.
func restartRigAfter(t *testing.T, r *rig, between func()) *rig {
	t.Helper()
	stopRig(t, r)
	if between != nil {
		between()
	}
	o := New(r.o.cfg)
	f, err := o.Open(bg(), r.spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(bg()); err != nil {
			t.Errorf("close front: %v", err)
		}
		o.waitDrained(r.spec.Key, 3*time.Second)
	})
	return &rig{host: r.host, mnt: f.Mountpoint(), front: f, o: o, spec: r.spec}
}

// Rules C5 and D6 at the cost of a sweep: a symlink the host has not
// changed since the container listed it is left alone by the sweep, as a
// file is. Its base is the one kept in memory (store.EntryBase); taken for
// one without a base, each was looked at again on the host at every
// sweep, two requests to the share per symlink ("2 host changes brought
// in", none made).
func TestC5_D6_AnUnchangedSymlinkCostsASweepNothing(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			r := newRescanRig(t, st, "1h", func(h string) {
				for _, name := range []string{"l", "m"} {
					if err := os.Symlink("a", filepath.Join(h, name)); err != nil {
						t.Fatal(err)
					}
				}
			})
			ref := ownRefresher(t, r, false)
			listNames(t, r.mnt)
			s, err := ref.Scan(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if s.Dirs == 0 || s.Applied != 0 {
				t.Fatalf("sweep: %d directories listed, %d host changes brought in; want 1 listed, none brought in", s.Dirs, s.Applied)
			}
		})
	}
}
