package fsys

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// BenchmarkOpenReadClose is a hot open, read and close of a file the
// kernel has cached, on a writable mount: an OPEN and a RELEASE per file,
// what a hot go list over a writable volume pays (make bench W1 hot).
func BenchmarkOpenReadClose(b *testing.B) {
	for _, state := range []consistency.State{consistency.Cached, consistency.Delegated} {
		b.Run(state.String(), func(b *testing.B) {
			st := newStoreOver(b, state, func(host string) {
				for i := range 100 {
					if err := os.WriteFile(filepath.Join(host, fmt.Sprintf("f%d", i)), []byte("package f\n"), 0o644); err != nil {
						b.Fatal(err)
					}
				}
			})
			m, err := New(st, filepath.Join(b.TempDir(), "mnt"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { m.Unmount() })
			buf := make([]byte, 64)
			i := 0
			for b.Loop() {
				f, err := os.Open(filepath.Join(m.Mountpoint(), fmt.Sprintf("f%d", i%100)))
				if err != nil {
					b.Fatal(err)
				}
				f.Read(buf)
				f.Close()
				i++
			}
		})
	}
}
