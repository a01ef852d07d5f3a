package hostpath

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/internal/testshare"
)

// A listing of a directory on a share a round trip away lstats its entries
// side by side once the first shows that each is a round trip: one after
// the other, a listing of N entries took N round trips (the first look at a
// large directory over 9p, or virtiofs or NFS without attribute caching).
// The listing is what it was: every entry, sorted, with its own attributes.
func TestAListingOfAFarDirectoryStatsItsEntriesSideBySide(t *testing.T) {
	for _, untyped := range []bool{false, true} {
		name := "ReadDir"
		if untyped {
			name = "ReadDirTypes, entries without a type"
		}
		t.Run(name, func(t *testing.T) {
			backing, mnt := t.TempDir(), t.TempDir()
			const files = 32
			for i := range files {
				mustWrite(t, filepath.Join(backing, fmt.Sprintf("f%02d", i)), fmt.Sprint(i*1000))
			}
			share := testshare.MountFar(t, mnt, backing, time.Millisecond, untyped)
			share.SetFar(true)
			r, err := Open(mnt)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var got []string
			if untyped {
				ents, err := r.ReadDirTypes("")
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range ents {
					// Its own inode, as the share gives it to an lstat of
					// the name alone.
					var own syscall.Stat_t
					if err := syscall.Lstat(filepath.Join(mnt, e.Name), &own); err != nil {
						t.Fatal(err)
					}
					if e.Type != syscall.S_IFREG || e.Ino != own.Ino {
						t.Errorf("%s: type %o, inode %d; want a regular file's, its own %d, from its lstat", e.Name, e.Type, e.Ino, own.Ino)
					}
					got = append(got, e.Name)
				}
			} else {
				ents, err := r.ReadDir("")
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range ents {
					var i int
					fmt.Sscanf(e.Name, "f%02d", &i)
					if want := int64(len(fmt.Sprint(i * 1000))); e.Stat.Size != want {
						t.Errorf("%s: size %d, want its own %d", e.Name, e.Stat.Size, want)
					}
					got = append(got, e.Name)
				}
			}
			if len(got) != files || got[0] != "f00" || got[files-1] != fmt.Sprintf("f%02d", files-1) {
				t.Fatalf("listed %v, want f00..f%02d in order", got, files-1)
			}
			if most := share.Most(); most < 2 {
				t.Fatalf("the listing's lstats: at most %d under way at once, want several (one after the other, a listing over a far share takes a round trip per entry)", most)
			}
		})
	}
}

// A Root keeps its pace from one listing to the next: after a listing whose
// lstats were round trips, a small directory's (three entries, which alone
// would go one after the other) overlap after the first.
func TestARootKeepsItsPaceFromListingToListing(t *testing.T) {
	backing, mnt := t.TempDir(), t.TempDir()
	mustMkdir(t, filepath.Join(backing, "big"))
	mustMkdir(t, filepath.Join(backing, "small"))
	for _, p := range []string{"big/f00", "big/f01", "big/f02", "big/f03", "big/f04", "big/f05", "big/f06", "big/f07", "small/a", "small/b", "small/c"} {
		mustWrite(t, filepath.Join(backing, p), p)
	}
	share := testshare.MountFar(t, mnt, backing, time.Millisecond, false)
	share.SetFar(true)
	listSmall := func(r *Root) int32 {
		share.ResetMost()
		ents, err := r.ReadDir("small")
		if err != nil || len(ents) != 3 {
			t.Fatalf("ReadDir small: %v, %v", ents, err)
		}
		return share.Most()
	}
	fresh, err := Open(mnt)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if most := listSmall(fresh); most != 1 {
		t.Fatalf("a small directory listed first: at most %d lstats under way at once, want 1 (three round trips before any overlap)", most)
	}
	r, err := Open(mnt)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.ReadDir("big"); err != nil {
		t.Fatal(err)
	}
	if most := listSmall(r); most < 2 {
		t.Fatalf("a small directory listed after a big one's round trips: at most %d lstats under way at once, want 2 (after the first)", most)
	}
}
