package fsys

import (
	"context"
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// releaseFS runs, after the node bridge has served a RELEASE, what the
// plugin may only do once the bridge is done with the handle.
//
// The bridge calls handle.Release and only then drops the handle's
// reference on its inode's passthrough backing file. Until it has, it
// answers every new OPEN of the inode with FOPEN_PASSTHROUGH on that
// backing file, whatever the new handle says (the kernel refuses an
// ordinary open of an inode open by passthrough). So the plugin must not
// take the inode for one without passthrough opens before then: newHandle
// decides a new open's kind from the node's counts (node.ptOpens), and an
// O_RDWR open decided as one the plugin serves, made in that gap, was
// served by the kernel from the store file itself. The plugin then never
// saw its writes, never journaled them, and its fsync wrote nothing back
// (rule D2; the writes were also lost to a crash). handle.Release hands
// the uncount of its kind to bridgeReleases, and releaseFS runs it when
// the bridge returns.
type releaseFS struct {
	fuse.RawFileSystem // the node bridge
	releases           *bridgeReleases
}

func newReleaseFS(bridge fuse.RawFileSystem, releases *bridgeReleases) *releaseFS {
	return &releaseFS{RawFileSystem: bridge, releases: releases}
}

func (r *releaseFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	r.RawFileSystem.Release(cancel, in)
	r.releases.done(cancel)
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
