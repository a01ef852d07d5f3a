package harness

import (
	"os"
	"path/filepath"
	"testing"
)

// Vars gives the values share.sh env prints, as they are: share.sh quotes
// each with bash's printf %q (an empty one as two single quotes, a path
// with a space as a\ b), and a caller comparing a port or opening a path
// wants the value.
// A stand-in for share.sh prints through the same printf.
func TestVarsGivesTheValuesShareEnvQuotes(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "share.sh")
	body := `#!/bin/bash
[[ $1 == env ]] || exit 2
printf 'SHARE_STATE=%q\nSHARE_SSHD_PID=%q\nSHARE_PORT=%q\nSHARE_NAME=%q\n' "$2/state dir" "" 2222 "it's"
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	s := &Share{Script: script, Mount: "/mnt/a share"}
	vars, err := s.Vars()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"SHARE_STATE":    "/mnt/a share/state dir",
		"SHARE_SSHD_PID": "",
		"SHARE_PORT":     "2222",
		"SHARE_NAME":     "it's",
	}
	for k, v := range want {
		if vars[k] != v {
			t.Errorf("%s = %q, want %q", k, vars[k], v)
		}
	}
}

func TestShellUnquoteRefusesWhatItCannotRead(t *testing.T) {
	for _, q := range []string{`$'a\nb'`, `a\`} {
		if v, err := shellUnquote(q); err == nil {
			t.Errorf("shellUnquote(%q) = %q, want an error", q, v)
		}
	}
}
