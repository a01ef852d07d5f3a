package store

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/hostpath"
)

// writersFromHost decides, once per store, whether a cached writer may be
// served from the host file (File.HostPassthrough), and says why.
//
// The kernel opens a file of its own on the host for a passthrough open and
// writes through that; the plugin's own descriptor of the file sees none of
// it. That is as good as a bind mount where the host's file system reports
// a failed write to the write itself or to any close of the file: kernel
// file systems keep writeback errors with the file (NFS, SMB, 9p, virtiofs,
// ext4), so the plugin's close of its own descriptor at the container's
// close (handle.Flush) still reports them. A FUSE file system run by a
// process (sshfs, rclone) may acknowledge a write before its server has it
// and keep the failure with that one open file (sshfs does): the failure of
// the kernel's writes would be reported to nobody and the data lost, so
// there every write goes through the plugin's open file, as before.
func writersFromHost(host *hostpath.Root) (bool, string) {
	byProcess, kind := host.ServedByProcess()
	return !byProcess, kind
}

// xattrNamespaces are the namespaces of extended attributes a container
// may use, each with a name the source is asked for (refusedXattrs).
var xattrNamespaces = []struct{ prefix, probe string }{
	{"user.", XattrPrefix + "probe"},
	{"trusted.", "trusted.bindstate.probe"},
	{"security.", "security.capability"},
}

// refusedXattrs decides, once per store, which namespaces of extended
// attributes the source's file system refuses: all of them over one that
// holds none (sftp has no xattrs: sshfs; ramfs), some over one that holds
// others (NFS takes user.* but not trusted.*). The volume refuses those as
// the plain bind of the source would (EOPNOTSUPP), instead of keeping in
// the store an xattr that no writeback could ever put on the host (rule
// D4: nothing a container saw succeed is lost). Over a source that holds
// none the FUSE mount tells the kernel so once (fsys: DisableXAttrs), which
// stops the security.capability lookup the kernel makes before every chown
// and a file's first write: two round trips per file an untar makes.
//
// The source's root stands for the whole tree; a file system mounted
// inside it is not asked. One name in each namespace is looked up: a file
// system that holds the namespace answers "no such attribute" (or the
// value), one that does not answers EOPNOTSUPP.
func refusedXattrs(host *hostpath.Root) []string {
	var refused []string
	for _, ns := range xattrNamespaces {
		if _, err := host.Getxattr("", ns.probe, nil); errors.Is(err, unix.EOPNOTSUPP) {
			refused = append(refused, ns.prefix)
		}
	}
	return refused
}
