package integration

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bindstate/bindstate/integration/harness"
)

// registryBinary is the registry program of distribution/distribution,
// built from the Go module proxy by make registry (pinned in
// contrib/versions.env): $BINDSTATE_REGISTRY, or the newest
// _build/tools/registry-* of the repository.
func registryBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("BINDSTATE_REGISTRY"); p != "" {
		return p
	}
	repo, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	found, _ := filepath.Glob(filepath.Join(repo, "_build", "tools", "registry-*"))
	if len(found) == 0 {
		if harness.InCI() {
			t.Fatal("no registry program: make registry builds it (make test-integration does)")
		}
		t.Skip("no registry program: run make registry")
	}
	return found[len(found)-1]
}

// startRegistry runs a registry on 127.0.0.1 (an insecure registry to
// Docker by default, as all of 127.0.0.0/8 is) with its storage in dir, and
// stops it, by PID, when the test ends.
func startRegistry(t *testing.T, bin, dir string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	config := filepath.Join(dir, "config.yml")
	writeHost(t, config, fmt.Sprintf(`version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
`, filepath.Join(dir, "data"), addr))
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", config)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start registry: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("registry log:\n%s", b)
		}
	})
	harness.Eventually(t, 30*time.Second, "registry answering on "+addr, func() (bool, string) {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return addr
}

// docker plugin install, for real: the plugin is pushed to a registry on
// 127.0.0.1 and installed from there into a clean daemon with settings
// given at install time, which then take effect (allowed_roots refuses a
// source outside them; a delegated volume inside them works end to end).
func TestPluginInstallFromRegistry(t *testing.T) {
	d := need(t)
	reg := registryBinary(t)
	dir := t.TempDir()
	addr := startRegistry(t, reg, dir)
	ref := addr + "/bindstate/bindstate:e2e"

	// Publish: create the plugin under its registry name and push it. From
	// a copy with one file more: the daemon already holds the plugin's
	// rootfs layer, and dockerd refuses to create a second plugin from
	// identical content ("content sha256:... already exists").
	pub := filepath.Join(dir, "plugin")
	if out, err := exec.Command("cp", "-a", env.pluginDir, pub).CombinedOutput(); err != nil {
		t.Fatalf("copy the plugin bundle: %v\n%s", err, out)
	}
	writeHost(t, filepath.Join(pub, "rootfs", "etc", "bindstate-published"), ref+"\n")
	d.Docker(t, "plugin", "create", ref, pub)
	t.Cleanup(func() { d.Try("plugin", "rm", "--force", ref) })
	d.Docker(t, "plugin", "push", ref)

	// A clean daemon: no plugin, no image, its own data root.
	clean := anotherDaemon(t, d, nil)
	root := filepath.Join(clean.Dir, "src")
	outside := filepath.Join(clean.Dir, "elsewhere")
	for _, p := range []string{root, outside} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	clean.Docker(t, "plugin", "install", "--grant-all-permissions", "--alias", "bindstate", ref,
		"ALLOWED_ROOTS="+root, "LOG_LEVEL=debug")
	got := clean.Docker(t, "plugin", "inspect", "-f", "{{.Enabled}} {{.PluginReference}} {{json .Settings.Env}}", "bindstate")
	for _, want := range []string{"true", ref, `"ALLOWED_ROOTS=` + root + `"`, `"LOG_LEVEL=debug"`} {
		if !strings.Contains(got, want) {
			t.Fatalf("installed plugin: %s; want %s in it", got, want)
		}
	}

	// The setting took effect: outside the root is refused, and says why.
	_, stderr, err := clean.Run(nil, "volume", "create", "-d", "bindstate", "-o", "source="+outside, "-o", "state=cached", "out")
	if err == nil || !strings.Contains(stderr, "outside the allowed roots") || !strings.Contains(stderr, root) {
		t.Fatalf("volume outside ALLOWED_ROOTS: err %v, stderr %q; want a refusal naming %s", err, stderr, root)
	}

	// And the plugin serves a delegated volume inside it: the container's
	// write is on the host once the container has exited (rule D4).
	if err := clean.ImportBusybox(image, env.tools.Busybox, nil); err != nil {
		t.Fatal(err)
	}
	clean.Docker(t, "volume", "create", "-d", "bindstate", "-o", "source="+root, "-o", "state=delegated", "work")
	clean.Docker(t, "run", "--rm", "-v", "work:/w", image, "sh", "-c", "echo from-registry > /w/out.txt")
	if b, err := os.ReadFile(filepath.Join(root, "out.txt")); err != nil || string(b) != "from-registry\n" {
		t.Fatalf("after the container exited the host has %q (%v)", b, err)
	}
	clean.Docker(t, "volume", "rm", "work")
}
