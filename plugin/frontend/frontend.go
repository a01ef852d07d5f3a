// Package frontend assembles what serves a (source, state): a plain bind for
// consistent, or the local store + FUSE mount + host refresh for cached and
// delegated. It implements driver.Opener.
//
// A delegated store outlives its mount while it still has changes to write
// back (rule D4: nothing unwritten is dropped): the Opener keeps it open and
// retrying, and hands the same store to the next mount of its key.
package frontend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/bindmount"
	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/driver"
	"github.com/bindstate/bindstate/plugin/fsys"
	"github.com/bindstate/bindstate/plugin/hostpath"
	"github.com/bindstate/bindstate/plugin/ownmount"
	"github.com/bindstate/bindstate/plugin/store"
	"github.com/bindstate/bindstate/plugin/syncer"
)

// Config is where things live.
type Config struct {
	StateDir   string          // stores live in StateDir/stores/<key>
	MountRoot  string          // mountpoints are MountRoot/<key> (the propagated mount)
	HostPrefix string          // where the host's "/" is seen ("/host" when managed)
	Policy     hostpath.Policy // which sources are allowed
	Log        *slog.Logger
	FuseDebug  bool // log every FUSE request
	// ShareWork, if set, is each store's Config.ShareWork (the plugin's
	// cpus.Governor).
	ShareWork func()
}

// Opener implements driver.Opener.
type Opener struct {
	cfg Config

	mu     sync.Mutex
	stores map[string]*openStore // by key: stores open with or without a mount
}

// openStore is a store and what keeps it open.
type openStore struct {
	st      *store.Store
	host    *hostpath.Root
	mounted bool
	drain   context.CancelFunc // background writeback after unmount; nil if none
}

var _ driver.Opener = (*Opener)(nil)

// populatedLog is store.Config.PopulatedLog for the stores opened: 0 (the
// store's default) but in a test that makes the log overflow.
var populatedLog int

// New returns an Opener for cfg.
func New(cfg Config) *Opener {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Opener{cfg: cfg, stores: make(map[string]*openStore)}
}

func (o *Opener) mountpoint(key string) string { return filepath.Join(o.cfg.MountRoot, key) }

func (o *Opener) storeDir(key string) string {
	return filepath.Join(o.cfg.StateDir, "stores", key)
}

// Open implements driver.Opener.
func (o *Opener) Open(ctx context.Context, spec driver.FrontSpec) (driver.Front, error) {
	mp := o.mountpoint(spec.Key)
	log := o.cfg.Log.With("key", spec.Key, "source", spec.Source, "state", spec.State.String())
	// A mount left by a crashed run is dead ("transport endpoint is not
	// connected"): clear it so the new mount can take its place.
	if err := bindmount.CleanupStale(mp); err != nil {
		return nil, fmt.Errorf("open %s: clear stale mount: %w", mp, err)
	}
	if !spec.State.NeedsStore() {
		root, err := o.cfg.Policy.OpenSource(o.cfg.HostPrefix, spec.Source)
		if err != nil {
			return nil, err
		}
		defer root.Close()
		bind := bindmount.Mount
		if spec.ReadOnly {
			bind = bindmount.MountReadOnly
		}
		if err := bind(root, mp); err != nil {
			return nil, fmt.Errorf("bind %s on %s: %w", spec.Source, mp, err)
		}
		log.Info("serving as a plain bind", "readonly", spec.ReadOnly)
		return &bindFront{mp: mp, source: spec.Source}, nil
	}
	ost, err := o.takeStore(spec, log)
	if err != nil {
		return nil, err
	}
	f, err := o.mount(spec, ost, log)
	if err != nil {
		o.release(spec.Key, ost, log)
		return nil, err
	}
	return f, nil
}

// takeStore returns the store for spec, reusing one that is still open.
func (o *Opener) takeStore(spec driver.FrontSpec, log *slog.Logger) (*openStore, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ost := o.stores[spec.Key]; ost != nil {
		if ost.mounted {
			return nil, fmt.Errorf("store %s is already mounted", spec.Key)
		}
		if ost.drain != nil {
			ost.drain()
			ost.drain = nil
		}
		ost.mounted = true
		return ost, nil
	}
	ost, err := o.openStore(spec, log)
	if err != nil {
		return nil, err
	}
	ost.mounted = true
	o.stores[spec.Key] = ost
	return ost, nil
}

func (o *Opener) openStore(spec driver.FrontSpec, log *slog.Logger) (*openStore, error) {
	host, err := o.cfg.Policy.OpenSource(o.cfg.HostPrefix, spec.Source)
	if err != nil {
		return nil, err
	}
	dir := o.storeDir(spec.Key)
	st, err := store.Open(store.Config{
		Host:         host,
		Tree:         filepath.Join(dir, "tree"),
		Journal:      filepath.Join(dir, "journal"),
		State:        spec.State,
		Log:          log,
		PopulatedLog: populatedLog,
		ShareWork:    o.cfg.ShareWork,
		ReadOnly:     spec.ReadOnly,
	})
	if err != nil {
		host.Close()
		return nil, err
	}
	return &openStore{st: st, host: host}, nil
}

// rescanEvery reads the "rescan" option (validated by the driver).
func rescanEvery(spec driver.FrontSpec) time.Duration {
	if d, err := time.ParseDuration(spec.Opts["rescan"]); err == nil && d > 0 {
		return d
	}
	return time.Second
}

func (o *Opener) mount(spec driver.FrontSpec, ost *openStore, log *slog.Logger) (*storeFront, error) {
	mp := o.mountpoint(spec.Key)
	inUse := syncer.NewInUse(0)
	m, err := fsys.New(ost.st, mp, fsys.Options{Name: "bindstate:" + spec.Source, Log: log, Debug: o.cfg.FuseDebug,
		Opened: inUse.Opened, ReadOnly: spec.ReadOnly})
	if err != nil {
		return nil, err
	}
	// The refresher brings host changes in through mnt, opened before a
	// read-only volume's read-only bind covers the mount: mnt stays on the
	// writable mount beneath, which only the plugin reaches. Its requests
	// come from ownmount's thread: one killed while they are served would
	// otherwise keep the killed plugin.
	mnt, err := ownmount.Open(mp)
	if err != nil {
		m.Unmount()
		return nil, err
	}
	if spec.ReadOnly {
		if err := bindmount.StackReadOnly(mp); err != nil {
			mnt.Close()
			m.Unmount()
			return nil, err
		}
	}
	f := &storeFront{o: o, key: spec.Key, source: spec.Source, ost: ost, mount: m, mnt: mnt, inUse: inUse,
		readOnly: spec.ReadOnly, rescan: rescanEvery(spec), log: log}
	f.startRefresh(f.rescan)
	log.Info("serving from the local store", "mountpoint", mp, "readonly", spec.ReadOnly)
	return f, nil
}

// release drops a store after its mount is gone: closed at once if nothing
// is left to write back, else kept open and retried until it is (D4).
func (o *Opener) release(key string, ost *openStore, log *slog.Logger) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ost.mounted = false
	if ost.st.Stats().WriteBack.Dirty == 0 {
		o.closeStore(key, ost)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	ost.drain = cancel
	log.Warn("unmounted with changes not yet on the host; writing them back in the background",
		"pending", ost.st.Stats().WriteBack.Dirty)
	go o.drain(ctx, key, ost, log)
}

func (o *Opener) closeStore(key string, ost *openStore) {
	if err := ost.st.Close(); err != nil {
		o.cfg.Log.Warn("closing store", "key", key, "err", err)
	}
	ost.host.Close()
	delete(o.stores, key)
}

// drain retries writeback of an unmounted store until it is clean, then
// closes it. A new mount of the key cancels it and takes the store over.
func (o *Opener) drain(ctx context.Context, key string, ost *openStore, log *slog.Logger) {
	for ctx.Err() == nil {
		err := ost.st.Flush(ctx)
		if err == nil {
			o.mu.Lock()
			if ctx.Err() == nil && !ost.mounted {
				log.Info("background writeback complete")
				ost.drain = nil
				o.closeStore(key, ost)
			}
			o.mu.Unlock()
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
}

// Resume implements driver.Opener: a delegated store whose journal names
// paths not yet on the host is opened (without a mount) and drained.
func (o *Opener) Resume(ctx context.Context, spec driver.FrontSpec) error {
	if !spec.State.WritesBack() {
		return nil
	}
	journal := filepath.Join(o.storeDir(spec.Key), "journal")
	if fi, err := os.Stat(journal); err != nil || fi.Size() == 0 {
		return nil
	}
	log := o.cfg.Log.With("key", spec.Key, "source", spec.Source, "state", spec.State.String())
	o.mu.Lock()
	if o.stores[spec.Key] != nil {
		o.mu.Unlock()
		return nil
	}
	st, err := o.openStore(spec, log)
	if err != nil {
		o.mu.Unlock()
		return err
	}
	o.stores[spec.Key] = st
	o.mu.Unlock()
	o.release(spec.Key, st, log)
	return nil
}

// storeFront is a cached or delegated mount.
type storeFront struct {
	o           *Opener
	key, source string
	ost         *openStore
	mount       *fsys.Mount
	mnt         *ownmount.Root
	inUse       *syncer.InUse // files the container opened lately (the refresher stats them)
	readOnly    bool          // a read-only bind covers the mount (spec.ReadOnly)
	rescan      time.Duration // the volume's rescan interval
	log         *slog.Logger
	closeOnce   sync.Once

	refreshMu   sync.Mutex
	stopRefresh func()        // nil once closed
	every       time.Duration // the refresher's current interval
}

func (f *storeFront) Mountpoint() string { return f.mount.Mountpoint() }

func (f *storeFront) Flush(ctx context.Context) error { return f.ost.st.Flush(ctx) }

// startRefresh runs the host refresh every interval. refreshMu held, or
// the front not shared yet.
func (f *storeFront) startRefresh(every time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	r := syncer.NewRefresher(f.ost.st, f.mnt, f.mount, f.inUse, every, f.log)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	f.stopRefresh = func() { cancel(); <-done }
	f.every = every
}

// setRescan restarts the host refresh with a new interval (SetFloor).
func (f *storeFront) setRescan(every time.Duration) {
	f.refreshMu.Lock()
	defer f.refreshMu.Unlock()
	if f.stopRefresh == nil || f.every == every {
		return
	}
	f.stopRefresh()
	f.startRefresh(every)
}

// OverlapRescan is how often a store front looks for host edits while a
// consistent mount overlaps it (rules C4, D5): consistent's "immediately",
// approximated (see docs/states.md, "Overlapping mounts").
const OverlapRescan = 100 * time.Millisecond

// atLeast reports whether s is at least as strong as t.
func atLeast(s, t consistency.State) bool { return consistency.Stronger(s, t) == s }

// SetFloor implements driver.Front (rules C4, D5). A delegated store with a
// floor of cached or stronger writes through (store.SetWriteThrough); with
// a floor of consistent, a cached or delegated store rescans the host at
// least every OverlapRescan. A floor no stronger than the front's own state
// restores its own rule.
func (f *storeFront) SetFloor(ctx context.Context, floor consistency.State) error {
	st := f.ost.st
	own := st.State()
	through := own.WritesBack() && atLeast(floor, consistency.Cached)
	if err := st.SetWriteThrough(ctx, through); err != nil {
		f.log.Error("cannot write through for an overlapping stronger mount: writing back what the container changed failed; the volume stays delegated meanwhile",
			"floor", floor.String(), "err", err)
		return fmt.Errorf("%s: write through for an overlapping %s mount: %w", f.source, floor, err)
	}
	every := f.rescan
	if !atLeast(own, consistency.Consistent) && atLeast(floor, consistency.Consistent) {
		every = min(every, OverlapRescan)
	}
	f.setRescan(every)
	return nil
}

func (f *storeFront) Status() driver.FrontStatus {
	s := f.ost.st.Stats()
	st := driver.FrontStatus{
		State:        f.ost.st.State().String(),
		Source:       f.source,
		Mountpoint:   f.Mountpoint(),
		Dirty:        s.WriteBack.Dirty,
		Failed:       s.WriteBack.Failed,
		Lag:          s.WriteBack.OldestAge,
		LastError:    s.WriteBack.LastError,
		Conflicts:    int(s.Conflicts),
		FailedPaths:  s.WriteBack.FailedPaths,
		WrittenFiles: s.WriteBack.Written,
		WrittenBytes: uint64(s.WrittenBytes),
		Fetched:      uint64(s.Fetched),
		CacheHits:    uint64(s.Hits),
		Errors:       s.WriteBack.Errors,
		Ops:          make(map[string]uint64, len(s.Ops)),
		Writers:      s.Writers,
		Xattrs:       s.Xattrs,
	}
	for k, v := range s.Ops {
		st.Ops[k] = uint64(v)
	}
	// What is left to write: the dirty files' sizes in the store (a stat
	// each, of the listed ones; status is asked for by people, not per op).
	for _, rel := range s.WriteBack.DirtyPaths {
		if lst, err := f.ost.st.Lstat(rel); err == nil && lst.Mode&unix.S_IFMT == unix.S_IFREG {
			st.DirtyBytes += lst.Size
		}
	}
	return st
}

func (f *storeFront) Close(ctx context.Context) error {
	var err error
	f.closeOnce.Do(func() {
		f.refreshMu.Lock()
		f.stopRefresh()
		f.stopRefresh = nil
		f.refreshMu.Unlock()
		// The store may outlive the mount (draining) and serve the next one,
		// whose floor starts from its own state.
		f.ost.st.SetWriteThrough(ctx, false)
		f.mnt.Close()
		if f.readOnly {
			if uerr := bindmount.UnmountTop(f.Mountpoint()); uerr != nil {
				f.log.Warn("unmount the read-only bind", "err", uerr)
			}
		}
		err = f.mount.Unmount()
		if rerr := os.Remove(f.Mountpoint()); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			f.log.Debug("remove mountpoint", "err", rerr)
		}
		f.o.release(f.key, f.ost, f.log)
	})
	return err
}

// bindFront is a consistent mount: a plain bind, nothing to flush.
type bindFront struct{ mp, source string }

func (b *bindFront) Mountpoint() string              { return b.mp }
func (b *bindFront) Flush(ctx context.Context) error { return nil }
func (b *bindFront) Status() driver.FrontStatus {
	return driver.FrontStatus{State: consistency.Consistent.String(), Source: b.source, Mountpoint: b.mp}
}
func (b *bindFront) Close(ctx context.Context) error { return bindmount.Unmount(b.mp) }

// SetFloor implements driver.Front: consistent is the strongest rule already.
func (b *bindFront) SetFloor(ctx context.Context, floor consistency.State) error { return nil }
