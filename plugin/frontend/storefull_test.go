package frontend

// Issue 5 fault: the local store's disk fills up. The front is opened
// directly (as rig does) with its state dir on a small tmpfs.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/driver"
	"github.com/bindstate/bindstate/plugin/hostpath"
	"github.com/bindstate/bindstate/plugin/internal/logrepeat"
	"github.com/bindstate/bindstate/plugin/internal/testenv"
)

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// rule D4 with a full store: container writes fail with ENOSPC (not EIO,
// not silently), what was written before is kept and written back, the
// journal stays usable (more writes after space is freed, a reopen of the
// store as after a plugin restart), nothing is lost.
func TestD4_Fault_StoreDiskFull(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			base, host, state := smallStoreDirs(t)
			o := New(Config{StateDir: state, MountRoot: filepath.Join(base, "mnt"),
				Policy: hostpath.Policy{AllowedRoots: []string{base}}, Log: testLogger(t)})
			spec := driver.FrontSpec{Key: "full-" + st.String(), Source: host, State: st, Opts: map[string]string{"rescan": "1h"}}
			f, err := o.Open(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			closed := false
			t.Cleanup(func() {
				if !closed {
					f.Close(context.Background())
				}
			})
			mnt := f.Mountpoint()
			before := strings.Repeat("b", 100<<10)
			writeFile(t, filepath.Join(mnt, "before"), before)

			// fill the store
			big, err := os.Create(filepath.Join(mnt, "big"))
			if err != nil {
				t.Fatal(err)
			}
			chunk := make([]byte, 256<<10)
			var werr error
			written := 0
			for i := 0; i < 64 && werr == nil; i++ {
				var n int
				n, werr = big.Write(chunk)
				written += n
			}
			if werr == nil {
				werr = big.Sync()
			}
			cerr := big.Close()
			if werr == nil {
				werr = cerr
			}
			if !errors.Is(werr, unix.ENOSPC) {
				t.Fatalf("writing 16 MiB into a 6 MiB store: %v after %d bytes; want ENOSPC", werr, written)
			}
			t.Logf("store full after %d bytes: %v", written, werr)
			if got := readFile(t, filepath.Join(mnt, "before")); got != before {
				t.Fatalf("earlier file changed in the mount (%d bytes)", len(got))
			}
			// free the space, write on
			if err := os.Remove(filepath.Join(mnt, "big")); err != nil {
				t.Fatalf("remove the big file: %v", err)
			}
			// Its store copy's space comes back once the plugin's last
			// descriptor of it is closed: the kernel sends the RELEASE of
			// the container's handle and the FORGET of the node after the
			// close and the unlink have returned, and a writeback may be
			// reading it. On a loaded machine that is a moment later.
			waitStoreSpace(t, state, 1<<20)
			writeFile(t, filepath.Join(mnt, "after"), "after")
			ctx, cancel := contextWithTimeout(30 * time.Second)
			defer cancel()
			if err := f.Flush(ctx); err != nil {
				t.Fatalf("flush after the store was full: %v", err)
			}
			if got := readFile(t, filepath.Join(host, "before")); got != before {
				t.Errorf("host before: %d bytes, want %d", len(got), len(before))
			}
			if got := readFile(t, filepath.Join(host, "after")); got != "after" {
				t.Errorf("host after: %q", got)
			}
			if _, err := os.Lstat(filepath.Join(host, "big")); !os.IsNotExist(err) {
				t.Errorf("host big (removed in the container): %v; want gone", err)
			}
			// reopen, as after a restart: the journal must still load
			if err := f.Close(ctx); err != nil {
				t.Fatalf("close: %v", err)
			}
			closed = true
			o2 := New(o.cfg)
			f2, err := o2.Open(ctx, spec)
			if err != nil {
				t.Fatalf("reopen after the store was full: %v", err)
			}
			defer f2.Close(context.Background())
			if got := readFile(t, filepath.Join(f2.Mountpoint(), "after")); got != "after" {
				t.Errorf("after reopen the mount reads %q", got)
			}
			// What the journal still names (the big file's removal, when its
			// handle's release came after the flush) is written back shortly.
			deadline := time.Now().Add(15 * time.Second)
			for s := f2.Status(); s.Dirty != 0 || s.Failed != 0; s = f2.Status() {
				if time.Now().After(deadline) {
					t.Fatalf("status after reopen: %+v; want nothing left to write back", s)
				}
				time.Sleep(20 * time.Millisecond)
			}
			_ = consistency.Cached
		})
	}
}

// smallStoreDirs makes a test's base directory with a host folder in it
// and a state directory on a 6 MiB tmpfs of its own (until the test ends),
// for a store that fills up.
func smallStoreDirs(t *testing.T) (base, host, state string) {
	t.Helper()
	testenv.RequireFUSE(t)
	base = t.TempDir()
	host = filepath.Join(base, "host")
	state = filepath.Join(base, "state")
	for _, d := range []string{host, state} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("tmpfs", state, "tmpfs", 0, "size=6m"); err != nil {
		t.Skipf("tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(state, unix.MNT_DETACH) })
	return base, host, state
}

// waitStoreSpace waits until the file system of dir has at least free
// bytes free, for up to 10 s.
func waitStoreSpace(t *testing.T, dir string, free uint64) {
	t.Helper()
	var fs unix.Statfs_t
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := unix.Statfs(dir, &fs); err != nil {
			t.Fatal(err)
		}
		if fs.Bavail*uint64(fs.Bsize) >= free {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store has %d bytes free 10 s after the big file's removal, want %d", fs.Bavail*uint64(fs.Bsize), free)
		}
	}
}

// rule D4 with a full store, reading: a host file the container has not
// read yet, whose content the full store cannot take, is read from the
// host itself, whole and right, and the log says so. Not once per file: a
// build reading a tree while the store's disk is full would write a record
// per file and bury the rest of the log, so the first records are said in
// full and one more counts the rest, at the unmount at the latest.
func TestD4_Fault_AFullStoreServesReadsFromTheHostWithoutALogRecordEach(t *testing.T) {
	const files = 60
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			base, host, state := smallStoreDirs(t)
			if err := os.Mkdir(filepath.Join(host, "src"), 0o755); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{}
			for i := range files {
				name := fmt.Sprintf("src/f%02d.go", i)
				want[name] = strings.Repeat(fmt.Sprintf("package f%02d // ", i), 500)
				writeFile(t, filepath.Join(host, name), want[name])
			}
			out := &lockedBuffer{}
			o := New(Config{StateDir: state, MountRoot: filepath.Join(base, "mnt"),
				Policy: hostpath.Policy{AllowedRoots: []string{base}}, Log: slog.New(slog.NewJSONHandler(out, nil))})
			spec := driver.FrontSpec{Key: "full-reads-" + st.String(), Source: host, State: st, Opts: map[string]string{"rescan": "1h"}}
			f, err := o.Open(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			r := &rig{host: host, mnt: f.Mountpoint(), front: f, o: o, spec: spec}
			closed := false
			t.Cleanup(func() {
				if !closed {
					stopRig(t, r)
				}
			})
			if _, err := os.ReadDir(r.mntPath("src")); err != nil { // listed: stubs, no content yet
				t.Fatal(err)
			}
			fill, err := os.Create(r.mntPath("fill"))
			if err != nil {
				t.Fatal(err)
			}
			chunk := make([]byte, 256<<10)
			for i := 0; ; i++ {
				if _, err = fill.Write(chunk); err != nil || i == 64 {
					break
				}
			}
			fill.Close()
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("filling a 6 MiB store: %v; want ENOSPC", err)
			}

			for name, content := range want {
				if got := readFile(t, r.mntPath(name)); got != content {
					t.Fatalf("%s read with the store full: %d bytes, want the host's %d", name, len(got), len(content))
				}
			}
			const msg = "the local store is full: reading from the host"
			full := out.records(t, msg)
			if len(full) == 0 || len(full) > logrepeat.DefaultBurst {
				t.Fatalf("%d records %q for %d files read from the host; want 1 to %d", len(full), msg, files, logrepeat.DefaultBurst)
			}
			for _, rec := range full {
				if _, ok := want[fmt.Sprint(rec["path"])]; !ok || rec["repeated"] != nil {
					t.Fatalf("a record in full names no file read, or counts repeats: %v", rec)
				}
			}
			stopRig(t, r)
			closed = true
			all := out.records(t, msg)
			held := 0
			if n := len(all) - len(full); n == 1 {
				held = int(all[len(all)-1]["repeated"].(float64))
			} else if n != 0 {
				t.Fatalf("%d records after the first %d; want one that counts the rest", n, len(full))
			}
			if len(full)+held != files {
				t.Fatalf("%d records in full and %d counted for %d files read from the host: %v", len(full), held, files, all)
			}
		})
	}
}
