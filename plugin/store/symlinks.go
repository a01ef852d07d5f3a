package store

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// A share may list a symlink and refuse to say where it points: Debian's
// sshfs 3.7.3 answers readlink with EPERM for a target that is absolute or
// has a ".." in it (its contain_symlinks option, on by default; libfuse/sshfs
// pull request 361), which is every link of a node_modules/.bin. A plain
// bind of that share lists such a link and fails its readlink. The store
// does the same: it makes the link with targetRefused as its target, and
// Readlink answers EPERM for it (errTargetRefused). Without this a listing
// of a directory holding one failed whole (EPERM), since making its entries
// needs each link's target.

// targetRefused is the store's target for a symlink whose target the share
// refused. A target has no NUL, so \x01 makes it one no tool writes by
// chance; followed, it leads nowhere (ENOENT), as a refused target does.
const targetRefused = "/\x01bindstate: the share refused to tell this symlink's target"

// errTargetRefused is what reading such a link gives the container.
var errTargetRefused = fmt.Errorf("the share refuses to tell this symlink's target (sshfs refuses a target that is absolute or has \"..\" unless mounted with -o no_contain_symlinks): %w", unix.EPERM)

// hostReadlink is the host symlink rel's target, or targetRefused where the
// share refuses to tell it.
func (s *Store) hostReadlink(rel string) (string, error) {
	t, err := s.host.Readlink(rel)
	if errors.Is(err, unix.EPERM) {
		if s.targetRefusedSeen.CompareAndSwap(false, true) {
			s.log.Info("the share refuses to tell some symlinks' targets: they are listed, and reading one fails as on the share (said once per volume)",
				"path", rel, "err", err)
		}
		return targetRefused, nil
	}
	return t, err
}

// Readlink returns a symlink's target, as stored: it is never followed here.
// One whose target the share refused reads as EPERM (errTargetRefused).
func (s *Store) Readlink(rel string) (string, error) {
	t, err := s.local.Readlink(rel)
	if err == nil && t == targetRefused {
		return "", fmt.Errorf("readlink %q: %w", rel, errTargetRefused)
	}
	return t, err
}
