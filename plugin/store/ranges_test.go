package store

import (
	"bytes"
	"context"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
)

func TestAddSpanMergesWhatOverlapsOrTouches(t *testing.T) {
	var got []span
	for _, s := range []span{{10, 20}, {30, 40}, {0, 5}, {20, 25}, {50, 60}, {35, 52}, {5, 6}} {
		got = addSpan(got, s)
	}
	want := []span{{0, 6}, {10, 25}, {30, 60}}
	if !slices.Equal(got, want) {
		t.Fatalf("spans = %v, want %v", got, want)
	}
	if got = addSpan(got, span{-1, 100}); !slices.Equal(got, []span{{-1, 100}}) {
		t.Fatalf("a span over all = %v", got)
	}
}

func TestRangeLogForgetsWhatItCannotTell(t *testing.T) {
	l := newRangeLog()
	l.start("small", 1, minLoggedSize-1)
	if _, ok := l.take("small", 1); ok {
		t.Fatal("a small file is logged; it should be copied whole")
	}
	l.start("f", 2, minLoggedSize)
	l.wrote([]string{"f"}, 2, 100, 10)
	l.wrote([]string{"f"}, 2, 105, 10)
	spans, ok := l.take("f", 2)
	if !ok || !slices.Equal(spans, []span{{100, 115}}) {
		t.Fatalf("take = %v, %v", spans, ok)
	}
	if spans, ok := l.take("f", 2); !ok || len(spans) != 0 {
		t.Fatalf("a second take = %v, %v: want nothing written since", spans, ok)
	}
	if _, ok := l.take("f", 3); ok {
		t.Fatal("another inode at the path took the log")
	}
	l.start("f", 2, minLoggedSize)
	l.forget("f")
	if _, ok := l.take("f", 2); ok {
		t.Fatal("a forgotten file was taken")
	}
	l.start("f", 2, minLoggedSize)
	l.kernelWriter(2, 1)
	if _, ok := l.take("f", 2); ok {
		t.Fatal("a file with a passthrough writer was taken")
	}
	l.start("f", 2, minLoggedSize)
	if _, ok := l.take("f", 2); ok {
		t.Fatal("logging began while a passthrough writer was open")
	}
	l.kernelWriter(2, -1)
	l.start("f", 2, minLoggedSize)
	for i := 0; i <= maxSpans; i++ {
		l.wrote([]string{"f"}, 2, int64(i*10), 1)
	}
	if _, ok := l.take("f", 2); ok {
		t.Fatal("a file written in more than maxSpans places is logged")
	}
	if len(l.files) != 0 || len(l.inos) != 0 {
		t.Fatalf("left %d files, %d inodes logged", len(l.files), len(l.inos))
	}
}

// largeFileRig is a delegated store holding a large file "db" that has been
// written back once (so the host has it, and the range log follows it).
type largeFileRig struct {
	s    *Store
	host string
	f    *File // open for reading and writing, as a database keeps it
	want []byte
}

func newLargeFileRig(t *testing.T) *largeFileRig {
	t.Helper()
	s := openTestStore(t, consistency.Delegated, func(string) {})
	if err := s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	me := Owner{Uid: os.Getuid(), Gid: os.Getgid()}
	f, err := s.Create(ctx, "db", unix.O_RDWR, 0o600, me, func() (string, bool) { return "db", true })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Release() })
	r := &largeFileRig{s: s, host: s.Host().Path(), f: f, want: make([]byte, 4<<20)}
	rand.New(rand.NewSource(1)).Read(r.want)
	r.write(t, 0, r.want)
	r.sync(t)
	return r
}

func (r *largeFileRig) write(t *testing.T, off int64, p []byte) {
	t.Helper()
	if _, err := r.f.WriteAt(context.Background(), p, off); err != nil {
		t.Fatal(err)
	}
	if end := off + int64(len(p)); end > int64(len(r.want)) {
		r.want = append(r.want, make([]byte, end-int64(len(r.want)))...)
	}
	copy(r.want[off:], p)
}

// sync is the container's fsync (rule D2): the file is on the host after it.
func (r *largeFileRig) sync(t *testing.T) {
	t.Helper()
	if err := r.f.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// hostIno is the host file's inode: a Put that copies the whole file
// renames a new one over it; one that writes in place keeps it.
func (r *largeFileRig) hostIno(t *testing.T) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(r.host, "db"), &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func (r *largeFileRig) hostMatches(t *testing.T) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(r.host, "db"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, r.want) {
		i := 0
		for i < len(got) && i < len(r.want) && got[i] == r.want[i] {
			i++
		}
		t.Fatalf("host file: %d bytes, first difference at %d; want %d bytes", len(got), i, len(r.want))
	}
}

// Rule D2 for a database's file: each fsync puts the file on the host, and
// for a large file written in a few places that is those places, written in
// place (the host file keeps its inode), not a copy of the whole file.
func TestD2_FsyncOfALargeFileWritesWhatChangedInPlace(t *testing.T) {
	r := newLargeFileRig(t)
	ino := r.hostIno(t)
	before := r.s.Stats().WrittenBytes
	for i := range 20 {
		r.write(t, int64(i*100_003), bytes.Repeat([]byte{byte(i)}, 8192))
		r.sync(t)
		r.hostMatches(t)
	}
	if got := r.hostIno(t); got != ino {
		t.Fatalf("the host file was replaced (inode %d, was %d): the fsyncs copied it whole", got, ino)
	}
	if written := r.s.Stats().WrittenBytes - before; written != 20*8192 {
		t.Fatalf("20 fsyncs after 8 KiB writes wrote %d bytes to the host, want %d", written, 20*8192)
	}
	// Growing the file: the new bytes and the new size reach the host.
	r.write(t, int64(len(r.want))+5000, []byte("past the end"))
	r.sync(t)
	r.hostMatches(t)
}

// What the range log cannot see makes the next Put copy the whole file, and
// the host still ends up with the store's content.
func TestD2_AChangeTheRangeLogCannotSeeIsWrittenBackWhole(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, r *largeFileRig)
	}{
		{"truncate", func(t *testing.T, r *largeFileRig) {
			if err := r.f.Truncate(ctx, 1<<20); err != nil {
				t.Fatal(err)
			}
			r.want = r.want[:1<<20]
		}},
		{"fallocate punching a hole", func(t *testing.T, r *largeFileRig) {
			if err := r.f.Allocate(ctx, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 4096, 65536); err != nil {
				t.Skipf("the store's file system cannot punch holes: %v", err)
			}
			clear(r.want[4096 : 4096+65536])
		}},
		{"a passthrough writer", func(t *testing.T, r *largeFileRig) {
			// The kernel writes the store file itself: here, as it would.
			r.f.KernelWrites()
			if _, err := unix.Pwrite(r.f.Fd(), []byte("unseen"), 300); err != nil {
				t.Fatal(err)
			}
			copy(r.want[300:], "unseen")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newLargeFileRig(t)
			r.write(t, 10, []byte("seen")) // logged, as a write through the plugin is
			tc.change(t, r)
			ino := r.hostIno(t)
			r.sync(t)
			r.hostMatches(t)
			if r.hostIno(t) == ino {
				t.Fatal("written in place after a change the range log cannot see")
			}
		})
	}
}

// Writes racing with the Puts of their file: whatever the interleaving, once
// the writes stop and the file is synced, the host has every byte.
func TestD2_WritesDuringWritebackAllReachTheHost(t *testing.T) {
	r := newLargeFileRig(t)
	ctx := context.Background()
	var mu sync.Mutex // r.want
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			rnd := rand.New(rand.NewSource(int64(w)))
			for range 200 {
				off := rnd.Int63n(int64(5 << 20))
				p := bytes.Repeat([]byte{byte(rnd.Intn(256))}, 1+rnd.Intn(9000))
				mu.Lock()
				_, err := r.f.WriteAt(ctx, p, off)
				if err == nil {
					if end := off + int64(len(p)); end > int64(len(r.want)) {
						r.want = append(r.want, make([]byte, end-int64(len(r.want)))...)
					}
					copy(r.want[off:], p)
				}
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			if err := r.s.Flush(ctx, "db"); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	r.sync(t)
	r.hostMatches(t)
}

// A write that lands while a Put copies the file whole (after the copy has
// read that place) is in the range log for the next Put.
func TestD2_AWriteDuringAWholeCopyReachesTheHostNextTime(t *testing.T) {
	r := newLargeFileRig(t)
	// A change the log cannot see: the next Put copies the whole file.
	if err := r.f.Truncate(context.Background(), int64(len(r.want))); err != nil {
		t.Fatal(err)
	}
	once := sync.Once{}
	testHookPutWritten = func(rel string) {
		once.Do(func() {
			if _, err := r.f.WriteAt(context.Background(), []byte("during the copy"), 1000); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(func() { testHookPutWritten = nil })
	copy(r.want[1000:], "during the copy")
	r.sync(t) // the whole copy, and the write during it
	r.sync(t)
	r.hostMatches(t)
}
