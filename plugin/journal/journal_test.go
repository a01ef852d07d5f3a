package journal

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func open(t *testing.T, path string) *Journal {
	t.Helper()
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func mark(t *testing.T, j *Journal, dirty bool, rels ...string) {
	t.Helper()
	for _, r := range rels {
		var err error
		if dirty {
			err = j.MarkDirty(r)
		} else {
			err = j.MarkClean(r)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func wantPending(t *testing.T, j *Journal, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	slices.Sort(want)
	if got := j.Pending(); !slices.Equal(got, want) {
		t.Fatalf("pending = %q, want %q", got, want)
	}
}

// records parses the journal file the way Open does, without repairing it.
func records(t *testing.T, path string) (kinds []byte, rels []string, rest int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), magic) {
		t.Fatalf("bad header %q", data[:min(len(data), 8)])
	}
	b := data[headerLen:]
	for len(b) > 0 {
		rel, kind, _, n, ok := decode(b)
		if !ok {
			break
		}
		kinds, rels = append(kinds, kind), append(rels, rel)
		b = b[n:]
	}
	return kinds, rels, len(b)
}

func size(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func TestReplayAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "journal")
	j := open(t, path)
	wantPending(t, j)
	mark(t, j, true, "a", "b/c", "d")
	mark(t, j, false, "b/c", "never-dirty")
	mark(t, j, true, "e")
	wantPending(t, j, "a", "d", "e")
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.MarkDirty("z"); err == nil {
		t.Fatal("MarkDirty on a closed journal succeeded")
	}

	j2 := open(t, path)
	wantPending(t, j2, "a", "d", "e")
	mark(t, j2, false, "a")
	mark(t, j2, true, "f")
	j2.Close()

	j3 := open(t, path)
	wantPending(t, j3, "d", "e", "f")
}

func TestMarkDirtyTwiceWritesOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	j := open(t, path)
	mark(t, j, true, "a")
	before := size(t, path)
	mark(t, j, true, "a", "a", "a")
	if after := size(t, path); after != before {
		t.Fatalf("re-marking a dirty path wrote %d bytes", after-before)
	}
	mark(t, j, false, "a")
	before = size(t, path)
	mark(t, j, false, "a")
	if after := size(t, path); after != before {
		t.Fatalf("re-marking a clean path wrote %d bytes", after-before)
	}
}

func TestTornTailIsDropped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	j := open(t, path)
	mark(t, j, true, "kept", "also kept")
	j.Close()
	good := size(t, path)

	// Every proper prefix of a record is a torn write.
	rec := encode(nil, "torn", kindDirty, "")
	for cut := 1; cut < len(rec); cut++ {
		if err := os.Truncate(path, good); err != nil {
			t.Fatal(err)
		}
		appendBytes(t, path, rec[:cut])
		j := open(t, path)
		wantPending(t, j, "kept", "also kept")
		if got := size(t, path); got != good {
			t.Fatalf("cut %d: torn tail not truncated: size %d, want %d", cut, got, good)
		}
		j.Close()
	}

	// Appends after the repair are readable.
	j = open(t, path)
	mark(t, j, true, "after")
	j.Close()
	wantPending(t, open(t, path), "kept", "also kept", "after")
}

func TestCorruptRecordIsDropped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	j := open(t, path)
	mark(t, j, true, "first", "second")
	j.Close()
	good := size(t, path)
	j = open(t, path)
	mark(t, j, true, "third")
	j.Close()

	for _, tc := range []struct {
		name string
		off  int64 // from the start of the "third" record
	}{
		{"length", 0},
		{"kind", 4},
		{"path", 6},
		{"crc", int64(len(encode(nil, "third", kindDirty, ""))) - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "journal")
			copyFile(t, path, p)
			flipByte(t, p, good+tc.off)
			j := open(t, p)
			wantPending(t, j, "first", "second")
			if got := size(t, p); got != good {
				t.Fatalf("corrupt tail not truncated: size %d, want %d", got, good)
			}
			mark(t, j, true, "fourth")
			j.Close()
			wantPending(t, open(t, p), "first", "second", "fourth")
		})
	}
}

// A damaged record in the middle ends the readable journal: what follows it
// cannot be framed. Documented behaviour, checked so it stays deliberate.
func TestCorruptMiddleRecordDropsTheRest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	j := open(t, path)
	mark(t, j, true, "first")
	j.Close()
	good := size(t, path)
	j = open(t, path)
	mark(t, j, true, "second", "third")
	j.Close()
	flipByte(t, path, good+6)
	wantPending(t, open(t, path), "first")
}

func TestBadHeaderIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	if err := os.WriteFile(path, []byte("dirty a\ndirty b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if j, err := Open(path); err == nil {
		j.Close()
		t.Fatal("opened a file that is not a journal")
	} else if !strings.Contains(err.Error(), path) {
		t.Fatalf("error does not name the file: %v", err)
	}
	if data, _ := os.ReadFile(path); string(data) != "dirty a\ndirty b\n" {
		t.Fatalf("refused file was modified: %q", data)
	}
}

func TestTornHeaderIsReset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	if err := os.WriteFile(path, []byte(magic[:3]), 0o600); err != nil {
		t.Fatal(err)
	}
	j := open(t, path)
	wantPending(t, j)
	mark(t, j, true, "a")
	j.Close()
	wantPending(t, open(t, path), "a")
}

func TestCompactionKeepsExactlyTheDirtySet(t *testing.T) {
	old := compactMin
	compactMin = 512
	t.Cleanup(func() { compactMin = old })

	path := filepath.Join(t.TempDir(), "journal")
	j := open(t, path)
	want := map[string]bool{}
	for i := range 200 {
		rel := fmt.Sprintf("dir/file-%03d", i)
		mark(t, j, true, rel)
		want[rel] = true
		if i%10 != 0 {
			mark(t, j, false, rel)
			delete(want, rel)
		}
	}
	// 200 dirty + 180 clean records would be ~8 KiB; compaction keeps it
	// near the 20 live records.
	var wantList []string
	var live int64
	for rel := range want {
		wantList = append(wantList, rel)
		live += recSize(rel, kindDirty, "")
	}
	if got := size(t, path); got > compactRatio*(headerLen+live) {
		t.Fatalf("journal not compacted: %d bytes for %d live bytes", got, live)
	}
	if _, err := os.Stat(tempPath(path)); !os.IsNotExist(err) {
		t.Fatalf("temp file left behind: %v", err)
	}
	wantPending(t, j, wantList...)

	// Appends keep working on the rewritten file.
	mark(t, j, true, "later")
	wantList = append(wantList, "later")
	j.Close()

	// Rewrite it once more from a reopen and check the file itself: only
	// "dirty" records, exactly the dirty set.
	j = open(t, path)
	wantPending(t, j, wantList...)
	if err := j.compact(); err != nil {
		t.Fatal(err)
	}
	j.Close()
	kinds, rels, rest := records(t, path)
	if rest != 0 {
		t.Fatalf("%d unreadable bytes after compaction", rest)
	}
	for _, k := range kinds {
		if k != kindDirty {
			t.Fatalf("compacted file holds a %q record", k)
		}
	}
	slices.Sort(wantList)
	if !slices.Equal(rels, wantList) {
		t.Fatalf("compacted file holds %q, want %q", rels, wantList)
	}
}

// compact is _compact with the lock, for tests.
func (j *Journal) compact() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j._compact()
}

func TestOddNames(t *testing.T) {
	var all []byte
	for b := 1; b < 256; b++ {
		all = append(all, byte(b))
	}
	names := []string{
		"",               // the root
		"line\nbreak",    // a text format would split this
		"\n",             //
		"crlf\r\n",       //
		"dirty x",        // looks like a record
		"tab\tand space", //
		"ünïcödé/日本",     //
		"\xff\xfe invalid utf-8",
		string(all),
		strings.Repeat("long/", 2000),
	}
	path := filepath.Join(t.TempDir(), "journal")
	j := open(t, path)
	mark(t, j, true, names...)
	mark(t, j, false, "\n")
	if err := j.MarkDirty("nul\x00byte"); err == nil {
		t.Fatal("accepted a path with NUL")
	}
	j.Close()
	want := slices.DeleteFunc(slices.Clone(names), func(s string) bool { return s == "\n" })
	wantPending(t, open(t, path), want...)
}

func TestConcurrentMarks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	j := open(t, path)
	const workers, per = 16, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				// Overlapping names: every path is marked by two workers.
				rel := fmt.Sprintf("p%d/%d", w/2, i)
				if err := j.MarkDirty(rel); err != nil {
					t.Error(err)
					return
				}
				if i%2 == 1 {
					if err := j.MarkClean(rel); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	// Each odd path ended with a clean from at least one worker, but the
	// other worker's dirty may have come after it; even paths are dirty.
	got := map[string]bool{}
	for _, r := range j.Pending() {
		got[r] = true
	}
	for w := range workers / 2 {
		for i := 0; i < per; i += 2 {
			if rel := fmt.Sprintf("p%d/%d", w, i); !got[rel] {
				t.Fatalf("%s lost", rel)
			}
		}
	}
	mem := j.Pending()
	j.Close()
	wantPending(t, open(t, path), mem...)
}

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[off] ^= 0x5a
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// wantTombs checks j's tombstones.
func wantTombs(t *testing.T, j *Journal, want map[string]string) {
	t.Helper()
	wantValues(t, "tombstones", j.Tombs(), want)
}

// Tombstones (rule D7: what the host had at a path the store no longer
// has) survive a restart, beside the dirty set and independent of it.
func TestD7_TombstonesSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	j := open(t, path)
	value := "base\x00with\nany\xffbytes"
	for _, step := range []struct {
		rel, value string
	}{{"gone", "v1"}, {"link", value}, {"gone", "v2"}, {"dropped", "x"}} {
		if err := j.SetTomb(step.rel, []byte(step.value)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.DropTomb("dropped"); err != nil {
		t.Fatal(err)
	}
	mark(t, j, true, "gone")
	before := size(t, path)
	if err := j.SetTomb("link", []byte(value)); err != nil { // unchanged: no record
		t.Fatal(err)
	}
	if err := j.DropTomb("never"); err != nil {
		t.Fatal(err)
	}
	if got := size(t, path); got != before {
		t.Fatalf("journal grew from %d to %d bytes for no change", before, got)
	}
	want := map[string]string{"gone": "v2", "link": value}
	wantTombs(t, j, want)
	j.Close()

	j = open(t, path)
	wantTombs(t, j, want)
	wantPending(t, j, "gone")
	if err := j.compact(); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j = open(t, path)
	wantTombs(t, j, want)
	wantPending(t, j, "gone")
	if err := j.SetTomb("bad\x00name", nil); err == nil {
		t.Fatal("a path with NUL was accepted")
	}
}

// An older journal (version 1: before tombstones; version 2: before
// writing marks) is read, and rewritten as this version before a record of
// a newer kind is appended to it.
func TestOlderJournalsAreUpgraded(t *testing.T) {
	for _, tc := range []struct {
		header string
		tomb   bool // the version has tombstones
		kinds  string
		rels   []string // of the upgraded file: dirty, tombstones, writing marks, each sorted
	}{
		{magicV1, false, "DTW", []string{"b", "t", "w"}},
		{magicV2, true, "DTTW", []string{"b", "old", "t", "w"}},
	} {
		t.Run(fmt.Sprintf("%q", tc.header), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal")
			old := []byte(tc.header)
			old = encode(old, "a", kindDirty, "")
			old = encode(old, "b", kindDirty, "")
			old = encode(old, "a", kindClean, "")
			tombs := map[string]string{"t": "v"}
			if tc.tomb {
				old = encode(old, "old", kindTomb, "o")
				tombs["old"] = "o"
			}
			if err := os.WriteFile(path, old, 0o600); err != nil {
				t.Fatal(err)
			}
			j := open(t, path)
			wantPending(t, j, "b")
			if err := j.SetTomb("t", []byte("v")); err != nil {
				t.Fatal(err)
			}
			if err := j.SetWriting("w", []byte("x")); err != nil {
				t.Fatal(err)
			}
			j.Close()
			kinds, rels, rest := records(t, path) // fails unless the header is this version's
			if rest != 0 || string(kinds) != tc.kinds || !slices.Equal(rels, tc.rels) {
				t.Fatalf("upgraded file: kinds %q rels %q, %d bytes left; want kinds %q rels %q", kinds, rels, rest, tc.kinds, tc.rels)
			}
			j = open(t, path)
			wantPending(t, j, "b")
			wantValues(t, "tombstones", j.Tombs(), tombs)
			wantValues(t, "writing marks", j.Writing(), map[string]string{"w": "x"})
		})
	}
}

// A version 2 file holding a record of a kind version 3 brought is
// damaged there (no build of version 2 wrote one): replay stops at it.
func TestAKindTheVersionHadNotIsDamage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	old := []byte(magicV2)
	old = encode(old, "a", kindDirty, "")
	old = encode(old, "w", kindWriting, "x")
	old = encode(old, "b", kindDirty, "")
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	j := open(t, path)
	wantPending(t, j, "a")
	wantValues(t, "writing marks", j.Writing(), map[string]string{})
}

// Writing marks (rule D7: what a symlink's writeback is putting in place
// on the host, which a symlink cannot carry as an xattr) survive a restart
// and a compaction, beside the tombstones and independent of them.
func TestD7_WritingMarksSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	j := open(t, path)
	for _, step := range []struct{ rel, value string }{{"l", "v1"}, {"l", "v2"}, {"m", "x"}, {"gone", "y"}} {
		if err := j.SetWriting(step.rel, []byte(step.value)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.SetTomb("l", []byte("the base")); err != nil {
		t.Fatal(err)
	}
	if err := j.DropWriting("gone"); err != nil {
		t.Fatal(err)
	}
	before := size(t, path)
	if err := j.SetWriting("m", []byte("x")); err != nil { // unchanged: no record
		t.Fatal(err)
	}
	if err := j.DropWriting("never"); err != nil {
		t.Fatal(err)
	}
	if got := size(t, path); got != before {
		t.Fatalf("journal grew from %d to %d bytes for no change", before, got)
	}
	want := map[string]string{"l": "v2", "m": "x"}
	tombs := map[string]string{"l": "the base"}
	for _, compact := range []bool{false, true} {
		j.Close()
		j = open(t, path)
		wantValues(t, "writing marks", j.Writing(), want)
		wantValues(t, "tombstones", j.Tombs(), tombs)
		if compact {
			if err := j.compact(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := j.DropWriting("l"); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j = open(t, path)
	wantValues(t, "writing marks", j.Writing(), map[string]string{"m": "x"})
	wantValues(t, "tombstones", j.Tombs(), tombs)
}

func wantValues(t *testing.T, what string, got map[string][]byte, want map[string]string) {
	t.Helper()
	g := map[string]string{}
	for rel, v := range got {
		g[rel] = string(v)
	}
	if !maps.Equal(g, want) {
		t.Fatalf("%s = %q, want %q", what, g, want)
	}
}

// A tombstone record torn by a crash is dropped like any other.
func TestTornTombstoneIsDropped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	j := open(t, path)
	if err := j.SetTomb("whole", []byte("v")); err != nil {
		t.Fatal(err)
	}
	j.Close()
	rec := encode(nil, "torn", kindTomb, "value")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(rec[:len(rec)-3])
	f.Close()
	j = open(t, path)
	wantTombs(t, j, map[string]string{"whole": "v"})
	if err := j.SetTomb("after", []byte("w")); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j = open(t, path)
	wantTombs(t, j, map[string]string{"whole": "v", "after": "w"})
}
