// Package driver is bindstate's volume API: volumes, their options, their
// mounts, and the Fronts that serve them. Protocol adapts it to Docker's
// volume plugin protocol.
//
// Several volumes naming the same (source, state) share one Front, named by
// a key (rule D3), which stays open while any mount ID of any of those
// volumes is active. Mount IDs are tracked as sets, not counters, so that a
// repeated Mount (docker cp) or Unmount of one ID is harmless (moby#46508).
//
// Locking: Driver.mu guards the volume table and is only held for short,
// local work (including rewriting volumes.json). Each key has its own mutex
// that orders Open and Close of its Front; a delegated Unmount's Flush runs
// under neither, kept safe by its mount ID, which stays active (and the
// Front open) until the flush is over.
//
// Where the sources of open fronts overlap, the overlap follows the stronger
// state (rules C4, D5): after every Mount and Unmount each open front is told
// its floor (overlap.go). Driver.floorMu comes before keyState.mu.
package driver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/hostpath"
)

// DefaultUnmountFlushTimeout bounds the writeback a delegated Unmount waits
// for. Docker gives a volume plugin's Unmount one minute.
const DefaultUnmountFlushTimeout = 50 * time.Second

// Bounds for work the caller's deadline should not cut short.
const (
	closeTimeout   = 30 * time.Second // unmounting a front
	restartTimeout = time.Minute      // each Open/Resume at start
)

// Config configures a Driver.
type Config struct {
	// StateDir holds volumes.json (created if missing).
	StateDir string
	// Opener makes the Fronts.
	Opener Opener
	// Policy validates the "source" option at Create.
	Policy hostpath.Policy
	// UnmountFlushTimeout bounds how long a delegated Unmount waits for its
	// writeback (default DefaultUnmountFlushTimeout).
	UnmountFlushTimeout time.Duration
	// Log receives structured logs (default slog.Default()).
	Log *slog.Logger
}

// VolumeInfo describes a volume for Get and List.
type VolumeInfo struct {
	Name       string
	Mountpoint string // "" unless its front is open
	CreatedAt  time.Time
	Status     map[string]any
}

// Driver manages volumes. It is safe for concurrent use.
type Driver struct {
	cfg   Config
	log   *slog.Logger
	file  string
	check func(source string) error // Policy.Check; replaced in tests

	mu       sync.Mutex
	vols     map[string]*volume
	keys     map[string]*keyState
	shutdown bool

	floorMu sync.Mutex // serializes applyFloors (overlap.go); before keyState.mu

	counters counters // for metrics; own locking
}

// volume is one named volume.
type volume struct {
	name    string
	raw     map[string]string // options as given, persisted
	opts    options
	broken  error // options no longer valid (set at load); Mount refuses
	created time.Time
	// ids counts the active Mounts of each Docker mount ID. Docker reuses a
	// container's ID for `docker cp` while the container runs (Mount, then
	// Unmount of the same ID): a set would end the container's mount there.
	ids     map[string]int
	pending int // Mounts in progress (Remove waits for none)
	// releasing counts the Unmounts in progress of each ID, persisted so
	// that one cut short by a crash is ended at the next start (see load).
	releasing map[string]int
}

// keyState is the front of one key and what uses it.
type keyState struct {
	key   string
	state consistency.State // served state (never Default)
	// mu orders Open and Close of the front. Never taken while holding
	// Driver.mu (the other order is fine).
	mu sync.Mutex
	// front is written holding both mu and Driver.mu, read holding either.
	front Front
	users int // active mount IDs of all volumes with this key, plus Flushes running (status.go); Driver.mu
	// floor is the overlap floor last pushed to floorFront (rules C4, D5);
	// a front never told one serves its own state. Driver.floorMu.
	floor      consistency.State
	floorFront Front
}

// New loads the volumes kept in cfg.StateDir, opens the front of every key
// that had active mounts (so their mountpoints are live again after a
// restart) and resumes the writeback of the others. Failures to open or
// resume are logged, not returned.
func New(cfg Config) (*Driver, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("driver: StateDir is required")
	}
	if cfg.Opener == nil {
		return nil, errors.New("driver: Opener is required")
	}
	if cfg.UnmountFlushTimeout <= 0 {
		cfg.UnmountFlushTimeout = DefaultUnmountFlushTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("driver: state dir: %w", err)
	}
	d := &Driver{
		cfg:   cfg,
		log:   cfg.Log,
		file:  stateFile(cfg.StateDir),
		check: cfg.Policy.Check,
		vols:  make(map[string]*volume),
		keys:  make(map[string]*keyState),
	}
	if err := d.load(); err != nil {
		return nil, err
	}
	d.restart()
	return d, nil
}

// restart opens or resumes every known key (called by New).
func (d *Driver) restart() {
	type work struct {
		ks   *keyState
		spec FrontSpec
	}
	var todo []work
	for _, v := range d.sortedVolumes() { // no concurrency yet: no locking
		if v.broken != nil {
			continue
		}
		ks := d.keyState(v)
		if !slices.ContainsFunc(todo, func(w work) bool { return w.ks == ks }) {
			todo = append(todo, work{ks, v.opts.spec()})
		}
	}
	for _, w := range todo {
		log := d.log.With("key", w.ks.key, "source", w.spec.Source, "state", w.spec.State.String())
		ctx, cancel := context.WithTimeout(context.Background(), restartTimeout)
		if w.ks.users > 0 {
			f, err := d.cfg.Opener.Open(ctx, w.spec)
			if err == nil {
				w.ks.front = f
				log.Info("reopened after restart", "mounts", w.ks.users, "mountpoint", f.Mountpoint())
			} else {
				log.Error("cannot reopen a volume that was mounted before the restart; the next Mount retries",
					"mounts", w.ks.users, "err", err)
				// Whatever was journaled must still reach the host.
				if err := d.cfg.Opener.Resume(ctx, w.spec); err != nil {
					log.Error("resume writeback", "err", err)
				}
			}
		} else if err := d.cfg.Opener.Resume(ctx, w.spec); err != nil {
			log.Error("resume writeback", "err", err)
		}
		cancel()
	}
	if err := d.applyFloors(context.Background()); err != nil {
		d.log.Error("overlap floors after restart", "err", err)
	}
}

// keyState returns the state of v's key, creating it. Driver.mu held (or
// no concurrency yet).
func (d *Driver) keyState(v *volume) *keyState {
	key := v.opts.key()
	ks := d.keys[key]
	if ks == nil {
		ks = &keyState{key: key, state: v.opts.serveState()}
		d.keys[key] = ks
	}
	return ks
}

func (d *Driver) sortedVolumes() []*volume {
	vs := slices.Collect(maps.Values(d.vols))
	slices.SortFunc(vs, func(a, b *volume) int { return cmp.Compare(a.name, b.name) })
	return vs
}

func (d *Driver) volLog(v *volume) *slog.Logger {
	return d.log.With("volume", v.name, "key", v.opts.key(), "source", v.opts.Source, "state", v.opts.State.String())
}

// Create makes volume name with opts. Creating an existing volume with the
// same options is a no-op (Docker does that); with other options, an error.
func (d *Driver) Create(ctx context.Context, name string, opts map[string]string) error {
	if name == "" {
		return errorf(KindInvalid, "a volume name is required")
	}
	o, err := parseOptions(opts, d.check)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shutdown {
		return errShutdown
	}
	if v := d.vols[name]; v != nil {
		if v.broken == nil && v.opts == o {
			return nil
		}
		return errorf(KindConflict,
			"volume %q already exists with other options (%s); remove it first, or create it with the same options",
			name, describe(v))
	}
	v := &volume{
		name:    name,
		raw:     maps.Clone(opts),
		opts:    o,
		created: time.Now().UTC().Truncate(time.Second),
		ids:     make(map[string]int),
	}
	d.vols[name] = v
	d.keyState(v)
	if err := d.saveLocked(); err != nil {
		delete(d.vols, name)
		d.dropKeyLocked(v.opts.key())
		return err
	}
	d.volLog(v).Info("volume created", "rescan", o.Rescan.String())
	return nil
}

func describe(v *volume) string {
	if v.broken != nil {
		return "invalid: " + v.broken.Error()
	}
	return fmt.Sprintf("source=%s state=%s rescan=%v", v.opts.Source, v.opts.State, v.opts.Rescan)
}

// Remove deletes volume name (never the data of its source). Removing an
// unknown volume is not an error. A mount still counted is ended first
// (endLostUnmounts); a mount in progress refuses it.
func (d *Driver) Remove(ctx context.Context, name string) error {
	if err := d.endLostUnmounts(ctx, name); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.vols[name]
	if v == nil {
		d.log.Debug("remove of an unknown volume", "volume", name)
		return nil
	}
	if n := len(v.ids); n > 0 {
		return errorf(KindInUse, "volume %q is in use by %d mounts", name, n)
	}
	if v.pending > 0 {
		return errorf(KindInUse, "volume %q is in use: a mount is in progress", name)
	}
	delete(d.vols, name)
	if err := d.saveLocked(); err != nil {
		d.vols[name] = v
		return err
	}
	if v.broken == nil {
		d.dropKeyLocked(v.opts.key())
	}
	d.volLog(v).Info("volume removed")
	return nil
}

// endLostUnmounts ends the mounts still counted for volume name when Docker
// removes it, as their Unmounts would have: what they wrote is written back
// (an error is returned, and the volume stays, if that fails; the changes
// stay journaled and are retried), and the front closes with the key's last
// mount.
//
// Docker asks a driver to remove a volume only once no container refers to
// it (it keeps its own references across daemon restarts and refuses
// `docker volume rm` before asking), so every mount counted then is one
// whose Unmount never arrived. That happens: the engine resends a plugin
// request whose connection broke with an empty body (moby/moby#39331), so
// an Unmount that reached a plugin killed before it recorded the Unmount
// (releasing, which the next start ends) comes to the restarted plugin
// with no volume or ID in it, and fails. Without this the volume would
// stay "in use" for good.
func (d *Driver) endLostUnmounts(ctx context.Context, name string) error {
	d.mu.Lock()
	v := d.vols[name]
	if v == nil || len(v.ids) == 0 || v.pending > 0 {
		d.mu.Unlock()
		return nil // nothing to end, or a mount in progress: Remove says so
	}
	ids := maps.Clone(v.ids)
	log := d.volLog(v)
	d.mu.Unlock()
	log.Warn("removing a volume Docker no longer uses: ending the mounts whose Unmount never arrived (the plugin restarted during it)",
		"ids", slices.Sorted(maps.Keys(ids)))
	var errs []error
	for id, n := range ids {
		for range n {
			errs = append(errs, d.unmount(ctx, name, id))
		}
	}
	d.applyFloors(ctx)
	return errors.Join(errs...)
}

// dropKeyLocked forgets key once no volume names it. Nobody can be waiting
// on its mutex then: Mount and Unmount hold a volume of the key (pending or
// an active ID), which keeps it from being removed.
func (d *Driver) dropKeyLocked(key string) {
	ks := d.keys[key]
	if ks == nil || ks.front != nil || ks.users > 0 {
		return
	}
	for _, v := range d.vols {
		if v.broken == nil && v.opts.key() == key {
			return
		}
	}
	delete(d.keys, key)
}

var errShutdown = errorf(KindSystem, "the bindstate plugin is shutting down")

// Mount makes volume name available for mount id and returns its
// mountpoint. The first mount of a key opens its front; later ones share it.
// Mounting an ID that is already active returns the same mountpoint.
//
// Before the mountpoint is returned, every open front is told its overlap
// floor (rules C4, D5), so a container never uses the new mount while an
// overlapping weaker one still follows its weaker rule. A front that cannot
// take its floor is logged (applyFloors); the mount itself stands.
func (d *Driver) Mount(ctx context.Context, name, id string) (string, error) {
	mp, err := d.mount(ctx, name, id)
	if err == nil {
		d.applyFloors(ctx)
	}
	return mp, err
}

func (d *Driver) mount(ctx context.Context, name, id string) (string, error) {
	d.mu.Lock()
	if d.shutdown {
		d.mu.Unlock()
		return "", errShutdown
	}
	v := d.vols[name]
	if v == nil {
		d.mu.Unlock()
		return "", notFound(name)
	}
	if v.broken != nil {
		d.mu.Unlock()
		return "", &Error{Kind: KindInvalid, Err: fmt.Errorf("volume %q cannot be mounted: %w; remove it and create it again", name, v.broken)}
	}
	ks := d.keyState(v)
	v.pending++
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		v.pending--
		d.mu.Unlock()
	}()
	log := d.volLog(v).With("id", id)

	ks.mu.Lock()
	defer ks.mu.Unlock()
	d.mu.Lock()
	front := ks.front
	d.mu.Unlock()
	opened := false
	if front == nil {
		start := time.Now()
		f, err := d.cfg.Opener.Open(ctx, v.opts.spec())
		if err != nil {
			log.Error("mount failed", "err", err)
			return "", fmt.Errorf("mount volume %q (%s): %w", name, describe(v), err)
		}
		front, opened = f, true
		log.Info("front opened", "mountpoint", f.Mountpoint(), "took", time.Since(start).String())
	}

	d.mu.Lock()
	if opened {
		ks.front = front
	}
	v.ids[id]++
	ks.users++
	if err := d.saveLocked(); err != nil {
		if v.ids[id]--; v.ids[id] == 0 {
			delete(v.ids, id)
		}
		ks.users--
		var toClose Front
		if ks.users == 0 {
			toClose, ks.front = ks.front, nil
		}
		d.mu.Unlock()
		if toClose != nil {
			d.closeFront(ctx, toClose, log)
		}
		return "", err
	}
	mounts, users := v.ids[id], ks.users
	d.mu.Unlock()
	log.Info("mounted", "mountpoint", front.Mountpoint(), "mounts", mounts, "key_users", users)
	return front.Mountpoint(), nil
}

// Unmount ends mount id of volume name. An ID that is not active is
// ignored. For a delegated volume it first waits (at most
// UnmountFlushTimeout) until every change is on the host (rule D4); if that
// fails, the mount still ends (the changes stay journaled and keep being
// retried) and the error names the volume and the paths. The front of a key
// is closed when its last mount ID ends; the fronts it overlapped are then
// relaxed to their own rule (rules C4, D5; see applyFloors).
func (d *Driver) Unmount(ctx context.Context, name, id string) error {
	err := d.unmount(ctx, name, id)
	d.applyFloors(ctx)
	return err
}

func (d *Driver) unmount(ctx context.Context, name, id string) error {
	d.mu.Lock()
	v := d.vols[name]
	if v == nil {
		d.mu.Unlock()
		return notFound(name)
	}
	log := d.volLog(v).With("id", id)
	if v.ids[id] == 0 {
		d.mu.Unlock()
		log.Debug("unmount of an id that is not active: nothing to do")
		return nil
	}
	if v.broken != nil { // never opened
		if v.ids[id]--; v.ids[id] <= 0 {
			delete(v.ids, id)
		}
		err := d.saveLocked()
		d.mu.Unlock()
		return err
	}
	ks := d.keyState(v)
	front := ks.front
	if v.releasing == nil {
		v.releasing = make(map[string]int)
	}
	v.releasing[id]++
	if err := d.saveLocked(); err != nil {
		v.releasing[id]--
		d.mu.Unlock()
		return err
	}
	d.mu.Unlock()

	// The front stays open while our id is active: flush without locks.
	var flushErr error
	if front != nil && ks.state.WritesBack() {
		fctx, cancel := context.WithTimeout(ctx, d.cfg.UnmountFlushTimeout)
		start := time.Now()
		flushErr = front.Flush(fctx)
		cancel()
		if flushErr != nil {
			log.Error("writeback before unmount failed; the changes stay journaled and are retried",
				"err", flushErr, "took", time.Since(start).String())
			flushErr = fmt.Errorf("volume %q: writing the container's changes back to %s failed; they stay journaled and are retried in the background: %w",
				name, v.opts.Source, flushErr)
		} else {
			log.Info("written back before unmount", "took", time.Since(start).String())
		}
	}

	ks.mu.Lock()
	defer ks.mu.Unlock()
	d.mu.Lock()
	// This Unmount is over: saved below with the count it ends.
	if v.releasing[id]--; v.releasing[id] <= 0 {
		delete(v.releasing, id)
	}
	if v.ids[id] == 0 { // a concurrent Unmount of the same id ended it
		saveErr := d.saveLocked()
		d.mu.Unlock()
		return errors.Join(flushErr, saveErr)
	}
	if v.ids[id]--; v.ids[id] == 0 {
		delete(v.ids, id)
	}
	ks.users--
	var toClose Front
	if ks.users == 0 {
		toClose, ks.front = ks.front, nil
	}
	saveErr := d.saveLocked()
	mounts, users := v.ids[id], ks.users
	d.mu.Unlock()
	log.Info("unmounted", "mounts", mounts, "key_users", users)

	var closeErr error
	if toClose != nil {
		closeErr = d.closeFront(ctx, toClose, log)
		if closeErr != nil {
			closeErr = fmt.Errorf("volume %q: %w", name, closeErr)
		}
	}
	return errors.Join(flushErr, closeErr, saveErr)
}

// closeFront closes f, not cut short by the caller's deadline.
func (d *Driver) closeFront(ctx context.Context, f Front, log *slog.Logger) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	mp := f.Mountpoint()
	if err := f.Close(cctx); err != nil {
		log.Error("closing front", "mountpoint", mp, "err", err)
		return fmt.Errorf("unmount %s: %w", mp, err)
	}
	log.Info("front closed", "mountpoint", mp)
	return nil
}

// Path returns where volume name is mounted, "" if it is not.
func (d *Driver) Path(ctx context.Context, name string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.vols[name]
	if v == nil {
		return "", notFound(name)
	}
	return d.mountpointLocked(v), nil
}

func (d *Driver) mountpointLocked(v *volume) string {
	if v.broken != nil {
		return ""
	}
	if ks := d.keys[v.opts.key()]; ks != nil && ks.front != nil {
		return ks.front.Mountpoint()
	}
	return ""
}

// Get describes volume name.
func (d *Driver) Get(ctx context.Context, name string) (VolumeInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.vols[name]
	if v == nil {
		return VolumeInfo{}, notFound(name)
	}
	return d.infoLocked(v), nil
}

// List describes every volume, by name.
func (d *Driver) List(ctx context.Context) ([]VolumeInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]VolumeInfo, 0, len(d.vols))
	for _, v := range d.sortedVolumes() {
		out = append(out, d.infoLocked(v))
	}
	return out, nil
}

// infoLocked describes v. Front.Status is called under Driver.mu, which
// keeps it from racing with Close (a front leaves the table before it is
// closed).
func (d *Driver) infoLocked(v *volume) VolumeInfo {
	st := map[string]any{
		"source": v.opts.Source,
		"state":  v.opts.State.String(),
		"mounts": len(v.ids),
	}
	info := VolumeInfo{Name: v.name, CreatedAt: v.created, Status: st}
	if v.broken != nil {
		st["source"] = v.raw[OptSource]
		st["state"] = v.raw[OptState]
		st["error"] = v.broken.Error()
		return info
	}
	st["key"] = v.opts.key()
	if v.opts.ReadOnly {
		st["readonly"] = true
	}
	if v.opts.State.NeedsStore() {
		st["rescan"] = v.opts.Rescan.String()
	}
	if ks := d.keys[v.opts.key()]; ks != nil && ks.front != nil {
		fs := ks.front.Status()
		info.Mountpoint = ks.front.Mountpoint()
		st["mountpoint"] = info.Mountpoint
		st["dirty"] = fs.Dirty
		st["failed"] = fs.Failed
		st["lag"] = fs.Lag.String()
		st["last_error"] = fs.LastError
		st["conflicts"] = fs.Conflicts
		if fs.Writers != "" {
			st["writers"] = fs.Writers
		}
		if fs.Xattrs != "" {
			st["xattrs"] = fs.Xattrs
		}
	}
	return info
}

// Shutdown stops the Driver for good: new mounts are refused, and every
// open front is flushed (delegated; bounded by ctx) and closed. Active
// mount IDs stay recorded, so the next start reopens their fronts.
func (d *Driver) Shutdown(ctx context.Context) error {
	d.mu.Lock()
	d.shutdown = true
	var open []*keyState
	for _, ks := range d.keys {
		if ks.front != nil {
			open = append(open, ks)
		}
	}
	d.mu.Unlock()

	errs := make([]error, len(open))
	var wg sync.WaitGroup
	for i, ks := range open {
		wg.Go(func() {
			ks.mu.Lock()
			defer ks.mu.Unlock()
			d.mu.Lock()
			f := ks.front
			ks.front = nil
			d.mu.Unlock()
			if f == nil {
				return
			}
			log := d.log.With("key", ks.key, "state", ks.state.String())
			if ks.state.WritesBack() {
				if err := f.Flush(ctx); err != nil {
					log.Error("writeback at shutdown failed; the changes stay journaled for the next start", "err", err)
					errs[i] = fmt.Errorf("key %s: %w", ks.key, err)
				}
			}
			if err := d.closeFront(ctx, f, log); err != nil {
				errs[i] = errors.Join(errs[i], fmt.Errorf("key %s: %w", ks.key, err))
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
