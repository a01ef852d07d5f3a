// Package control is bindstate's control socket: a small HTTP API on a unix
// socket, served by the plugin next to Docker's protocol, and the
// `bindstate` command (ls, status, flush, logs) that talks to it.
//
// Routes (JSON unless said otherwise):
//
//	GET  /v1/volumes             every volume's status ([]driver.VolumeStatus)
//	GET  /v1/volumes/{name}      one volume's status (404 if unknown)
//	POST /v1/flush[?volume=NAME] flush one volume, or all; streams FlushEvent lines (NDJSON)
//	GET  /v1/logs[?after=SEQ]    recent log records ([]LogRecord, oldest first)
//	GET  /v1/version             {"version": ...}
//	GET  /metrics                Prometheus text format
//
// Where the socket is: the plugin listens on CONTROL_SOCKET, by default
// DefaultSocket (beside Docker's plugin sockets, in a directory of its own so
// that Docker's plugin discovery never takes it for a plugin). A managed
// plugin's /run/docker/plugins is, on the host, Docker's
// /run/docker/plugins/<plugin ID>; the command looks in both places (see
// Discover).
package control

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bindstate/bindstate/plugin/driver"
)

// PluginSockDir is where Docker looks for plugin sockets, on the host and
// inside a managed plugin (which sees its own directory there).
const PluginSockDir = "/run/docker/plugins"

// socketRel is the control socket beneath PluginSockDir (or beneath a
// managed plugin's directory in it).
const socketRel = "bindstate-control/control.sock"

// DefaultSocket is where the plugin listens unless CONTROL_SOCKET says
// otherwise: inside a managed plugin, host path
// /run/docker/plugins/<plugin ID>/bindstate-control/control.sock; as a plain
// process, this very path.
var DefaultSocket = filepath.Join(PluginSockDir, socketRel)

// SocketEnv names the variable giving the control socket's path, to the
// plugin and to the command alike.
const SocketEnv = "CONTROL_SOCKET"

// Discover finds the control socket from the host among the plain plugin's
// (DefaultSocket) and every managed plugin's
// (/run/docker/plugins/*/bindstate-control/control.sock), counting only
// those a plugin listens on. It fails if there is none, or several (then
// name one with --socket or CONTROL_SOCKET).
func Discover() (string, error) { return discoverIn(PluginSockDir) }

func discoverIn(dir string) (string, error) {
	var found []string
	for _, pat := range []string{filepath.Join(dir, socketRel), filepath.Join(dir, "*", socketRel)} {
		ms, _ := filepath.Glob(pat)
		for _, m := range ms {
			if fi, err := os.Stat(m); err == nil && fi.Mode()&os.ModeSocket != 0 && live(m) {
				found = append(found, m)
			}
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", fmt.Errorf("no bindstate control socket in %s or %s: is the plugin enabled (docker plugin ls)? "+
			"If it listens elsewhere, give --socket PATH or %s=PATH", filepath.Join(dir, socketRel), filepath.Join(dir, "<plugin ID>", socketRel), SocketEnv)
	default:
		return "", fmt.Errorf("several bindstate control sockets: %s; choose one with --socket PATH "+
			"(`docker plugin inspect -f '{{.Id}}' NAME` gives a managed plugin's ID)", strings.Join(found, ", "))
	}
}

// live reports whether a plugin listens on the socket at path (a plugin
// that was killed leaves its socket behind).
func live(path string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := dialUnix(ctx, path)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// FlushEvent is one line of a flush's answer: progress while it runs, then
// exactly one with Done set.
type FlushEvent struct {
	// Progress: every volume being flushed, as it stands.
	Volumes []FlushProgress `json:"volumes,omitempty"`
	// Done is set on the last line, with the outcome per volume.
	Done    bool          `json:"done,omitempty"`
	Results []FlushResult `json:"results,omitempty"`
	// Error is set (with Done) if the flush could not start (unknown volume).
	Error string `json:"error,omitempty"`
}

// FlushProgress is where one volume's flush stands.
type FlushProgress struct {
	Volume     string `json:"volume"`
	Dirty      int    `json:"dirty"` // paths not on the host yet
	DirtyBytes int64  `json:"dirty_bytes"`
	Failed     int    `json:"failed"`
}

// FlushResult is the outcome of one volume's flush.
type FlushResult struct {
	Volume string              `json:"volume"`
	Source string              `json:"source"`
	OK     bool                `json:"ok"` // everything reached the host
	Error  string              `json:"error,omitempty"`
	Failed []driver.FailedPath `json:"failed,omitempty"` // host paths that could not be written
	Took   string              `json:"took"`
}

// errorBody is the answer to a failed request.
type errorBody struct {
	Error string `json:"error"`
}
