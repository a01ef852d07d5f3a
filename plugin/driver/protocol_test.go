package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// protoServer serves p with go-plugins-helpers' handler on a unix socket in
// a temp dir, as the plugin does (NewHandler(p).Serve(ln)).
type protoServer struct {
	ln     net.Listener
	client *http.Client
	URL    string
	done   chan error
}

func serveProtocol(t *testing.T, p *Protocol) *protoServer {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "plugin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := &protoServer{ln: ln, URL: "http://plugin", done: make(chan error, 1)}
	s.client = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	go func() { s.done <- NewHandler(p).Serve(ln) }()
	t.Cleanup(func() {
		s.client.CloseIdleConnections()
		ln.Close()
		<-s.done
	})
	return s
}

func (s *protoServer) Client() *http.Client { return s.client }

// call POSTs body to path as Docker does and decodes the JSON answer.
func call(t *testing.T, srv *protoServer, path string, body any, out any) int {
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
	srv := serveProtocol(t, &Protocol{Driver: d})

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

	// Every request served is counted, failures by kind (for /metrics).
	c := d.Counters()
	if c.Requests["create"] != 3 || c.Requests["mount"] != 1 || c.Requests["unmount"] != 1 || c.Requests["capabilities"] != 1 ||
		c.Errors["create/invalid parameter"] != 2 || c.Errors["get/not found"] != 1 || c.Errors["unmount/system"] != 1 {
		t.Fatalf("counters %+v", c)
	}
}

// Drain waits for requests in flight and refuses later ones, even on a
// connection that stays open (the helpers' server cannot be shut down).
func TestProtocolDrain(t *testing.T) {
	op := newFakeOpener()
	d := newTestDriver(t, t.TempDir(), op)
	p := &Protocol{Driver: d}
	srv := serveProtocol(t, p)
	if code := call(t, srv, "/VolumeDriver.Create", CreateRequest{Name: "v", Options: map[string]string{"source": "/data/p", "state": "delegated"}}, nil); code != 200 {
		t.Fatalf("create: %d", code)
	}
	if code := call(t, srv, "/VolumeDriver.Mount", MountRequest{Name: "v", ID: "c1"}, nil); code != 200 {
		t.Fatalf("mount: %d", code)
	}
	// An Unmount whose flush blocks until released.
	entered, release := make(chan struct{}), make(chan struct{})
	op.mu.Lock()
	op.flush = func(ctx context.Context, key string) error {
		close(entered)
		<-release
		return nil
	}
	op.mu.Unlock()
	var wg sync.WaitGroup
	var unmountCode int
	wg.Go(func() { unmountCode = call(t, srv, "/VolumeDriver.Unmount", UnmountRequest{Name: "v", ID: "c1"}, nil) })
	<-entered

	drained := make(chan error, 1)
	go func() { drained <- p.Drain(context.Background()) }()
	select {
	case err := <-drained:
		t.Fatalf("Drain returned while an Unmount was running: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	// Refused while draining, with Docker's error format.
	for !func() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.draining }() {
		time.Sleep(time.Millisecond)
	}
	var e ErrorResponse
	if code := call(t, srv, "/VolumeDriver.List", nil, &e); code != 500 || !strings.Contains(e.Err, "stopping") {
		t.Fatalf("list while draining: %d %+v", code, e)
	}
	close(release)
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if unmountCode != 200 {
		t.Fatalf("unmount in flight: %d", unmountCode)
	}

	// A bounded Drain gives up with the context's error.
	p2 := &Protocol{Driver: d}
	if err := p2.enter("list"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p2.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("bounded drain: %v", err)
	}
	p2.running.Done()
}
