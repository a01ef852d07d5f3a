package hostpath

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// fuseSuperMagic is statfs's f_type of every FUSE file system (sshfs,
// rclone mount, virtiofs alike).
const fuseSuperMagic = 0x65735546

// servedByProcess reports whether the file system of fd is a FUSE file
// system served by a process (sshfs, rclone mount), and says what it is.
// Such a server works by path and on its own terms, where a kernel file
// system (ext4, NFS, SMB, 9p) or virtiofs (the kernel's FUSE client over a
// VM's device) works on the inode the kernel hands it:
//   - it may acknowledge a write before its server has it, and keep the
//     failure with that one open file (sshfs does);
//   - it may set attributes by path, following a final symlink (sshfs:
//     SFTP SETSTAT, which the server runs as chown and utimes).
//
// Where it cannot tell (statfs or mountinfo failed), it says served by a
// process: the cautious answer for both.
func servedByProcess(fd int) (bool, string) {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return true, fmt.Sprintf("statfs failed: %v", err)
	}
	if fs.Type != fuseSuperMagic {
		return false, fmt.Sprintf("a kernel file system (type %#x)", fs.Type)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return true, fmt.Sprintf("stat failed: %v", err)
	}
	kind, err := mountType(unix.Major(st.Dev), unix.Minor(st.Dev))
	switch {
	case err != nil:
		return true, fmt.Sprintf("a FUSE file system (%v)", err)
	case kind == "virtiofs":
		// The kernel's FUSE client over a VM's device: its server
		// answers a write once done, the client keeps writeback errors
		// with the file, and virtiofsd sets attributes on the inode.
		return false, "virtiofs"
	default:
		return true, fmt.Sprintf("a FUSE file system run by a process (%s)", kind)
	}
}

// mountType is the file system type of the mount of device major:minor,
// from /proc/self/mountinfo.
func mountType(major, minor uint32) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	dev := fmt.Sprintf("%d:%d", major, minor)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJOR:MINOR ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[2] != dev {
			continue
		}
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) {
				return fields[i+1], nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("device %s not in /proc/self/mountinfo", dev)
}
