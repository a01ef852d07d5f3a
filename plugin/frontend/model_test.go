package frontend

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// Rule D2, against a model: a file used as a database uses its files
// (written in places, truncated, fsynced and fdatasynced, reopened
// write-only and read-write, renamed while open, read), at random from a
// fixed seed, in a delegated volume; after every fsync the host file is
// what the container wrote, byte for byte, and so after the last close and
// a flush. The writeback takes several ways here (whole copies, the ranges
// log, passthrough writers, holds that stay on a renamed file's old name),
// and the syncer sweeps every 2 ms meanwhile. It found two holes the rule
// tests had not: an O_RDWR open in the gap of a passthrough writer's
// release (TestD2_C3_AnOpenRacingAPassthroughWritersReleaseIsServedAsOne)
// and a file renamed while open for writing
// (TestD2_AFileRenamedWhileOpenForWritingIsWrittenBackAtEachFsync).
func TestD2_ADatabaseFileAgainstAModel(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			runDatabaseModel(t, seed, 300)
		})
	}
}

func runDatabaseModel(t *testing.T, seed int64, steps int) {
	r := newRescanRig(t, consistency.Delegated, "2ms", nil)
	rnd := rand.New(rand.NewSource(seed))
	model := bytes.Repeat([]byte("0123456789abcdef"), 40<<10) // 640 KiB
	name := "db"
	if err := os.WriteFile(r.mntPath(name), model, 0o644); err != nil {
		t.Fatal(err)
	}
	var f *os.File
	defer func() { f.Close() }() // an open file keeps the mount busy
	var ops []string
	did := func(format string, args ...any) { ops = append(ops, fmt.Sprintf(format, args...)) }
	open := func() {
		flags := []int{os.O_RDWR, os.O_WRONLY}[rnd.Intn(2)]
		var err error
		if f, err = os.OpenFile(r.mntPath(name), flags, 0); err != nil {
			t.Fatal(err)
		}
		did("open %#x", flags)
	}
	// sameOnHost fails t unless the host's file is the model.
	sameOnHost := func(when string) {
		got, err := os.ReadFile(r.hostPath(name))
		if err == nil && bytes.Equal(got, model) {
			return
		}
		k := 0
		for k < len(got) && k < len(model) && got[k] == model[k] {
			k++
		}
		t.Fatalf("%s: the host's %s differs from what the container wrote at byte %d (host %d bytes, container %d, %v); the last operations: %v",
			when, name, k, len(got), len(model), err, ops[max(0, len(ops)-12):])
	}
	open()
	for step := range steps {
		switch op := rnd.Intn(20); {
		case op < 10:
			off, n := rnd.Intn(len(model)+1000), 1+rnd.Intn(20000)
			p := bytes.Repeat([]byte{byte('A' + rnd.Intn(26))}, n)
			if _, err := f.WriteAt(p, int64(off)); err != nil {
				t.Fatal(err)
			}
			if off+n > len(model) {
				model = append(model, make([]byte, off+n-len(model))...)
			}
			copy(model[off:], p)
			did("write %d+%d", off, n)
		case op < 11:
			size := rnd.Intn(len(model) + 5000)
			if err := f.Truncate(int64(size)); err != nil {
				t.Fatal(err)
			}
			if size > len(model) {
				model = append(model, make([]byte, size-len(model))...)
			}
			model = model[:size]
			did("truncate %d", size)
		case op < 16:
			sync, syncName := f.Sync, "fsync"
			if rnd.Intn(2) == 0 {
				sync, syncName = func() error { return unix.Fdatasync(int(f.Fd())) }, "fdatasync"
			}
			if err := sync(); err != nil {
				t.Fatalf("%s: %v", syncName, err)
			}
			did("%s", syncName)
			sameOnHost(fmt.Sprintf("step %d, after an %s", step, syncName))
		case op < 18:
			f.Close()
			did("close")
			open()
		case op < 19:
			to := fmt.Sprintf("db%d", step)
			if err := os.Rename(r.mntPath(name), r.mntPath(to)); err != nil {
				t.Fatal(err)
			}
			name = to
			did("rename to %s", to)
		default:
			if got, err := os.ReadFile(r.mntPath(name)); err != nil || !bytes.Equal(got, model) {
				t.Fatalf("step %d: the container reads %d bytes (%v), it wrote %d", step, len(got), err, len(model))
			}
			did("read")
		}
	}
	f.Close()
	r.flush(t)
	sameOnHost("after the last close and a flush")
}
