package driver

// Docker's volume plugin protocol, wire-compatible with
// github.com/docker/go-plugins-helpers/volume: the same request and response
// types (same names, same JSON), the same routes, status codes and content
// type, and the same interface (VolumeDriver is volume.Driver).
//
// Why not that package itself: it cannot be compiled in this module. Its sdk
// imports github.com/docker/go-connections/sockets and
// github.com/coreos/go-systemd/activation, which go.mod does not require
// (go-plugins-helpers has no go.mod of its own, so `go get` of it does not
// record them). To switch once go.mod requires them: replace the types below
// with aliases (type CreateRequest = volume.CreateRequest, ...), drop
// Handler, and serve volume.NewHandler(&Protocol{...}). The protocol is
// small; this file is all of it that Docker uses.

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// ContentType is what Docker sends and expects.
const ContentType = "application/vnd.docker.plugins.v1.1+json"

const manifest = `{"Implements": ["VolumeDriver"]}`

// CreateRequest is VolumeDriver.Create's request.
type CreateRequest struct {
	Name    string
	Options map[string]string `json:"Opts,omitempty"`
}

// RemoveRequest is VolumeDriver.Remove's request.
type RemoveRequest struct {
	Name string
}

// MountRequest is VolumeDriver.Mount's request.
type MountRequest struct {
	Name string
	ID   string
}

// MountResponse is VolumeDriver.Mount's response.
type MountResponse struct {
	Mountpoint string
}

// UnmountRequest is VolumeDriver.Unmount's request.
type UnmountRequest struct {
	Name string
	ID   string
}

// PathRequest is VolumeDriver.Path's request.
type PathRequest struct {
	Name string
}

// PathResponse is VolumeDriver.Path's response.
type PathResponse struct {
	Mountpoint string
}

// GetRequest is VolumeDriver.Get's request.
type GetRequest struct {
	Name string
}

// GetResponse is VolumeDriver.Get's response.
type GetResponse struct {
	Volume *Volume
}

// ListResponse is VolumeDriver.List's response.
type ListResponse struct {
	Volumes []*Volume
}

// CapabilitiesResponse is VolumeDriver.Capabilities' response.
type CapabilitiesResponse struct {
	Capabilities Capability
}

// Volume describes a volume in Get and List responses.
type Volume struct {
	Name       string
	Mountpoint string         `json:",omitempty"`
	CreatedAt  string         `json:",omitempty"`
	Status     map[string]any `json:",omitempty"`
}

// Capability is what a volume driver declares about itself.
type Capability struct {
	Scope string
}

// ErrorResponse carries an error to Docker.
type ErrorResponse struct {
	Err string
}

// VolumeDriver is the interface a volume plugin implements (volume.Driver).
type VolumeDriver interface {
	Create(*CreateRequest) error
	List() (*ListResponse, error)
	Get(*GetRequest) (*GetResponse, error)
	Remove(*RemoveRequest) error
	Path(*PathRequest) (*PathResponse, error)
	Mount(*MountRequest) (*MountResponse, error)
	Unmount(*UnmountRequest) error
	Capabilities() *CapabilitiesResponse
}

// Handler serves the protocol for a VolumeDriver over HTTP (volume.Handler).
type Handler struct {
	mux *http.ServeMux
}

// NewHandler returns the HTTP handler for d.
func NewHandler(d VolumeDriver) *Handler {
	h := &Handler{mux: http.NewServeMux()}
	h.mux.HandleFunc("/Plugin.Activate", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ContentType)
		fmt.Fprintln(w, manifest)
	})
	h.mux.HandleFunc("/VolumeDriver.Create", func(w http.ResponseWriter, r *http.Request) {
		var req CreateRequest
		if decode(w, r, &req) {
			reply(w, struct{}{}, d.Create(&req))
		}
	})
	h.mux.HandleFunc("/VolumeDriver.Remove", func(w http.ResponseWriter, r *http.Request) {
		var req RemoveRequest
		if decode(w, r, &req) {
			reply(w, struct{}{}, d.Remove(&req))
		}
	})
	h.mux.HandleFunc("/VolumeDriver.Mount", func(w http.ResponseWriter, r *http.Request) {
		var req MountRequest
		if decode(w, r, &req) {
			res, err := d.Mount(&req)
			reply(w, res, err)
		}
	})
	h.mux.HandleFunc("/VolumeDriver.Unmount", func(w http.ResponseWriter, r *http.Request) {
		var req UnmountRequest
		if decode(w, r, &req) {
			reply(w, struct{}{}, d.Unmount(&req))
		}
	})
	h.mux.HandleFunc("/VolumeDriver.Path", func(w http.ResponseWriter, r *http.Request) {
		var req PathRequest
		if decode(w, r, &req) {
			res, err := d.Path(&req)
			reply(w, res, err)
		}
	})
	h.mux.HandleFunc("/VolumeDriver.Get", func(w http.ResponseWriter, r *http.Request) {
		var req GetRequest
		if decode(w, r, &req) {
			res, err := d.Get(&req)
			reply(w, res, err)
		}
	})
	h.mux.HandleFunc("/VolumeDriver.List", func(w http.ResponseWriter, r *http.Request) {
		res, err := d.List()
		reply(w, res, err)
	})
	h.mux.HandleFunc("/VolumeDriver.Capabilities", func(w http.ResponseWriter, r *http.Request) {
		reply(w, d.Capabilities(), nil)
	})
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// decode reads the JSON request; on failure it answers 400 and returns false.
func decode(w http.ResponseWriter, r *http.Request, req any) bool {
	if err := json.NewDecoder(r.Body).Decode(req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

// reply answers res, or {"Err": ...} with status 500 if err is not nil.
func reply(w http.ResponseWriter, res any, err error) {
	w.Header().Set("Content-Type", ContentType)
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		res = &ErrorResponse{Err: err.Error()}
	}
	json.NewEncoder(w).Encode(res)
}
