package testshare

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/bindstate/bindstate/integration/harness"
)

// SSHFS starts a real sshfs share of a fresh folder under base (its
// server's folder base/server, mounted on base/share; contrib/share.sh,
// its own sshd), stopped when the test ends, after what was opened on it
// later (cleanups run last first). Skipped without sshd and sshfs, except
// in CI.
func SSHFS(t testing.TB, base string) *harness.Share {
	t.Helper()
	for _, tool := range []string{"/usr/sbin/sshd", "sshfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			if harness.InCI() {
				t.Fatalf("%s: %v (contrib/install-deps.sh installs it)", tool, err)
			}
			t.Skipf("no %s for a share: %v", tool, err)
		}
	}
	repo, err := harness.RepoRoot() // go test runs in the package, make test-exercise-loop at the top
	if err != nil {
		t.Fatal(err)
	}
	share, err := harness.StartShare(filepath.Join(repo, "contrib", "share.sh"),
		filepath.Join(base, "server"), filepath.Join(base, "share"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := share.Down(); err != nil {
			t.Errorf("share down: %v", err)
		}
	})
	return share
}
