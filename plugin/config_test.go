package main

import (
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/control"
	"github.com/bindstate/bindstate/plugin/hostpath"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestConfigDefaults(t *testing.T) {
	c, err := loadConfig(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := config{
		StateDir:            "/var/lib/bindstate",
		StateDirHost:        "/var/lib/bindstate",
		MountRoot:           "/var/lib/bindstate/mnt",
		HostPrefix:          "",
		AllowedRoots:        hostpath.DefaultAllowedRoots,
		LogLevel:            slog.LevelInfo,
		SocketName:          "bindstate",
		SocketGID:           0,
		UnmountFlushTimeout: 50 * time.Second,
	}
	if !equal(c, want) {
		t.Fatalf("defaults\n got %+v\nwant %+v", c, want)
	}
	if c.socketPath() != "/run/docker/plugins/bindstate.sock" {
		t.Fatalf("socket %s", c.socketPath())
	}
	// The command finds the control socket there (control.Discover).
	if c.controlSocketPath() != control.DefaultSocket || control.DefaultSocket != "/run/docker/plugins/bindstate-control/control.sock" {
		t.Fatalf("control socket %s", c.controlSocketPath())
	}
	p := c.policy()
	wantDenied := []string{"/var/lib/bindstate", "/var/lib/docker", "/proc", "/sys", "/dev", "/run", "/boot", "/etc"}
	if !slices.Equal(p.Denied, wantDenied) || !slices.Equal(p.AllowedRoots, hostpath.DefaultAllowedRoots) {
		t.Fatalf("policy %+v", p)
	}
}

func TestConfigManaged(t *testing.T) {
	c, err := loadConfig(env(map[string]string{
		"STATE_DIR":             "/var/lib/bindstate/",
		"STATE_DIR_HOST":        "/var/lib/docker/plugins/abc/rootfs/var/lib/bindstate",
		"MOUNT_ROOT":            "/mnt/volumes",
		"HOST_PREFIX":           "/host",
		"ALLOWED_ROOTS":         " /home , /Users,,/srv/projects",
		"LOG_LEVEL":             "DEBUG",
		"SOCKET_NAME":           "bindstate.v2",
		"SOCKET_GID":            "999",
		"UNMOUNT_FLUSH_TIMEOUT": "20s",
		"FUSE_DEBUG":            "1",
		"CPU_PROFILE":           "/tmp//bs.pprof",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := config{
		StateDir:            "/var/lib/bindstate",
		StateDirHost:        "/var/lib/docker/plugins/abc/rootfs/var/lib/bindstate",
		MountRoot:           "/mnt/volumes",
		HostPrefix:          "/host",
		AllowedRoots:        []string{"/home", "/Users", "/srv/projects"},
		LogLevel:            slog.LevelDebug,
		SocketName:          "bindstate.v2",
		SocketGID:           999,
		UnmountFlushTimeout: 20 * time.Second,
		FuseDebug:           true,
		CPUProfile:          "/tmp/bs.pprof",
	}
	if !equal(c, want) {
		t.Fatalf("\n got %+v\nwant %+v", c, want)
	}
	if c.policy().Denied[0] != want.StateDirHost {
		t.Fatal("state dir host not denied")
	}
	if c.socketPath() != "/run/docker/plugins/bindstate.v2.sock" {
		t.Fatal(c.socketPath())
	}
	c, _ = loadConfig(env(map[string]string{"SOCKET_NAME": "/tmp/x/b.sock", "HOST_PREFIX": "/"}))
	if c.socketPath() != "/tmp/x/b.sock" || c.HostPrefix != "" || c.controlSocketPath() != "/tmp/x/bindstate-control/control.sock" {
		t.Fatalf("%+v", c)
	}
	c, _ = loadConfig(env(map[string]string{"CONTROL_SOCKET": "/run/bs//ctl.sock"}))
	if c.controlSocketPath() != "/run/bs/ctl.sock" {
		t.Fatal(c.controlSocketPath())
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{"LOG_LEVEL": "verbose"}, []string{`LOG_LEVEL="verbose"`, "debug, info, warn, error"}},
		{map[string]string{"STATE_DIR": "state"}, []string{`STATE_DIR="state"`, "absolute"}},
		{map[string]string{"STATE_DIR_HOST": "x"}, []string{`STATE_DIR_HOST="x"`, "absolute"}},
		{map[string]string{"MOUNT_ROOT": "mnt"}, []string{`MOUNT_ROOT="mnt"`, "absolute"}},
		{map[string]string{"HOST_PREFIX": "host"}, []string{`HOST_PREFIX="host"`, "absolute"}},
		{map[string]string{"ALLOWED_ROOTS": "/home,srv"}, []string{`ALLOWED_ROOTS: "srv"`, "absolute"}},
		{map[string]string{"ALLOWED_ROOTS": "/home/../etc"}, []string{`"/home/../etc"`, "clean"}},
		{map[string]string{"ALLOWED_ROOTS": "/"}, []string{`"/"`}},
		{map[string]string{"ALLOWED_ROOTS": " , "}, []string{"lists no directory", "e.g. /home,/srv"}},
		{map[string]string{"SOCKET_NAME": "a/b"}, []string{`SOCKET_NAME="a/b"`, "/run/docker/plugins/NAME.sock"}},
		{map[string]string{"SOCKET_GID": "docker"}, []string{`SOCKET_GID="docker"`, "numeric"}},
		{map[string]string{"SOCKET_GID": "-1"}, []string{`SOCKET_GID="-1"`}},
		{map[string]string{"UNMOUNT_FLUSH_TIMEOUT": "50"}, []string{`UNMOUNT_FLUSH_TIMEOUT="50"`, "Go duration", "e.g. 50s"}},
		{map[string]string{"UNMOUNT_FLUSH_TIMEOUT": "-1s"}, []string{"positive"}},
		{map[string]string{"FUSE_DEBUG": "yes please"}, []string{`FUSE_DEBUG="yes please"`, "true or false"}},
		{map[string]string{"CONTROL_SOCKET": "ctl.sock"}, []string{`CONTROL_SOCKET="ctl.sock"`, "absolute"}},
		{map[string]string{"CPU_PROFILE": "cpu.pprof"}, []string{`CPU_PROFILE="cpu.pprof"`, "absolute file path"}},
		// Every problem is reported at once.
		{map[string]string{"LOG_LEVEL": "x", "SOCKET_GID": "y"}, []string{"LOG_LEVEL", "SOCKET_GID"}},
	}
	for _, tc := range tests {
		_, err := loadConfig(env(tc.env))
		if err == nil {
			t.Errorf("%v: no error", tc.env)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not contain %q", tc.env, err, w)
			}
		}
	}
}

func equal(a, b config) bool {
	if !slices.Equal(a.AllowedRoots, b.AllowedRoots) {
		return false
	}
	a.AllowedRoots, b.AllowedRoots = nil, nil
	return reflect.DeepEqual(a, b)
}
