package driver

// Docker's volume plugin protocol is github.com/docker/go-plugins-helpers/volume:
// its Handler serves a volume.Driver (Protocol) over HTTP. The aliases below
// name its wire types here unqualified (the package's name clashes with the
// driver's own volume type).

import (
	"github.com/docker/go-plugins-helpers/sdk"
	dockervolume "github.com/docker/go-plugins-helpers/volume"
)

// ContentType is what Docker sends and expects.
const ContentType = sdk.DefaultContentTypeV1_1

// The protocol's request and response types.
type (
	CreateRequest        = dockervolume.CreateRequest
	RemoveRequest        = dockervolume.RemoveRequest
	MountRequest         = dockervolume.MountRequest
	MountResponse        = dockervolume.MountResponse
	UnmountRequest       = dockervolume.UnmountRequest
	PathRequest          = dockervolume.PathRequest
	PathResponse         = dockervolume.PathResponse
	GetRequest           = dockervolume.GetRequest
	GetResponse          = dockervolume.GetResponse
	ListResponse         = dockervolume.ListResponse
	CapabilitiesResponse = dockervolume.CapabilitiesResponse
	Volume               = dockervolume.Volume
	Capability           = dockervolume.Capability
	ErrorResponse        = dockervolume.ErrorResponse
	// VolumeDriver is what the handler serves (Protocol implements it).
	VolumeDriver = dockervolume.Driver
)

// NewHandler returns go-plugins-helpers' handler for p. Serve it on a
// listener made by the caller (who owns the socket's path and mode):
// NewHandler(p).Serve(ln).
func NewHandler(p *Protocol) *dockervolume.Handler { return dockervolume.NewHandler(p) }
