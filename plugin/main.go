// Command bindstate is the bindstate Docker volume plugin: it serves a host
// folder to containers as consistent (a bind mount), cached or delegated
// (FUSE over a local store). It is configured by its environment (see
// config.go) and serves Docker's volume plugin protocol on a unix socket.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/bindstate/bindstate/plugin/hostpath"
)

// version is set at build time: -ldflags "-X main.version=..."
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is main without the process: it returns the exit code. Cancelling ctx
// (SIGTERM, SIGINT) stops the plugin.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
	case len(args) == 1 && (args[0] == "version" || args[0] == "--version"):
		fmt.Fprintln(stdout, "bindstate", version)
		return 0
	default:
		fmt.Fprintf(stderr, "usage: bindstate [version]\n\n"+envHelp, strings.Join(hostpath.DefaultAllowedRoots, ","))
		return 2
	}
	cfg, err := loadConfig(getenv)
	if err != nil {
		fmt.Fprintf(stderr, "bindstate: invalid configuration:\n%v\n", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	slog.SetDefault(log)
	if err := serve(ctx, cfg, log); err != nil {
		log.Error("bindstate stopped", "err", err)
		return 1
	}
	return 0
}
