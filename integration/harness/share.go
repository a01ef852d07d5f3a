package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Share is a real slow share made by contrib/share.sh: HostDir (local disk,
// where "host-side" edits are made, as a user on the Mac side would) served
// by a private sshd on 127.0.0.1 and mounted with sshfs at Mount (what the
// plugin is given as the source).
type Share struct {
	Script  string // contrib/share.sh
	HostDir string
	Mount   string
	Env     []string // added to share.sh's environment (SSHD=..., SSHFS=...)
}

// StartShare runs share.sh up hostDir mount; env is added to the script's
// environment (e.g. SSHD=/usr/sbin/sshd, SSHFS=/usr/bin/sshfs).
func StartShare(script, hostDir, mount string, env ...string) (*Share, error) {
	s := &Share{Script: script, HostDir: hostDir, Mount: mount, Env: env}
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		return nil, err
	}
	if _, err := s.run("up", hostDir, mount); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Share) run(args ...string) (string, error) {
	cmd := exec.Command(s.Script, args...)
	cmd.Env = append(os.Environ(), s.Env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", filepath.Base(s.Script), strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Down unmounts the share and stops its sshd.
func (s *Share) Down() error { _, err := s.run("down", s.Mount); return err }

// StopSSHD kills the sshd and its sessions: the share vanishes.
func (s *Share) StopSSHD() error { _, err := s.run("stop-sshd", s.Mount); return err }

// StartSSHD starts the sshd again (same port and keys); sshfs reconnects.
func (s *Share) StartSSHD() error { _, err := s.run("start-sshd", s.Mount); return err }

// Vars is what share.sh env says of the share (SHARE_PORT, SHARE_STATE,
// SHARE_RTT_MS, ...), by name, unquoted: share.sh prints each value with
// bash's printf %q, so that a shell can eval it.
func (s *Share) Vars() (map[string]string, error) {
	out, err := s.run("env", s.Mount)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		if vars[k], err = shellUnquote(v); err != nil {
			return nil, fmt.Errorf("share.sh env: %s: %w", k, err)
		}
	}
	return vars, nil
}

// shellUnquote undoes bash's printf %q for what share.sh prints: two
// single quotes for an empty value, a backslash before each other
// character the shell would take apart. The $'...' form (control characters) is refused, not guessed.
func shellUnquote(q string) (string, error) {
	if q == "''" {
		return "", nil
	}
	if strings.HasPrefix(q, "$'") {
		return "", fmt.Errorf("%s: a value with control characters (bash's $'...' quoting) is not read here", q)
	}
	var b strings.Builder
	for i := 0; i < len(q); i++ {
		if q[i] == '\\' {
			if i++; i == len(q) {
				return "", fmt.Errorf("%s: ends in a lone backslash", q)
			}
		}
		b.WriteByte(q[i])
	}
	return b.String(), nil
}

// Host is the path of rel in the backing directory (a host-side path).
func (s *Share) Host(rel string) string { return filepath.Join(s.HostDir, rel) }

// Source is the path of rel through the share (what the plugin serves).
func (s *Share) Source(rel string) string { return filepath.Join(s.Mount, rel) }
