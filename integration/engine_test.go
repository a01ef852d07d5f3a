//go:build engine

// Integration tests of the patched engine, CLI and Compose (engine-patch/,
// cli-patch/, docs/engine.md): `state=`/`consistency=` on binds served by the
// bindstate plugin, invalid values refused, writeback-aware exits (rule D4).
//
// Behind the build tag `engine`, which `make test-engine` sets after building
// the patched binaries and pointing the harness at them
// (BINDSTATE_DOCKERD, BINDSTATE_DOCKER, BINDSTATE_DAEMON_PATH,
// BINDSTATE_ENGINE_BIN); `go test ./integration/...` alone does not compile
// them. With the tag they run, and fail (not skip) if the daemon or CLI is not
// the patched one.

package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bindstate/bindstate/integration/harness"
)

// The valid states, as every refusal must list them.
var engineStates = []string{"consistent", "default", "cached", "delegated"}

// needEngine is need(t), plus a check that the daemon and the CLI are the
// patched ones (their versions end in +bindstate).
func needEngine(t *testing.T) *harness.Daemon {
	t.Helper()
	d := need(t)
	v := d.Docker(t, "version", "--format", "{{.Client.Version}} {{.Server.Version}}")
	if strings.Count(v, "+bindstate") != 2 {
		t.Fatalf("docker version: %q: want the patched CLI and daemon (+bindstate); run `make test-engine`", v)
	}
	return d
}

// engineBin is the directory of the patched binaries.
func engineBin(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("BINDSTATE_ENGINE_BIN")
	if dir == "" {
		t.Fatal("BINDSTATE_ENGINE_BIN is not set: run `make test-engine`")
	}
	return dir
}

type mountJSON struct {
	Type        string
	Name        string
	Source      string
	Destination string
	Driver      string
	Mode        string
	RW          bool
}

type inspectJSON struct {
	ID    string `json:"Id"`
	State struct {
		Status   string
		ExitCode int
		Error    string
	}
	HostConfig struct {
		Binds  []string
		Mounts []struct {
			Type        string
			Source      string
			Target      string
			ReadOnly    bool
			Consistency string
		}
	}
	Mounts []mountJSON
}

func inspectContainer(t *testing.T, d *harness.Daemon, id string) inspectJSON {
	t.Helper()
	var out []inspectJSON
	if err := json.Unmarshal([]byte(d.Docker(t, "container", "inspect", id)), &out); err != nil || len(out) != 1 {
		t.Fatalf("docker inspect %s: %v (%d results)", id, err, len(out))
	}
	return out[0]
}

// bindstateVolumesOf lists the volumes the daemon made for container id.
func bindstateVolumesOf(t *testing.T, d *harness.Daemon, id string) []string {
	t.Helper()
	out := d.Docker(t, "volume", "ls", "-q", "--filter", "label=com.docker.bindstate.container="+id)
	return strings.Fields(out)
}

// dieAttributes returns the attributes of the die events of container id
// since since.
func dieAttributes(t *testing.T, d *harness.Daemon, id string, since time.Time) []map[string]string {
	t.Helper()
	out := d.Docker(t, "events", "--since", fmt.Sprint(since.Add(-time.Second).Unix()),
		"--until", fmt.Sprint(time.Now().Add(time.Second).Unix()),
		"--filter", "container="+id, "--filter", "event=die", "--format", "{{json .Actor.Attributes}}")
	var all []map[string]string
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var m map[string]string
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("die event attributes %q: %v", line, err)
		}
		all = append(all, m)
	}
	return all
}

// TestEngine_D4_StateOnBindServedByPlugin: every way of writing the state
// on a bind (--mount state=, --mount consistency=, -v SRC:DST:MODE) reaches
// the daemon; cached and delegated binds are served by the plugin without
// the user creating a volume, consistent and default stay plain binds;
// inspect shows the user's bind and its state; a delegated container's
// writes are on the host when `docker run` returns (rule D4); `docker rm`
// (without -v) leaves no volume behind.
func TestEngine_D4_StateOnBindServedByPlugin(t *testing.T) {
	d := needEngine(t)
	cases := []struct {
		name, state string
		flag        func(source string) []string
	}{
		{"mount-state-delegated", "delegated", func(s string) []string {
			return []string{"--mount", "type=bind,source=" + s + ",target=/data,state=delegated"}
		}},
		{"mount-consistency-delegated", "delegated", func(s string) []string {
			return []string{"--mount", "type=bind,source=" + s + ",target=/data,consistency=delegated"}
		}},
		{"v-delegated", "delegated", func(s string) []string { return []string{"-v", s + ":/data:delegated"} }},
		{"mount-state-cached", "cached", func(s string) []string {
			return []string{"--mount", "type=bind,source=" + s + ",target=/data,state=cached"}
		}},
		{"v-cached", "cached", func(s string) []string { return []string{"-v", s + ":/data:cached"} }},
		{"mount-state-consistent", "consistent", func(s string) []string {
			return []string{"--mount", "type=bind,source=" + s + ",target=/data,state=consistent"}
		}},
		{"v-default", "default", func(s string) []string { return []string{"-v", s + ":/data:default"} }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newShareSource(t)
			name := "c-" + slug(t)
			args := append([]string{"run", "--name", name, "--network", "none"}, c.flag(s.Source)...)
			args = append(args, image, "sh", "-c", "echo "+c.state+" > /data/f && mkdir /data/dir && echo x > /data/dir/g")
			d.Docker(t, args...)
			t.Cleanup(func() { d.Try("rm", "-f", name) })

			// rule D4 (and C3, K2): on the host when docker run returns
			mustHost(t, s.host("f"), c.state+"\n")
			mustHost(t, s.host("dir/g"), "x\n")

			ins := inspectContainer(t, d, name)
			if ins.State.ExitCode != 0 || ins.State.Error != "" {
				t.Errorf("state: exit code %d, error %q; want 0, none", ins.State.ExitCode, ins.State.Error)
			}
			if len(ins.Mounts) != 1 {
				t.Fatalf("inspect .Mounts = %+v; want one", ins.Mounts)
			}
			m := ins.Mounts[0]
			served := c.state == "cached" || c.state == "delegated"
			if served {
				if m.Type != "volume" || !strings.HasPrefix(m.Driver, pluginName) || !strings.HasPrefix(m.Name, "bindstate_") {
					t.Errorf("inspect .Mounts[0] = %+v; want a volume of driver %s named bindstate_...", m, pluginName)
				}
			} else if m.Type != "bind" || m.Source != s.Source || m.Driver != "" {
				t.Errorf("inspect .Mounts[0] = %+v; want a plain bind of %s", m, s.Source)
			}
			if m.Destination != "/data" || !m.RW {
				t.Errorf("inspect .Mounts[0] = %+v; want /data, rw", m)
			}
			// the user's bind and its state, as given
			switch {
			case len(ins.HostConfig.Binds) == 1:
				if want := s.Source + ":/data:" + c.state; ins.HostConfig.Binds[0] != want {
					t.Errorf("HostConfig.Binds = %q; want %q", ins.HostConfig.Binds, want)
				}
			case len(ins.HostConfig.Mounts) == 1:
				hm := ins.HostConfig.Mounts[0]
				if hm.Type != "bind" || hm.Source != s.Source || hm.Consistency != c.state {
					t.Errorf("HostConfig.Mounts[0] = %+v; want bind of %s, consistency %s", hm, s.Source, c.state)
				}
			default:
				t.Errorf("HostConfig: Binds %q, Mounts %+v: want the user's bind", ins.HostConfig.Binds, ins.HostConfig.Mounts)
			}

			vols := bindstateVolumesOf(t, d, ins.ID)
			if served && len(vols) != 1 {
				t.Errorf("volumes made for the container: %q; want one", vols)
			} else if !served && len(vols) != 0 {
				t.Errorf("volumes made for a %s bind: %q; want none", c.state, vols)
			}
			d.Docker(t, "rm", name)
			if vols := bindstateVolumesOf(t, d, ins.ID); len(vols) != 0 {
				t.Errorf("after docker rm, volumes left: %q (leak)", vols)
			}
		})
	}
}

// TestEngine_D4_ReadOnlyAndRunRm: a read-only delegated bind is read-only
// in the container; `docker run --rm` leaves no volume behind; a read-only
// bind's volume is a read-only bindstate volume.
func TestEngine_D4_ReadOnlyAndRunRm(t *testing.T) {
	d := needEngine(t)
	s := newShareSource(t)
	writeHost(t, s.host("r"), "host\n")
	before := d.Docker(t, "volume", "ls", "-q", "--filter", "label=com.docker.bindstate.container")
	out, err := d.Try("run", "--rm", "--network", "none",
		"-v", s.Source+":/data:ro,delegated", image, "sh", "-c", "cat /data/r; echo no > /data/w && echo WROTE")
	if strings.Contains(out, "WROTE") {
		t.Errorf("wrote through a read-only delegated bind: %s", out)
	}
	if !strings.Contains(out, "host") {
		t.Errorf("container read %q (err %v); want the host's file", out, err)
	}
	if after := d.Docker(t, "volume", "ls", "-q", "--filter", "label=com.docker.bindstate.container"); after != before {
		t.Errorf("bindstate volumes before docker run --rm: %q, after: %q (leak)", before, after)
	}

	// The volume made for a read-only bind is a read-only volume (served
	// without OPEN); one for a writable bind is not.
	for i, tc := range []struct{ bind, want string }{
		{s.Source + ":/data:ro,cached", "true"},
		{s.Source + ":/data:cached", "<no value>"},
	} {
		name := "c-" + slug(t) + "-" + strconv.Itoa(i)
		d.Docker(t, "run", "-d", "--name", name, "--network", "none", "-v", tc.bind, image, "sleep", "600")
		t.Cleanup(func() { d.Try("rm", "-f", name) })
		vols := bindstateVolumesOf(t, d, inspectContainer(t, d, name).ID)
		if len(vols) != 1 {
			t.Fatalf("%s: volumes made: %q, want one", tc.bind, vols)
		}
		if got := d.Docker(t, "volume", "inspect", "-f", "{{.Status.readonly}}", vols[0]); got != tc.want {
			t.Errorf("%s: volume %s Status.readonly %q, want %q", tc.bind, vols[0], got, tc.want)
		}
	}
}

// TestEngine_InvalidStateRefused: an invalid state is refused by the CLI
// and by the daemon (raw API), with a message listing the valid states;
// state= and consistency= with different values are refused.
func TestEngine_InvalidStateRefused(t *testing.T) {
	d := needEngine(t)
	s := newShareSource(t)
	listsStates := func(t *testing.T, msg string) {
		t.Helper()
		for _, st := range engineStates {
			if !strings.Contains(msg, st) {
				t.Errorf("message does not list %q: %s", st, msg)
			}
		}
	}

	t.Run("cli-state", func(t *testing.T) {
		_, err := d.Try("run", "--rm", "--network", "none", "--mount", "type=bind,source="+s.Source+",target=/data,state=fast", image, "true")
		if err == nil || !strings.Contains(err.Error(), "fast") {
			t.Fatalf("docker run --mount ...,state=fast: %v; want refused", err)
		}
		listsStates(t, err.Error())
	})
	t.Run("cli-consistency", func(t *testing.T) {
		_, err := d.Try("create", "--mount", "type=bind,source="+s.Source+",target=/data,consistency=Fast", image, "true")
		if err == nil || !strings.Contains(err.Error(), "fast") {
			t.Fatalf("docker create --mount ...,consistency=Fast: %v; want refused", err)
		}
		listsStates(t, err.Error())
	})
	t.Run("cli-conflict", func(t *testing.T) {
		_, err := d.Try("create", "--mount", "type=bind,source="+s.Source+",target=/data,state=delegated,consistency=cached", image, "true")
		if err == nil || !strings.Contains(err.Error(), "conflicting") {
			t.Fatalf("docker create --mount ...,state=delegated,consistency=cached: %v; want refused as conflicting", err)
		}
	})
	t.Run("cli-v", func(t *testing.T) {
		_, err := d.Try("create", "-v", s.Source+":/data:fast", image, "true")
		if err == nil || !strings.Contains(err.Error(), "fast") {
			t.Fatalf("docker create -v SRC:/data:fast: %v; want refused", err)
		}
		listsStates(t, err.Error())
	})

	// The daemon, for API clients that skip the CLI's checks.
	api := func(t *testing.T, hostConfig string) (int, string) {
		t.Helper()
		body := `{"Image":"` + image + `","Cmd":["true"],"HostConfig":` + hostConfig + `}`
		cmd := exec.Command("curl", "-sS", "--unix-socket", d.Socket, "-o", "-", "-w", "\n%{http_code}",
			"-H", "Content-Type: application/json", "-X", "POST", "--data-binary", body, "http://docker/containers/create")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("curl: %v: %s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		var code int
		fmt.Sscan(lines[len(lines)-1], &code)
		return code, strings.Join(lines[:len(lines)-1], "\n")
	}
	t.Run("api-mounts", func(t *testing.T) {
		code, msg := api(t, `{"NetworkMode":"none","Mounts":[{"Type":"bind","Source":"`+s.Source+`","Target":"/data","Consistency":"fast"}]}`)
		if code != 400 || !strings.Contains(msg, "fast") {
			t.Fatalf("POST /containers/create with Mounts[].Consistency=fast: %d %s; want 400 naming it", code, msg)
		}
		listsStates(t, msg)
	})
	t.Run("api-binds", func(t *testing.T) {
		code, msg := api(t, `{"NetworkMode":"none","Binds":["`+s.Source+`:/data:fast"]}`)
		if code != 400 || !strings.Contains(msg, "fast") {
			t.Fatalf("POST /containers/create with Binds SRC:/data:fast: %d %s; want 400 naming it", code, msg)
		}
		listsStates(t, msg)
	})
	t.Run("api-valid", func(t *testing.T) {
		code, msg := api(t, `{"NetworkMode":"none","Mounts":[{"Type":"bind","Source":"`+s.Source+`","Target":"/data","Consistency":"delegated"}]}`)
		if code != 201 {
			t.Fatalf("POST /containers/create with Consistency=delegated: %d %s; want 201", code, msg)
		}
		var r struct{ Id string }
		json.Unmarshal([]byte(msg), &r)
		d.Docker(t, "rm", r.Id)
	})
}

// TestEngine_D4_WritebackFailureFailsExit: the share vanishes while a
// delegated container exits: its exit is a failure (non-zero exit code
// though the process exited 0, State.Error naming the path, a die event
// attribute); nothing is lost: once the share is back, the next container
// on the same folder gets the data written to the host.
func TestEngine_D4_WritebackFailureFailsExit(t *testing.T) {
	d := needEngine(t)
	s := newShareSource(t)
	name := "c-" + slug(t)
	since := time.Now()
	id := d.Docker(t, "run", "-d", "--name", name, "--network", "none",
		"--mount", "type=bind,source="+s.Source+",target=/data,state=delegated", image,
		"sh", "-c", "while [ ! -e /go ]; do sleep 0.1; done; echo kept > /data/kept.txt; exit 0")
	t.Cleanup(func() { d.Try("rm", "-f", id) })
	// The container writes only once the share is down: written before,
	// the background writeback (1 s after the write) could have it on the
	// host before the share went, and the exit had nothing left to fail.
	harness.Eventually(t, 30*time.Second, "container running, the volume mounted", func() (bool, string) {
		out, err := d.Try("exec", id, "ls", "/data")
		return err == nil, out
	})

	if err := env.share.StopSSHD(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			env.share.StartSSHD()
		}
	})
	d.Docker(t, "exec", id, "touch", "/go")
	code := d.Docker(t, "wait", id)
	ins := inspectContainer(t, d, id)
	t.Logf("share down during the exit: docker wait = %s, State.Error = %q", code, ins.State.Error)
	if code == "0" || ins.State.ExitCode == 0 {
		t.Errorf("docker wait = %s, inspect exit code %d: want non-zero (the writeback failed)", code, ins.State.ExitCode)
	}
	if !strings.Contains(ins.State.Error, "kept.txt") && !strings.Contains(ins.State.Error, s.Source) {
		t.Errorf("State.Error = %q: want it to name the failed path", ins.State.Error)
	}
	var failed bool
	for _, a := range dieAttributes(t, d, id, since) {
		if a["bindstate.writeback"] == "failed" && a["bindstate.writebackError"] != "" && a["exitCode"] != "0" {
			failed = true
		}
	}
	if !failed {
		t.Errorf("no die event with bindstate.writeback=failed: %v", dieAttributes(t, d, id, since))
	} else {
		t.Logf("die event attributes: %v", dieAttributes(t, d, id, since))
	}

	// The share comes back; the data is in the store and is retried: the
	// next container using the folder delegated finds it and, by the time
	// it has exited, the host has it (rule D4: nothing discarded).
	if err := env.share.StartSSHD(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	harness.Eventually(t, 60*time.Second, "share answers again", func() (bool, string) {
		_, err := os.Stat(filepath.Join(s.Source, "."))
		return err == nil, fmt.Sprint(err)
	})
	var out string
	harness.Eventually(t, writebackDeadline, "a next container's exit writes the data back", func() (bool, string) {
		o, err := d.Try("run", "--rm", "--network", "none", "-v", s.Source+":/data:delegated", image, "cat", "/data/kept.txt")
		out = o
		if err != nil {
			return false, err.Error()
		}
		got, err := readHost(s.host("kept.txt"))
		return got == "kept\n", fmt.Sprintf("host: %q %v", got, err)
	})
	if out != "kept" {
		t.Errorf("next container read %q; want kept", out)
	}
}

// TestEngine_D4_DieEventOnSuccess: a delegated container's die event says
// the writeback worked; its exit code is the process's.
func TestEngine_D4_DieEventOnSuccess(t *testing.T) {
	d := needEngine(t)
	s := newShareSource(t)
	name := "c-" + slug(t)
	since := time.Now()
	_, err := d.Try("run", "--name", name, "--network", "none", "-v", s.Source+":/data:delegated", image,
		"sh", "-c", "echo ok > /data/f; exit 3")
	t.Cleanup(func() { d.Try("rm", "-f", name) })
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("docker run: %v; want exit status 3", err)
	}
	mustHost(t, s.host("f"), "ok\n")
	id := inspectContainer(t, d, name).ID
	attrs := dieAttributes(t, d, id, since)
	if len(attrs) != 1 || attrs[0]["bindstate.writeback"] != "ok" || attrs[0]["exitCode"] != "3" {
		t.Errorf("die events: %v; want one with bindstate.writeback=ok, exitCode=3", attrs)
	}
}

// TestEngine_ComposeConsistencyReachesEngine: Compose long syntax
// `consistency: delegated` on a bind reaches the engine (the patched
// Compose keeps it in the bind string), through `docker compose` (CLI
// plugin) as through the standalone docker-compose.
func TestEngine_ComposeConsistencyReachesEngine(t *testing.T) {
	d := needEngine(t)
	bin := engineBin(t)
	plugins := filepath.Join(d.CLIConfig, "cli-plugins")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(bin, "docker-compose"), filepath.Join(plugins, "docker-compose")); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	for _, how := range []string{"plugin", "standalone"} {
		t.Run(how, func(t *testing.T) {
			s := newShareSource(t)
			dir := t.TempDir()
			project := strings.ReplaceAll(slug(t), "-", "")
			yml := fmt.Sprintf(`services:
  app:
    image: %s
    network_mode: none
    command: ["sh", "-c", "echo compose > /data/f"]
    volumes:
      - type: bind
        source: %s
        target: /data
        consistency: delegated
`, image, s.Source)
			file := filepath.Join(dir, "compose.yaml")
			if err := os.WriteFile(file, []byte(yml), 0o644); err != nil {
				t.Fatal(err)
			}
			compose := func(args ...string) (string, error) {
				args = append([]string{"-f", file, "-p", project}, args...)
				if how == "plugin" {
					return d.Try(append([]string{"compose"}, args...)...)
				}
				cmd := d.Cmd(t.Context(), args...)
				cmd.Path = filepath.Join(bin, "docker-compose")
				cmd.Args[0] = cmd.Path
				cmd.Err = nil
				out, err := cmd.CombinedOutput()
				if err != nil {
					err = fmt.Errorf("docker-compose %s: %w: %s", strings.Join(args, " "), err, out)
				}
				return strings.TrimSpace(string(out)), err
			}
			t.Cleanup(func() { compose("down", "-t", "1") })
			if out, err := compose("up", "--abort-on-container-exit"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			mustHost(t, s.host("f"), "compose\n")
			ids, err := compose("ps", "-a", "-q")
			if err != nil || len(strings.Fields(ids)) != 1 {
				t.Fatalf("compose ps: %q %v", ids, err)
			}
			id := strings.Fields(ids)[0]
			ins := inspectContainer(t, d, id)
			var seen string
			for _, b := range ins.HostConfig.Binds {
				seen += b + " "
			}
			for _, m := range ins.HostConfig.Mounts {
				seen += m.Consistency + " "
			}
			if !strings.Contains(seen, "delegated") {
				t.Errorf("the engine did not get the consistency: Binds %q, Mounts %+v", ins.HostConfig.Binds, ins.HostConfig.Mounts)
			}
			if len(ins.Mounts) != 1 || !strings.HasPrefix(ins.Mounts[0].Driver, pluginName) {
				t.Errorf("inspect .Mounts = %+v; want the bind served by %s", ins.Mounts, pluginName)
			}
			if _, err := compose("down"); err != nil {
				t.Fatal(err)
			}
			if vols := bindstateVolumesOf(t, d, ins.ID); len(vols) != 0 {
				t.Errorf("after compose down, volumes left: %q (leak)", vols)
			}
		})
	}
}

// TestEngine_D4_ExitWhileDaemonDown: a delegated container whose process
// ends while the daemon is down (killed: containerd, the shims and the
// plugin live on) has its writeback done when the daemon starts again,
// before its exit is reported: a die event with bindstate.writeback=ok, the
// data on the host. Two ways it meets the daemon again:
//   - exited: the process ended before the daemon started; the restore path
//     finds the exit (exit code 0);
//   - running: the process still runs when the daemon starts; restore stops
//     it (no live-restore) and its exit is handled as usual, with the
//     mount count the killed daemon held lost.
//
// The container is told when to write and exit through a plain bind the
// test writes to (ctl), not by sleeping: with a sleep, a slow machine
// turned the first case into the second.
func TestEngine_D4_ExitWhileDaemonDown(t *testing.T) {
	d := needEngine(t)
	for _, tc := range []struct {
		name     string
		exitedAt string // "down": before the daemon starts; "restore": stopped by it
	}{
		{"exited", "down"},
		{"running", "restore"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newShareSource(t)
			ctl := t.TempDir()
			// After /ctl/go: write late.txt (written back ~1 s later, or at
			// the exit), say so in /ctl/wrote, then exit or wait for ever.
			then := "exit 0"
			if tc.exitedAt == "restore" {
				then = "exec sleep 3600"
			}
			id := d.Docker(t, "run", "-d", "--name", "c-"+slug(t), "--network", "none", "--stop-timeout", "1",
				"-v", s.Source+":/data:delegated", "-v", ctl+":/ctl", image,
				"sh", "-c", "echo restored > /data/r.txt; while [ ! -e /ctl/go ]; do sleep 0.1; done; "+
					"echo late > /data/late.txt && touch /ctl/wrote; "+then)
			t.Cleanup(func() { d.Try("rm", "-f", id) })
			harness.Eventually(t, 30*time.Second, "container wrote /data/r.txt", func() (bool, string) {
				out, err := d.Try("exec", id, "cat", "/data/r.txt")
				return err == nil && out == "restored", out
			})
			pid, err := strconv.Atoi(d.Docker(t, "inspect", "-f", "{{.State.Pid}}", id))
			if err != nil || pid <= 0 {
				t.Fatalf("the container's pid: %d, %v", pid, err)
			}

			// Kill the daemon, let the container write, start the daemon again.
			if err := d.Kill(); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ctl, "go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			harness.Eventually(t, 60*time.Second, "the container wrote /data/late.txt while the daemon was down", func() (bool, string) {
				_, err := os.Stat(filepath.Join(ctl, "wrote"))
				return err == nil, fmt.Sprint(err)
			})
			if tc.exitedAt == "down" {
				harness.Eventually(t, 30*time.Second, "the container's process ended", func() (bool, string) {
					err := syscall.Kill(pid, 0)
					return errors.Is(err, syscall.ESRCH), fmt.Sprintf("pid %d: kill 0: %v", pid, err)
				})
			}
			since := time.Now()
			if err := d.Start(); err != nil {
				t.Fatal(err)
			}
			harness.Eventually(t, 60*time.Second, "the container exited", func() (bool, string) {
				st := d.Docker(t, "inspect", "-f", "{{.State.Status}}", id)
				return st == "exited", st
			})
			ins := inspectContainer(t, d, id)
			if ins.State.Error != "" || (tc.exitedAt == "down" && ins.State.ExitCode != 0) {
				t.Errorf("after restore: exit code %d, error %q; want no error (and exit code 0 for an exit while the daemon was down)",
					ins.State.ExitCode, ins.State.Error)
			}
			mustHost(t, s.host("late.txt"), "late\n")
			var ok bool
			for _, a := range dieAttributes(t, d, id, since) {
				ok = ok || a["bindstate.writeback"] == "ok"
			}
			if !ok {
				t.Errorf("no die event with bindstate.writeback=ok after restore: %v", dieAttributes(t, d, id, since))
			}
			// the plugin still serves new containers, over the same source
			if out, err := d.Try("run", "--rm", "--network", "none", "-v", s.Source+":/data:delegated", image, "cat", "/data/late.txt"); err != nil || out != "late" {
				t.Errorf("a new container over the same source: cat /data/late.txt = %q, %v; want late", out, err)
			}
		})
	}
}

// TestEngine_D4_RestartPolicySeesWritebackFailure: with --restart
// on-failure, a process that exits 0 but whose writeback fails is
// restarted: the restart policy sees the failed exit.
func TestEngine_D4_RestartPolicySeesWritebackFailure(t *testing.T) {
	d := needEngine(t)
	s := newShareSource(t)
	// The container writes only once the share is gone (/go): a write
	// made before could be written back before the share went (a second
	// later, or at any sync), and its exit would then rightly be a success.
	id := d.Docker(t, "run", "-d", "--restart", "on-failure:1", "--network", "none",
		"-v", s.Source+":/data:delegated", image,
		"sh", "-c", "while [ ! -e /go ]; do sleep 0.1; done; echo x >> /data/runs.txt; exit 0")
	t.Cleanup(func() { d.Try("rm", "-f", id) })
	harness.Eventually(t, 30*time.Second, "container running, its volume mounted", func() (bool, string) {
		out, err := d.Try("exec", id, "ls", "/data")
		return err == nil, out
	})
	if err := env.share.StopSSHD(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			env.share.StartSSHD()
		}
	})
	d.Docker(t, "exec", id, "touch", "/go")
	var count string
	took := harness.Eventually(t, 90*time.Second, "restarted once, then stopped", func() (bool, string) {
		count = d.Docker(t, "inspect", "-f", "{{.RestartCount}} {{.State.Status}} {{.State.ExitCode}}", id)
		return count == "1 exited 1", count
	})
	t.Logf("restarted once after the failed writeback, then stopped (exit code 1), in %v", took)
	if err := env.share.StartSSHD(); err != nil {
		t.Fatal(err)
	}
	restarted = true
}

// TestEngine_D4_LiveRestoreKeepsTheMountAndWritesBackAtTheStop: a patched
// daemon with --live-restore, killed while a container with a delegated
// bind runs (-v SRC:/data:delegated). The plugin runs on, the same
// process, and serves the bind through the outage and after; the daemon
// that came back takes the container back and, at its stop, waits for the
// writeback before reporting it: a die event with bindstate.writeback=ok,
// and all the container wrote before, during and after on the host.
func TestEngine_D4_LiveRestoreKeepsTheMountAndWritesBackAtTheStop(t *testing.T) {
	lr := newLiveRestoreDaemon(t, needEngine(t))
	s := newShareSource(t)
	cid := lr.runThroughACrash(t, s.Source+":/data:delegated")
	since := time.Now()
	lr.d.Docker(t, "stop", cid)
	for _, name := range []string{"before", "during", "after"} {
		mustHost(t, s.host(name+".txt"), name+"\n")
	}
	var ok bool
	for _, a := range dieAttributes(t, lr.d, cid, since) {
		ok = ok || a["bindstate.writeback"] == "ok"
	}
	if !ok {
		t.Errorf("no die event with bindstate.writeback=ok at the stop after the daemon came back: %v", dieAttributes(t, lr.d, cid, since))
	}
}
