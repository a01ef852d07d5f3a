package main

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/bindstate/bindstate/plugin/driver"
	"github.com/bindstate/bindstate/plugin/hostpath"
)

// pluginSockDir is where Docker looks for plugin sockets.
const pluginSockDir = "/run/docker/plugins"

// deniedSystemPaths are never sources (nor beneath or above one), besides
// the plugin's own state dir.
var deniedSystemPaths = []string{"/var/lib/docker", "/proc", "/sys", "/dev", "/run", "/boot", "/etc"}

var logLevels = []string{"debug", "info", "warn", "error"}

// config is the plugin's configuration, read from the environment.
type config struct {
	StateDir            string     // STATE_DIR: volumes.json and the stores
	StateDirHost        string     // STATE_DIR_HOST: the state dir as the host names it (denied as a source)
	MountRoot           string     // MOUNT_ROOT: mountpoints (the propagated mount when managed)
	HostPrefix          string     // HOST_PREFIX: where the host's "/" is seen ("" or e.g. /host)
	AllowedRoots        []string   // ALLOWED_ROOTS: host trees sources may live in
	LogLevel            slog.Level // LOG_LEVEL
	SocketName          string     // SOCKET_NAME: plugin name, or an absolute socket path
	SocketGID           int        // SOCKET_GID: group owning the socket
	UnmountFlushTimeout time.Duration
	FuseDebug           bool   // FUSE_DEBUG: log every FUSE request
	ControlSocket       string // CONTROL_SOCKET: the control socket ("": beside the plugin socket)
	CPUProfile          string // CPU_PROFILE: write a pprof CPU profile of the whole run here ("": none)
	FixedCPUs           bool   // GOMAXPROCS is set (the Go runtime applies it): no cpus.Governor
}

// envHelp documents the environment for usage messages.
const envHelp = `environment:
  STATE_DIR              state directory (default /var/lib/bindstate)
  STATE_DIR_HOST         host path of STATE_DIR, never allowed as a source (default STATE_DIR)
  MOUNT_ROOT             where volumes are mounted (default STATE_DIR/mnt)
  HOST_PREFIX            where the host's / is seen (default "")
  ALLOWED_ROOTS          comma-separated host trees sources may be in (default ` + "%s" + `)
  LOG_LEVEL              debug, info, warn or error (default info)
  SOCKET_NAME            plugin socket name or absolute path (default bindstate)
  SOCKET_GID             group owning the socket (default 0)
  UNMOUNT_FLUSH_TIMEOUT  how long a delegated unmount waits for writeback (default 50s)
  FUSE_DEBUG             log every FUSE request (default false)
  CONTROL_SOCKET         control socket of the bindstate commands (default: beside the
                         plugin socket, /run/docker/plugins/bindstate-control/control.sock;
                         for a managed plugin the host sees it in /run/docker/plugins/<plugin ID>/)
  GOMAXPROCS             CPUs the plugin's Go code runs on (default: 1 while it answers
                         from its local stores, all while it works on the share)
  CPU_PROFILE            write a Go CPU profile of the run to this file, for go tool pprof
                         (default none; for measuring, see contrib/bench/README.md)
`

var socketNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// loadConfig reads the configuration with getenv (unset and empty are the
// same). Every problem is reported, each naming the variable, what it was
// and what is valid.
func loadConfig(getenv func(string) string) (config, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	absDir := func(name, def string) string {
		v := getenv(name)
		if v == "" {
			return def
		}
		if !filepath.IsAbs(v) {
			bad("%s=%q: must be an absolute path", name, v)
			return def
		}
		return filepath.Clean(v)
	}

	c := config{}
	c.StateDir = absDir("STATE_DIR", "/var/lib/bindstate")
	c.StateDirHost = absDir("STATE_DIR_HOST", c.StateDir)
	c.MountRoot = absDir("MOUNT_ROOT", filepath.Join(c.StateDir, "mnt"))
	c.HostPrefix = absDir("HOST_PREFIX", "")
	if c.HostPrefix == "/" {
		c.HostPrefix = ""
	}

	c.AllowedRoots = hostpath.DefaultAllowedRoots
	if v := getenv("ALLOWED_ROOTS"); v != "" {
		var roots []string
		for r := range strings.SplitSeq(v, ",") {
			r = strings.TrimSpace(r)
			switch {
			case r == "":
			case !filepath.IsAbs(r) || filepath.Clean(r) != r || r == "/":
				bad("ALLOWED_ROOTS: %q is not a clean absolute directory other than /", r)
			default:
				roots = append(roots, r)
			}
		}
		if len(roots) == 0 && len(errs) == 0 {
			bad("ALLOWED_ROOTS=%q lists no directory: give comma-separated absolute paths, e.g. /home,/srv", v)
		}
		c.AllowedRoots = roots
	}

	c.LogLevel = slog.LevelInfo
	if v := getenv("LOG_LEVEL"); v != "" {
		switch strings.ToLower(v) {
		case "debug":
			c.LogLevel = slog.LevelDebug
		case "info":
			c.LogLevel = slog.LevelInfo
		case "warn":
			c.LogLevel = slog.LevelWarn
		case "error":
			c.LogLevel = slog.LevelError
		default:
			bad("LOG_LEVEL=%q: valid levels are %s", v, strings.Join(logLevels, ", "))
		}
	}

	c.SocketName = "bindstate"
	if v := getenv("SOCKET_NAME"); v != "" {
		if !filepath.IsAbs(v) && !socketNameRE.MatchString(v) {
			bad("SOCKET_NAME=%q: give a plugin name (letters, digits, '.', '_', '-'; the socket is %s/NAME.sock) or an absolute socket path", v, pluginSockDir)
		}
		c.SocketName = v
	}

	if v := getenv("SOCKET_GID"); v != "" {
		gid, err := strconv.Atoi(v)
		if err != nil || gid < 0 {
			bad("SOCKET_GID=%q: must be a numeric group id (0 or more)", v)
		}
		c.SocketGID = gid
	}

	c.UnmountFlushTimeout = driver.DefaultUnmountFlushTimeout
	if v := getenv("UNMOUNT_FLUSH_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			bad("UNMOUNT_FLUSH_TIMEOUT=%q: must be a positive Go duration, e.g. 50s (Docker gives an unmount 1m)", v)
		}
		c.UnmountFlushTimeout = d
	}

	if v := getenv("FUSE_DEBUG"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			bad("FUSE_DEBUG=%q: must be true or false", v)
		}
		c.FuseDebug = b
	}

	if v := getenv("CONTROL_SOCKET"); v != "" {
		if !filepath.IsAbs(v) || strings.HasSuffix(v, "/") {
			bad("CONTROL_SOCKET=%q: must be an absolute socket path, e.g. /run/bindstate/control.sock", v)
		}
		c.ControlSocket = filepath.Clean(v)
	}

	if v := getenv("CPU_PROFILE"); v != "" {
		if !filepath.IsAbs(v) || strings.HasSuffix(v, "/") {
			bad("CPU_PROFILE=%q: must be an absolute file path, e.g. /tmp/bindstate.pprof", v)
		}
		c.CPUProfile = filepath.Clean(v)
	}

	c.FixedCPUs = getenv("GOMAXPROCS") != ""

	if err := errors.Join(errs...); err != nil {
		return config{}, err
	}
	return c, nil
}

// policy is the host path policy: sources in the allowed roots, never the
// plugin's state dir nor a system directory.
func (c config) policy() hostpath.Policy {
	return hostpath.Policy{
		AllowedRoots: c.AllowedRoots,
		Denied:       append([]string{c.StateDirHost}, deniedSystemPaths...),
	}
}

// socketPath is where the plugin listens.
func (c config) socketPath() string {
	if filepath.IsAbs(c.SocketName) {
		return c.SocketName
	}
	return filepath.Join(pluginSockDir, c.SocketName+".sock")
}

// controlSocketPath is where the control socket listens: CONTROL_SOCKET, or
// beside the plugin socket in a directory of its own (Docker's plugin
// discovery only looks at DIR/NAME.sock and DIR/NAME/NAME.sock, so it never
// takes it for a plugin).
func (c config) controlSocketPath() string {
	if c.ControlSocket != "" {
		return c.ControlSocket
	}
	return filepath.Join(filepath.Dir(c.socketPath()), "bindstate-control", "control.sock")
}
