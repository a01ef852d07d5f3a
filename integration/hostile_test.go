package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostile_NamesTreesAndSwapsThroughDocker: through cached and delegated
// mounts in a container: file names with a newline, invalid UTF-8 and 255
// bytes, a 300-level tree, and a directory swapped for symlinks to a canary
// directory outside the source (and to /) between writes and the exit
// flush. After the container exits, the host has everything as written,
// links as links, and the canary is untouched.
func TestHostile_NamesTreesAndSwapsThroughDocker(t *testing.T) {
	d := need(t)
	long := strings.Repeat("n", 255)
	for _, state := range []string{"cached", "delegated"} {
		t.Run(state, func(t *testing.T) {
			s := newLocalSource(t)
			canary := filepath.Join(env.outside, slug(t))
			if err := os.MkdirAll(canary, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(canary, "f"), []byte("canary"), 0o644); err != nil {
				t.Fatal(err)
			}
			vol := createVolume(t, d, s.Source, state)
			script := `set -e
cd /data
printf 'nl' > "$(printf 'new\nline')"
printf 'bad' > "$(printf 'bad\377\376utf8')"
printf 'long' > ` + long + `
p=.; for i in $(seq 300); do p=$p/d; done; mkdir -p $p && printf 'leaf' > $p/leaf
i=0; while [ $i -lt 30 ]; do
  rm -rf sw; mkdir sw; printf "round $i" > sw/f; printf x > sw/new
  rm -rf gone$((i % 3)); mv sw gone$((i % 3)); ln -s ` + canary + ` sw; [ $((i % 2)) = 0 ] && { rm sw; ln -s / sw; }
  i=$((i+1))
done
rm sw; ln -s ` + canary + ` sw
`
			runOnce(t, d, vol, script)
			mustHost(t, s.host("new\nline"), "nl")
			mustHost(t, s.host("bad\xff\xfeutf8"), "bad")
			mustHost(t, s.host(long), "long")
			mustHost(t, s.host(strings.Repeat("d/", 300)+"leaf"), "leaf")
			if tgt, err := os.Readlink(s.host("sw")); err != nil || tgt != canary {
				t.Errorf("host sw: %q %v; want a symlink to %s", tgt, err, canary)
			}
			mustHost(t, s.host("gone2/f"), "round 29")
			ents, _ := os.ReadDir(canary)
			if len(ents) != 1 {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Errorf("the canary outside the source holds %q: something was written outside", names)
			}
			mustHost(t, filepath.Join(canary, "f"), "canary")
		})
	}
}
