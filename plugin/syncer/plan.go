// Package syncer brings host changes into a store: it scans the host, plans
// what to change (a pure function, Plan), and applies each change through the
// FUSE mount so that the kernel raises inotify events inside containers
// (watch-mode tools depend on them; rules C2, D1, D6).
//
// The other direction, container changes to the host, is package writeback.
package syncer

import (
	"sort"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/hostpath"
	"github.com/bindstate/bindstate/plugin/store"
)

// Kind is what one action does to the container's view.
type Kind int

const (
	Create  Kind = iota + 1 // the host has an entry the store lacks
	Delete                  // the host lost an entry the store still has
	Update                  // content or attributes changed on the host
	Replace                 // the entry's type (or a symlink's target) changed
)

func (k Kind) String() string {
	return [...]string{"?", "create", "delete", "update", "replace"}[k]
}

// Action is one planned change to one name in a directory.
type Action struct {
	Kind Kind
	Name string
	Host unix.Stat_t // the host entry (zero for Delete)
}

// Local is what Plan needs to know of a store entry.
type Local struct {
	Name    string
	Mode    uint32     // type and permission bits in the store
	Base    store.Base // host attributes when last in sync
	HasBase bool       // false for entries the container made
}

// Plan compares one directory's host entries with its store entries and
// returns the changes that bring host edits in, sorted by name. busy(name)
// reports entries the container has changed and not yet written back (or is
// writing through): those are never touched, the container's view wins
// until writeback (rule D7 handles a clash there). Entries without a base
// are never deleted: the container made them.
func Plan(host []hostpath.Entry, local []Local, busy func(name string) bool) []Action {
	byName := make(map[string]*Local, len(local))
	for i := range local {
		byName[local[i].Name] = &local[i]
	}
	var out []Action
	seen := make(map[string]bool, len(host))
	for _, h := range host {
		if store.IsTemporary(h.Name) {
			continue // the writeback's own file, renamed into place in a moment
		}
		seen[h.Name] = true
		l := byName[h.Name]
		if busy(h.Name) {
			continue
		}
		switch {
		case l == nil:
			out = append(out, Action{Kind: Create, Name: h.Name, Host: h.Stat})
		case !l.HasBase && isSpecial(l.Mode) && l.Mode&unix.S_IFMT == h.Stat.Mode&unix.S_IFMT:
			// a FIFO, socket or device: the host's node is the node (D8)
		case !l.HasBase && isSpecial(l.Mode):
			out = append(out, Action{Kind: Replace, Name: h.Name, Host: h.Stat})
		case !l.HasBase && l.Mode&unix.S_IFMT == h.Stat.Mode&unix.S_IFMT && isFileOrDir(l.Mode):
			// Not busy, so nothing of the container's is waiting for the
			// host: a create from the host cut short (the entry made, not
			// yet given the host's attributes and base, when the plugin
			// died: a file that reads empty, a directory with mode 0700),
			// or the container's own already on the host, its base lost on
			// the way. Either way the host has what belongs here: finish
			// it from the host, in place. (A populate cut short leaves the
			// same in a directory not populated yet, which no sweep looks
			// at: the next populate makes it again, store.removeUnfinished.)
			out = append(out, Action{Kind: Update, Name: h.Name, Host: h.Stat})
		case !l.HasBase && l.Mode&unix.S_IFMT == unix.S_IFLNK && h.Stat.Mode&unix.S_IFMT == unix.S_IFLNK:
			// A symlink, not busy, whose base is lost: a cached store keeps
			// symlink bases in memory only. The host's is what belongs here
			// (as for a file above): RefreshEntry takes its base if the
			// targets agree, else it is replaced.
			out = append(out, Action{Kind: Update, Name: h.Name, Host: h.Stat})
		case !l.HasBase:
			// an entry of another type than the host's: the container's,
			// on both sides; leave it to writeback
		case l.Mode&unix.S_IFMT != h.Stat.Mode&unix.S_IFMT:
			out = append(out, Action{Kind: Replace, Name: h.Name, Host: h.Stat})
		case l.Base.Matches(&h.Stat):
			// unchanged
		case h.Stat.Mode&unix.S_IFMT == unix.S_IFLNK:
			out = append(out, Action{Kind: Replace, Name: h.Name, Host: h.Stat})
		default:
			out = append(out, Action{Kind: Update, Name: h.Name, Host: h.Stat})
		}
	}
	for _, l := range local {
		if seen[l.Name] || (!l.HasBase && isFileOrDir(l.Mode)) || busy(l.Name) {
			// Without a base a file or directory is the container's, not
			// on the host yet. A symlink without a base is not busy (its
			// base lost: see above), so the host removed it. (The removal
			// through the mount checks the host again: store.hostStillHas.)
			continue
		}
		out = append(out, Action{Kind: Delete, Name: l.Name})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// isSpecial reports FIFOs, sockets and devices. They have no base (the
// kernel keeps no user xattrs on them) and always belong to the host (rule
// D8): the store mirrors the host's node, whoever made it.
func isSpecial(mode uint32) bool {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFDIR, unix.S_IFLNK:
		return false
	}
	return true
}

// isFileOrDir reports the types whose base the store keeps in an xattr of
// the entry, so that one without a base is one that never got it.
func isFileOrDir(mode uint32) bool {
	k := mode & unix.S_IFMT
	return k == unix.S_IFREG || k == unix.S_IFDIR
}
