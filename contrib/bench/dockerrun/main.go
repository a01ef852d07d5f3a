// Command dockerrun measures what BENCH.md asks of a large source: the time
// from `docker run` to the container's first process, with the source
// mounted in each state, and to its first look at a file there. It runs a
// private dockerd (integration/harness: its own data root, exec root and
// socket; the system's daemon is never touched) with the bindstate managed
// plugin, a busybox image holding this program as /bin/bsprobe, and times
//
//	docker run --rm -v MOUNT:/data bs-busybox bsprobe probe /data/PROBE
//
// from the start of the docker CLI to the probe's first instruction (its
// own clock: the container shares the host's) and to the end of its stat
// of PROBE. MOUNT is, by configuration: native, a bind of -native (the same
// tree on a local disk: what docker run costs by itself); consistent, a bind
// of -source (the share); cached and delegated, a bindstate volume of
// -source, made with `docker volume create` first (timed apart). The first
// run of a state is the volume's first mount: a fresh store, nothing
// fetched yet.
//
//	go build -o dockerrun ./contrib/bench/dockerrun   # CGO_ENABLED=0: it runs in the image too
//	dockerrun -source /srv/share/big -native /srv/local/big [-states cached,delegated] [-runs 3] [-probe REL]
//
// It prints one JSON object on stdout (bench.py's "run" extra reads it) and
// its progress on stderr. The share must be mounted before it starts: the
// plugin sees the host's "/" through a bind made when it starts.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bindstate/bindstate/integration/harness"
)

const (
	image      = "bs-busybox:latest"
	pluginName = "bindstate"
)

// run is one `docker run`, in seconds from the start of the docker CLI.
type run struct {
	FirstProcessS float64 `json:"first_process_s"` // the probe's first instruction
	FirstStatS    float64 `json:"first_stat_s"`    // the end of its stat of PROBE
	ExitS         float64 `json:"exit_s"`          // the docker CLI's exit (the container's stop, a delegated flush)
}

// config is one configuration's measurements.
type config struct {
	VolumeCreateS float64 `json:"volume_create_s,omitempty"` // docker volume create (the plugin's Create)
	Runs          []run   `json:"runs"`
	Error         string  `json:"error,omitempty"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		probe(os.Args[2:])
		return
	}
	source := flag.String("source", "", "the source on the share (required)")
	native := flag.String("native", "", "the same tree on a local disk (optional: the native configuration)")
	states := flag.String("states", "cached,delegated", "bindstate states to measure, comma-separated")
	runs := flag.Int("runs", 3, "docker runs per configuration")
	probePath := flag.String("probe", "p4/d199/f099.js", "a file of the source that the container stats")
	flag.Parse()
	if *source == "" || *runs < 1 {
		fmt.Fprintln(os.Stderr, "usage: dockerrun -source DIR [-native DIR] [-states cached,delegated] [-runs N] [-probe REL]")
		os.Exit(2)
	}
	out, err := measure(*source, *native, strings.Split(*states, ","), *runs, *probePath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dockerrun:", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(out)
}

// probe is the container's first process: it prints its start and, after
// a stat of path, the time again, in nanoseconds since the epoch.
func probe(args []string) {
	start := time.Now().UnixNano()
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: bsprobe probe PATH")
		os.Exit(2)
	}
	if _, err := os.Stat(args[0]); err != nil {
		fmt.Fprintln(os.Stderr, "bsprobe:", err)
		os.Exit(1)
	}
	fmt.Printf("start %d\nstat %d\n", start, time.Now().UnixNano())
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[dockerrun %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func measure(source, native string, states []string, runs int, probePath string) (map[string]any, error) {
	if _, err := os.Stat(filepath.Join(source, probePath)); err != nil {
		return nil, fmt.Errorf("-probe must name a file of -source: %w", err)
	}
	tools, err := harness.FindTools()
	if err != nil {
		return nil, err
	}
	repo, err := harness.RepoRoot()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := harness.MakeShortDir()
	if err != nil {
		return nil, err
	}
	d := harness.NewDaemon(dir)
	d.Dockerd, d.DockerCLI = tools.Dockerd, tools.Docker
	logf("starting a private dockerd in %s", dir)
	if err := d.Start(); err != nil {
		return nil, err
	}
	defer func() {
		// Stopping the daemon stops the plugin, which unmounts its volumes.
		if err := d.Stop(); err != nil {
			logf("stop dockerd: %v", err)
		}
		if err := d.Cleanup(); err != nil {
			logf("clean up %s: %v", dir, err)
		}
	}()
	if err := d.ImportBusybox(image, tools.Busybox, map[string]string{"/bin/bsprobe": self}); err != nil {
		return nil, err
	}
	pdir, how, err := harness.PluginDir(tools.Go, repo, filepath.Join(dir, "work"))
	if err != nil {
		return nil, err
	}
	logf("installing the plugin from %s (%s)", pdir, how)
	if err := d.InstallPlugin(pluginName, pdir, "ALLOWED_ROOTS="+source); err != nil {
		return nil, fmt.Errorf("%w\ndaemon log:\n%s", err, d.LogTail(40))
	}

	results := map[string]config{}
	measureRuns := func(name, mount string) config {
		var c config
		for i := 0; i < runs; i++ {
			r, err := dockerRun(d, mount, "/data/"+probePath)
			if err != nil {
				c.Error = err.Error()
				break
			}
			logf("%s run %d: first process %.3f s, first stat %.3f s, exit %.3f s", name, i+1, r.FirstProcessS, r.FirstStatS, r.ExitS)
			c.Runs = append(c.Runs, r)
		}
		return c
	}
	if native != "" {
		results["native"] = measureRuns("native", native)
	}
	results["consistent"] = measureRuns("consistent", source)
	for _, st := range states {
		vol := "bench-run-" + st
		t0 := time.Now()
		if _, err := d.Try("volume", "create", "-d", pluginName, "-o", "source="+source, "-o", "state="+st, vol); err != nil {
			results[st] = config{Error: err.Error()}
			continue
		}
		created := time.Since(t0).Seconds()
		c := measureRuns(st, vol)
		c.VolumeCreateS = round(created)
		results[st] = c
		if _, err := d.Try("volume", "rm", vol); err != nil {
			logf("volume rm %s: %v", vol, err)
		}
	}
	return map[string]any{"probe": probePath, "runs": runs, "configs": results}, nil
}

// dockerRun runs the probe in a container with mount at /data.
func dockerRun(d *harness.Daemon, mount, probePath string) (run, error) {
	t0 := time.Now()
	stdout, stderr, err := d.Run(nil, "run", "--rm", "-v", mount+":/data", image, "/bin/bsprobe", "probe", probePath)
	exit := time.Since(t0)
	if err != nil {
		return run{}, fmt.Errorf("docker run -v %s:/data: %w: %s", mount, err, strings.TrimSpace(stderr))
	}
	var start, stat int64
	for _, line := range strings.Split(stdout, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "start":
			start = n
		case "stat":
			stat = n
		}
	}
	if start == 0 || stat == 0 {
		return run{}, fmt.Errorf("docker run -v %s:/data: the probe printed %q, want its start and stat times", mount, stdout)
	}
	since := func(ns int64) float64 { return round(time.Unix(0, ns).Sub(t0).Seconds()) }
	return run{FirstProcessS: since(start), FirstStatS: since(stat), ExitS: round(exit.Seconds())}, nil
}

func round(s float64) float64 { return float64(int64(s*1000+0.5)) / 1000 }
