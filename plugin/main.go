// Command bindstate is the bindstate Docker volume plugin: it serves a host
// folder to containers as consistent (a bind mount), cached or delegated
// (FUSE over a local store). It is configured by its environment (see
// config.go) and serves Docker's volume plugin protocol on a unix socket.
//
// The same binary is the bindstate command (ls, status, flush, logs,
// metrics; package control), which talks to a running plugin over its
// control socket.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/bindstate/bindstate/plugin/control"
	"github.com/bindstate/bindstate/plugin/hostpath"
	"github.com/bindstate/bindstate/plugin/internal/logwriter"
)

// version is set at build time: -ldflags "-X main.version=..."
var version = "dev"

// The log's queue for stderr: 1 MiB is some 5,000 records, a long outage's
// worth; past it records are dropped (and counted) rather than waited for.
// At stop the queue gets a few seconds to reach stderr, not for ever: a
// plugin stopping while nobody reads its output must still stop.
var (
	logQueueLimit   = 1 << 20
	logFlushTimeout = 3 * time.Second
)

func main() {
	args := os.Args[1:]
	if len(args) == 0 && control.IsTerminal(os.Stdin) {
		// Someone typed `bindstate` in a shell: help them rather than start
		// a plugin on Docker's socket. Docker and systemd start the plugin
		// with no terminal (or with `bindstate serve`).
		fmt.Fprint(os.Stderr, control.Usage)
		fmt.Fprintln(os.Stderr, "\nTo run the plugin itself in the foreground: bindstate serve")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, args, os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is main without the process: it returns the exit code. With no
// arguments, or "serve", it runs the plugin; cancelling ctx (SIGTERM,
// SIGINT) stops it. Otherwise it runs a command (version, or those of
// package control).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0, len(args) == 1 && args[0] == "serve":
	case len(args) == 1 && (args[0] == "version" || args[0] == "--version"):
		fmt.Fprintln(stdout, "bindstate", version)
		return 0
	case slices.Contains(control.Commands, args[0]):
		cli := &control.CLI{Stdout: stdout, Stderr: stderr, Getenv: getenv, Terminal: control.IsTerminal(stderr)}
		return cli.Run(ctx, args)
	default:
		fmt.Fprint(stderr, control.Usage)
		fmt.Fprintf(stderr, "\nplugin "+envHelp, strings.Join(hostpath.DefaultAllowedRoots, ","))
		return 2
	}
	cfg, err := loadConfig(getenv)
	if err != nil {
		fmt.Fprintf(stderr, "bindstate: invalid configuration:\n%v\n", err)
		return 2
	}
	// Every record also goes to a ring buffer, for bindstate logs. stderr
	// is written from a queue of its own: while the Docker daemon is down
	// nobody reads it, and a log line must not hold up a container's
	// syscall (package logwriter).
	ring := control.NewRing(control.DefaultRingSize)
	out := logwriter.New(stderr, logQueueLimit)
	defer out.Flush(logFlushTimeout)
	log := slog.New(ring.Handler(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: cfg.LogLevel})))
	slog.SetDefault(log)
	if err := serve(ctx, cfg, log, ring); err != nil {
		log.Error("bindstate stopped", "err", err)
		return 1
	}
	return 0
}
