package hostpath

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/internal/sidebyside"
)

// A listing's lstats go side by side once the first ones show that the
// directory is a round trip away (sidebyside.Do). Over a share that keeps
// no attributes (9p, as WSL2 mounts Windows folders; virtiofs or NFS
// without attribute caching; sshfs with its caches off) each lstat is one,
// and one after the other a listing of N entries took N: the first listing
// of a large directory, and each look of the host refresher at one.
// Answered from a cache (a local disk; sshfs's attribute cache, tens of
// microseconds through FUSE) they stay one after the other: on a small
// machine the goroutines' switches cost more than they overlap (a cold
// `git status` over sshfs on 2 CPUs was 13-16% slower when any lstat over
// 50 µs set them going).
const (
	statsAtOnce = 8                      // lstats in flight, at most
	slowStat    = 200 * time.Microsecond // lstats that take longer are round trips
)

// lstatEach lstats names[i] in the directory dfd into sts[i], errs[i], for
// every i.
func lstatEach(dfd int, names []string) (sts []unix.Stat_t, errs []error) {
	sts, errs = make([]unix.Stat_t, len(names)), make([]error, len(names))
	sidebyside.Do(len(names), statsAtOnce, slowStat, func(i int) {
		if err := unix.Fstatat(dfd, names[i], &sts[i], unix.AT_SYMLINK_NOFOLLOW); err != nil {
			errs[i] = err
		}
	})
	return sts, errs
}
