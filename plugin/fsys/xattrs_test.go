package fsys

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// rule D4 (nothing a container saw succeed is lost), through the mount: over
// a source whose file system holds no extended attributes (sshfs; here
// ramfs) the mount refuses them as a plain bind of the source does
// (EOPNOTSUPP), and the kernel is told so once: the security.capability
// lookup it makes before a chown and a file's first write never reaches the
// plugin, which saves an untar two round trips per file. Over a local folder
// the same steps do reach it (so the count below means something), and an
// xattr is kept.
func TestD4_AnXattrTheSourceCannotHoldIsRefusedByTheKernel(t *testing.T) {
	for _, src := range []string{"local folder", "ramfs"} {
		for _, state := range []consistency.State{consistency.Cached, consistency.Delegated} {
			t.Run(src+"/"+state.String(), func(t *testing.T) {
				st := newStoreOver(t, state, func(host string) {
					if src != "ramfs" {
						return
					}
					if err := unix.Mount("ramfs", host, "ramfs", 0, ""); err != nil {
						t.Fatalf("mount ramfs: %v", err)
					}
					t.Cleanup(func() { unix.Unmount(host, unix.MNT_DETACH) })
				})
				m := mountStore(t, st)
				// what tar does as root with each file it unpacks
				for i := range 3 {
					f, err := os.OpenFile(filepath.Join(m.Mountpoint(), fmt.Sprintf("f%d", i)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
					if err != nil {
						t.Fatal(err)
					}
					_, werr := f.WriteString("content")
					cerr := f.Chown(1, 1)
					merr := f.Chmod(0o644)
					if err := errors.Join(werr, cerr, merr, f.Close()); err != nil {
						t.Fatal(err)
					}
				}
				p := filepath.Join(m.Mountpoint(), "f0")
				err := unix.Setxattr(p, "user.a", []byte("v"), 0)
				asked := st.Stats().Ops["getxattr"]
				if src == "ramfs" {
					if !errors.Is(err, unix.EOPNOTSUPP) {
						t.Errorf("setxattr over a source that holds no xattrs: %v; want EOPNOTSUPP, as a plain bind of it answers", err)
					}
					if asked != 0 {
						t.Errorf("%d GETXATTRs reached the plugin over a source that holds no xattrs; want none (the kernel is told once)", asked)
					}
					if _, err := unix.Getxattr(p, "user.a", nil); !errors.Is(err, unix.EOPNOTSUPP) {
						t.Errorf("getxattr: %v; want EOPNOTSUPP", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("setxattr over a local folder: %v", err)
				}
				if asked == 0 {
					t.Error("no GETXATTR reached the plugin over a local folder: the kernel no longer asks before a chown or a first write, and this test counts nothing")
				}
				buf := make([]byte, 16)
				if n, err := unix.Getxattr(p, "user.a", buf); err != nil || string(buf[:n]) != "v" {
					t.Errorf("getxattr user.a: %q, %v; want v", buf[:max(n, 0)], err)
				}
			})
		}
	}
}
