package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/bindstate/bindstate/plugin/control"
	"github.com/bindstate/bindstate/plugin/cpus"
	"github.com/bindstate/bindstate/plugin/driver"
	"github.com/bindstate/bindstate/plugin/frontend"
)

// drainRequests is how long requests in flight may finish once the plugin
// is told to stop.
const drainRequests = 5 * time.Second

// serve runs the plugin until ctx is cancelled: it stops serving, then
// flushes (bounded by UnmountFlushTimeout) and closes every open front. A
// failed flush is logged: those changes stay journaled for the next start.
//
// Beside Docker's protocol it serves the control socket of the bindstate
// commands (status, flush, logs, metrics; package control), whose logs come
// from ring.
func serve(ctx context.Context, cfg config, log *slog.Logger, ring *control.Ring) error {
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.MountRoot, 0o755); err != nil {
		return err
	}
	if cfg.CPUProfile != "" {
		stop, err := startCPUProfile(cfg.CPUProfile)
		if err != nil {
			return err
		}
		defer stop()
		log.Info("writing a CPU profile until the plugin stops", "path", cfg.CPUProfile)
	}
	policy := cfg.policy()
	shareWork, stopGoverning, cpusDesc := governCPUs(cfg.FixedCPUs)
	defer stopGoverning()
	opener := frontend.New(frontend.Config{
		StateDir:   cfg.StateDir,
		MountRoot:  cfg.MountRoot,
		HostPrefix: cfg.HostPrefix,
		Policy:     policy,
		Log:        log,
		FuseDebug:  cfg.FuseDebug,
		ShareWork:  shareWork,
	})
	drv, err := driver.New(driver.Config{
		StateDir:            cfg.StateDir,
		Opener:              opener,
		Policy:              policy,
		UnmountFlushTimeout: cfg.UnmountFlushTimeout,
		Log:                 log,
	})
	if err != nil {
		return err
	}
	path := cfg.socketPath()
	ln, err := listenUnix(path, cfg.SocketGID)
	if err != nil {
		return err
	}
	// go-plugins-helpers serves the protocol on our listener (we own the
	// socket's path, owner and mode). Its server cannot be shut down, so
	// proto.Drain is what stops requests.
	proto := &driver.Protocol{Driver: drv, Log: log}
	errc := make(chan error, 1)
	go func() { errc <- driver.NewHandler(proto).Serve(ln) }()
	ctrlPath := cfg.controlSocketPath()
	ctrl := startControl(ctrlPath, cfg.SocketGID, &control.Server{Driver: drv, Ring: ring, Log: log, Version: version}, log)
	log.Info("bindstate serving", "version", version, "socket", path, "control_socket", ctrlPath, "state_dir", cfg.StateDir,
		"mount_root", cfg.MountRoot, "host_prefix", cfg.HostPrefix, "allowed_roots", policy.AllowedRoots,
		"denied", policy.Denied, "unmount_flush_timeout", cfg.UnmountFlushTimeout.String(), "cpus", cpusDesc)

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("stopping: no more requests; writing back and unmounting open volumes")
	case serveErr = <-errc:
		log.Error("serving failed; stopping", "err", serveErr)
	}
	stopGoverning() // the last writebacks run on every CPU

	ln.Close() // no new connections; requests on open ones are refused by Drain
	os.Remove(path)
	sctx, cancel := context.WithTimeout(context.Background(), drainRequests)
	if err := proto.Drain(sctx); err != nil {
		log.Warn("requests still running when stopping", "err", err)
	}
	cancel()
	if ctrl != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := ctrl.Shutdown(sctx); err != nil {
			ctrl.Close() // a flush still waiting: it ends with its client's connection
		}
		cancel()
		os.Remove(ctrlPath)
	}

	fctx, cancel := context.WithTimeout(context.Background(), cfg.UnmountFlushTimeout)
	defer cancel()
	if err := drv.Shutdown(fctx); err != nil {
		log.Error("not everything was written back before stopping; it stays journaled for the next start", "err", err)
	}
	log.Info("bindstate stopped")
	if serveErr != nil && !errors.Is(serveErr, net.ErrClosed) {
		return serveErr
	}
	return nil
}

// governCPUs starts a cpus.Governor: the plugin's Go code runs on one CPU
// while it answers from its local stores (the cheapest FUSE round trip) and
// on every CPU while it works on the share. GOMAXPROCS in the environment
// (fixed) turns it off, so the user's number stands; so does a single CPU.
// It returns the stores' ShareWork (nil when off), what ends the governing
// (idempotent), and a description for the log.
func governCPUs(fixed bool) (shareWork func(), stop func(), desc string) {
	n := runtime.GOMAXPROCS(0)
	if fixed {
		return nil, func() {}, fmt.Sprintf("%d (GOMAXPROCS)", n)
	}
	if n == 1 {
		return nil, func() {}, "1"
	}
	g := cpus.New(n, cpus.DefaultQuiet, setMaxProcs)
	return g.ShareWork, g.Stop, fmt.Sprintf("1, %d during share work", n)
}

// setMaxProcs is what a Governor sets GOMAXPROCS with. A test records
// through it: sampling runtime.GOMAXPROCS on a timer misses a raise when a
// loaded machine runs the sampler late.
var setMaxProcs = runtime.GOMAXPROCS

// startControl serves the control API on path. A failure is logged, not
// returned: volumes keep being served without it.
func startControl(path string, gid int, api *control.Server, log *slog.Logger) *http.Server {
	ln, err := listenUnix(path, gid)
	if err != nil {
		log.Error("control socket unavailable: bindstate ls/status/flush/logs will not reach this plugin", "socket", path, "err", err)
		return nil
	}
	srv := &http.Server{
		Handler:           api.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("control socket stopped serving", "socket", path, "err", err)
		}
	}()
	return srv
}

// listenUnix listens on the unix socket path, replacing a stale one, owned
// by root:gid with mode 0660 (as go-plugins-helpers' ServeUnix does).
func listenUnix(path string, gid int) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chown(path, 0, gid); err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket owner: %w", err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket mode: %w", err)
	}
	return ln, nil
}

// startCPUProfile writes a CPU profile of the process to path until the
// returned stop is called (at a clean stop: SIGTERM or SIGINT). For
// measuring where the plugin's time goes (make bench, go tool pprof).
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
