package syncer

import (
	"container/list"
	"sync"
	"time"
)

// InUse is the files the container opened lately, so that a check can stat
// them on the host. An edit in place on the host (what VS Code's save does:
// it writes over the file, no rename) moves no directory's mtime, so a check
// of directories alone misses it until the next sweep, which on a large tree
// is a minute or more away. A file the container keeps opening (a build or a
// test run reading its sources, a dev server rereading a template) is the
// one whose edits the user waits for, and one stat per such file finds them
// at the next check.
//
// It outlives a Refresher (the front restarts its refresher to change the
// interval). The zero value is not usable; see NewInUse.
type InUse struct {
	mu    sync.Mutex
	max   int
	order *list.List               // of *inUseEntry, most recently opened first
	byRel map[string]*list.Element // rel -> its element in order
}

type inUseEntry struct {
	rel string
	at  time.Time
}

const (
	// inUseFor is how long after its last open a file is stat'ed at each
	// check: long enough for an edit-then-rebuild loop.
	inUseFor = 10 * time.Minute
	// maxInUse bounds the files stat'ed per check: about the cost of the
	// directory stats of a 100k-file tree (~15 ms on sshfs over loopback).
	// Past it, the least recently opened are forgotten.
	maxInUse = 1024
)

// NewInUse keeps up to max files (maxInUse if max <= 0).
func NewInUse(max int) *InUse {
	if max <= 0 {
		max = maxInUse
	}
	return &InUse{max: max, order: list.New(), byRel: make(map[string]*list.Element)}
}

// Opened records that the container opened rel. It is on the path of every
// open: a map lookup and a list move, under a mutex.
func (u *InUse) Opened(rel string) {
	now := time.Now()
	u.mu.Lock()
	defer u.mu.Unlock()
	if el, ok := u.byRel[rel]; ok {
		el.Value.(*inUseEntry).at = now
		u.order.MoveToFront(el)
		return
	}
	u.byRel[rel] = u.order.PushFront(&inUseEntry{rel: rel, at: now})
	for u.order.Len() > u.max {
		el := u.order.Back()
		delete(u.byRel, el.Value.(*inUseEntry).rel)
		u.order.Remove(el)
	}
}

// Since returns the files opened at or after t, most recent first, and
// forgets the others.
func (u *InUse) Since(t time.Time) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for el := u.order.Front(); el != nil; {
		e := el.Value.(*inUseEntry)
		if e.at.Before(t) {
			// The rest are older still.
			for el != nil {
				next := el.Next()
				delete(u.byRel, el.Value.(*inUseEntry).rel)
				u.order.Remove(el)
				el = next
			}
			break
		}
		out = append(out, e.rel)
		el = el.Next()
	}
	return out
}
