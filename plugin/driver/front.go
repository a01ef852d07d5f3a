package driver

import (
	"context"
	"time"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// A Front serves one host source in one state at one mountpoint, shared by
// every volume and container that names the same (source, state) (rule D3).
// Consistent fronts are plain bind mounts; cached and delegated fronts are a
// FUSE mount over the local store with its sync worker.
type Front interface {
	// Mountpoint is the path handed to Docker (beneath the plugin's
	// propagated mount).
	Mountpoint() string
	// Flush returns once every change made through the front is on the host
	// (delegated), or at once (other states). On failure it returns an error
	// naming each path that could not be written; those stay journaled.
	Flush(ctx context.Context) error
	// SetFloor tells the front the strongest state among the other open
	// fronts whose source overlaps its own (rules C4, D5: the overlap
	// follows the stronger rule); floor is its own state once no stronger
	// front overlaps it. A front whose state is at least as strong as floor
	// serves its own rule. A delegated front with a floor of cached or
	// stronger writes every container change through to the host until the
	// floor drops again; it first writes back everything it holds, and if
	// that fails it keeps its rule and returns the error (naming the paths).
	// Called without driver locks held; it may block on writeback.
	SetFloor(ctx context.Context, floor consistency.State) error
	// Status is a snapshot for `docker volume inspect` and the status command.
	Status() FrontStatus
	// Close unmounts. The caller flushes first; Close never discards data:
	// a delegated store whose journal is not empty keeps writing back in the
	// background (Opener.Resume) until it is.
	Close(ctx context.Context) error
}

// FrontStatus is what a Front reports about itself.
type FrontStatus struct {
	State      string        `json:"state"`
	Source     string        `json:"source"`
	Mountpoint string        `json:"mountpoint"`
	Dirty      int           `json:"dirty"`      // paths not yet on the host
	Failed     int           `json:"failed"`     // paths whose last writeback failed
	Lag        time.Duration `json:"lag"`        // age of the oldest change not on the host
	LastError  string        `json:"last_error"` // last writeback error, "" if none
	Conflicts  int           `json:"conflicts"`  // host copies kept aside (rule D7)

	// For the status command and metrics; zero when the front does not
	// keep them. Counts are since the front's store was opened.
	DirtyBytes   int64             `json:"dirty_bytes"`            // size of the dirty files' content
	FailedPaths  []string          `json:"failed_paths,omitempty"` // store-relative paths whose last writeback failed
	WrittenFiles uint64            `json:"written_files"`          // successful writebacks (paths)
	WrittenBytes uint64            `json:"written_bytes"`          // file content written back
	Fetched      uint64            `json:"fetched"`                // files whose content came from the host (cache misses)
	CacheHits    uint64            `json:"cache_hits"`             // opens served from content already local
	Ops          map[string]uint64 `json:"ops,omitempty"`          // container operations served, by kind
	Errors       uint64            `json:"errors"`                 // failed writeback attempts
	Writers      string            `json:"writers,omitempty"`      // cached: how files open for writing only are served, and why
	Xattrs       string            `json:"xattrs,omitempty"`       // whether the volume takes extended attributes, and why
}

// FrontSpec says what to serve.
type FrontSpec struct {
	Key    string            // stable id of (source, state): names the store and mountpoint
	Source string            // absolute host path as the user gave it
	State  consistency.State // never Default: the driver maps Default to Consistent
	// ReadOnly: containers only read what is mounted (option "readonly").
	ReadOnly bool
	Opts     map[string]string // remaining validated options (e.g. "rescan")
}

// Opener makes Fronts. Implemented by package frontend; faked in driver tests.
type Opener interface {
	// Open mounts a front for spec. It is called once per key while no front
	// for that key is open.
	Open(ctx context.Context, spec FrontSpec) (Front, error)
	// Resume is called at plugin start for every known key with no active
	// mounts, so that writeback journaled by an earlier run is retried (D4).
	// It must not mount anything.
	Resume(ctx context.Context, spec FrontSpec) error
}
