package frontend

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/internal/testshare"
)

// rules C5 and D6, over a share a round trip away: a check stats the
// watched directories, and the files in use, side by side, not one after
// the other. One after the other, a check of N directories took N round
// trips, and the next check waited nine times that (the refresher's duty
// cycle): over sshfs with its caches off and 2 ms added to each round trip,
// host edits reached a container that had listed 900 directories 75-120 s
// late.
func TestC5_D6_AChecksHostStatsAreUnderWayTogether(t *testing.T) {
	for _, c := range []struct {
		name, per   string // per: what each stat is of
		dirs, files int    // directories watched beside the root, files in each (in the root: none)
		inUse       bool
	}{
		{name: "watched directories", per: "watched directory", dirs: 16, files: 1},
		// One directory watched (the root): its one stat is not two under way.
		{name: "files in use", per: "file in use", dirs: 0, files: 16, inUse: true},
	} {
		for _, st := range storeStates {
			t.Run(c.name+"/"+st.String(), func(t *testing.T) {
				var share *testshare.Far
				var dirs, files []string
				for i := range c.dirs {
					d := fmt.Sprintf("d%02d", i)
					dirs = append(dirs, d)
					for j := range c.files {
						files = append(files, fmt.Sprintf("%s/f%02d", d, j))
					}
				}
				if c.dirs == 0 {
					for j := range c.files {
						files = append(files, fmt.Sprintf("f%02d", j))
					}
				}
				r := newRescanRig(t, st, "1h", func(h string) {
					backing := t.TempDir()
					long := time.Now().Add(-time.Hour)
					for _, d := range dirs {
						os.Mkdir(filepath.Join(backing, d), 0o755)
					}
					for _, f := range files {
						writeFile(t, filepath.Join(backing, f), f)
					}
					for _, p := range append(append([]string{""}, dirs...), files...) {
						os.Chtimes(filepath.Join(backing, p), long, long) // not racy
					}
					share = testshare.MountFar(t, h, backing, 5*time.Millisecond, false)
				})
				ref := ownRefresher(t, r, c.inUse)
				listThenSweep(t, r, ref, append([]string{""}, dirs...)...)
				if c.inUse {
					for _, f := range files {
						readFile(t, r.mntPath(f)) // opened: in use
					}
				}
				// A host change for the check to find through its stats side
				// by side: a new file in the last directory (its mtime
				// moves: it and its parent are listed), or an edit in place
				// to the last file in use (only the file's own attributes
				// move: its directory is listed).
				changed, wantDirs := files[len(files)-1], 1
				if !c.inUse {
					changed, wantDirs = dirs[len(dirs)-1]+"/new", 2
				}
				writeFile(t, r.hostPath(changed), "changed on the host")
				at := time.Now().Add(-30 * time.Minute) // not racy
				if err := os.Chtimes(r.hostPath(changed), at, at); err != nil {
					t.Fatal(err)
				}
				share.SetFar(true)
				s := runCheck(t, ref, "the check")
				share.SetFar(false)
				wantFiles := 0
				if c.inUse {
					wantFiles = len(files)
				}
				if s.Checked != len(dirs)+1 || s.Files != wantFiles {
					t.Fatalf("set-up: the check stat'ed %d directories and %d files, want the %d watched and %d in use",
						s.Checked, s.Files, len(dirs)+1, wantFiles)
				}
				if s.Dirs != wantDirs {
					t.Errorf("the check listed %d directories, want %d: the change to %s found", s.Dirs, wantDirs, changed)
				}
				if got := readFile(t, r.mntPath(changed)); got != "changed on the host" {
					t.Errorf("%s in the container after the check: %q, want the host's", changed, got)
				}
				if most := share.Most(); most < 2 {
					t.Fatalf("the check's host stats: at most %d under way at once, want several (one after the other, a check over a slow share takes a round trip per %s)", most, c.per)
				}
			})
		}
	}
}
