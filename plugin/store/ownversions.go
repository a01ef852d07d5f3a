package store

import (
	"sync"
	"time"
)

// ownVersions remembers, for files with several names on a source served
// by a process (sshfs), the host versions the store recorded as their base
// lately: what the plugin itself wrote there, or saw there.
//
// Such a share keeps each path's attributes for a while (sshfs: 20 s), and
// a write or chmod through one name of a linked file makes it forget only
// that name's. Its other names keep showing a version from before, even
// past the caches: sshfs's open, which LstatFresh relies on, refreshes a
// path's attributes only if no write was made anywhere on the mount while
// it ran, and a writeback of other files makes many. One of the store's
// own earlier versions, seen so, is no host edit: without this the refresh
// gave the container's file its older size and mode back, and the
// writeback through that name, or of its removal, kept the container's own
// file aside as a conflict copy (rule D7). A stale name shows what the host
// held when the share last looked; if that is a version the store recorded
// before the one it last recorded (the base), nothing newer was seen
// there, as when the share shows the base itself.
//
// Versions are kept by store inode, so that an earlier version counts only
// for the file it was recorded for, whichever of its names is looked at
// (the removal of a name has no store entry left, only its base).
//
// Bounded: each version is kept for ownVersionsKeep (a share's cache can
// be set longer than sshfs's 20 s, and a name's may hold a version from
// many writes ago), at most ownVersionsPerFile per file, for at most
// ownVersionsFiles files.
type ownVersions struct {
	mu    sync.Mutex
	byIno map[uint64][]ownVersion
	order []uint64 // inodes, oldest first, to drop past ownVersionsFiles
}

type ownVersion struct {
	base Base
	at   time.Time
}

const (
	ownVersionsPerFile = 64
	ownVersionsFiles   = 1024
	ownVersionsKeep    = 10 * time.Minute
)

// add records b as a version of store inode ino the host held.
func (o *ownVersions) add(ino uint64, b Base) {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byIno == nil {
		o.byIno = make(map[uint64][]ownVersion)
	}
	vs, ok := o.byIno[ino]
	if !ok {
		if len(o.order) >= ownVersionsFiles {
			delete(o.byIno, o.order[0])
			o.order = o.order[1:]
		}
		o.order = append(o.order, ino)
	}
	if n := len(vs); n > 0 && vs[n-1].base == b {
		vs[n-1].at = now
		return
	}
	for len(vs) > 0 && (len(vs) >= ownVersionsPerFile || now.Sub(vs[0].at) >= ownVersionsKeep) {
		vs = vs[1:]
	}
	o.byIno[ino] = append(vs, ownVersion{b, now})
}

// has reports whether one file's versions recorded lately hold both its
// base and, before it, shown.
func (o *ownVersions) has(base, shown Base) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, vs := range o.byIno {
		earlier := false
		for _, v := range vs {
			if time.Since(v.at) >= ownVersionsKeep {
				continue
			}
			switch v.base {
			case shown:
				earlier = true
			case base:
				if earlier {
					return true
				}
			}
		}
	}
	return false
}
