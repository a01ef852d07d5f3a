package hostpath

import (
	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/internal/sidebyside"
)

// lstatEach lstats names[i] in the directory dfd into sts[i], errs[i], for
// every i: side by side once they show they are round trips (a share that
// keeps no attributes: sidebyside.Stats), where one after the other a
// listing of N entries took N.
func lstatEach(dfd int, names []string) (sts []unix.Stat_t, errs []error) {
	sts, errs = make([]unix.Stat_t, len(names)), make([]error, len(names))
	sidebyside.Stats(len(names), func(i int) {
		if err := unix.Fstatat(dfd, names[i], &sts[i], unix.AT_SYMLINK_NOFOLLOW); err != nil {
			errs[i] = err
		}
	})
	return sts, errs
}
