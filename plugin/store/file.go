package store

import (
	"context"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// File is an open file of the container's view. Reads are served from the
// store; writes follow the state's rule (through to the host for cached,
// journaled for delegated). Offsets come from the kernel (pread/pwrite), so
// O_APPEND is never passed down.
type File struct {
	s     *Store
	rel   func() (string, bool) // current path (renamed while open?); false once unlinked
	local *os.File
	host  *os.File // cached state, opened for writing: the host half
	write bool
	mu    sync.Mutex // guards host during Release

	unbusy func() // ends the host refresh's hands-off for a cached writer
}

// openFlags strips flags the store handles itself.
func openFlags(flags int) int {
	return flags &^ (unix.O_APPEND | unix.O_CREAT | unix.O_EXCL | unix.O_NOCTTY | unix.O_NOFOLLOW)
}

func isWrite(flags int) bool { return flags&unix.O_ACCMODE != unix.O_RDONLY }

// Open opens rel. relNow reports the file's current path for later writes.
func (s *Store) Open(ctx context.Context, rel string, flags int, relNow func() (string, bool)) (*File, error) {
	write := isWrite(flags)
	trunc := write && flags&unix.O_TRUNC != 0
	r := s.routeFor(ctx)
	switch {
	case r == routeLocal:
		// The applier opens only to raise events; content stays lazy.
	case trunc:
		if err := s.prepareTruncate(rel, 0); err != nil {
			return nil, err
		}
	default:
		if err := s.EnsureContent(rel); err != nil {
			return nil, err
		}
	}
	f := &File{s: s, rel: relNow, write: write}
	open := func() error {
		lf, err := s.local.OpenFile(rel, openFlags(flags), 0)
		if err != nil {
			return err
		}
		f.local = lf
		return nil
	}
	switch {
	case !write || r == routeLocal:
		return f, open()
	case r == routeThrough:
		defer s.lockShared(ctx)()
		hf, err := s.host.OpenFile(rel, openFlags(flags), 0)
		if err != nil {
			return nil, err
		}
		f.host = hf
		if err := open(); err != nil {
			hf.Close()
			return nil, err
		}
		f.unbusy = s.holdBusy(rel)
		if trunc {
			s.rebase(rel)
		}
		return f, nil
	default:
		defer s.lockShared(ctx)()
		if trunc {
			return f, s.do(r, []string{rel}, nil, open)
		}
		return f, open()
	}
}

// Create creates and opens rel.
func (s *Store) Create(ctx context.Context, rel string, flags int, mode uint32, o Owner, relNow func() (string, bool)) (*File, error) {
	r := s.routeFor(ctx)
	if r == routeLocal {
		if err := s.adoptFromHost(rel); err != nil {
			return nil, err
		}
		return s.Open(ctx, rel, flags&^unix.O_TRUNC, relNow)
	}
	defer s.lockShared(ctx)()
	f := &File{s: s, rel: relNow, write: true}
	excl := flags & unix.O_EXCL
	err := s.do(r, []string{rel},
		func() error {
			hf, err := s.host.OpenFile(rel, openFlags(flags)|unix.O_CREAT|excl, mode)
			if err != nil {
				return err
			}
			f.host = hf
			s.hostChown(rel, o)
			return nil
		},
		func() error {
			lf, err := s.local.OpenFile(rel, openFlags(flags)|unix.O_CREAT|excl, mode)
			if err != nil {
				return err
			}
			f.local = lf
			return s.chown(rel, o)
		})
	if err != nil {
		f.closeAll()
		return nil, err
	}
	if f.host != nil {
		f.unbusy = s.holdBusy(rel)
	}
	return f, nil
}

// rels is the file's current path as a journal/base key, or none once the
// file has been unlinked (its content then matters to no one on the host).
func (f *File) rels() []string {
	if r, ok := f.rel(); ok {
		return []string{r}
	}
	return nil
}

// Rel names the file for logs.
func (f *File) Rel() string {
	if r, ok := f.rel(); ok {
		return r
	}
	return "(unlinked)"
}

// Fd is the store file's descriptor (for reads, seeks and stats).
func (f *File) Fd() int { return int(f.local.Fd()) }

// ReadAt reads from the store.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	n, err := unix.Pread(f.Fd(), p, off)
	if n < 0 {
		n = 0
	}
	return n, err
}

// WriteAt writes p at off along the state's route.
func (f *File) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	s := f.s
	var n int
	r := s.routeFor(ctx)
	if f.host == nil && r == routeThrough {
		r = routeLocal // opened by the applier, or read-only
	}
	defer s.lockShared(ctx)()
	err := s.do(r, f.rels(),
		func() error {
			_, err := unix.Pwrite(int(f.host.Fd()), p, off)
			return err
		},
		func() error {
			var err error
			n, err = unix.Pwrite(f.Fd(), p, off)
			return err
		})
	return n, err
}

// Allocate is fallocate(2) along the state's route.
func (f *File) Allocate(ctx context.Context, mode uint32, off, size int64) error {
	s := f.s
	r := s.routeFor(ctx)
	if f.host == nil && r == routeThrough {
		r = routeLocal
	}
	defer s.lockShared(ctx)()
	return s.do(r, f.rels(),
		func() error { return unix.Fallocate(int(f.host.Fd()), mode, off, size) },
		func() error { return unix.Fallocate(f.Fd(), mode, off, size) })
}

// Truncate is ftruncate(2) along the state's route.
func (f *File) Truncate(ctx context.Context, size int64) error {
	s := f.s
	r := s.routeFor(ctx)
	if f.host == nil && r == routeThrough {
		return s.Setattr(ctx, f.Rel(), Attrs{Size: &size})
	}
	defer s.lockShared(ctx)()
	return s.do(r, f.rels(),
		func() error { return f.host.Truncate(size) },
		func() error { return f.local.Truncate(size) })
}

// Sync returns once the file's data is on the host (rule D2): for cached it
// fsyncs the host half; for delegated it writes the file back now.
func (f *File) Sync(ctx context.Context) error {
	if f.host != nil {
		return f.host.Sync()
	}
	rels := f.rels()
	if rels == nil {
		return nil
	}
	return f.s.Flush(ctx, rels...)
}

// Release closes the file. A cached file records the host's attributes as
// its base now that our own writes are done.
func (f *File) Release() error {
	if f.host != nil {
		for _, r := range f.rels() {
			f.s.rebase(r)
		}
	}
	return f.closeAll()
}

func (f *File) closeAll() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unbusy != nil {
		f.unbusy()
		f.unbusy = nil
	}
	var err error
	if f.host != nil {
		err = f.host.Close()
		f.host = nil
	}
	if f.local != nil {
		if e := f.local.Close(); err == nil {
			err = e
		}
		f.local = nil
	}
	return err
}
