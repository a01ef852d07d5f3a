package control

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
)

// DefaultDockerHost is Docker's socket when DOCKER_HOST is not set.
const DefaultDockerHost = "unix:///var/run/docker.sock"

// DockerContainers asks the Docker daemon at $DOCKER_HOST (a unix socket)
// which running containers use which volume: volume name -> container
// names, sorted. Docker's mount IDs, which the plugin sees, do not name
// containers; this does.
func DockerContainers(ctx context.Context, getenv func(string) string) (map[string][]string, error) {
	host := getenv("DOCKER_HOST")
	if host == "" {
		host = DefaultDockerHost
	}
	path, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		return nil, fmt.Errorf("DOCKER_HOST=%s: only unix:// sockets are asked for containers", host)
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/containers/json", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("docker: GET /containers/json: %s", resp.Status)
	}
	var cs []struct {
		ID     string `json:"Id"`
		Names  []string
		Mounts []struct {
			Type string
			Name string
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&cs); err != nil {
		return nil, fmt.Errorf("docker: GET /containers/json: %w", err)
	}
	out := map[string][]string{}
	for _, c := range cs {
		name := c.ID
		if len(name) > 12 {
			name = name[:12]
		}
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		for _, m := range c.Mounts {
			if m.Type == "volume" && m.Name != "" && !slices.Contains(out[m.Name], name) {
				out[m.Name] = append(out[m.Name], name)
			}
		}
	}
	for _, names := range out {
		slices.Sort(names)
	}
	return out, nil
}
