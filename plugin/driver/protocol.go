package driver

import (
	"context"
	"log/slog"
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

// Protocol adapts a Driver to Docker's volume plugin protocol (it is a
// VolumeDriver, i.e. a go-plugins-helpers volume.Driver).
type Protocol struct {
	Driver *Driver
	// Log receives a line per failed request: user mistakes at Info,
	// failures at Error (default: the Driver's logger).
	Log *slog.Logger
	// RequestTimeout bounds Create, Remove, Get, List and Path (default
	// DefaultRequestTimeout). Mount and Unmount have their own bounds.
	RequestTimeout time.Duration
}

var _ VolumeDriver = (*Protocol)(nil)

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
	level := slog.LevelError
	if k != KindSystem {
		level = slog.LevelInfo
	}
	log.Log(context.Background(), level, "request failed", "op", op, "volume", name, "kind", k.String(), "err", err)
	return err
}

// Create implements VolumeDriver.
func (p *Protocol) Create(r *CreateRequest) error {
	ctx, cancel := p.short()
	defer cancel()
	return p.report("create", r.Name, p.Driver.Create(ctx, r.Name, r.Options))
}

// Remove implements VolumeDriver.
func (p *Protocol) Remove(r *RemoveRequest) error {
	ctx, cancel := p.short()
	defer cancel()
	return p.report("remove", r.Name, p.Driver.Remove(ctx, r.Name))
}

// Mount implements VolumeDriver.
func (p *Protocol) Mount(r *MountRequest) (*MountResponse, error) {
	ctx, cancel := p.ctx(mountTimeout)
	defer cancel()
	mp, err := p.Driver.Mount(ctx, r.Name, r.ID)
	if err != nil {
		return nil, p.report("mount", r.Name, err)
	}
	return &MountResponse{Mountpoint: mp}, nil
}

// Unmount implements VolumeDriver. The flush it may wait for is bounded by
// the Driver's UnmountFlushTimeout.
func (p *Protocol) Unmount(r *UnmountRequest) error {
	ctx, cancel := p.ctx(p.Driver.cfg.UnmountFlushTimeout + 5*time.Second)
	defer cancel()
	return p.report("unmount", r.Name, p.Driver.Unmount(ctx, r.Name, r.ID))
}

// Path implements VolumeDriver.
func (p *Protocol) Path(r *PathRequest) (*PathResponse, error) {
	ctx, cancel := p.short()
	defer cancel()
	mp, err := p.Driver.Path(ctx, r.Name)
	if err != nil {
		return nil, p.report("path", r.Name, err)
	}
	return &PathResponse{Mountpoint: mp}, nil
}

// Get implements VolumeDriver.
func (p *Protocol) Get(r *GetRequest) (*GetResponse, error) {
	ctx, cancel := p.short()
	defer cancel()
	info, err := p.Driver.Get(ctx, r.Name)
	if err != nil {
		return nil, p.report("get", r.Name, err)
	}
	return &GetResponse{Volume: wireVolume(info)}, nil
}

// List implements VolumeDriver.
func (p *Protocol) List() (*ListResponse, error) {
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

// Capabilities implements VolumeDriver: volumes live on this host.
func (p *Protocol) Capabilities() *CapabilitiesResponse {
	return &CapabilitiesResponse{Capabilities: Capability{Scope: "local"}}
}

func wireVolume(info VolumeInfo) *Volume {
	v := &Volume{Name: info.Name, Mountpoint: info.Mountpoint, Status: info.Status}
	if !info.CreatedAt.IsZero() {
		v.CreatedAt = info.CreatedAt.Format(time.RFC3339)
	}
	return v
}
