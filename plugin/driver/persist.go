package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// stateVersion is the format of volumes.json.
const stateVersion = 1

// stateDoc is volumes.json: every volume, with its active mount IDs.
type stateDoc struct {
	Version int            `json:"version"`
	Volumes []volumeRecord `json:"volumes"`
}

type volumeRecord struct {
	Name      string            `json:"name"`
	Opts      map[string]string `json:"opts"`
	CreatedAt time.Time         `json:"created_at"`
	Mounts    []string          `json:"mounts,omitempty"` // active mount IDs, one entry per active Mount
	// Releasing are mount IDs whose Unmount had begun (one entry per
	// Unmount in progress). Found at load, they are Unmounts a crash cut
	// short: the daemon does not send them again, so they are done then.
	Releasing []string `json:"releasing,omitempty"`
}

func stateFile(dir string) string { return filepath.Join(dir, "volumes.json") }

// load reads volumes.json (a missing file is an empty table). Options are
// validated again, without the source policy (Open checks it): a volume
// whose options no longer parse is kept, marked broken, so that it can be
// listed and removed.
func (d *Driver) load() error {
	b, err := os.ReadFile(d.file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("driver: read %s: %w", d.file, err)
	}
	var doc stateDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("driver: %s is corrupt (%v): repair it or move it aside (the volumes it lists are then forgotten)", d.file, err)
	}
	if doc.Version != stateVersion {
		return fmt.Errorf("driver: %s has format version %d, this plugin reads %d", d.file, doc.Version, stateVersion)
	}
	interrupted := false
	for _, r := range doc.Volumes {
		if r.Name == "" || d.vols[r.Name] != nil {
			d.log.Error("skipping a nameless or duplicate volume in the state file", "volume", r.Name, "file", d.file)
			continue
		}
		v := &volume{name: r.Name, raw: r.Opts, created: r.CreatedAt, ids: make(map[string]int)}
		if v.raw == nil {
			v.raw = map[string]string{}
		}
		for _, id := range r.Mounts {
			v.ids[id]++
		}
		for _, id := range r.Releasing {
			// The container is gone and its changes are journaled (the
			// store resumes their writeback): only the count is left to end.
			if v.ids[id] > 0 {
				if v.ids[id]--; v.ids[id] == 0 {
					delete(v.ids, id)
				}
				d.log.Warn("an Unmount was cut short by a restart; the mount is ended now and its changes are written back from the journal",
					"volume", v.name, "id", id)
				interrupted = true
			}
		}
		v.opts, v.broken = parseOptions(v.raw, nil)
		d.vols[v.name] = v
		if v.broken != nil {
			d.log.Error("volume options are no longer valid; it cannot be mounted until it is created again",
				"volume", v.name, "err", v.broken)
			continue
		}
		d.keyState(v).users += activeMounts(v)
	}
	d.log.Info("volumes loaded", "file", d.file, "volumes", len(d.vols))
	if interrupted {
		return d.saveLocked()
	}
	return nil
}

// saveLocked writes volumes.json atomically (temporary file, fsync, rename,
// fsync of the directory). Driver.mu held: snapshots are written in order.
func (d *Driver) saveLocked() error {
	doc := stateDoc{Version: stateVersion, Volumes: []volumeRecord{}}
	for _, v := range d.sortedVolumes() {
		doc.Volumes = append(doc.Volumes, volumeRecord{
			Name:      v.name,
			Opts:      v.raw,
			CreatedAt: v.created,
			Mounts:    mountList(v),
			Releasing: releasingList(v),
		})
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return &Error{Kind: KindSystem, Err: fmt.Errorf("save volumes: %w", err)}
	}
	if err := writeFileAtomic(d.file, append(b, '\n')); err != nil {
		d.log.Error("cannot save the volume table", "file", d.file, "err", err)
		return &Error{Kind: KindSystem, Err: fmt.Errorf("save volumes: %w", err)}
	}
	return nil
}

// writeFileAtomic replaces path with data (mode 0600, from CreateTemp).
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	dh, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer dh.Close()
	return dh.Sync()
}

// mountList is v's active mounts for volumes.json: each ID as many times as
// it is mounted, sorted.
func mountList(v *volume) []string { return countedList(v.ids) }

// releasingList is v's Unmounts in progress, as mountList.
func releasingList(v *volume) []string { return countedList(v.releasing) }

// countedList lists each key of counts as many times as it counts, sorted.
func countedList(counts map[string]int) []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(counts)) {
		for range counts[id] {
			out = append(out, id)
		}
	}
	return out
}

// activeMounts is the number of active Mounts of v, over all its IDs.
func activeMounts(v *volume) int {
	n := 0
	for _, c := range v.ids {
		n += c
	}
	return n
}
