package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bindstate/bindstate/plugin/writeback"
)

// What the status command, flush command and metrics see (package control
// serves them). Nothing here changes a volume's mounts.

// Background is optionally implemented by an Opener whose stores outlive
// their mount while they still have changes to write back (rule D4), so
// that status and flush reach a volume that no container mounts any more.
type Background interface {
	// BackgroundStatus describes the key's store if it is open without a
	// mount (ok is false otherwise).
	BackgroundStatus(spec FrontSpec) (st FrontStatus, ok bool)
	// BackgroundFlush waits until the key's store has nothing left to write
	// back (nil at once if no store of that key is open).
	BackgroundFlush(ctx context.Context, spec FrontSpec) error
}

// VolumeStatus describes one volume for the status command.
type VolumeStatus struct {
	Name       string    `json:"name"`
	Source     string    `json:"source"`
	State      string    `json:"state"`
	ReadOnly   bool      `json:"readonly,omitempty"` // option readonly: containers only read it
	Key        string    `json:"key,omitempty"`      // names the store; volumes sharing it share one front (D3)
	CreatedAt  time.Time `json:"created_at"`
	Mountpoint string    `json:"mountpoint,omitempty"`
	MountIDs   []string  `json:"mount_ids"`       // Docker's mount IDs, sorted
	Error      string    `json:"error,omitempty"` // the volume's options are no longer valid
	// Front is the front's status: set while it is open, or while a
	// delegated store keeps writing back after its last unmount.
	Front *FrontStatus `json:"front,omitempty"`
	// Background is true when Front describes a store with no mount.
	Background bool `json:"background,omitempty"`
}

// Status describes volume name.
func (d *Driver) Status(ctx context.Context, name string) (VolumeStatus, error) {
	d.mu.Lock()
	v := d.vols[name]
	if v == nil {
		d.mu.Unlock()
		return VolumeStatus{}, notFound(name)
	}
	st, spec := d.statusLocked(v)
	d.mu.Unlock()
	d.background(&st, spec)
	return st, nil
}

// StatusAll describes every volume, by name.
func (d *Driver) StatusAll(ctx context.Context) []VolumeStatus {
	d.mu.Lock()
	vs := d.sortedVolumes()
	out := make([]VolumeStatus, len(vs))
	specs := make([]*FrontSpec, len(vs))
	for i, v := range vs {
		out[i], specs[i] = d.statusLocked(v)
	}
	d.mu.Unlock()
	for i := range out {
		d.background(&out[i], specs[i])
	}
	return out
}

// statusLocked describes v; it returns v's spec if its front is not open
// (for background). Driver.mu held: Front.Status never races with Close.
func (d *Driver) statusLocked(v *volume) (VolumeStatus, *FrontSpec) {
	st := VolumeStatus{
		Name:      v.name,
		Source:    v.opts.Source,
		State:     v.opts.State.String(),
		ReadOnly:  v.opts.ReadOnly,
		CreatedAt: v.created,
		MountIDs:  slices.Sorted(maps.Keys(v.ids)),
	}
	if st.MountIDs == nil {
		st.MountIDs = []string{}
	}
	if v.broken != nil {
		st.Source, st.State, st.Error = v.raw[OptSource], v.raw[OptState], v.broken.Error()
		return st, nil
	}
	st.Key = v.opts.key()
	if ks := d.keys[st.Key]; ks != nil && ks.front != nil {
		fs := ks.front.Status()
		st.Front = &fs
		st.Mountpoint = ks.front.Mountpoint()
		return st, nil
	}
	if !v.opts.State.WritesBack() {
		return st, nil
	}
	spec := v.opts.spec()
	return st, &spec
}

// background fills st.Front from the Opener's background store, if any.
func (d *Driver) background(st *VolumeStatus, spec *FrontSpec) {
	bg, ok := d.cfg.Opener.(Background)
	if spec == nil || !ok {
		return
	}
	if fs, ok := bg.BackgroundStatus(*spec); ok {
		st.Front, st.Background = &fs, true
	}
}

// Flush waits until every change made through volume name is on the host:
// its front's, or its background store's once no container mounts it. A
// volume that writes nothing back (consistent, cached) has nothing to wait
// for. On failure the error names the volume and wraps the front's error
// (see FailedPaths).
func (d *Driver) Flush(ctx context.Context, name string) error {
	d.mu.Lock()
	if d.shutdown {
		d.mu.Unlock()
		return errShutdown
	}
	v := d.vols[name]
	if v == nil {
		d.mu.Unlock()
		return notFound(name)
	}
	if v.broken != nil || !v.opts.State.WritesBack() {
		d.mu.Unlock()
		return nil
	}
	ks := d.keyState(v)
	spec := v.opts.spec()
	// Count as a user of the front while flushing, as a mount ID would: an
	// Unmount of the last ID then leaves the front open, and we close it.
	front := ks.front
	if front != nil {
		ks.users++
	} else {
		v.pending++ // keeps the volume (and so its key) from being removed
	}
	d.mu.Unlock()
	log := d.volLog(v)

	start := time.Now()
	var err error
	if front != nil {
		err = front.Flush(ctx)
		d.releaseFront(ctx, ks, log)
	} else {
		if bg, ok := d.cfg.Opener.(Background); ok {
			err = bg.BackgroundFlush(ctx, spec)
		}
		d.mu.Lock()
		v.pending--
		d.mu.Unlock()
	}
	d.counters.flushes.Add(1)
	if err != nil {
		d.counters.flushFailures.Add(1)
		log.Error("flush failed; the changes stay journaled and are retried", "err", err,
			"failed_paths", FailedPaths(err, v.opts.Source), "took", time.Since(start).String())
		return fmt.Errorf("volume %q: writing back to %s failed: %w", name, v.opts.Source, err)
	}
	log.Info("flushed", "took", time.Since(start).String())
	return nil
}

// releaseFront ends a use of ks's front taken by Flush, closing the front
// if no mount ID uses it any more (and then relaxing the fronts it
// overlapped, see applyFloors).
func (d *Driver) releaseFront(ctx context.Context, ks *keyState, log *slog.Logger) {
	ks.mu.Lock()
	d.mu.Lock()
	ks.users--
	var toClose Front
	if ks.users == 0 {
		toClose, ks.front = ks.front, nil
	}
	d.mu.Unlock()
	if toClose != nil {
		d.closeFront(ctx, toClose, log)
	}
	ks.mu.Unlock()
	if toClose != nil {
		d.applyFloors(ctx)
	}
}

// FailedPath is a host path whose writeback failed, and why.
type FailedPath struct {
	Path  string `json:"path"`
	Error string `json:"error"`
}

// FailedPaths lists the paths a flush error names (a *writeback.FlushError
// in its chain), as host paths beneath source, sorted; nil if it names none.
func FailedPaths(err error, source string) []FailedPath {
	var fe *writeback.FlushError
	if !errors.As(err, &fe) || fe == nil {
		return nil
	}
	out := make([]FailedPath, 0, len(fe.Failed))
	for _, rel := range slices.Sorted(maps.Keys(fe.Failed)) {
		msg := ""
		if e := fe.Failed[rel]; e != nil {
			msg = e.Error()
		}
		out = append(out, FailedPath{Path: filepath.Join(source, rel), Error: msg})
	}
	return out
}

// Ops names the requests Counters counts, in the order they are reported.
var Ops = []string{"create", "remove", "mount", "unmount", "path", "get", "list", "capabilities"}

// counters are the Driver's and Protocol's metrics.
type counters struct {
	flushes       atomic.Uint64 // Driver.Flush calls (the flush command)
	flushFailures atomic.Uint64
	mu            sync.Mutex
	requests      map[string]uint64 // protocol requests by op
	errors        map[string]uint64 // failed protocol requests by op/kind
}

func (c *counters) request(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.requests == nil {
		c.requests = make(map[string]uint64)
	}
	c.requests[op]++
}

func (c *counters) failed(op string, k Kind) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.errors == nil {
		c.errors = make(map[string]uint64)
	}
	c.errors[op+"/"+k.String()]++
}

// Counters is a snapshot of the Driver's counters since it started.
type Counters struct {
	Requests      map[string]uint64 `json:"requests"` // protocol requests by op
	Errors        map[string]uint64 `json:"errors"`   // failed ones by "op/kind"
	Flushes       uint64            `json:"flushes"`
	FlushFailures uint64            `json:"flush_failures"`
}

// Counters returns a snapshot.
func (d *Driver) Counters() Counters {
	d.counters.mu.Lock()
	c := Counters{Requests: make(map[string]uint64), Errors: make(map[string]uint64)}
	maps.Copy(c.Requests, d.counters.requests)
	maps.Copy(c.Errors, d.counters.errors)
	d.counters.mu.Unlock()
	c.Flushes, c.FlushFailures = d.counters.flushes.Load(), d.counters.flushFailures.Load()
	return c
}
