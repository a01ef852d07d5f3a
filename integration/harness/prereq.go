// Package harness drives real parts for the integration tests: a private
// dockerd (never the system's), the docker CLI against it, a busybox image
// made with docker import, the bindstate managed plugin, and a real slow
// share (sshd + sshfs over loopback, contrib/share.sh). Standard library only.
//
// Tests skip only when they cannot run at all here (not root, or no
// /dev/fuse), and say so; with CI=true even that fails instead. Any other
// missing piece (dockerd, sshfs, busybox-static, ...) is a failure.
package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// InCI reports whether the tests run in CI (CI=true), where a missing
// prerequisite fails instead of skipping.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1" || v == "yes"
}

// SkipReason is why the integration tests cannot run on this machine at all
// (not root, no /dev/fuse), or "" when they can.
func SkipReason() string {
	if os.Geteuid() != 0 {
		return "integration tests need root (they start a dockerd, sshd and FUSE mounts); run them as root"
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return "integration tests need /dev/fuse: " + err.Error()
	}
	return ""
}

// RequiresRoot skips t (or fails it, in CI) when SkipReason is not empty.
func RequiresRoot(t testing.TB) {
	t.Helper()
	if r := SkipReason(); r != "" {
		if InCI() {
			t.Fatalf("CI=true and a prerequisite is missing: %s", r)
		}
		t.Skip("SKIP: " + r)
	}
}

// Tools are the programs the tests need besides root and /dev/fuse.
type Tools struct {
	Dockerd string // the daemon binary (default /usr/sbin/dockerd)
	Docker  string // the CLI
	Busybox string // a static busybox (Debian busybox-static)
	Sshd    string
	Sshfs   string
	Go      string // to build the plugin and the test helper
}

// FindTools looks every tool up. The error names each missing one and the
// Debian package that provides it.
func FindTools() (Tools, error) {
	var t Tools
	var missing []string
	find := func(dst *string, tool, env string, candidates []string, pkg string) {
		if v := os.Getenv(env); v != "" {
			candidates = []string{v}
		}
		for _, c := range candidates {
			if p, err := exec.LookPath(c); err == nil {
				*dst = p
				return
			}
		}
		missing = append(missing, fmt.Sprintf("%s (looked for %s; Debian package %s; or set %s)",
			tool, strings.Join(candidates, ", "), pkg, env))
	}
	find(&t.Dockerd, "dockerd", "BINDSTATE_DOCKERD", []string{"/usr/sbin/dockerd", "dockerd"}, "docker.io")
	find(&t.Docker, "docker", "BINDSTATE_DOCKER", []string{"docker"}, "docker.io (or docker-cli)")
	find(&t.Busybox, "busybox", "BINDSTATE_BUSYBOX", []string{"/bin/busybox", "busybox"}, "busybox-static")
	find(&t.Sshd, "sshd", "BINDSTATE_SSHD", []string{"/usr/sbin/sshd"}, "openssh-server")
	find(&t.Sshfs, "sshfs", "BINDSTATE_SSHFS", []string{"sshfs"}, "sshfs")
	find(&t.Go, "go", "BINDSTATE_GO", []string{"go"}, "golang")
	if len(missing) > 0 {
		return t, errors.New("missing prerequisites: " + strings.Join(missing, "; ") +
			" (contrib/install-deps.sh installs them)")
	}
	if out, err := exec.Command("file", "-L", t.Busybox).Output(); err == nil &&
		!strings.Contains(string(out), "statically linked") && !strings.Contains(string(out), "static-pie") {
		return t, fmt.Errorf("%s is not statically linked: install Debian busybox-static", t.Busybox)
	}
	return t, nil
}

// RepoRoot finds the repository root (the directory of go.mod of module
// github.com/bindstate/bindstate) from the working directory upwards.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/bindstate/bindstate\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (go.mod of github.com/bindstate/bindstate) not found above the working directory")
		}
		dir = parent
	}
}
