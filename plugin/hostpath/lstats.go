package hostpath

import (
	"golang.org/x/sys/unix"
)

// Stats calls fn(0) .. fn(n-1), each an lstat (or a few) on r's file
// system, side by side once they show they are round trips (a share that
// keeps no attributes; sidebyside.Pace), where one after the other N of
// them took N. r keeps the pace across calls, for listings and host checks
// alike: they ask the same file system.
func (r *Root) Stats(n int, fn func(i int)) { r.pace.Stats(n, fn) }

// lstatEach lstats names[i] in the directory dfd into sts[i], errs[i], for
// every i, at r's pace (Stats).
func (r *Root) lstatEach(dfd int, names []string) (sts []unix.Stat_t, errs []error) {
	sts, errs = make([]unix.Stat_t, len(names)), make([]error, len(names))
	r.Stats(len(names), func(i int) {
		if err := unix.Fstatat(dfd, names[i], &sts[i], unix.AT_SYMLINK_NOFOLLOW); err != nil {
			errs[i] = err
		}
	})
	return sts, errs
}
