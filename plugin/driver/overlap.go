package driver

// Overlapping mounts (rules C4, D5): where the sources of two open fronts
// overlap (one equal to or beneath the other), the overlap follows the
// stronger state. The driver works this out after every change to the set of
// open fronts and tells each front its floor: the strongest state among the
// other open fronts that overlap it. The front does the rest (a delegated
// store writes through, a cached one rescans faster).
//
// Floors are pushed whole-front: a delegated /a overlapped by a cached /a/b
// writes through everywhere, not only beneath /a/b. That is stronger than
// the rule asks, and simple.
//
// Lock order: Driver.floorMu, then keyState.mu, then Driver.mu. floorMu is
// held while fronts are told (SetFloor may write back), so pushes never
// cross: the last one reflects the last change to the table.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// overlaps reports whether one of the host paths a and b is equal to or
// beneath the other, by path components: /a/b overlaps /a/b/c, not /a/bc.
func overlaps(a, b string) bool {
	a, b = filepath.Clean(a), filepath.Clean(b)
	return within(a, b) || within(b, a)
}

// within reports whether p is root or beneath it (both clean).
func within(p, root string) bool {
	if p == root || root == "/" {
		return true
	}
	return strings.HasPrefix(p, root+"/")
}

// openFront is what floors are computed from: one open front.
type openFront struct {
	ks     *keyState
	front  Front
	source string
	state  consistency.State // served state; Default ranks as Consistent anyway
	// imposes: its state counts for the fronts it overlaps. Not so for a
	// bind served only for "default" volumes: default is consistent minus
	// the overlap rules (SEMANTICS.md).
	imposes bool
}

// floors returns the floor of each front in open: the strongest state among
// the others whose source overlaps its own, and never below its own state
// (a front with no stronger overlap gets its own state: nothing to change).
func floors(open []openFront) []consistency.State {
	out := make([]consistency.State, len(open))
	for i, f := range open {
		floor := f.state
		for j, g := range open {
			if i != j && g.imposes && overlaps(f.source, g.source) {
				floor = consistency.Stronger(floor, g.state)
			}
		}
		out[i] = floor
	}
	return out
}

// openFrontsLocked lists the open fronts, by key. Driver.mu held.
func (d *Driver) openFrontsLocked() []openFront {
	var out []openFront
	for _, ks := range d.keys {
		if ks.front == nil {
			continue
		}
		src := d.sourceLocked(ks.key)
		if src == "" {
			continue
		}
		out = append(out, openFront{ks: ks, front: ks.front, source: src, state: ks.state,
			imposes: ks.state != consistency.Consistent || d.explicitConsistentLocked(ks.key)})
	}
	slices.SortFunc(out, func(a, b openFront) int { return strings.Compare(a.ks.key, b.ks.key) })
	return out
}

// sourceLocked is the source of key (every volume of a key has the same).
func (d *Driver) sourceLocked(key string) string {
	for _, v := range d.vols {
		if v.broken == nil && v.opts.key() == key {
			return v.opts.Source
		}
	}
	return ""
}

// volumesOfLocked names the volumes of key, for logs.
func (d *Driver) volumesOfLocked(key string) []string {
	var out []string
	for _, v := range d.vols {
		if v.broken == nil && v.opts.key() == key {
			out = append(out, v.name)
		}
	}
	slices.Sort(out)
	return out
}

// applyFloors computes every open front's floor and tells those whose floor
// changed since they were last told. Called after every Mount and Unmount
// that changed the set of open fronts, and after the restart; never holding
// a keyState.mu or Driver.mu. A front that cannot take its new floor (a
// delegated store that cannot write back what it holds) keeps its old one:
// the error is logged and returned, and the next change retries it.
func (d *Driver) applyFloors(ctx context.Context) error {
	d.floorMu.Lock()
	defer d.floorMu.Unlock()

	d.mu.Lock()
	open := d.openFrontsLocked()
	d.mu.Unlock()

	var errs []error
	for i, floor := range floors(open) {
		f := open[i]
		last := f.state // what a front serves until told otherwise
		if f.ks.floorFront == f.front {
			last = f.ks.floor
		}
		if floor == last {
			continue
		}
		if err := d.pushFloor(ctx, f, last, floor); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pushFloor tells f its floor, holding its key's mutex so that the front
// stays open meanwhile. floorMu held.
func (d *Driver) pushFloor(ctx context.Context, f openFront, last, floor consistency.State) error {
	f.ks.mu.Lock()
	defer f.ks.mu.Unlock()
	d.mu.Lock()
	stillOpen := f.ks.front == f.front
	vols := d.volumesOfLocked(f.ks.key)
	d.mu.Unlock()
	if !stillOpen {
		return nil // closed meanwhile; whoever closed it pushes again
	}
	log := d.log.With("volumes", vols, "key", f.ks.key, "source", f.source, "state", f.state.String(),
		"floor", floor.String())
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.UnmountFlushTimeout)
	start := time.Now()
	err := f.front.SetFloor(pctx, floor)
	cancel()
	if err != nil {
		attrs := []any{"err", err, "took", time.Since(start).String()}
		if fp := FailedPaths(err, f.source); len(fp) > 0 {
			attrs = append(attrs, "failed_paths", fp)
		}
		log.Error("cannot serve the overlap with a stronger mount in the stronger state; the front keeps its current rule and is retried at the next mount or unmount", attrs...)
		return fmt.Errorf("volumes %s (%s, %s): overlap floor %s: %w",
			strings.Join(vols, ", "), f.source, f.state, floor, err)
	}
	f.ks.floor, f.ks.floorFront = floor, f.front
	if consistency.Stronger(last, floor) == floor { // floor != last
		log.Info("front strengthened: it overlaps a stronger mount of the same host tree (rules C4, D5)",
			"was", last.String(), "took", time.Since(start).String())
	} else {
		log.Info("front relaxed: the stronger mount that overlapped it has ended",
			"was", last.String(), "took", time.Since(start).String())
	}
	return nil
}

// explicitConsistentLocked reports whether a volume of key asked for
// "consistent" by name (not "default", which shares its plain bind).
// Driver.mu held.
func (d *Driver) explicitConsistentLocked(key string) bool {
	for _, v := range d.vols {
		if v.broken == nil && v.opts.key() == key && v.opts.State == consistency.Consistent {
			return true
		}
	}
	return false
}
