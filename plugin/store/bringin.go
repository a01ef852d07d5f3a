package store

import (
	"errors"

	"golang.org/x/sys/unix"
)

// BringIn runs fn, which applies one host change, holding off every
// container change (so the two never interleave on a path) and on a thread
// whose requests through the mount count as host-origin. fn must re-check
// Busy for its path: the container may have changed it since the change was
// planned.
func (s *Store) BringIn(fn func() error) error {
	s.apply.Lock()
	defer s.apply.Unlock()
	return s.threads.Run(fn)
}

// RefreshEntry updates the store entry rel from the host entry st, in place:
// a stub gets the new size and attributes (still fetched lazily); a file
// whose content was fetched gets the new content now, so open readers see it
// at once; directories and others get the attributes. Call within BringIn.
func (s *Store) RefreshEntry(rel string, st *unix.Stat_t) error {
	lst, err := s.local.Lstat(rel)
	if err != nil {
		return err
	}
	if lst.Mode&unix.S_IFMT != st.Mode&unix.S_IFMT {
		return errors.New("store: refresh: type changed; replace instead")
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		if !s.IsStub(rel) {
			if err := s.local.Setxattr(rel, xattrStub, []byte("1"), 0); err != nil {
				return err
			}
			if err := s.EnsureContent(rel); err != nil {
				return err
			}
		} else if err := s.local.Truncate(rel, st.Size); err != nil {
			return err
		}
	}
	return s.copyAttrs(rel, st)
}
