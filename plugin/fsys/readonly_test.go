package fsys

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/store"
)

// openedLog records Options.Opened.
type openedLog struct {
	mu   sync.Mutex
	rels []string
}

func (l *openedLog) opened(rel string) {
	l.mu.Lock()
	l.rels = append(l.rels, rel)
	l.mu.Unlock()
}

func (l *openedLog) has(rel string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.rels, rel)
}

// mountReadOnly mounts st as a read-only volume's FUSE mount (without the
// read-only bind the frontend stacks on it) until the test ends.
func mountReadOnly(t *testing.T, st *store.Store, opened func(string)) *Mount {
	t.Helper()
	m, err := New(st, filepath.Join(t.TempDir(), "mnt"), Options{ReadOnly: true, Opened: opened})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmount() })
	return m
}

// A read-only mount is served without OPEN: the kernel opens files itself,
// a cold read is a READ without a handle served from the store (a stub's
// content fetched first), and a hot open and read reach nobody.
func TestReadOnlyMountIsServedWithoutOpen(t *testing.T) {
	for _, state := range []consistency.State{consistency.Cached, consistency.Delegated} {
		t.Run(state.String(), func(t *testing.T) {
			st := newOneFileStore(t, state, "hello from the host")
			var log openedLog
			m := mountReadOnly(t, st, log.opened)
			f := filepath.Join(m.Mountpoint(), "f")
			for i := range 3 {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatalf("read %d: %v", i, err)
				}
				if string(b) != "hello from the host" {
					t.Fatalf("read %d: %q", i, b)
				}
			}
			ops := st.Stats().Ops
			if ops["open"] != 0 {
				t.Errorf("%d OPENs reached the plugin, want none", ops["open"])
			}
			if ops["read"] != 1 {
				t.Errorf("%d READs for three reads of a 19-byte file, want 1 (the first; the kernel keeps the pages)", ops["read"])
			}
			// The one sign of use the mount gets goes to the in-use list.
			if !log.has("f") {
				t.Errorf("a read without OPEN did not tell Opened (told %v)", log.rels)
			}
			waitKept(t, st, 1)
		})
	}
}

// Nothing a container asks for changes a read-only mount, or the host
// behind it, even where the kernel sends the request (the mount itself is
// writable: the syncer brings host changes in through it).
func TestReadOnlyMountRefusesEveryChange(t *testing.T) {
	st := newOneFileStore(t, consistency.Cached, "host")
	m := mountReadOnly(t, st, nil)
	mp := m.Mountpoint()
	f := filepath.Join(mp, "f")
	if _, err := os.ReadFile(f); err != nil { // the first open: OPEN answered ENOSYS
		t.Fatal(err)
	}
	wantEROFS := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, unix.EROFS) {
			t.Errorf("%s: %v, want EROFS", what, err)
		}
	}
	// Opened for writing without OPEN, so refused at the write.
	w, err := os.OpenFile(f, os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("open for writing: %v", err)
	}
	_, err = w.Write([]byte("container"))
	w.Close()
	wantEROFS("write", err)
	wantEROFS("truncate", os.Truncate(f, 0))
	wantEROFS("create", os.WriteFile(filepath.Join(mp, "new"), nil, 0o644))
	wantEROFS("mkdir", os.Mkdir(filepath.Join(mp, "d"), 0o755))
	wantEROFS("symlink", os.Symlink("f", filepath.Join(mp, "l")))
	wantEROFS("link", os.Link(f, filepath.Join(mp, "h")))
	wantEROFS("mknod", unix.Mkfifo(filepath.Join(mp, "p"), 0o644))
	wantEROFS("rename", os.Rename(f, filepath.Join(mp, "g")))
	wantEROFS("chmod", os.Chmod(f, 0o600))
	wantEROFS("setxattr", unix.Setxattr(f, "user.x", []byte("1"), 0))
	wantEROFS("unlink", os.Remove(f))

	b, err := os.ReadFile(f)
	if err != nil || string(b) != "host" {
		t.Fatalf("through the mount after the refusals: %q, %v", b, err)
	}
	hb, err := os.ReadFile(filepath.Join(st.Host().Path(), "f"))
	if err != nil || string(hb) != "host" {
		t.Fatalf("on the host after the refusals: %q, %v", hb, err)
	}
	if ops := st.Stats().Ops; ops["write"]+ops["setattr"]+ops["create"]+ops["unlink"] != 0 {
		t.Errorf("refused changes reached the store: %v", ops)
	}
}
