package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/driver"
)

// Client talks to the control socket.
type Client struct {
	Socket string
	hc     *http.Client
}

// NewClient returns a client of the control socket at path.
func NewClient(path string) *Client {
	return &Client{Socket: path, hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dialUnix(ctx, path) },
	}}}
}

// maxSunPath is the longest path a unix socket address holds (sun_path,
// less its NUL).
const maxSunPath = len(unix.RawSockaddrUnix{}.Path) - 1

// dialUnix connects to the unix socket at path, even one whose path is too
// long for a socket address (as a managed plugin's is from the host:
// /run/docker/plugins/<64 hex digits>/...): then through its directory,
// opened, as /proc/self/fd/N/NAME.
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	if len(path) <= maxSunPath {
		return d.DialContext(ctx, "unix", path)
	}
	fd, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: filepath.Dir(path), Err: err}
	}
	defer unix.Close(fd)
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d/%s", fd, filepath.Base(path)))
}

// APIError is an error answered by the plugin.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return e.Message }

// IsNotFound reports whether err is the plugin saying "no such volume".
func IsNotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values) (*http.Response, error) {
	u := "http://bindstate" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bindstate control socket %s: %w", c.Socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		var eb errorBody
		raw, _ := io.ReadAll(resp.Body)
		if json.Unmarshal(raw, &eb) != nil || eb.Error == "" {
			eb.Error = fmt.Sprintf("%s %s: %s: %s", method, path, resp.Status, raw)
		}
		return nil, &APIError{Status: resp.StatusCode, Message: eb.Error}
	}
	return resp, nil
}

func (c *Client) getJSON(ctx context.Context, path string, q url.Values, out any) error {
	resp, err := c.do(ctx, http.MethodGet, path, q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("GET %s: bad answer: %w", path, err)
	}
	return nil
}

// Volumes returns every volume's status.
func (c *Client) Volumes(ctx context.Context) ([]driver.VolumeStatus, error) {
	var out []driver.VolumeStatus
	return out, c.getJSON(ctx, "/v1/volumes", nil, &out)
}

// Volume returns one volume's status.
func (c *Client) Volume(ctx context.Context, name string) (driver.VolumeStatus, error) {
	var out driver.VolumeStatus
	return out, c.getJSON(ctx, "/v1/volumes/"+url.PathEscape(name), nil, &out)
}

// Logs returns the records kept with a sequence number above after,
// optionally only those naming volume.
func (c *Client) Logs(ctx context.Context, after uint64, volume string) ([]LogRecord, error) {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatUint(after, 10))
	}
	if volume != "" {
		q.Set("volume", volume)
	}
	var out []LogRecord
	return out, c.getJSON(ctx, "/v1/logs", q, &out)
}

// Metrics returns the Prometheus text.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	resp, err := c.do(ctx, http.MethodGet, "/metrics", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// Flush flushes volume ("" for all) and returns the last event (Done set),
// calling progress with every event before it. timeout > 0 bounds it on the
// plugin's side too.
func (c *Client) Flush(ctx context.Context, volume string, timeout time.Duration, progress func(FlushEvent)) (FlushEvent, error) {
	q := url.Values{}
	if volume != "" {
		q.Set("volume", volume)
	}
	if timeout > 0 {
		q.Set("timeout", timeout.String())
	}
	resp, err := c.do(ctx, http.MethodPost, "/v1/flush", q)
	if err != nil {
		return FlushEvent{}, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var ev FlushEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return FlushEvent{}, fmt.Errorf("flush: bad answer %q: %w", sc.Bytes(), err)
		}
		if ev.Done {
			return ev, nil
		}
		if progress != nil {
			progress(ev)
		}
	}
	if err := sc.Err(); err != nil {
		return FlushEvent{}, fmt.Errorf("flush: %w", err)
	}
	return FlushEvent{}, errors.New("flush: the plugin hung up before the flush was over (did it stop?)")
}
