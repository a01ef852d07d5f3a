package syncer

import (
	"log/slog"
	"time"
)

// failureReport says a run of failed looks without a record for each: the
// first failure, then at most one record a minute with how many looks have
// failed since the run began, and a record when a look works again. A share
// that is gone fails every check, once a rescan interval, for as long as it
// is gone: a record each time said nothing new, buried the rest of the log
// (bindstate logs keeps the latest 2,000 records), and filled the plugin's
// output while nobody read it (package logwriter).
type failureReport struct {
	log *slog.Logger

	failed int       // looks failed since the last that worked
	since  time.Time // when the first of them failed
	said   time.Time // when a record last said so
}

// failureRepeat is how often a run of failed looks is said again.
const failureRepeat = time.Minute

// look notes how the look of kind that ended at now went.
func (f *failureReport) look(now time.Time, kind string, err error) {
	switch {
	case err == nil && f.failed > 0:
		f.log.Info("host refresh works again", "kind", kind, "failed_looks", f.failed,
			"failing_for", now.Sub(f.since).Round(time.Millisecond).String())
		f.failed = 0
	case err == nil:
	case f.failed == 0:
		f.failed, f.since, f.said = 1, now, now
		f.log.Warn("host refresh failed", "kind", kind, "err", err)
	default:
		f.failed++
		if now.Sub(f.said) >= failureRepeat {
			f.said = now
			f.log.Warn("host refresh still failing", "kind", kind, "err", err, "failed_looks", f.failed,
				"failing_for", now.Sub(f.since).Round(time.Millisecond).String())
		}
	}
}
