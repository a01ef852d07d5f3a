package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// call POSTs body to path as Docker does and decodes the JSON answer.
func call(t *testing.T, srv *httptest.Server, path string, body any, out any) int {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", ContentType)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != ContentType {
		t.Errorf("%s: Content-Type %q", path, ct)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s: decode %q: %v", path, raw, err)
		}
	}
	return resp.StatusCode
}

func TestProtocolRoundTrip(t *testing.T) {
	op := newFakeOpener()
	d := newTestDriver(t, t.TempDir(), op)
	srv := httptest.NewServer(NewHandler(&Protocol{Driver: d}))
	defer srv.Close()

	var act struct{ Implements []string }
	if code := call(t, srv, "/Plugin.Activate", nil, &act); code != 200 || len(act.Implements) != 1 || act.Implements[0] != "VolumeDriver" {
		t.Fatalf("activate: %d %+v", code, act)
	}
	var caps CapabilitiesResponse
	if call(t, srv, "/VolumeDriver.Capabilities", nil, &caps); caps.Capabilities.Scope != "local" {
		t.Fatalf("capabilities %+v", caps)
	}

	// Bad options: HTTP 500 with the message in Err, as Docker expects.
	var e ErrorResponse
	code := call(t, srv, "/VolumeDriver.Create", map[string]any{"Name": "v", "Opts": map[string]string{"source": "/data/p", "speed": "max"}}, &e)
	if code != http.StatusInternalServerError || !strings.Contains(e.Err, `unknown option "speed"`) || !strings.Contains(e.Err, "valid options are") {
		t.Fatalf("create with bad opts: %d %+v", code, e)
	}
	e = ErrorResponse{}
	code = call(t, srv, "/VolumeDriver.Create", map[string]any{"Name": "v"}, &e)
	if code != http.StatusInternalServerError || !strings.Contains(e.Err, `option "source" is required`) {
		t.Fatalf("create without opts: %d %+v", code, e)
	}

	e = ErrorResponse{}
	if code := call(t, srv, "/VolumeDriver.Create", CreateRequest{Name: "v", Options: map[string]string{"source": "/data/p", "state": "delegated"}}, &e); code != 200 || e.Err != "" {
		t.Fatalf("create: %d %+v", code, e)
	}
	var mr MountResponse
	if code := call(t, srv, "/VolumeDriver.Mount", MountRequest{Name: "v", ID: "c1"}, &mr); code != 200 || mr.Mountpoint == "" {
		t.Fatalf("mount: %d %+v", code, mr)
	}
	var pr PathResponse
	if call(t, srv, "/VolumeDriver.Path", PathRequest{Name: "v"}, &pr); pr.Mountpoint != mr.Mountpoint {
		t.Fatalf("path %+v", pr)
	}
	var gr GetResponse
	if code := call(t, srv, "/VolumeDriver.Get", GetRequest{Name: "v"}, &gr); code != 200 || gr.Volume == nil {
		t.Fatalf("get: %d %+v", code, gr)
	}
	if _, err := time.Parse(time.RFC3339, gr.Volume.CreatedAt); err != nil {
		t.Errorf("CreatedAt %q: %v", gr.Volume.CreatedAt, err)
	}
	if gr.Volume.Name != "v" || gr.Volume.Mountpoint != mr.Mountpoint || gr.Volume.Status["state"] != "delegated" || gr.Volume.Status["mounts"] != 1.0 {
		t.Errorf("get %+v", gr.Volume)
	}
	var lr ListResponse
	if call(t, srv, "/VolumeDriver.List", nil, &lr); len(lr.Volumes) != 1 || lr.Volumes[0].Name != "v" {
		t.Fatalf("list %+v", lr)
	}

	e = ErrorResponse{}
	if code := call(t, srv, "/VolumeDriver.Remove", RemoveRequest{Name: "v"}, &e); code != 500 || !strings.Contains(e.Err, "in use by 1 mounts") {
		t.Fatalf("remove in use: %d %+v", code, e)
	}
	e = ErrorResponse{}
	if code := call(t, srv, "/VolumeDriver.Get", GetRequest{Name: "nope"}, &e); code != 500 || !strings.Contains(e.Err, "no such volume") {
		t.Fatalf("get unknown: %d %+v", code, e)
	}

	// A failed writeback reaches Docker as the Unmount's error.
	op.mu.Lock()
	op.flush = func(ctx context.Context, key string) error { return errors.New("not written back: /data/p/x") }
	op.mu.Unlock()
	e = ErrorResponse{}
	if code := call(t, srv, "/VolumeDriver.Unmount", UnmountRequest{Name: "v", ID: "c1"}, &e); code != 500 || !strings.Contains(e.Err, "/data/p/x") {
		t.Fatalf("unmount: %d %+v", code, e)
	}
	e = ErrorResponse{}
	if code := call(t, srv, "/VolumeDriver.Remove", RemoveRequest{Name: "v"}, &e); code != 200 || e.Err != "" {
		t.Fatalf("remove: %d %+v", code, e)
	}

	// Malformed JSON: 400, as go-plugins-helpers answers.
	resp, err := srv.Client().Post(srv.URL+"/VolumeDriver.Create", ContentType, strings.NewReader("{"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("malformed request: %d", resp.StatusCode)
	}
}
