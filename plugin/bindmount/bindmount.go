// Package bindmount serves the consistent state: a plain Linux bind mount of
// the source directory, with no plugin code on the data path (rule K2).
//
// The source is never named by a path string when it is mounted: the caller
// has already opened it (hostpath.Policy.OpenSource refuses symlinks in every
// component), and the bind takes "/proc/self/fd/N" of that open directory as
// its source, so a symlink swapped into the source path after the check
// cannot redirect the mount.
//
// Unmount only ever removes the mountpoint with os.Remove (rmdir): if the
// unmount did not happen, the directory is not empty (or is busy) and nothing
// behind it is touched.
package bindmount

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/hostpath"
)

// How Unmount retries a busy mountpoint before detaching it lazily.
var (
	busyRetries = 5
	busyDelay   = 100 * time.Millisecond
)

// maxStack bounds how many mounts stacked on one target are taken off.
const maxStack = 16

// Mount bind-mounts the directory root was opened on onto target (recursively,
// so mounts beneath the source are seen too), creating target if needed. The
// new mount is made a slave: mounts appearing beneath the source on the host
// still show up, mounts made beneath the target never reach the source.
// Anything already mounted on target (left by an earlier run) is detached
// first: a target is only ever used for one source.
func Mount(root *hostpath.Root, target string) error {
	return mountFd(root.Fd(), target, false)
}

// MountReadOnly is Mount, read-only: the bind and every mount beneath it
// (option readonly of a consistent volume).
func MountReadOnly(root *hostpath.Root, target string) error {
	return mountFd(root.Fd(), target, true)
}

func mountFd(fd int, target string, readOnly bool) error {
	if fd < 0 {
		return fmt.Errorf("bind mount on %s: source is not open", target)
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("bind mount: create mountpoint: %w", err)
	}
	if err := detachAll(target); err != nil {
		return err
	}
	if readOnly {
		if err := attachReadOnly(fd, "", true, target); err != nil {
			return err
		}
	} else {
		src := "/proc/self/fd/" + strconv.Itoa(fd)
		if err := unix.Mount(src, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return &os.PathError{Op: "bind mount", Path: target, Err: err}
		}
	}
	if err := unix.Mount("", target, "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		_ = unix.Unmount(target, unix.MNT_DETACH)
		return &os.PathError{Op: "make mount a slave", Path: target, Err: err}
	}
	return nil
}

// StackReadOnly stacks a read-only bind of the mount on target onto it
// (not recursive: a FUSE mount has nothing beneath it). Whoever reaches
// target by its path from then on gets the read-only one; a descriptor
// opened on target before keeps the writable mount beneath, which is how
// the plugin's own changes still get through (a read-only volume's host
// changes brought in). Unmount takes both off.
func StackReadOnly(target string) error {
	return attachReadOnly(unix.AT_FDCWD, target, false, target)
}

// attachReadOnly attaches a read-only copy of the mount tree at (fd, path)
// on target. The copy is made read-only before it is attached: a mount made
// read-only after (a remount, mount_setattr) is read-only alone, and the
// copies mount propagation made of it when it was attached (the host's,
// through the plugin's propagated mount, which Docker binds into
// containers) stay writable.
func attachReadOnly(fd int, path string, recursive bool, target string) error {
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC)
	attrFlags := uint(0)
	if path == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	if recursive {
		flags |= unix.AT_RECURSIVE
		attrFlags |= unix.AT_RECURSIVE
	}
	tree, err := unix.OpenTree(fd, path, flags)
	if err != nil {
		return &os.PathError{Op: "clone mount (open_tree)", Path: target, Err: err}
	}
	defer unix.Close(tree)
	if err := unix.MountSetattr(tree, "", attrFlags|unix.AT_EMPTY_PATH,
		&unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return &os.PathError{Op: "make mount read-only (mount_setattr)", Path: target, Err: err}
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return &os.PathError{Op: "attach read-only mount (move_mount)", Path: target, Err: err}
	}
	return nil
}

// detachAll lazily unmounts whatever is mounted on target.
func detachAll(target string) error {
	for range maxStack {
		mounted, err := IsMountpoint(target)
		if err != nil || !mounted {
			return err
		}
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return &os.PathError{Op: "detach stale mount", Path: target, Err: err}
		}
	}
	return fmt.Errorf("detach stale mount %s: more than %d mounts stacked", target, maxStack)
}

// Unmount unmounts target and removes the (then empty) mountpoint directory.
// A busy mount is retried a few times, then detached lazily (MNT_DETACH): it
// disappears from the namespace at once and is released when its last user
// lets go. Mounts stacked on target are all taken off. A target that does not
// exist is not an error; a target that is not a mountpoint is only removed
// if it is empty.
func Unmount(target string) error {
	for range maxStack {
		err := unmountOnce(target)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if errors.Is(err, unix.EINVAL) { // not (or no longer) a mountpoint
			break
		}
		if err != nil {
			return err
		}
		mounted, err := IsMountpoint(target)
		if err != nil {
			return err
		}
		if !mounted {
			break
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove mountpoint: %w", err)
	}
	return nil
}

// UnmountTop takes the top mount off target (StackReadOnly's), retrying a
// busy one a few times and then detaching it lazily; what is beneath stays.
func UnmountTop(target string) error { return unmountOnce(target) }

// unmountOnce takes the top mount off target, retrying EBUSY and then
// detaching lazily.
func unmountOnce(target string) error {
	for attempt := 0; ; attempt++ {
		err := unix.Unmount(target, 0)
		if !errors.Is(err, unix.EBUSY) {
			if err != nil {
				return &os.PathError{Op: "unmount", Path: target, Err: err}
			}
			return nil
		}
		if attempt >= busyRetries {
			break
		}
		time.Sleep(busyDelay)
	}
	if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
		return &os.PathError{Op: "unmount (detach)", Path: target, Err: err}
	}
	return nil
}

// CleanupStale lazily unmounts a dead FUSE mount at path ("transport
// endpoint is not connected", ENOTCONN), as left by a server that crashed
// without unmounting. A live mount, a plain directory and a missing path are
// left alone.
//
// It asks with statfs, which a FUSE mount always sends to its server, not
// lstat: the kernel answers an lstat of a mount's root from the attributes
// it keeps (the plugin gives them long timeouts), dead server or not, so a
// mount that served before its server died looked alive, and each restart
// after a crash mounted on top of the dead one.
func CleanupStale(path string) error {
	// A read-only volume's mount is two: the dead FUSE mount and the
	// read-only bind of it on top (StackReadOnly), dead too.
	for range maxStack {
		var fs unix.Statfs_t
		err := unix.Statfs(path, &fs)
		if !errors.Is(err, unix.ENOTCONN) && !errors.Is(err, unix.ECONNABORTED) {
			return nil
		}
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			if errors.Is(err, unix.EINVAL) {
				return nil
			}
			return &os.PathError{Op: "detach dead mount", Path: path, Err: err}
		}
	}
	return fmt.Errorf("detach dead mount %s: more than %d mounts stacked", path, maxStack)
}

// IsMountpoint reports whether something is mounted on path, according to
// /proc/self/mountinfo. The final component of path is not resolved (so a dead
// FUSE mount is still found); symlinks in its parent are.
func IsMountpoint(path string) (bool, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		abs = filepath.Join(dir, filepath.Base(abs))
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw
		fields := strings.SplitN(sc.Text(), " ", 6)
		if len(fields) < 5 {
			continue
		}
		if unescapeMountinfo(fields[4]) == abs {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("read /proc/self/mountinfo: %w", err)
	}
	return false, nil
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for space, \011,
// \012, \134) in a mountinfo path.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
