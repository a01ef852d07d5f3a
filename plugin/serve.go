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
	"time"

	"github.com/bindstate/bindstate/plugin/driver"
	"github.com/bindstate/bindstate/plugin/frontend"
)

// drainRequests is how long requests in flight may finish once the plugin
// is told to stop.
const drainRequests = 5 * time.Second

// serve runs the plugin until ctx is cancelled: it stops serving, then
// flushes (bounded by UnmountFlushTimeout) and closes every open front. A
// failed flush is logged: those changes stay journaled for the next start.
func serve(ctx context.Context, cfg config, log *slog.Logger) error {
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.MountRoot, 0o755); err != nil {
		return err
	}
	policy := cfg.policy()
	opener := frontend.New(frontend.Config{
		StateDir:   cfg.StateDir,
		MountRoot:  cfg.MountRoot,
		HostPrefix: cfg.HostPrefix,
		Policy:     policy,
		Log:        log,
		FuseDebug:  cfg.FuseDebug,
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
	srv := &http.Server{
		Handler:           driver.NewHandler(&driver.Protocol{Driver: drv, Log: log}),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("bindstate serving", "version", version, "socket", path, "state_dir", cfg.StateDir,
		"mount_root", cfg.MountRoot, "host_prefix", cfg.HostPrefix, "allowed_roots", policy.AllowedRoots,
		"denied", policy.Denied, "unmount_flush_timeout", cfg.UnmountFlushTimeout.String())

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("stopping: no more requests; writing back and unmounting open volumes")
	case serveErr = <-errc:
		log.Error("serving failed; stopping", "err", serveErr)
	}
	sctx, cancel := context.WithTimeout(context.Background(), drainRequests)
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	cancel()
	os.Remove(path)

	fctx, cancel := context.WithTimeout(context.Background(), cfg.UnmountFlushTimeout)
	defer cancel()
	if err := drv.Shutdown(fctx); err != nil {
		log.Error("not everything was written back before stopping; it stays journaled for the next start", "err", err)
	}
	log.Info("bindstate stopped")
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
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
