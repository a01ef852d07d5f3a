package driver

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Timeouts of the contexts Protocol gives the Driver.
const (
	// DefaultRequestTimeout bounds requests that do no long work.
	DefaultRequestTimeout = 30 * time.Second
	// mountTimeout bounds Mount (opening a front mounts FUSE and may read
	// the source's top directory over a slow share). Docker waits a minute.
	mountTimeout = 55 * time.Second
)

// Protocol adapts a Driver to Docker's volume plugin protocol: it is the
// volume.Driver that go-plugins-helpers' volume.NewHandler serves.
//
// The helpers' HTTP server cannot be shut down gracefully (it is not an
// http.Handler we can put in our own server), so Protocol keeps count of the
// requests it is running: Drain refuses new ones and waits for those.
type Protocol struct {
	Driver *Driver
	// Log receives a line per failed request: user mistakes at Info,
	// failures at Error (default: the Driver's logger).
	Log *slog.Logger
	// RequestTimeout bounds Create, Remove, Get, List and Path (default
	// DefaultRequestTimeout). Mount and Unmount have their own bounds.
	RequestTimeout time.Duration

	mu       sync.Mutex
	draining bool
	running  sync.WaitGroup
}

var _ VolumeDriver = (*Protocol)(nil)

var errDraining = errorf(KindSystem, "the bindstate plugin is stopping; retry once it has restarted")

// enter counts a request of kind op in, or returns errDraining once Drain was called.
// The caller calls p.running.Done() when it is over.
func (p *Protocol) enter(op string) error {
	p.Driver.counters.request(op)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.draining {
		return errDraining
	}
	p.running.Add(1)
	return nil
}

// Drain refuses every later request and waits until those running are over
// or ctx ends (then it returns ctx's error).
func (p *Protocol) Drain(ctx context.Context) error {
	p.mu.Lock()
	p.draining = true
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.running.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return errors.Join(errors.New("requests still running"), ctx.Err())
	}
}

func (p *Protocol) ctx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func (p *Protocol) short() (context.Context, context.CancelFunc) {
	d := p.RequestTimeout
	if d <= 0 {
		d = DefaultRequestTimeout
	}
	return p.ctx(d)
}

// report logs a failed request by kind and returns err unchanged: its
// message is what Docker shows.
func (p *Protocol) report(op, name string, err error) error {
	if err == nil {
		return nil
	}
	log := p.Log
	if log == nil {
		log = p.Driver.log
	}
	k := KindOf(err)
	p.Driver.counters.failed(op, k)
	level := slog.LevelError
	if k != KindSystem {
		level = slog.LevelInfo
	}
	log.Log(context.Background(), level, "request failed", "op", op, "volume", name, "kind", k.String(), "err", err)
	return err
}

// Create implements volume.Driver.
func (p *Protocol) Create(r *CreateRequest) error {
	if err := p.enter("create"); err != nil {
		return err
	}
	defer p.running.Done()
	ctx, cancel := p.short()
	defer cancel()
	return p.report("create", r.Name, p.Driver.Create(ctx, r.Name, r.Options))
}

// Remove implements volume.Driver.
func (p *Protocol) Remove(r *RemoveRequest) error {
	if err := p.enter("remove"); err != nil {
		return err
	}
	defer p.running.Done()
	ctx, cancel := p.short()
	defer cancel()
	return p.report("remove", r.Name, p.Driver.Remove(ctx, r.Name))
}

// Mount implements volume.Driver.
func (p *Protocol) Mount(r *MountRequest) (*MountResponse, error) {
	if err := p.enter("mount"); err != nil {
		return nil, err
	}
	defer p.running.Done()
	ctx, cancel := p.ctx(mountTimeout)
	defer cancel()
	mp, err := p.Driver.Mount(ctx, r.Name, r.ID)
	if err != nil {
		return nil, p.report("mount", r.Name, err)
	}
	return &MountResponse{Mountpoint: mp}, nil
}

// Unmount implements volume.Driver. The flush it may wait for is bounded by
// the Driver's UnmountFlushTimeout.
func (p *Protocol) Unmount(r *UnmountRequest) error {
	if err := p.enter("unmount"); err != nil {
		return err
	}
	defer p.running.Done()
	ctx, cancel := p.ctx(p.Driver.cfg.UnmountFlushTimeout + 5*time.Second)
	defer cancel()
	return p.report("unmount", r.Name, p.Driver.Unmount(ctx, r.Name, r.ID))
}

// Path implements volume.Driver.
func (p *Protocol) Path(r *PathRequest) (*PathResponse, error) {
	if err := p.enter("path"); err != nil {
		return nil, err
	}
	defer p.running.Done()
	ctx, cancel := p.short()
	defer cancel()
	mp, err := p.Driver.Path(ctx, r.Name)
	if err != nil {
		return nil, p.report("path", r.Name, err)
	}
	return &PathResponse{Mountpoint: mp}, nil
}

// Get implements volume.Driver.
func (p *Protocol) Get(r *GetRequest) (*GetResponse, error) {
	if err := p.enter("get"); err != nil {
		return nil, err
	}
	defer p.running.Done()
	ctx, cancel := p.short()
	defer cancel()
	info, err := p.Driver.Get(ctx, r.Name)
	if err != nil {
		return nil, p.report("get", r.Name, err)
	}
	return &GetResponse{Volume: wireVolume(info)}, nil
}

// List implements volume.Driver.
func (p *Protocol) List() (*ListResponse, error) {
	if err := p.enter("list"); err != nil {
		return nil, err
	}
	defer p.running.Done()
	ctx, cancel := p.short()
	defer cancel()
	infos, err := p.Driver.List(ctx)
	if err != nil {
		return nil, p.report("list", "", err)
	}
	res := &ListResponse{Volumes: make([]*Volume, 0, len(infos))}
	for _, info := range infos {
		res.Volumes = append(res.Volumes, wireVolume(info))
	}
	return res, nil
}

// Capabilities implements volume.Driver: volumes live on this host.
func (p *Protocol) Capabilities() *CapabilitiesResponse {
	p.Driver.counters.request("capabilities")
	return &CapabilitiesResponse{Capabilities: Capability{Scope: "local"}}
}

func wireVolume(info VolumeInfo) *Volume {
	v := &Volume{Name: info.Name, Mountpoint: info.Mountpoint, Status: info.Status}
	if !info.CreatedAt.IsZero() {
		v.CreatedAt = info.CreatedAt.Format(time.RFC3339)
	}
	return v
}
