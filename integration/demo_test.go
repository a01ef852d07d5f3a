package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bindstate/bindstate/integration/harness"
)

// The README's first command, `make demo` (contrib/demo.sh), run against a
// daemon given by DOCKER_HOST, as a user's own daemon would be, and then
// `make demo-clean`: the demo's states behave as it says, and the clean
// leaves that daemon and the machine as they were, with no container,
// volume, plugin or image of the demo left, and no demo folder or mount.
//
// The daemon's socket path has a comma in it, which the demo's record of
// the daemon it used quotes (printf %q): the clean must read it back
// unquoted. It once did not: an empty address (the default socket) came
// back as a pair of quote marks, no daemon, so a demo run on the machine's
// own daemon was never cleaned up.
func TestDemoAndItsCleanLeaveTheDaemonAsTheyFoundIt(t *testing.T) {
	base := need(t)
	repo, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	d := anotherDaemon(t, base, func(d *harness.Daemon) {
		d.Socket = filepath.Join(d.Dir, "a,b", "docker.sock")
		if err := os.Mkdir(filepath.Dir(d.Socket), 0o700); err != nil {
			t.Fatal(err)
		}
	})

	home := filepath.Join(d.Dir, "demo")
	demo := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("bash", append([]string{filepath.Join(repo, "contrib", "demo.sh")}, args...)...)
		cmd.Env = append(os.Environ(), "DOCKER_HOST="+d.Host(), "DOCKER_CONFIG="+d.CLIConfig,
			"DEMO_HOME="+home, "DEMO_PRIVATE_DAEMON=0", "NO_COLOR=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("demo.sh %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := demo("demo")
	if !strings.Contains(out, "using the daemon at "+d.Host()) || !strings.Contains(out, "behaved as described") {
		t.Fatalf("the demo did not say it used %s and that every state behaved as described:\n%s", d.Host(), out)
	}
	for _, what := range [][]string{{"plugin", "ls", "-q"}, {"volume", "ls", "-q"}, {"ps", "-aq"}, {"image", "ls", "-q"}} {
		if strings.TrimSpace(d.Docker(t, what...)) == "" {
			t.Fatalf("docker %s lists nothing after the demo: it made nothing to clean", strings.Join(what, " "))
		}
	}

	out = demo("clean")
	for _, what := range [][]string{{"plugin", "ls", "-q"}, {"volume", "ls", "-q"}, {"ps", "-aq"}, {"image", "ls", "-q"}} {
		if left := strings.TrimSpace(d.Docker(t, what...)); left != "" {
			t.Errorf("docker %s after demo-clean: %s\nthe clean said:\n%s", strings.Join(what, " "), left, out)
		}
	}
	if m := harness.MountsBeneath(home); len(m) > 0 {
		t.Errorf("mounts left beneath the demo's folder: %v", m)
	}
	if _, err := os.Lstat(home); !os.IsNotExist(err) {
		t.Errorf("the demo's folder %s is still there (%v)", home, err)
	}
}
