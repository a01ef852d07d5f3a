package fsys

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"time"

	"github.com/bindstate/bindstate/plugin/store"
	"github.com/bindstate/bindstate/plugin/writeback"
)

// errno turns an error from the store into what the kernel returns to the
// container. A plain errno passes through; a failed writeback is EIO (the
// data is safe in the store's journal; the host could not take it); anything
// unrecognised is EIO with a log line naming the operation and path, so no
// failure is ever reported as success.
func (f *filesystem) errno(err error, op, rel string) syscall.Errno {
	if err == nil {
		return 0
	}
	if rel == orphanPath || strings.HasPrefix(rel, orphanPath+"/") {
		return syscall.ENOENT // raced with an unlink or rename: gone
	}
	if errors.Is(err, store.ErrBusy) {
		return syscall.EBUSY // a host change the container got to first
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	var fe *writeback.FlushError
	switch {
	case errors.As(err, &fe):
		f.log.Warn("sync failed: writeback to the host failed", "op", op, "path", rel, "err", err)
		return syscall.EIO
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, context.DeadlineExceeded):
		f.log.Warn("gave up waiting for the host", "op", op, "path", rel, "limit", hostWait.String(), "err", err)
		return syscall.EIO
	}
	f.log.Error("request failed", "op", op, "path", rel, "err", err)
	return syscall.EIO
}

// hostWait bounds how long one request (fsync, or a rename or link that must
// write back first) waits for the host.
const hostWait = 5 * time.Minute

// waitCtx is the context for a request that waits on writeback. The kernel's
// interrupts do not cancel it: a Go program's runtime signals its threads all
// the time (preemption), the kernel forwards each as an interrupt of the
// pending request, and answering EINTR would fail the program's rename or
// fsync for nothing. The wait is bounded by hostWait instead (then EIO).
func waitCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), hostWait)
}
