package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// A Put takes the host parent directory to be there and looks at it only
// when the Put fails for want of it. A parent the host removed since an
// earlier writeback is written back again, with the file (rule D4: the host
// gets the container's tree).
func TestD4_PutWritesBackAParentTheHostRemoved(t *testing.T) {
	s := openTestStore(t, consistency.Delegated, func(string) {})
	ctx := context.Background()
	if err := s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	me := Owner{Uid: os.Getuid(), Gid: os.Getgid()}
	for _, d := range []string{"d", "d/e"} {
		if err := s.Mkdir(ctx, d, 0o755, me); err != nil {
			t.Fatal(err)
		}
	}
	writeAsContainer(t, s, "d/e/f", "first")
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	host := s.Host().Path()
	if err := os.RemoveAll(filepath.Join(host, "d")); err != nil {
		t.Fatal(err)
	}
	writeAsContainer(t, s, "d/e/f", "second")
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("flush after the host removed the file's directories: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(host, "d/e/f")); err != nil || string(b) != "second" {
		t.Fatalf("host d/e/f = %q (%v), want %q", b, err, "second")
	}
}
