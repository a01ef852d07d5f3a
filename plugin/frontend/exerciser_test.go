package frontend

// Integrity exerciser (issue 5): a seeded random mix of file operations
// (write, pwrite, append, truncate, ftruncate, mmap write + msync, rename,
// rename over an existing file, hard link, unlink, mkdir, rmdir, symlink,
// chmod, fsync, fsync of a directory) run through a cached and a delegated
// mount against an in-memory model. After every batch of operations the
// mount's view is compared with the model; the host folder is compared byte
// for byte (content, size, mode, link count, symlink target) after every
// batch for cached (rule C3: write-through) and after each flush for
// delegated (rule D4), and a fsynced file must be on the host at once (D2).
//
// Short run in `make test`; longer ones with
//
//	BINDSTATE_EXERCISE_OPS=20000 BINDSTATE_EXERCISE_SEED=42 go test -run TestExerciser ./plugin/frontend/
//
// (make test-long). A failure prints the seed: rerun with it to reproduce.
// TestExerciserCrash_D4_C3 (crash_test.go) runs the same operations with the
// plugin killed and started again between batches, or in the middle of a
// change of names or modes (changeDuringCrash).
// A failure that depends on timing may not come back with its seed: loop a
// built test binary (go test -c) to catch it again, and add
// BINDSTATE_TEST_FUSE_DEBUG=1 to log every FUSE request of the run.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
)

type exInode struct {
	data []byte
	mode uint32 // permission bits
}

// exModel is what the tree must look like.
type exModel struct {
	files map[string]*exInode // regular files; hard links share an inode
	links map[string]string   // symlink -> target
	dirs  map[string]uint32   // directory -> permission bits ("" is the root)
}

func newExModel() *exModel {
	return &exModel{files: map[string]*exInode{}, links: map[string]string{}, dirs: map[string]uint32{"": 0o755}}
}

func (m *exModel) exists(p string) bool {
	_, f := m.files[p]
	_, l := m.links[p]
	_, d := m.dirs[p]
	return f || l || d
}

func (m *exModel) nlink(ino *exInode) int {
	n := 0
	for _, i := range m.files {
		if i == ino {
			n++
		}
	}
	return n
}

func (m *exModel) children(dir string) []string {
	var out []string
	add := func(p string) {
		if p != "" && path.Dir(p) == dirOrDot(dir) {
			out = append(out, p)
		}
	}
	for p := range m.files {
		add(p)
	}
	for p := range m.links {
		add(p)
	}
	for p := range m.dirs {
		add(p)
	}
	sort.Strings(out)
	return out
}

func dirOrDot(d string) string {
	if d == "" {
		return "."
	}
	return d
}

// moveTree renames every entry at or below from to below to.
func (m *exModel) moveTree(from, to string) {
	re := func(p string) (string, bool) {
		if p == from {
			return to, true
		}
		if strings.HasPrefix(p, from+"/") {
			return to + p[len(from):], true
		}
		return "", false
	}
	files, links, dirs := map[string]*exInode{}, map[string]string{}, map[string]uint32{}
	for p, v := range m.files {
		if q, ok := re(p); ok {
			files[q] = v
		} else {
			files[p] = v
		}
	}
	for p, v := range m.links {
		if q, ok := re(p); ok {
			links[q] = v
		} else {
			links[p] = v
		}
	}
	for p, v := range m.dirs {
		if q, ok := re(p); ok {
			dirs[q] = v
		} else {
			dirs[p] = v
		}
	}
	m.files, m.links, m.dirs = files, links, dirs
}

// clone is a copy of m that shares nothing with it, and the map from each
// of m's inodes to its copy (names linked to one inode stay linked).
func (m *exModel) clone() (*exModel, map[*exInode]*exInode) {
	c := &exModel{files: map[string]*exInode{}, links: maps.Clone(m.links), dirs: maps.Clone(m.dirs)}
	remap := map[*exInode]*exInode{}
	for p, ino := range m.files {
		if remap[ino] == nil {
			remap[ino] = &exInode{data: slices.Clone(ino.data), mode: ino.mode}
		}
		c.files[p] = remap[ino]
	}
	return c, remap
}

// describe is the model's tree in the form treeDesc gives for a real one.
func (m *exModel) describe() map[string]string {
	out := map[string]string{}
	for p, ino := range m.files {
		out[p] = fmt.Sprintf("file %04o nlink=%d size=%d sha=%x", ino.mode, m.nlink(ino), len(ino.data), sha256.Sum256(ino.data))
	}
	for p, tgt := range m.links {
		out[p] = "symlink -> " + tgt
	}
	for p, mode := range m.dirs {
		if p != "" {
			out[p] = fmt.Sprintf("dir %04o", mode)
		}
	}
	return out
}

// treeDesc describes a real tree: type, permission bits, link count, size
// and content hash of files, symlink targets.
func treeDesc(root string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if int64(len(b)) != st.Size {
				return fmt.Errorf("%s: stat size %d, read %d bytes", rel, st.Size, len(b))
			}
			out[rel] = fmt.Sprintf("file %04o nlink=%d size=%d sha=%x", st.Mode&07777, st.Nlink, len(b), sha256.Sum256(b))
		case unix.S_IFLNK:
			tgt, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "symlink -> " + tgt
		case unix.S_IFDIR:
			out[rel] = fmt.Sprintf("dir %04o", st.Mode&07777)
		default:
			out[rel] = fmt.Sprintf("other %o", st.Mode)
		}
		return nil
	})
	return out, err
}

// diffDesc lists the differences between want and got, at most max.
func diffDesc(want, got map[string]string, max int) []string {
	var out []string
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	var sorted []string
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		w, wok := want[k]
		g, gok := got[k]
		switch {
		case !gok:
			out = append(out, fmt.Sprintf("%q missing (want %s)", k, w))
		case !wok:
			out = append(out, fmt.Sprintf("%q unexpected (%s)", k, g))
		case w != g:
			out = append(out, fmt.Sprintf("%q: want %s, got %s", k, w, g))
		}
		if len(out) >= max {
			break
		}
	}
	return out
}

// exerciser drives one mount.
type exerciser struct {
	t     *testing.T
	r     *rig
	st    consistency.State
	m     *exModel
	rnd   *rand.Rand
	seed  int64
	umask uint32
	step  int
	trail []string // the last operations, shown on failure
	focus []string // paths whose earlier operations are shown on failure
	count map[string]int

	// Crashes only (runExerciser's crash): the paths of files a crash found
	// written back in place (linked, or of 256 KiB or more), and whether a
	// conflict copy of one was removed through the mount since the last
	// flush (see tolerateInPlaceCopies).
	inPlace map[string]bool
	tidied  bool
	// Delegated crashes only: files a process had open for writing when
	// the plugin was killed, which it keeps writing (leftWriterAppend).
	leftWriters []exLeftWriter
}

// exLeftWriter is a descriptor opened through a mount whose plugin was killed
// since: a passthrough writer's writes still reach the store file, and
// must reach the host too (store/leftwriters.go).
type exLeftWriter struct {
	f    *os.File
	path string   // its name when opened, for the log
	ino  *exInode // what it writes, whatever its names now
}

func dirOf(p string) string {
	if d := path.Dir(p); d != "." {
		return d
	}
	return ""
}

var exNames = []string{"a", "b", "c", "d", "e", "f", "g", "h"}

func (x *exerciser) fail(format string, args ...any) {
	x.t.Helper()
	start := 0
	if len(x.trail) > 25 {
		start = len(x.trail) - 25
	}
	var focus []string
	for _, l := range x.trail[:start] {
		for _, f := range x.focus {
			if strings.Contains(l, " "+f) || strings.Contains(l, path.Base(f)) {
				focus = append(focus, l)
				break
			}
		}
	}
	x.t.Fatalf("exerciser %s seed %d step %d: %s\nearlier operations naming %q:\n  %s\nlast operations:\n  %s\nrerun: BINDSTATE_EXERCISE_SEED=%d BINDSTATE_EXERCISE_OPS=%d go test -run 'TestExerciser' ./plugin/frontend/",
		x.st, x.seed, x.step, fmt.Sprintf(format, args...), x.focus, strings.Join(focus, "\n  "), strings.Join(x.trail[start:], "\n  "), x.seed, exOps())
}

func (x *exerciser) log(format string, args ...any) {
	x.trail = append(x.trail, fmt.Sprintf("%d: ", x.step)+fmt.Sprintf(format, args...))
}

func (x *exerciser) must(err error, what string) {
	x.t.Helper()
	if err != nil {
		x.fail("%s: %v", what, err)
	}
}

func (x *exerciser) pickDir() string {
	var ds []string
	for d := range x.m.dirs {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	return ds[x.rnd.Intn(len(ds))]
}

func (x *exerciser) pickFile() (string, bool) {
	var fs []string
	for p := range x.m.files {
		fs = append(fs, p)
	}
	if len(fs) == 0 {
		return "", false
	}
	sort.Strings(fs)
	return fs[x.rnd.Intn(len(fs))], true
}

// newPath is dir/name with a name from a small pool, so that names collide
// often; the bool says whether nothing is there yet.
func (x *exerciser) newPath() (string, bool) {
	dir := x.pickDir()
	if strings.Count(dir, "/") >= 3 {
		dir = ""
	}
	p := path.Join(dir, exNames[x.rnd.Intn(len(exNames))])
	return p, !x.m.exists(p)
}

func (x *exerciser) data(n int) []byte {
	b := make([]byte, n)
	// compressible-looking but position-dependent bytes, with random runs
	c := byte(x.rnd.Intn(256))
	for i := range b {
		if x.rnd.Intn(16) == 0 {
			c = byte(x.rnd.Intn(256))
		}
		b[i] = c
	}
	return b
}

func (x *exerciser) size() int {
	switch x.rnd.Intn(10) {
	case 0:
		return 0
	case 1:
		return 64*1024 + x.rnd.Intn(200*1024) // beyond one FUSE write
	default:
		return 1 + x.rnd.Intn(5000)
	}
}

func setData(ino *exInode, off int, b []byte) {
	if end := off + len(b); end > len(ino.data) {
		ino.data = append(ino.data, make([]byte, end-len(ino.data))...)
	}
	copy(ino.data[off:], b)
}

func truncData(ino *exInode, n int) {
	if n <= len(ino.data) {
		ino.data = ino.data[:n]
		return
	}
	ino.data = append(ino.data, make([]byte, n-len(ino.data))...)
}

// op runs one random operation on the mount and the model.
func (x *exerciser) op() {
	mp := x.r.mntPath
	if len(x.leftWriters) > 0 && x.rnd.Intn(10) == 0 {
		x.leftWriterAppend()
		return
	}
	k := x.rnd.Intn(100)
	switch {
	case k < 32: // create or overwrite a whole file; pwrite at an offset (maybe beyond the end: a hole); append
		kind := "write"
		switch {
		case k >= 26:
			kind = "append"
		case k >= 14:
			kind = "pwrite"
		}
		c, ok := x.pickWrite(kind)
		if !ok {
			return
		}
		x.log("%s", c.what)
		x.must(c.do(), c.what)
		c.apply(x.m)
		x.count[c.kind]++
	case k < 38: // truncate (path) or ftruncate (open file)
		p, ok := x.pickFile()
		if !ok {
			return
		}
		ino := x.m.files[p]
		n := x.rnd.Intn(len(ino.data) + 10000)
		if x.rnd.Intn(2) == 0 {
			x.log("truncate %s to %d", p, n)
			x.must(os.Truncate(mp(p), int64(n)), "truncate "+p)
			x.count["truncate"]++
		} else {
			x.log("ftruncate %s to %d", p, n)
			f, err := os.OpenFile(mp(p), os.O_RDWR, 0)
			x.must(err, "open "+p)
			x.must(f.Truncate(int64(n)), "ftruncate "+p)
			x.must(f.Close(), "close "+p)
			x.count["ftruncate"]++
		}
		truncData(ino, n)
	case k < 44: // mmap write + msync(MS_SYNC)
		p, ok := x.pickFile()
		if !ok {
			return
		}
		ino := x.m.files[p]
		if len(ino.data) == 0 {
			return
		}
		off := x.rnd.Intn(len(ino.data))
		n := 1 + x.rnd.Intn(len(ino.data)-off)
		if n > 20000 {
			n = 20000
		}
		b := x.data(n)
		x.log("mmap write %s at %d (%d bytes)", p, off, n)
		// In another process: a page fault on a mapping of this process's
		// own FUSE mount would stall the Go runtime that serves it.
		x.must(mmapWriteIn(mp(p), len(ino.data), off, b), "mmap write "+p)
		setData(ino, off, b)
		x.count["mmap"]++
	case k < 91: // a change of names or modes: one syscall, made whole or not at all
		c, ok := x.pickChange(k, false)
		if !ok {
			return
		}
		x.log("%s", c.what)
		x.must(c.do(), c.what)
		c.apply(x.m)
		x.count[c.kind]++
	case k < 96: // fsync a file: its data is on the host at once (D2, C3)
		p, ok := x.pickFile()
		if !ok {
			return
		}
		x.log("fsync %s", p)
		f, err := os.OpenFile(mp(p), os.O_RDONLY, 0)
		x.must(err, "open "+p)
		x.must(f.Sync(), "fsync "+p)
		x.must(f.Close(), "close "+p)
		want := x.m.files[p].data
		got, err := os.ReadFile(filepath.Join(x.r.hostNow(x.t), p))
		if err != nil {
			x.fail("D2: after fsync of %s the host has no such file: %v", p, err)
		}
		if !bytes.Equal(got, want) {
			x.fail("D2: after fsync of %s the host has %d bytes (sha %x), want %d (sha %x)", p, len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
		}
		x.count["fsync"]++
	default: // fsync a directory: its entries are on the host (D2)
		dir := x.pickDir()
		x.log("fsync dir %q", dir)
		f, err := os.Open(mp(dir))
		x.must(err, "open dir "+dir)
		x.must(f.Sync(), "fsync dir "+dir)
		x.must(f.Close(), "close dir "+dir)
		ents, err := os.ReadDir(filepath.Join(x.r.hostNow(x.t), dir))
		if err != nil {
			x.fail("D2: after fsync of directory %q the host cannot list it: %v", dir, err)
		}
		var got []string
		for _, e := range ents {
			if p := path.Join(dir, e.Name()); !x.inPlaceCopy(p) {
				got = append(got, p)
			}
		}
		sort.Strings(got)
		if want := x.m.children(dir); strings.Join(got, "\n") != strings.Join(want, "\n") {
			x.fail("D2: after fsync of directory %q the host lists %q, want %q", dir, got, want)
		}
		x.count["fsync-dir"]++
	}
}

// exChange is one of the exerciser's changes of names or modes: one
// syscall through the mount (do), made whole or not at all, and what it
// does to a model (apply).
type exChange struct {
	what  string // for the log and errors
	kind  string // its count
	do    func() error
	apply func(m *exModel)
	write *exWrite // a write's, which a kill may cut in part (settle)
}

// exWrite is what a write change writes: b into the file at path, at off
// (-1: at its end), or as its whole content (created if need be).
type exWrite struct {
	path  string
	off   int
	b     []byte
	whole bool
}

// writeWhole makes b the content of the file p in m, a new file if there
// is none (with the mode a create through the mount gives).
func (x *exerciser) writeWhole(m *exModel, p string, b []byte) {
	if ino, ok := m.files[p]; ok {
		ino.data = b
		return
	}
	m.files[p] = &exInode{data: b, mode: 0o666 &^ x.umask}
}

// pickWrite draws a write of kind "write" (create or overwrite a whole
// file: O_CREAT|O_TRUNC), "pwrite" (into an existing file at an offset,
// maybe beyond its end: a hole) or "append"; each opens the file, writes
// and closes it. A write that returned is made, whatever the close says
// after it (a kill between the two: the close's error comes as an
// afterWrite).
func (x *exerciser) pickWrite(kind string) (exChange, bool) {
	mp := x.r.mntPath
	if kind == "write" {
		p, free := x.newPath()
		if !free && x.m.files[p] == nil {
			return exChange{}, false // a directory or symlink there
		}
		b := x.data(x.size())
		return exChange{
			what: fmt.Sprintf("write %s (%d bytes)", p, len(b)), kind: kind,
			do:    func() error { return writeAndClose(mp(p), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, b, -1) },
			apply: func(m *exModel) { x.writeWhole(m, p, b) },
			write: &exWrite{path: p, b: b, whole: true},
		}, true
	}
	p, ok := x.pickFile()
	if !ok {
		return exChange{}, false
	}
	if kind == "append" {
		b := x.data(1 + x.rnd.Intn(3000))
		return exChange{
			what: fmt.Sprintf("append %s at %d (%d bytes)", p, len(x.m.files[p].data), len(b)), kind: kind,
			do: func() error { return writeAndClose(mp(p), os.O_WRONLY|os.O_APPEND, b, -1) },
			apply: func(m *exModel) {
				ino := m.files[p]
				ino.data = append(ino.data, b...)
			},
			write: &exWrite{path: p, off: -1, b: b},
		}, true
	}
	ino := x.m.files[p]
	off := x.rnd.Intn(len(ino.data) + 1 + x.rnd.Intn(3)*70000)
	b := x.data(1 + x.rnd.Intn(9000))
	return exChange{
		what: fmt.Sprintf("pwrite %s at %d (%d bytes)", p, off, len(b)), kind: kind,
		do:    func() error { return writeAndClose(mp(p), os.O_WRONLY, b, int64(off)) },
		apply: func(m *exModel) { setData(m.files[p], off, b) },
		write: &exWrite{path: p, off: off, b: b},
	}, true
}

// writtenInPart is the model x.m with the first part of c's write that
// the file at root holds (a kill cut the write between its requests to
// the share), and how many of its bytes that is; false if it holds none
// or all of it. A whole file's write may also be cut between its open,
// which made the file empty, and its write: then it holds none.
func (x *exerciser) writtenInPart(c exChange, root string) (*exModel, map[*exInode]*exInode, int, bool) {
	w := c.write
	if w != nil && w.whole {
		got, err := os.ReadFile(filepath.Join(root, w.path))
		if err != nil || len(got) >= len(w.b) || !bytes.Equal(got, w.b[:len(got)]) {
			return nil, nil, 0, false
		}
		m, remap := x.m.clone()
		x.writeWhole(m, w.path, w.b[:len(got)])
		return m, remap, len(got), true
	}
	if w == nil || x.m.files[w.path] == nil {
		return nil, nil, 0, false
	}
	ino := x.m.files[w.path]
	got, err := os.ReadFile(filepath.Join(root, w.path))
	if err != nil {
		return nil, nil, 0, false
	}
	off := w.off
	if off < 0 {
		off = len(ino.data)
	}
	k := 0
	for k < len(w.b) && off+k < len(got) && got[off+k] == w.b[k] {
		k++
	}
	if k == 0 || k == len(w.b) {
		return nil, nil, 0, false
	}
	m, remap := x.m.clone()
	setData(m.files[w.path], off, w.b[:k])
	return m, remap, k, true
}

// afterWrite is the error of a close after a write that returned: the
// write is made.
type afterWrite struct{ err error }

func (e *afterWrite) Error() string { return "close after the write: " + e.err.Error() }
func (e *afterWrite) Unwrap() error { return e.err }

// writeAndClose opens path with flags, writes b at off (-1: where the
// open file is, the end for O_APPEND) and closes it.
func writeAndClose(path string, flags int, b []byte, off int64) error {
	f, err := os.OpenFile(path, flags, 0o666)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	if off < 0 {
		_, err = f.Write(b)
	} else {
		_, err = f.WriteAt(b, off)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("write: %w", err)
	}
	if err := f.Close(); err != nil {
		return &afterWrite{err}
	}
	return nil
}

// pickTruncate draws a truncate by path of a file: one syscall, as the
// changes of pickChange (op makes it with ftruncate too, which is three).
func (x *exerciser) pickTruncate() (exChange, bool) {
	p, ok := x.pickFile()
	if !ok {
		return exChange{}, false
	}
	n := x.rnd.Intn(len(x.m.files[p].data) + 10000)
	return exChange{
		what: fmt.Sprintf("truncate %s to %d", p, n), kind: "truncate",
		do:    func() error { return os.Truncate(x.r.mntPath(p), int64(n)) },
		apply: func(m *exModel) { truncData(m.files[p], n) },
	}, true
}

// pickChange draws a change for op's k (44 to 90), or false if the draw
// makes none. uncertain: for a kill during it (killDuringChange), so not
// the rmdir of a full directory, which op checks fails instead.
func (x *exerciser) pickChange(k int, uncertain bool) (exChange, bool) {
	mp := x.r.mntPath
	switch {
	case k < 54: // rename a file or symlink, maybe over an existing file
		var srcs []string
		for p := range x.m.files {
			srcs = append(srcs, p)
		}
		for p := range x.m.links {
			srcs = append(srcs, p)
		}
		if len(srcs) == 0 {
			return exChange{}, false
		}
		sort.Strings(srcs)
		from := srcs[x.rnd.Intn(len(srcs))]
		to, free := x.newPath()
		if to == from {
			return exChange{}, false
		}
		if !free {
			// over an existing file or symlink only, and not a link of the same inode
			_, isF := x.m.files[to]
			_, isL := x.m.links[to]
			if !isF && !isL {
				return exChange{}, false
			}
			if isF && x.m.files[from] != nil && x.m.files[from] == x.m.files[to] {
				return exChange{}, false
			}
		}
		kind := "rename"
		if !free {
			kind = "rename-over"
		}
		return exChange{
			what: fmt.Sprintf("rename %s -> %s (over existing: %v)", from, to, !free), kind: kind,
			do: func() error { return os.Rename(mp(from), mp(to)) },
			apply: func(m *exModel) {
				delete(m.files, to)
				delete(m.links, to)
				if ino, ok := m.files[from]; ok {
					m.files[to] = ino
					delete(m.files, from)
				} else {
					m.links[to] = m.links[from]
					delete(m.links, from)
				}
			},
		}, true
	case k < 58: // rename a directory to a new name (not below itself)
		dir := x.pickDir()
		if dir == "" {
			return exChange{}, false
		}
		to, free := x.newPath()
		if !free || to == dir || strings.HasPrefix(to, dir+"/") {
			return exChange{}, false
		}
		return exChange{
			what: fmt.Sprintf("rename dir %s -> %s", dir, to), kind: "rename-dir",
			do:    func() error { return os.Rename(mp(dir), mp(to)) },
			apply: func(m *exModel) { m.moveTree(dir, to) },
		}, true
	case k < 64: // hard link
		p, ok := x.pickFile()
		if !ok {
			return exChange{}, false
		}
		to, free := x.newPath()
		if !free {
			return exChange{}, false
		}
		return exChange{
			what: fmt.Sprintf("link %s -> %s", p, to), kind: "link",
			do:    func() error { return os.Link(mp(p), mp(to)) },
			apply: func(m *exModel) { m.files[to] = m.files[p] },
		}, true
	case k < 72: // unlink a file or symlink
		var ps []string
		for p := range x.m.files {
			ps = append(ps, p)
		}
		for p := range x.m.links {
			ps = append(ps, p)
		}
		if len(ps) == 0 {
			return exChange{}, false
		}
		sort.Strings(ps)
		p := ps[x.rnd.Intn(len(ps))]
		return exChange{
			what: "unlink " + p, kind: "unlink",
			do: func() error { return os.Remove(mp(p)) },
			apply: func(m *exModel) {
				delete(m.files, p)
				delete(m.links, p)
			},
		}, true
	case k < 78: // mkdir
		p, free := x.newPath()
		if !free {
			return exChange{}, false
		}
		return exChange{
			what: "mkdir " + p, kind: "mkdir",
			do:    func() error { return os.Mkdir(mp(p), 0o777) },
			apply: func(m *exModel) { m.dirs[p] = 0o777 &^ x.umask },
		}, true
	case k < 82: // rmdir (an empty one), or fail on a full one
		dir := x.pickDir()
		if dir == "" {
			return exChange{}, false
		}
		if len(x.m.children(dir)) > 0 {
			if uncertain {
				return exChange{}, false
			}
			x.log("rmdir %s (not empty: must fail)", dir)
			if err := unix.Rmdir(mp(dir)); err != unix.ENOTEMPTY && err != unix.EEXIST {
				x.fail("rmdir of non-empty %s: %v, want ENOTEMPTY", dir, err)
			}
			return exChange{}, false
		}
		return exChange{
			what: "rmdir " + dir, kind: "rmdir",
			do:    func() error { return unix.Rmdir(mp(dir)) },
			apply: func(m *exModel) { delete(m.dirs, dir) },
		}, true
	case k < 86: // symlink, hostile targets included
		p, free := x.newPath()
		if !free {
			return exChange{}, false
		}
		targets := []string{"a", "../b", "/etc/passwd", "../../../../../../", "/", "d/e/f", "nonexistent", strings.Repeat("x/", 40)}
		tgt := targets[x.rnd.Intn(len(targets))]
		return exChange{
			what: fmt.Sprintf("symlink %s -> %s", p, tgt), kind: "symlink",
			do:    func() error { return os.Symlink(tgt, mp(p)) },
			apply: func(m *exModel) { m.links[p] = tgt },
		}, true
	default: // chmod a file or directory
		modes := []uint32{0o600, 0o644, 0o755, 0o640, 0o700, 0o444}
		mode := modes[x.rnd.Intn(len(modes))]
		if x.rnd.Intn(3) == 0 {
			dir := x.pickDir()
			if dir == "" {
				return exChange{}, false
			}
			mode |= 0o700 // keep it usable
			return exChange{
				what: fmt.Sprintf("chmod dir %s %04o", dir, mode), kind: "chmod",
				do:    func() error { return os.Chmod(mp(dir), os.FileMode(mode)) },
				apply: func(m *exModel) { m.dirs[dir] = mode },
			}, true
		}
		p, ok := x.pickFile()
		if !ok {
			return exChange{}, false
		}
		return exChange{
			what: fmt.Sprintf("chmod %s %04o", p, mode), kind: "chmod",
			do:    func() error { return os.Chmod(mp(p), os.FileMode(mode)) },
			apply: func(m *exModel) { m.files[p].mode = mode },
		}, true
	}
}

func (x *exerciser) compare(what, root string) {
	x.t.Helper()
	got, err := treeDesc(root)
	if err != nil {
		x.fail("%s: walk: %v", what, err)
	}
	x.tolerateInPlaceCopies(got, root)
	if d := diffDesc(x.m.describe(), got, math.MaxInt); len(d) > 0 {
		if len(d) > 10 {
			d = d[:10]
		}
		for _, l := range d {
			if i := strings.Index(l[1:], `"`); i > 0 {
				p := l[1 : i+1]
				x.focus = append(x.focus, p)
				if j := strings.Index(p, ".bindstate-conflict-"); j > 0 {
					x.focus = append(x.focus, p[:j]) // the path it was kept aside from
				}
			}
		}
		// Nothing is allowed, not even an extra conflict copy: the model
		// makes no host edit, so one is the container's own file taken
		// for a host edit (rule D7).
		x.fail("%s differs from the model:\n  %s", what, strings.Join(d, "\n  "))
	}
}

// tolerateInPlaceCopies takes out of got (a tree of root) the conflict
// copies a crash may leave of a file written back in place: a plugin
// killed in the middle of that leaves a host file that is neither the old
// version nor the new, and the next run keeps it aside as a host edit
// (store/killedput.go: a known limit, nothing lost). One seen through the
// mount is removed there, as a user would, so that the model's directory
// is empty again when it is. Any other conflict copy still fails compare.
func (x *exerciser) tolerateInPlaceCopies(got map[string]string, root string) {
	for p := range got {
		if !x.inPlaceCopy(p) {
			continue
		}
		delete(got, p)
		if root != x.r.mnt {
			continue
		}
		x.log("conflict copy %s of a file written back in place when the plugin was killed: removed", p)
		x.must(os.Remove(filepath.Join(root, p)), "remove "+p)
		x.count["in-place conflict copy"]++
		x.tidied = true
	}
}

// tidyAfterCrash removes, through the mount, the conflict copies the
// restarted plugin made on the host of files written back in place
// (tolerateInPlaceCopies), once the refresh has brought each into the
// mount, as a user would: left for a later compare, one could reach the
// mount only after it.
func (x *exerciser) tidyAfterCrash() {
	host := x.r.hostNow(x.t)
	got, err := treeDesc(host)
	for tries := 0; err != nil && tries < 50; tries++ {
		time.Sleep(20 * time.Millisecond) // a writeback changed the tree under the walk
		got, err = treeDesc(host)
	}
	if err != nil {
		x.fail("after a crash: walk the host: %v", err)
	}
	for p := range got {
		if !x.inPlaceCopy(p) {
			continue
		}
		// Not every one reaches the mount soon (a delegated directory
		// with changes of its own waits); one that does not is left to
		// the compares, which tolerate it wherever a rename takes it.
		deadline := time.Now().Add(3 * time.Second)
		for {
			if _, err := os.Lstat(x.r.mntPath(p)); err == nil {
				break
			}
			if time.Now().After(deadline) {
				x.log("conflict copy %s of a file written back in place when the plugin was killed: not on the mount yet", p)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if time.Now().After(deadline) {
			continue
		}
		x.log("conflict copy %s of a file written back in place when the plugin was killed: removed", p)
		x.must(os.Remove(x.r.mntPath(p)), "remove "+p)
		x.count["in-place conflict copy"]++
		x.tidied = true
	}
}

// inPlaceCopy says whether p is a conflict copy tolerateInPlaceCopies
// tolerates: of a file noted in x.inPlace, by its name (a directory renamed
// since moves the copy with it). (The D2 check of a directory's fsync
// lists the host itself: a copy made at a restart may reach the mount, to
// be removed there, only after the compare that follows the restart.)
func (x *exerciser) inPlaceCopy(p string) bool {
	i := strings.Index(p, ".bindstate-conflict-")
	if i < 0 {
		return false
	}
	if x.inPlace[p[:i]] {
		return true
	}
	for q := range x.inPlace {
		if path.Base(q) == path.Base(p[:i]) {
			return true
		}
	}
	return false
}

// noteInPlace adds the files the writeback may be writing in place now to
// x.inPlace, before a crash.
func (x *exerciser) noteInPlace() {
	if x.inPlace == nil {
		x.inPlace = map[string]bool{}
	}
	for p, ino := range x.m.files {
		if x.m.nlink(ino) > 1 || len(ino.data) >= 256<<10 {
			x.inPlace[p] = true
		}
	}
}

// keepWriter opens a file for appending through the mount and keeps it
// open across the crash that follows (delegated): the writer a container's
// log or database is.
func (x *exerciser) keepWriter() {
	p, ok := x.pickFile()
	if !ok {
		return
	}
	f, err := os.OpenFile(x.r.mntPath(p), os.O_WRONLY|os.O_APPEND, 0)
	x.must(err, "open "+p+" to keep writing across the crash")
	x.log("keep %s open for appending across the crash", p)
	x.leftWriters = append(x.leftWriters, exLeftWriter{f: f, path: p, ino: x.m.files[p]})
}

// leftWriterAppend appends through a descriptor the killed plugin served. A
// passthrough writer's write succeeds, and lands in its file whatever its
// names are now (none: it is lost with the file, as on any file system);
// one the plugin served itself fails (ENOTCONN: its connection is gone),
// and the descriptor is closed.
func (x *exerciser) leftWriterAppend() {
	i := x.rnd.Intn(len(x.leftWriters))
	o := x.leftWriters[i]
	b := x.data(1 + x.rnd.Intn(3000))
	if _, err := o.f.Write(b); err != nil {
		x.log("append to %s (opened before a kill) failed: %v; closed", o.path, err)
		x.closeLeftWriter(i)
		x.count["left writer append failed"]++
		return
	}
	x.log("append to %s (opened before a kill): %d bytes", o.path, len(b))
	o.ino.data = append(o.ino.data, b...)
	x.count["left writer append"]++
	// The mount shows it within a look of the store's
	// (store/leftwriters.go), as a cached mount shows a host change
	// within its check: wait for it, under a name the file has now.
	for p, ino := range x.m.files {
		if ino != o.ino {
			continue
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			st, err := os.Lstat(x.r.mntPath(p))
			if err == nil && st.Size() == int64(len(o.ino.data)) {
				break
			}
			if time.Now().After(deadline) {
				x.focus = append(x.focus, p, o.path)
				x.fail("the mount never showed the append to %s (opened before a kill) at %s: %v, %v", o.path, p, st, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		break
	}
}

func (x *exerciser) closeLeftWriter(i int) {
	x.leftWriters[i].f.Close() // its error is the dead plugin's, not news
	x.leftWriters = append(x.leftWriters[:i], x.leftWriters[i+1:]...)
}

// exCrashDuringChanges: BINDSTATE_EXERCISE_CRASH=change makes every crash
// one during a change (changeDuringCrash), to look at those alone.
func exCrashDuringChanges() bool { return os.Getenv("BINDSTATE_EXERCISE_CRASH") == "change" }

func exOps() int {
	if v, err := strconv.Atoi(os.Getenv("BINDSTATE_EXERCISE_OPS")); err == nil && v > 0 {
		return v
	}
	return 250 // about 15-20 s per state under -race (make test)
}

func exSeed(t *testing.T) int64 {
	if v, err := strconv.ParseInt(os.Getenv("BINDSTATE_EXERCISE_SEED"), 10, 64); err == nil {
		return v
	}
	return time.Now().UnixNano()
}

// TestExerciser_C3_D2_D4: the randomized exerciser on a cached and a
// delegated mount (rules C3, D2, D4).
//
// It runs over an sshfs share too (forExerciseSources). Those subtests'
// first runs (2026-11-27) failed 10 runs in 10 at 1,000 operations; after
// the fixes they found, 0 in 40.
//
// A conflict copy fails it too (rule D7: the model makes no host edit).
// Until 2026-11-27 one that was all that differed only skipped the test,
// as a known bug: in delegated over sshfs, 10 runs of 1,000 operations in
// 20 (a linked file's other name, stale on the share; see
// TestC3_D6_D7_ALinkedFilesOtherNameIsStaleOnAShareWhileOtherFilesAreWritten);
// after its fix 0 in 19, and 0 in 29 over a local folder.
func TestExerciser_C3_D2_D4(t *testing.T) {
	forExerciseSources(t, func(t *testing.T, st consistency.State, overShare bool, seed int64) {
		var r *rig
		if overShare {
			r = newShareRig(t, st, exRescan())
		} else {
			r = newRescanRig(t, st, exRescan(), nil)
		}
		runExerciser(t, r, st, seed, nil)
	})
}

// forExerciseSources runs test in each store state over a local folder and
// over an sshfs share (subtests "cached", "delegated", "cached,sshfs",
// "delegated,sshfs"; BINDSTATE_EXERCISE_SHARE=0 leaves the share out),
// with the run's seed. Over the share the plugin writes through its own
// files of the share, keeps no xattrs, and sees the share's caches.
func forExerciseSources(t *testing.T, test func(t *testing.T, st consistency.State, overShare bool, seed int64)) {
	for _, overShare := range []bool{false, true} {
		for _, st := range storeStates {
			name := st.String()
			if overShare {
				name += ",sshfs"
			}
			t.Run(name, func(t *testing.T) {
				if overShare && os.Getenv("BINDSTATE_EXERCISE_SHARE") == "0" {
					t.Skip("over an sshfs share: left out (BINDSTATE_EXERCISE_SHARE=0)")
				}
				seed := exSeed(t)
				t.Logf("seed %d, %d operations (BINDSTATE_EXERCISE_SEED, BINDSTATE_EXERCISE_OPS)", seed, exOps())
				test(t, st, overShare, seed)
			})
		}
	}
}

// exRescan is the host refresh's interval during a run: it runs meanwhile
// (every 50ms; it raced with write-through changes before 37e6d14, see
// TestC3_RefreshRacesWithWriteThrough). BINDSTATE_EXERCISE_RESCAN=1h
// leaves it out.
func exRescan() string {
	if rescan := os.Getenv("BINDSTATE_EXERCISE_RESCAN"); rescan != "" {
		return rescan
	}
	return "50ms"
}

// exCrasher kills the plugin serving the exerciser's mount and starts it
// again; each leaves r serving again.
type exCrasher interface {
	// crash kills it after pause, or, if duringFlush, pause after asking
	// it to flush.
	crash(pause time.Duration, duringFlush bool) error
	// crashDuring runs op on the caller's goroutine and kills the plugin
	// pause after op began; it starts it again once op has returned.
	crashDuring(pause time.Duration, op func()) error
}

// runExerciser runs the exerciser's operations on r, comparing as the
// package comment says. crash, if given, kills the plugin at random batch
// ends (one in three): a third of them after a random pause of up to
// 1.5 s, so that they land at any point of the background work, a third
// up to 30 ms into a flush, in the middle of writing back, and a third up
// to 3 ms into a change of names or modes the exerciser makes then, in the
// middle of the container's own request (changeDuringCrash).
func runExerciser(t *testing.T, r *rig, st consistency.State, seed int64, crash exCrasher) {
	old := unix.Umask(0o022)
	unix.Umask(old)
	x := &exerciser{t: t, r: r, st: st, m: newExModel(), rnd: rand.New(rand.NewSource(seed)), seed: seed, umask: uint32(old), count: map[string]int{}}
	const batch = 25
	start := time.Now()
	// The short run (no BINDSTATE_EXERCISE_OPS) also stops after
	// 20 s per state: the op sequence is the seed's, only cut.
	budget := time.Duration(1<<62 - 1)
	if os.Getenv("BINDSTATE_EXERCISE_OPS") == "" {
		budget = 20 * time.Second
	}
	for x.step = 0; x.step < exOps() && time.Since(start) < budget; x.step++ {
		x.op()
		if (x.step+1)%batch != 0 {
			continue
		}
		// Drawn from the seed's source only when crashing, so that a seed
		// gives the same operations as before without crashes.
		// At the second batch end at the latest, so that a short run
		// (10 batches) always has one: without, 1 run in 60 had none.
		if crash != nil && (x.rnd.Intn(3) == 0 || (x.count["crash"] == 0 && x.step+1 == 2*batch)) {
			how := x.rnd.Intn(3)
			if exCrashDuringChanges() {
				how = 2
			}
			if st == consistency.Delegated && x.rnd.Intn(2) == 0 {
				x.keepWriter()
			}
			x.noteInPlace()
			switch how {
			case 0:
				pause := time.Duration(x.rnd.Intn(1500)) * time.Millisecond
				x.log("plugin killed %v after the last operation, started again", pause)
				x.must(crash.crash(pause, false), "plugin crash and restart")
			case 1:
				pause := time.Duration(x.rnd.Intn(30_000)) * time.Microsecond
				x.log("plugin killed %v into a flush, started again", pause)
				x.must(crash.crash(pause, true), "plugin crash and restart")
			default:
				// Mostly within the first 300 µs: a change through a local
				// folder takes about that, and the kill must come before
				// the plugin's answer to cut it.
				pause := time.Duration(x.rnd.Intn(300)) * time.Microsecond
				if x.rnd.Intn(4) == 0 {
					pause = time.Duration(x.rnd.Intn(3000)) * time.Microsecond
				}
				x.changeDuringCrash(crash, pause)
			}
			x.tidyAfterCrash()
			x.count["crash"]++
		}
		if len(x.leftWriters) > 0 && x.rnd.Intn(4) == 0 {
			x.log("close %s (opened before a kill)", x.leftWriters[0].path)
			x.closeLeftWriter(0)
		}
		if st == consistency.Cached {
			x.compare("host (cached: write-through)", r.hostNow(t))
		}
		x.compare("mount", r.mnt)
		if st == consistency.Cached {
		} else if x.rnd.Intn(4) == 0 {
			x.log("flush")
			x.must(r.front.Flush(bg()), "flush")
			x.tidied = false
			x.compare("host after flush", r.hostNow(t))
		}
	}
	for len(x.leftWriters) > 0 {
		x.log("close %s (opened before a kill)", x.leftWriters[0].path)
		x.closeLeftWriter(0)
	}
	x.log("final flush")
	x.must(r.front.Flush(bg()), "flush")
	x.compare("mount at the end", r.mnt)
	if x.tidied {
		x.must(r.front.Flush(bg()), "flush of the removed conflict copies")
	}
	x.compare("host after the final flush", r.hostNow(t))
	if s := r.front.Status(); s.Dirty != 0 || s.Failed != 0 || s.Conflicts > x.count["in-place conflict copy"] {
		x.fail("status after the final flush: %+v; want nothing dirty, failed or in conflict (but for %d conflict copies after crashes, of files written back in place)",
			s, x.count["in-place conflict copy"])
	}
	// A kept writer's appends are passthrough writes, which the kill does
	// not stop: had every one failed, the run would have tested nothing of
	// left writers (store/leftwriters.go) while passing.
	if n := x.count["left writer append failed"]; n > 0 && x.count["left writer append"] == 0 {
		x.fail("all %d appends through descriptors kept across kills failed: no writer outlived the plugin, so nothing of left writers was tested", n)
	}
	t.Logf("%d operations in %v: %v", x.step, time.Since(start).Round(time.Millisecond), x.count)
}

// changeDuringCrash makes a change of names or modes (pickChange), a
// truncate (pickTruncate), or a write of a whole file, a pwrite or an
// append (pickWrite), with the plugin killed pause after it began, and
// started again. Its syscall either returned before the kill (then the
// change holds, as any other must; a write that returned holds whatever
// its close said) or failed with the connection's end (ENOTCONN,
// ECONNABORTED, EIO): then the change may have been made or not, but
// whole. The restarted mount and the host (delegated: after a flush) must
// come to show the same one of the two trees, the model before it or the
// one after it; a half-made change (a rename made in the store and not the
// journal, the host and not the store, a write on the host and not in the
// store's copy) shows as neither, or as the two disagreeing. A write cut
// may also be made in part, the first part of it, where mount and host
// agree (writtenInPart): what a cut write leaves on any file system.
func (x *exerciser) changeDuringCrash(crash exCrasher, pause time.Duration) {
	var c exChange
	ok := false
	for tries := 0; !ok && tries < 20; tries++ {
		switch n := x.rnd.Intn(26); {
		case n < 3:
			c, ok = x.pickTruncate()
		case n < 6:
			c, ok = x.pickWrite("pwrite")
		case n < 8:
			c, ok = x.pickWrite("append")
		case n < 10:
			c, ok = x.pickWrite("write")
		default:
			c, ok = x.pickChange(44+x.rnd.Intn(47), true)
		}
	}
	if !ok {
		x.log("plugin killed %v after the last operation (no change to make), started again", pause)
		x.must(crash.crash(pause, false), "plugin crash and restart")
		return
	}
	after, remap := x.m.clone()
	c.apply(after)
	x.log("%s, the plugin killed %v into it, started again", c.what, pause)
	var err error
	x.must(crash.crashDuring(pause, func() { err = c.do() }), "plugin crash and restart")
	x.count["kill during a "+c.kind]++
	var aw *afterWrite
	switch {
	case err == nil || errors.As(err, &aw):
		x.log("%s: made before the kill (%v)", c.what, err)
		x.adopt(after, remap)
		x.count[c.kind]++
		x.count["change made before a kill"]++
	case errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.ECONNABORTED) || errors.Is(err, unix.EIO):
		// EIO too: a chmod of a directory got it once, with the kill 40 µs
		// into it (the test did not find which of the kernel's paths
		// gives it).
		x.count["change cut by a kill"]++
		x.settle(c, after, remap)
	default:
		x.fail("%s with the plugin killed during it: %v; want it made, or the connection's end (ENOTCONN, ECONNABORTED, EIO)", c.what, err)
	}
}

// adopt makes after (a clone of x.m and its remap) the model. A kept
// writer's inode follows to its copy; one no name has any more stays.
func (x *exerciser) adopt(after *exModel, remap map[*exInode]*exInode) {
	x.m = after
	for i, w := range x.leftWriters {
		if ino := remap[w.ino]; ino != nil {
			x.leftWriters[i].ino = ino
		}
	}
}

// settle waits (at most 20 s: a cached mount takes a host change in at
// its next check) for the mount and the host to show the same one of the
// model before c and after, and makes that the model.
func (x *exerciser) settle(c exChange, after *exModel, remap map[*exInode]*exInode) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		if x.st == consistency.Delegated {
			x.must(x.r.front.Flush(bg()), "flush after "+c.what)
			x.tidied = false
		}
		host := x.r.hostNow(x.t)
		// A walk may meet the refresh changing the tree under it: then
		// it is not settled yet.
		gotMnt, merr := treeDesc(x.r.mnt)
		gotHost, herr := treeDesc(host)
		if err := errors.Join(merr, herr); err != nil {
			if time.Now().After(deadline) {
				x.fail("after %s cut by a kill: walk the mount and the host: %v", c.what, err)
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		x.tolerateInPlaceCopies(gotMnt, x.r.mnt)
		x.tolerateInPlaceCopies(gotHost, host)
		before, made := x.m.describe(), after.describe()
		same := func(want, got map[string]string) bool { return len(diffDesc(want, got, 1)) == 0 }
		switch {
		case same(before, gotMnt) && same(before, gotHost):
			x.log("%s: cut by the kill, not made", c.what)
			x.count["change cut by a kill, not made"]++
			return
		case same(made, gotMnt) && same(made, gotHost):
			x.log("%s: cut by the kill, made", c.what)
			x.count["change cut by a kill, made"]++
			x.adopt(after, remap)
			return
		}
		if part, partRemap, k, ok := x.writtenInPart(c, host); ok && same(part.describe(), gotMnt) && same(part.describe(), gotHost) {
			x.log("%s: cut by the kill, made in part (%d bytes of %d)", c.what, k, len(c.write.b))
			x.count["write cut by a kill, made in part"]++
			x.adopt(part, partRemap)
			return
		}
		if len(x.leftWriters) > 0 && time.Until(deadline) < 15*time.Second {
			// A host change to a file with several names waits while
			// anything is queued for writeback (store.Busy), and a kept
			// writer's path is held queued until it is closed.
			for len(x.leftWriters) > 0 {
				x.log("close %s (opened before a kill), for the host's change to a linked file", x.leftWriters[0].path)
				x.closeLeftWriter(0)
			}
		}
		if time.Now().After(deadline) {
			x.fail("%s, cut by a kill, is neither made nor not made 20 s after:\n"+
				"mount against the tree before it:\n  %s\nmount against the tree after it:\n  %s\n"+
				"host against the tree before it:\n  %s\nhost against the tree after it:\n  %s",
				c.what, strings.Join(diffDesc(before, gotMnt, 5), "\n  "), strings.Join(diffDesc(made, gotMnt, 5), "\n  "),
				strings.Join(diffDesc(before, gotHost, 5), "\n  "), strings.Join(diffDesc(made, gotHost, 5), "\n  "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mmapWriteIn runs TestExerciserMmapHelper in a child process: map the first
// size bytes of file shared, copy b in at off, msync(MS_SYNC), unmap.
func mmapWriteIn(file string, size, off int, b []byte) error {
	cmd := exec.Command(os.Args[0], "-test.run=^TestExerciserMmapHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), "BINDSTATE_MMAP_HELPER="+file, fmt.Sprintf("BINDSTATE_MMAP_AT=%d,%d", size, off))
	cmd.Stdin = bytes.NewReader(b)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// TestExerciserMmapHelper is the child of mmapWriteIn; it does nothing in a
// normal run.
func TestExerciserMmapHelper(t *testing.T) {
	file := os.Getenv("BINDSTATE_MMAP_HELPER")
	if file == "" {
		t.Skip("only as the exerciser's child process")
	}
	var size, off int
	if _, err := fmt.Sscanf(os.Getenv("BINDSTATE_MMAP_AT"), "%d,%d", &size, &off); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(os.Stdin)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mm, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	copy(mm[off:], b)
	if err := unix.Msync(mm, unix.MS_SYNC); err != nil {
		t.Fatalf("msync: %v", err)
	}
	if err := unix.Munmap(mm); err != nil {
		t.Fatal(err)
	}
}

// bg is a context bounded like rig.flush's.
func bg() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	_ = cancel // released when it expires; tests are short-lived
	return ctx
}
