package syncer

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/hostpath"
	"github.com/bindstate/bindstate/plugin/store"
)

// Invalidator drops what the kernel caches for a path (fsys.Mount).
type Invalidator interface {
	Invalidate(rel string, content, entry bool)
}

// Refresher keeps a mounted store up to date with host edits, by rescanning
// the directories the container has looked into. A share gives no change
// notifications (sshfs, NFS, 9p), so scanning is the one method that works
// for all; only populated directories are scanned, so a large tree the
// container never looked into costs nothing.
type Refresher struct {
	store *store.Store
	mnt   *hostpath.Root // the FUSE mount, where changes are applied
	inval Invalidator
	every time.Duration
	log   *slog.Logger
}

// NewRefresher applies host changes to st through the mount opened as mnt,
// scanning every interval.
func NewRefresher(st *store.Store, mnt *hostpath.Root, inval Invalidator, every time.Duration, log *slog.Logger) *Refresher {
	if log == nil {
		log = slog.Default()
	}
	return &Refresher{store: st, mnt: mnt, inval: inval, every: every, log: log}
}

// dutyCycle bounds the share of time the refresher spends scanning: after a
// scan that took d, the next starts no sooner than (dutyCycle-1)*d later. A
// large tree on a slow share is then rescanned less often, instead of keeping
// the plugin and the share busy all the time (a polling storm).
const dutyCycle = 10

// Run scans until ctx ends, every interval, or less often for trees whose
// scan is slow (see dutyCycle).
func (r *Refresher) Run(ctx context.Context) {
	t := time.NewTimer(r.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		if n, err := r.Scan(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("host refresh failed", "err", err)
		} else if n > 0 {
			r.log.Debug("host changes brought in", "changes", n)
		}
		t.Reset(nextScan(r.every, time.Since(start)))
	}
}

// nextScan is the wait before the next scan, after one that took took.
func nextScan(every, took time.Duration) time.Duration {
	return max(every, (dutyCycle-1)*took)
}

// Scan makes one pass over the populated directories and applies what
// changed. It returns how many changes were applied.
func (r *Refresher) Scan(ctx context.Context) (int, error) {
	if !r.store.IsPopulated("") {
		return 0, nil
	}
	applied := 0
	var errs []error
	dirs := []string{""}
	for len(dirs) > 0 && ctx.Err() == nil {
		dir := dirs[len(dirs)-1]
		dirs = dirs[:len(dirs)-1]
		n, sub, err := r.scanDir(dir)
		applied += n
		if err != nil {
			errs = append(errs, err)
		}
		dirs = append(dirs, sub...)
	}
	return applied, errors.Join(errs...)
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// scanDir plans and applies one directory; it returns the populated
// subdirectories to scan next.
func (r *Refresher) scanDir(dir string) (int, []string, error) {
	host, err := r.store.Host().ReadDir(dir)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return 0, nil, nil // gone on the host: the parent's plan deletes it
	}
	if err != nil {
		return 0, nil, err
	}
	entries, err := r.store.Local().ReadDir(dir)
	if err != nil {
		return 0, nil, err
	}
	local := make([]Local, len(entries))
	for i, e := range entries {
		b, ok := r.store.Base(join(dir, e.Name))
		local[i] = Local{Name: e.Name, Mode: e.Stat.Mode, Base: b, HasBase: ok}
	}
	busy := func(name string) bool { return r.store.Busy(join(dir, name)) }
	applied := 0
	var errs []error
	for _, a := range Plan(host, local, busy) {
		err := r.apply(dir, a)
		if errors.Is(err, unix.EBUSY) { // store.ErrBusy, or EBUSY from a syscall on the mount
			continue // the container changed it meanwhile: its version wins until writeback
		}
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOENT) {
			// The container created or removed the name between the
			// listing and now: the next scan sees where things stand.
			r.log.Debug("host change raced with the container; rescanning later", "path", join(dir, a.Name), "err", err)
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		applied++
	}
	var sub []string
	for _, e := range entries {
		rel := join(dir, e.Name)
		if e.Stat.Mode&unix.S_IFMT == unix.S_IFDIR && r.store.IsPopulated(rel) {
			sub = append(sub, rel)
		}
	}
	return applied, sub, errors.Join(errs...)
}

// apply brings one host change in. Creation and deletion are syscalls on
// the mount (the kernel raises IN_CREATE / IN_DELETE); an update changes the
// store in place, drops the kernel's cache, and then truncates the file to
// its own size through the mount, which raises IN_MODIFY only after the new
// content is in place (rule D1: what is read after the event is the host's).
func (r *Refresher) apply(dir string, a Action) error {
	rel := join(dir, a.Name)
	return r.store.BringIn(func() error {
		if r.store.Busy(rel) {
			return nil // the container got there first
		}
		if st, err := r.store.Local().Lstat(dir); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return nil // the directory itself changed meanwhile
		}
		r.log.Debug("bringing host change in", "change", a.Kind.String(), "path", rel)
		switch a.Kind {
		case Create:
			return r.create(rel, &a.Host)
		case Delete:
			return r.mnt.RemoveAll(rel)
		case Replace:
			if err := r.mnt.RemoveAll(rel); err != nil {
				return err
			}
			return r.create(rel, &a.Host)
		default:
			if changed, err := r.store.RefreshEntry(rel); err != nil || !changed {
				return err
			}
			r.inval.Invalidate(rel, true, false)
			if a.Host.Mode&unix.S_IFMT == unix.S_IFREG {
				return r.mnt.Truncate(rel, a.Host.Size)
			}
			return nil
		}
	})
}

// create makes rel through the mount; the store's host-origin handlers
// adopt the host's entry whatever the request carried.
func (r *Refresher) create(rel string, st *unix.Stat_t) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return r.mnt.Mkdir(rel, 0o700)
	case unix.S_IFREG:
		f, err := r.mnt.OpenFile(rel, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		return f.Close()
	case unix.S_IFLNK:
		return r.mnt.Symlink("bindstate-placeholder", rel)
	default:
		return r.mnt.Mknod(rel, st.Mode, st.Rdev)
	}
}
