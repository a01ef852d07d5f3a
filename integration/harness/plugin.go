package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// fallbackManifest is used only when the repository has no config.json yet:
// the managed-plugin manifest of DESIGN.md (volume driver, propagated mount,
// CAP_SYS_ADMIN, /dev/fuse, the host's "/" at /host, state in the rootfs).
const fallbackManifest = `{
  "description": "bindstate: host folders as consistent, cached or delegated volumes",
  "documentation": "https://github.com/bindstate/bindstate",
  "entrypoint": ["/bindstate"],
  "interface": {"types": ["docker.volumedriver/1.0"], "socket": "bindstate.sock"},
  "network": {"type": "host"},
  "propagatedMount": "/mnt/volumes",
  "linux": {"capabilities": ["CAP_SYS_ADMIN"], "devices": [{"path": "/dev/fuse"}]},
  "mounts": [
    {"name": "host", "description": "the host's /", "source": "/", "destination": "/host",
     "type": "bind", "options": ["rbind", "rslave"]}
  ],
  "env": [
    {"name": "HOST_PREFIX", "value": "/host"},
    {"name": "MOUNT_ROOT", "value": "/mnt/volumes"},
    {"name": "STATE_DIR", "value": "/var/lib/bindstate"},
    {"name": "ALLOWED_ROOTS", "settable": ["value"], "value": ""},
    {"name": "LOG_LEVEL", "settable": ["value"], "value": "info"},
    {"name": "UNMOUNT_FLUSH_TIMEOUT", "settable": ["value"], "value": "50s"},
    {"name": "FUSE_DEBUG", "settable": ["value"], "value": "false"}
  ]
}
`

// PluginDir returns a directory holding config.json and rootfs/ for docker
// plugin create, and how it was chosen:
//   - $BINDSTATE_PLUGIN_DIR if set (make test-integration sets _build/plugin);
//   - else repo/_build/plugin (made by make plugin-rootfs) if it is newer than
//     every plugin source file;
//   - else one built now in work: CGO_ENABLED=0 go build ./plugin into
//     rootfs at the manifest's entrypoint, with repo/config.json (or, while
//     the repository has none, fallbackManifest).
func PluginDir(goBin, repo, work string) (dir, how string, err error) {
	if v := os.Getenv("BINDSTATE_PLUGIN_DIR"); v != "" {
		if _, err := os.Stat(filepath.Join(v, "config.json")); err != nil {
			return "", "", fmt.Errorf("BINDSTATE_PLUGIN_DIR=%s: %w", v, err)
		}
		return v, "BINDSTATE_PLUGIN_DIR", nil
	}
	built := filepath.Join(repo, "_build", "plugin")
	if fresh, why := pluginDirFresh(repo, built); fresh {
		return built, "_build/plugin (make plugin-rootfs)", nil
	} else if why != "" {
		how = why + "; "
	}

	dir = filepath.Join(work, "plugin")
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"tmp", "etc", "var/lib/bindstate", "mnt/volumes", "host", "run/docker/plugins", "dev", "proc"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return "", "", err
		}
	}
	manifest, err := os.ReadFile(filepath.Join(repo, "config.json"))
	if errors.Is(err, fs.ErrNotExist) {
		manifest = []byte(fallbackManifest)
		how += "built now with the harness's fallback manifest (no config.json in the repository)"
	} else if err != nil {
		return "", "", err
	} else {
		how += "built now with the repository's config.json"
	}
	var m struct {
		Entrypoint []string `json:"entrypoint"`
	}
	if err := json.Unmarshal(manifest, &m); err != nil {
		return "", "", fmt.Errorf("config.json: %w", err)
	}
	if len(m.Entrypoint) == 0 || !filepath.IsAbs(m.Entrypoint[0]) {
		return "", "", fmt.Errorf("config.json: entrypoint %q is not an absolute path", m.Entrypoint)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), manifest, 0o644); err != nil {
		return "", "", err
	}
	bin := filepath.Join(rootfs, m.Entrypoint[0])
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", "", err
	}
	args := []string{"build", "-trimpath"}
	if _, err := os.Stat(filepath.Join(repo, "vendor", "modules.txt")); err == nil {
		args = append(args, "-mod=vendor")
	}
	args = append(args, "-o", bin, "./plugin")
	cmd := exec.Command(goBin, args...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return dir, how, nil
}

// pluginDirFresh reports whether built holds a plugin rootfs newer than
// every .go file under repo/plugin and config.json; if not, why.
func pluginDirFresh(repo, built string) (bool, string) {
	if _, err := os.Stat(filepath.Join(built, "config.json")); err != nil {
		return false, ""
	}
	var oldest time.Time
	filepath.WalkDir(filepath.Join(built, "rootfs"), func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if fi, err := e.Info(); err == nil && fi.Mode()&0o111 != 0 && (oldest.IsZero() || fi.ModTime().Before(oldest)) {
				oldest = fi.ModTime()
			}
		}
		return nil
	})
	if oldest.IsZero() {
		return false, "_build/plugin has no executable in rootfs"
	}
	var newer string
	check := func(p string) {
		if fi, err := os.Stat(p); err == nil && fi.ModTime().After(oldest) && newer == "" {
			newer = p
		}
	}
	check(filepath.Join(repo, "config.json"))
	filepath.WalkDir(filepath.Join(repo, "plugin"), func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() && strings.HasSuffix(p, ".go") {
			check(p)
		}
		return nil
	})
	if newer != "" {
		rel, _ := filepath.Rel(repo, newer)
		return false, "_build/plugin is older than " + rel
	}
	return true, ""
}

// InstallPlugin creates the managed plugin name from dir (config.json +
// rootfs/), applies settings (KEY=VALUE, e.g. ALLOWED_ROOTS=/srv) and enables it.
func (d *Daemon) InstallPlugin(name, dir string, settings ...string) error {
	if _, err := d.Try("plugin", "create", name, dir); err != nil {
		return err
	}
	if len(settings) > 0 {
		if _, err := d.Try(append([]string{"plugin", "set", name}, settings...)...); err != nil {
			return err
		}
	}
	return d.EnablePlugin(name)
}

// EnablePlugin enables the plugin, giving it 2 minutes to start.
func (d *Daemon) EnablePlugin(name string) error {
	_, err := d.Try("plugin", "enable", "--timeout", "120", name)
	return err
}

// PluginID is the full id of the installed plugin name.
func (d *Daemon) PluginID(name string) (string, error) {
	return d.Try("plugin", "inspect", "--format", "{{.Id}}", name)
}

// PluginPids lists the processes of the managed plugin with that id: those
// whose cgroup path names it (it runs in containerd's "plugins.moby" namespace).
func PluginPids(id string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if err != nil || !strings.Contains(string(b), id) {
			continue
		}
		// skip the shim, which lives in the same cgroup on some setups
		if comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm"); strings.HasPrefix(string(comm), "containerd-shim") {
			continue
		}
		pids = append(pids, p)
	}
	return pids
}
