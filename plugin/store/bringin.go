package store

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrBusy is returned for a host change that was not brought in because the
// container has changed the path (or something beneath it) and not written
// it back yet: the container's version wins until writeback (rule D7 decides
// there). It wraps EBUSY, which is what a host-origin syscall on the mount
// sees.
var ErrBusy error = &busyError{}

type busyError struct{}

func (*busyError) Error() string {
	return "store: the container changed this path; the host change is left to writeback"
}
func (*busyError) Is(target error) bool { return target == syscall.EBUSY }

// Errno lets the FUSE layer hand EBUSY to the kernel.
func (*busyError) Errno() syscall.Errno { return syscall.EBUSY }

// ErrRetargeted is RefreshEntry's answer for a symlink whose target is not
// the host's: it is brought in by replacing it (through the mount, for the
// events), not in place.
var ErrRetargeted = errors.New("store: refresh: the host's symlink has another target; replace instead")

// BringIn runs fn, which applies one host change, with the requests of the
// OS thread tid through the mount counting as host-origin: fn makes its
// syscalls on the mount from that thread (the refresh's ownmount.Root), which
// must live until fn returns (Threads.During). It holds no lock while fn
// runs: the FUSE requests fn causes take the store's lock themselves
// (exclusively, see lockShared) and refuse a path the container has changed
// (ErrBusy). A lock held across such a syscall would deadlock with a
// container request that holds the kernel's directory lock and waits for the
// store.
func (s *Store) BringIn(tid uint32, fn func() error) error {
	return s.threads.During(tid, fn)
}

// RefreshEntry updates the store entry rel from the host entry, in place:
// a stub gets the new size and attributes (still fetched lazily); a file
// whose content was fetched gets the new content now, so open readers see it
// at once; directories and others get the attributes. Call within BringIn.
// It reports whether there was anything to bring in.
func (s *Store) RefreshEntry(rel string) (bool, error) {
	s.apply.Lock()
	defer s.apply.Unlock()
	if s.Busy(rel) {
		return false, ErrBusy
	}
	// The host is read here, under the lock, not taken from the refresh's
	// listing: the container may have changed rel since (a chmod, a
	// truncate, a write through to the host, each taking the host's new
	// state as its base), and the listing's attributes would undo that.
	hst, err := s.host.Lstat(rel)
	if err != nil {
		return false, err
	}
	if b, known := s.EntryBase(rel, hst.Mode); known {
		// Past the share's caches: a stale answer taken for a host edit
		// would give the container's file its own older size, mode or
		// content back.
		at, err := s.matchesPastCaches(rel, b, &hst)
		if err != nil {
			return false, err
		}
		if at {
			return false, nil // what the store has is what the host has
		}
	}
	st := &hst
	lst, err := s.local.Lstat(rel)
	if err != nil {
		return false, err
	}
	if lst.Mode&unix.S_IFMT != st.Mode&unix.S_IFMT {
		return false, errors.New("store: refresh: type changed; replace instead")
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		// A symlink without a base (Plan): a cached store keeps symlink
		// bases in memory only, so it has none after a restart. One with
		// the host's target is in sync: it takes the host's attributes and
		// base, with no event (nothing the container sees changed but its
		// times). One with another target is replaced.
		lt, err := s.local.Readlink(rel)
		if err != nil {
			return false, err
		}
		ht, err := s.hostReadlink(rel)
		if err != nil {
			return false, err
		}
		if lt != ht {
			return false, ErrRetargeted
		}
		return false, s.copyAttrs(rel, st)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		if !s.IsStub(rel) {
			if err := s.local.Setxattr(rel, xattrStub, mark, 0); err != nil {
				return false, err
			}
			s.markedStub()
			if err := s.EnsureContent(rel); err != nil {
				return false, err
			}
		} else if err := s.local.Truncate(rel, st.Size); err != nil {
			return false, err
		}
	}
	return true, s.copyAttrs(rel, st)
}
