package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// A delegated writeback makes the host's extended attributes of a file or
// directory what the container left, without taking away the ones the
// container never saw.
//
// The store holds the xattrs the container set, not the host's: a populate
// does not copy them (one more round trip per entry on a share). So the
// writeback cannot simply make the host's list the store's:
//   - a file written back whole goes through a new host file renamed over
//     the old one, which has none of the old one's xattrs: keepHostXattrs
//     copies over those the store does not have and the container did not
//     remove (before, a container's write to a file took its host xattrs
//     away, a SELinux label or a macOS Finder tag on a virtiofs share);
//   - a name the container removed is removed from the host too
//     (putRemovedXattrs): the store keeps the names removed since the last
//     writeback in its own xattr of the entry (xattrRemoved), as the
//     journal keeps the paths. A file written in place and a directory
//     keep their host xattrs otherwise.
//
// None of this runs over a source that holds no xattrs (sshfs): the store
// refuses them there (HostTakesXattrs).

// noteXattrRemoved records that the container removed name from rel
// (removed) or set it (!removed: a removal before it no longer applies).
func (s *Store) noteXattrRemoved(rel, name string, removed bool) error {
	defer s.baseLocks.Lock(rel)()
	names := s.removedXattrs(rel)
	i := slices.Index(names, name)
	switch {
	case removed && i < 0:
		names = append(names, name)
	case !removed && i >= 0:
		names = slices.Delete(names, i, i+1)
	default:
		return nil
	}
	return s.setRemovedXattrs(rel, names)
}

// removedXattrs is what noteXattrRemoved recorded for rel.
func (s *Store) removedXattrs(rel string) []string {
	names, err := xattrCall(func(b []byte) (int, error) { return s.local.Getxattr(rel, xattrRemoved, b) })
	if err != nil {
		return nil
	}
	return splitNames(names)
}

func (s *Store) setRemovedXattrs(rel string, names []string) error {
	if len(names) == 0 {
		return ignoreENODATA(s.local.Removexattr(rel, xattrRemoved))
	}
	var b bytes.Buffer
	for _, n := range names {
		b.WriteString(n)
		b.WriteByte(0)
	}
	return s.local.Setxattr(rel, xattrRemoved, b.Bytes(), 0)
}

// putRemovedXattrs removes from the host entry rel the names the container
// removed, and then forgets them.
func (s *Store) putRemovedXattrs(rel string) error {
	if !s.HostTakesXattrs() {
		return nil
	}
	names := s.removedXattrs(rel)
	for _, name := range names {
		if err := ignoreENODATA(s.host.Removexattr(rel, name)); err != nil {
			return fmt.Errorf("remove xattr %s: %w", name, err)
		}
	}
	return s.forgetRemovedXattrs(rel, names)
}

// forgetRemovedXattrs drops names, now gone from the host, from what
// noteXattrRemoved recorded for rel (a name removed again meanwhile stays
// recorded only if it was set in between).
func (s *Store) forgetRemovedXattrs(rel string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	defer s.baseLocks.Lock(rel)()
	left := slices.DeleteFunc(s.removedXattrs(rel), func(n string) bool { return slices.Contains(names, n) })
	return s.setRemovedXattrs(rel, left)
}

// keepHostXattrs copies to the new host file tmp, which is to replace the
// host file rel, the xattrs of rel that the store file src does not have
// and that the container did not remove. The store's own go after
// (finishHostFile), and win. It returns the removed names it left out:
// once tmp replaces rel, the host has none of them (forgetRemovedXattrs).
func (s *Store) keepHostXattrs(rel, tmp string, src *os.File) (removed []string) {
	if !s.HostTakesXattrs() {
		return nil
	}
	removed = s.removedXattrs(rel)
	host, err := xattrCall(func(b []byte) (int, error) { return s.host.Listxattr(rel, b) })
	if err != nil || len(host) == 0 {
		return removed
	}
	local, _ := xattrCall(func(b []byte) (int, error) { return unix.Flistxattr(int(src.Fd()), b) })
	inStore := splitNames(local)
	var keep []byte
	for _, name := range splitNames(host) {
		if !slices.Contains(inStore, name) && !slices.Contains(removed, name) {
			keep = append(append(keep, name...), 0)
		}
	}
	err = copyXattrs(keep, IsPrivateXattr,
		func(name string, buf []byte) (int, error) { return s.host.Getxattr(rel, name, buf) },
		func(name string, val []byte) error { return s.host.Setxattr(tmp, name, val, 0) })
	if err != nil {
		// The host's own xattr, which the container never saw: the
		// container's version still goes (rule D7 allows it), with a line.
		s.log.Warn("writeback: a host xattr could not be kept on the new file", "path", rel, "err", err)
	}
	return removed
}

// xattrCall calls call (a listxattr or getxattr) with a buffer that fits,
// and returns what it filled in.
func xattrCall(call func([]byte) (int, error)) ([]byte, error) {
	buf := make([]byte, 4096)
	for {
		n, err := call(buf)
		if errors.Is(err, unix.ERANGE) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}
