package fsys

import (
	"context"
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// afterBridgeFS runs what the plugin may only do once the node bridge has
// served a request itself, after the node's method returned.
//
// RELEASE: the bridge calls handle.Release and only then drops the
// handle's reference on its inode's passthrough backing file. Until it has,
// it answers every new OPEN of the inode with FOPEN_PASSTHROUGH on that
// backing file, whatever the new handle says (the kernel refuses an
// ordinary open of an inode open by passthrough). So the plugin must not
// take the inode for one without passthrough opens before then: newHandle
// decides a new open's kind from the node's counts (node.ptOpens), and an
// O_RDWR open decided as one the plugin serves, made in that gap, was
// served by the kernel from the store file itself. The plugin then never
// saw its writes, never journaled them, and its fsync wrote nothing back
// (rule D2; the writes were also lost to a crash). handle.Release hands
// the uncount of its kind to bridgeReleases, and afterBridgeFS runs it
// when the bridge returns.
//
// RENAME: the bridge moves the node in its tree, from which a file's
// current name is read (node.rel), after node.Rename returns. The store's
// journal holds of files open for writing follow them to their new names
// (store.Renamed) once it has.
type afterBridgeFS struct {
	fuse.RawFileSystem // the node bridge
	fs                 *filesystem
}

func newAfterBridgeFS(bridge fuse.RawFileSystem, fs *filesystem) *afterBridgeFS {
	return &afterBridgeFS{RawFileSystem: bridge, fs: fs}
}

func (a *afterBridgeFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	a.RawFileSystem.Release(cancel, in)
	a.fs.releases.done(cancel)
}

func (a *afterBridgeFS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	status := a.RawFileSystem.Rename(cancel, in, oldName, newName)
	if status == fuse.OK {
		if err := a.fs.store.Renamed(); err != nil {
			// The journal refused a record: the writes of a file renamed
			// while open are still journaled under its old name, and
			// written back at its release.
			a.fs.log.Error("journal a file renamed while open", "err", err)
		}
	}
	return status
}

// bridgeReleases holds what is to run once the bridge has finished a
// RELEASE, by request. A request is known by its cancel channel: the
// server makes one per request, and the bridge passes it to the node's
// Release in the fuse.Context.
type bridgeReleases struct {
	pending sync.Map // <-chan struct{} -> func()
}

// after runs fn once the bridge has finished the RELEASE ctx belongs to,
// or now for a release that is not the bridge's (releaseLeftover's, after
// the server stopped).
func (b *bridgeReleases) after(ctx context.Context, fn func()) {
	fc, ok := ctx.(*fuse.Context)
	if !ok || fc.Cancel == nil {
		fn()
		return
	}
	b.pending.Store(fc.Cancel, fn)
}

// done runs what after left for the RELEASE whose cancel channel this is.
func (b *bridgeReleases) done(cancel <-chan struct{}) {
	if fn, ok := b.pending.LoadAndDelete(cancel); ok {
		fn.(func())()
	}
}
