package integration

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bindstate/bindstate/integration/harness"
)

// One daemon, one share and one plugin for the whole test binary.
const (
	pluginName = "bindstate"
	image      = "bs-busybox:latest"
)

// Deadlines. A host edit is made directly in the share's backing directory:
// the plugin (and, for consistent, the kernel) only learn of it through
// sshfs, which caches attributes and directory listings for up to 20 s by
// default; the plugin rescans every second.
const (
	hostEditDeadline  = 45 * time.Second
	writebackDeadline = 60 * time.Second
)

var env struct {
	skip     string // why every test skips (not root, no /dev/fuse)
	setupErr error  // why every test fails

	dir       string // /tmp/bs-XXXX
	d         *harness.Daemon
	share     *harness.Share
	local     string // a local-disk source root (allowed)
	outside   string // an existing directory outside the allowed roots
	hostTmp   string // scratch for atomic host-side writes (same fs as the share's HostDir)
	pluginID  string
	pluginDir string // config.json + rootfs/ the plugin was created from
	tools     harness.Tools
}

func TestMain(m *testing.M) {
	flag.Parse()
	if r := harness.SkipReason(); r != "" {
		if harness.InCI() {
			fmt.Fprintf(os.Stderr, "FAIL: CI=true and a prerequisite is missing: %s\n", r)
			os.Exit(1)
		}
		env.skip = r
		os.Exit(m.Run())
	}
	start := time.Now()
	err := setup()
	if err != nil {
		env.setupErr = fmt.Errorf("integration setup failed: %w", err)
		fmt.Fprintln(os.Stderr, env.setupErr)
	} else if testing.Verbose() {
		fmt.Printf("integration: setup in %v: dockerd pid %d in %s, plugin %s\n",
			time.Since(start).Round(time.Millisecond), env.d.Pid(), env.dir, env.pluginID)
	}
	code := m.Run()
	if err := teardown(); err != nil {
		fmt.Fprintln(os.Stderr, "integration teardown:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func setup() error {
	tools, err := harness.FindTools()
	if err != nil {
		return err
	}
	env.tools = tools
	repo, err := harness.RepoRoot()
	if err != nil {
		return err
	}
	dir, err := harness.MakeShortDir()
	if err != nil {
		return err
	}
	env.dir = dir
	env.local = filepath.Join(dir, "local")
	env.outside = filepath.Join(dir, "outside")
	env.hostTmp = filepath.Join(dir, "hosttmp")
	for _, p := range []string{env.local, env.outside, env.hostTmp} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
	}

	// The share first: the plugin sees the host's "/" through a bind made
	// when it starts, and / may be a private mount here.
	env.share, err = harness.StartShare(filepath.Join(repo, "contrib", "share.sh"),
		filepath.Join(dir, "h"), filepath.Join(dir, "m"), "SSHD="+tools.Sshd, "SSHFS="+tools.Sshfs)
	if err != nil {
		return err
	}

	d := harness.NewDaemon(dir)
	d.Dockerd = tools.Dockerd
	d.DockerCLI = tools.Docker
	if p := os.Getenv("BINDSTATE_DAEMON_PATH"); p != "" {
		d.ExtraPath = strings.Split(p, ":")
	}
	env.d = d
	if err := d.Start(); err != nil {
		return err
	}

	bstool := filepath.Join(dir, "bstool")
	build := exec.Command(tools.Go, "build", "-o", bstool, "./integration/internal/bstool")
	build.Dir = repo
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build bstool: %w\n%s", err, out)
	}
	if err := d.ImportBusybox(image, tools.Busybox, map[string]string{"/bin/bstool": bstool}); err != nil {
		return err
	}

	pdir, how, err := harness.PluginDir(tools.Go, repo, filepath.Join(dir, "work"))
	if err != nil {
		return err
	}
	env.pluginDir = pdir
	if testing.Verbose() {
		fmt.Printf("integration: plugin from %s (%s)\n", pdir, how)
	}
	settings := []string{"ALLOWED_ROOTS=" + env.share.Mount + "," + env.local, "LOG_LEVEL=debug"}
	settings = append(settings, strings.Fields(os.Getenv("BINDSTATE_PLUGIN_SETTINGS"))...)
	if err := d.InstallPlugin(pluginName, pdir, settings...); err != nil {
		return fmt.Errorf("%w\ndaemon log:\n%s", err, d.LogTail(60))
	}
	env.pluginID, err = d.PluginID(pluginName)
	return err
}

func teardown() error {
	if env.dir == "" {
		return nil
	}
	var errs []string
	if env.d != nil {
		// Stopping the daemon stops the plugin, which unmounts its FUSE mounts.
		if err := env.d.Stop(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if env.share != nil {
		if err := env.share.Down(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if os.Getenv("BINDSTATE_KEEP") == "1" {
		fmt.Fprintf(os.Stderr, "integration: kept %s (BINDSTATE_KEEP=1)\n", env.dir)
	} else if env.d != nil {
		if err := env.d.Cleanup(); err != nil {
			errs = append(errs, err.Error())
		}
	} else if err := harness.UnmountBeneath(env.dir); err != nil {
		errs = append(errs, err.Error())
	} else if len(harness.MountsBeneath(env.dir)) == 0 {
		os.RemoveAll(env.dir)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// need is the first call of every test: it skips (not root, no /dev/fuse),
// fails if setup failed, and shows the daemon's log (where the managed
// plugin's log goes) if the test fails.
func need(t *testing.T) *harness.Daemon {
	t.Helper()
	if env.skip != "" {
		harness.RequiresRoot(t)
	}
	if env.setupErr != nil {
		t.Fatal(env.setupErr)
	}
	env.d.ShowLogOnFailure(t)
	return env.d
}
