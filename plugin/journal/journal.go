// Package journal is the crash-safe record of which store paths hold changes
// that the host has not seen yet, and of what the writeback needs to tell a
// host edit from its own (rule D7) where the store entry cannot carry it
// in an xattr: the tombstones, what the host had at a path whose store
// entry is gone (removed or renamed away, not yet written back) or at a
// symlink (the kernel allows user xattrs only on files and directories);
// and the writing marks, what a symlink's writeback is putting in place on
// the host, until it records that as the base. Without them a restarted
// plugin would take every such path for one the host changed, and keep a
// needless conflict copy.
//
// It is an append-only file of small checksummed records ("dirty P",
// "clean P", "tomb P = V", "untomb P", "writing P = V", "written P"). A record is appended (write(2), no fsync) BEFORE the change it
// covers is made in the store, so a plugin crash at any point leaves every
// change a container saw succeed either on the host or named here. Sync
// fsyncs it (for fsync from the container and at shutdown). Open replays the
// file and drops a torn final record. When most records are obsolete the file
// is rewritten (write temp, fsync, rename) to hold only the dirty set.
//
// File format (all integers little endian):
//
//	header  "bsjrnl\x00\x03"                       8 bytes: magic and version
//	record  len uint32 | kind byte | body [len]byte | crc uint32
//
// kind is 'D' (dirty), 'C' (clean), 'U' (untomb) or 'X' (written), whose
// body is a path, or 'T' (tomb) or 'W' (writing), whose body is a path, a
// NUL and the value. crc is CRC32C (Castagnoli) of every
// byte of the record before it, length included, so a damaged length is
// caught too. Paths are binary (anything but NUL, newlines included), which
// is why records are length-prefixed rather than text lines. Replay stops at
// the first record that is short (torn by a crash mid-write) or fails its
// check, and truncates the file there: records after a damaged one cannot be
// framed reliably, and appending behind garbage would make them unreadable
// too.
//
// An older file (version 1: no tombstones; version 2: no writing marks) is
// read and rewritten as version 3 at Open; a build that knows only an
// older version refuses a newer file rather than cut it short.
//
// Lock order: Journal.mu only, a leaf: nothing else is locked or called
// back while it is held. Methods named _foo expect mu held. replay, reset
// and apply run before the Journal is shared (or with mu held).
package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

const (
	magic     = "bsjrnl\x00\x03"
	magicV2   = "bsjrnl\x00\x02"
	magicV1   = "bsjrnl\x00\x01"
	version   = 3 // magic's
	headerLen = int64(len(magic))
	// recOverhead is a record's size beyond its path: length, kind, crc.
	recOverhead = 4 + 1 + 4
	// maxPath bounds a record's length field, so a damaged length is taken
	// for damage rather than for a huge record. Linux paths are far shorter.
	maxPath = 1 << 20

	kindDirty   = 'D'
	kindClean   = 'C'
	kindTomb    = 'T' // since version 2
	kindUntomb  = 'U' // since version 2
	kindWriting = 'W' // since version 3
	kindWritten = 'X' // since version 3
)

// hasValue reports whether records of kind carry a value after the path.
func hasValue(kind byte) bool { return kind == kindTomb || kind == kindWriting }

// since is the version of the file format that brought records of kind
// (0: no such kind).
func since(kind byte) int {
	switch kind {
	case kindDirty, kindClean:
		return 1
	case kindTomb, kindUntomb:
		return 2
	case kindWriting, kindWritten:
		return 3
	}
	return 0
}

// valueTable is one of the journal's tables of path -> value: records of
// kind set put a path's value in it, records of kind drop take it out.
type valueTable struct {
	set, drop byte
	m         map[string]string
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// compactMin is the file size below which the journal is never rewritten:
// small files are cheap to replay and rewriting them would cost two fsyncs
// for nothing. A variable so tests can make compaction happen quickly.
var compactMin int64 = 64 << 10

// compactRatio: the file is rewritten once it is this many times the size a
// freshly written file holding only the dirty set would have.
const compactRatio = 4

// ErrClosed is returned by calls on a closed Journal.
var ErrClosed = errors.New("journal closed")

// Journal is safe for concurrent use.
type Journal struct {
	path string

	mu      sync.Mutex
	f       *os.File            // opened O_APPEND; nil once closed
	dirty   map[string]struct{} // the live dirty set
	tombs   valueTable          // the live tombstones
	writing valueTable          // the live writing marks
	size    int64               // bytes in the file (all complete records)
	live    int64               // bytes the live records (dirty set, tables) take
	floor   int64               // no compaction below this size (raised after a failed one)
	broken  error               // sticky: the file could not be put back in a clean state
	buf     []byte              // record encoding scratch
}

// Open opens (creating if needed) the journal at path and replays it.
func Open(path string) (*Journal, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("journal %s: create directory: %w", path, err)
	}
	// A temp file left by a compaction that crashed before its rename is
	// incomplete by definition; the journal itself is still whole.
	if err := os.Remove(tempPath(path)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("journal %s: remove stale temp file: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("journal %s: open: %w", path, err)
	}
	j := &Journal{path: path, f: f, dirty: make(map[string]struct{}), floor: compactMin,
		tombs:   valueTable{set: kindTomb, drop: kindUntomb, m: make(map[string]string)},
		writing: valueTable{set: kindWriting, drop: kindWritten, m: make(map[string]string)},
	}
	old, err := j.replay()
	if err != nil {
		f.Close()
		return nil, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if old {
		// Records of the kinds a version added must not land in a file
		// whose header says it has none: rewrite it as this version first.
		if err := j._rewrite(); err != nil {
			j.f.Close()
			return nil, fmt.Errorf("journal %s: upgrade to version %d: %w", path, version, err)
		}
	} else if j._wantCompact() {
		// Not fatal: the file as replayed is valid, just longer than needed.
		j._compact()
	}
	return j, nil
}

// replay reads the whole file into the dirty set and the tables and cuts
// off whatever follows the last good record; old reports a file of an
// older version. It runs before j is shared.
func (j *Journal) replay() (old bool, err error) {
	data, err := io.ReadAll(io.NewSectionReader(j.f, 0, 1<<62))
	if err != nil {
		return false, fmt.Errorf("journal %s: read: %w", j.path, err)
	}
	if int64(len(data)) < headerLen {
		// New, or created by a run that crashed before its header was
		// written: either way it holds no records.
		if !bytes.HasPrefix([]byte(magic), data) && !bytes.HasPrefix([]byte(magicV2), data) && !bytes.HasPrefix([]byte(magicV1), data) {
			return false, fmt.Errorf("journal %s: not a bindstate journal (bad header)", j.path)
		}
		return false, j.reset()
	}
	v := version
	switch string(data[:headerLen]) {
	case magic:
	case magicV2:
		v = 2
	case magicV1:
		v = 1
	default:
		// Refuse rather than overwrite: the file may name unwritten changes
		// in a format this build does not know.
		return false, fmt.Errorf("journal %s: not a bindstate journal or unknown version (header %q)", j.path, data[:headerLen])
	}
	pos := headerLen
	for pos < int64(len(data)) {
		rel, kind, value, n, ok := decode(data[pos:])
		if !ok || since(kind) > v { // a kind its version had not: damage
			break
		}
		j.apply(rel, kind, value)
		pos += n
	}
	j.size = pos
	if pos < int64(len(data)) {
		// The truncation must be durable before anything is appended:
		// otherwise a crash could bring the bad bytes back in front of
		// later records, and the next replay would drop those.
		if err := j.f.Truncate(pos); err != nil {
			return false, fmt.Errorf("journal %s: drop damaged tail at %d: %w", j.path, pos, err)
		}
		if err := j.f.Sync(); err != nil {
			return false, fmt.Errorf("journal %s: sync after dropping damaged tail: %w", j.path, err)
		}
	}
	return v < version, nil
}

// reset makes the file an empty journal (header only), durably.
func (j *Journal) reset() error {
	if err := j.f.Truncate(0); err != nil {
		return fmt.Errorf("journal %s: truncate: %w", j.path, err)
	}
	if _, err := j.f.Write([]byte(magic)); err != nil {
		return fmt.Errorf("journal %s: write header: %w", j.path, err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("journal %s: sync: %w", j.path, err)
	}
	if err := syncDir(filepath.Dir(j.path)); err != nil {
		return fmt.Errorf("journal %s: %w", j.path, err)
	}
	j.size = headerLen
	return nil
}

// apply updates the dirty set or a table for one record (mu held, or not
// yet shared).
func (j *Journal) apply(rel string, kind byte, value string) {
	switch kind {
	case kindDirty, kindClean:
		_, was := j.dirty[rel]
		switch {
		case kind == kindDirty && !was:
			j.dirty[rel] = struct{}{}
			j.live += recSize(rel, kindDirty, "")
		case kind == kindClean && was:
			delete(j.dirty, rel)
			j.live -= recSize(rel, kindDirty, "")
		}
	case kindTomb, kindUntomb:
		j.applyValue(&j.tombs, rel, kind, value)
	case kindWriting, kindWritten:
		j.applyValue(&j.writing, rel, kind, value)
	}
}

// applyValue updates table t for one of its records.
func (j *Journal) applyValue(t *valueTable, rel string, kind byte, value string) {
	if old, was := t.m[rel]; was {
		delete(t.m, rel)
		j.live -= recSize(rel, t.set, old)
	}
	if kind == t.set {
		t.m[rel] = value
		j.live += recSize(rel, t.set, value)
	}
}

// Pending returns the dirty paths found at Open plus those marked since and
// not yet marked clean, sorted.
func (j *Journal) Pending() []string {
	j.mu.Lock()
	out := make([]string, 0, len(j.dirty))
	for rel := range j.dirty {
		out = append(out, rel)
	}
	j.mu.Unlock()
	slices.Sort(out)
	return out
}

// Tombs returns the tombstones found at Open plus those set since and not
// dropped: path -> value.
func (j *Journal) Tombs() map[string][]byte { return j.values(&j.tombs) }

// Writing returns the writing marks found at Open plus those set since and
// not dropped: path -> value.
func (j *Journal) Writing() map[string][]byte { return j.values(&j.writing) }

func (j *Journal) values(t *valueTable) map[string][]byte {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make(map[string][]byte, len(t.m))
	for rel, v := range t.m {
		out[rel] = []byte(v)
	}
	return out
}

// checkPath refuses a record body no record can hold.
func (j *Journal) checkPath(op, rel string, extra int) error {
	if strings.IndexByte(rel, 0) >= 0 {
		return fmt.Errorf("journal %s: %s %q: path contains NUL", j.path, op, rel)
	}
	if len(rel)+extra > maxPath {
		return fmt.Errorf("journal %s: %s: path of %d bytes is too long", j.path, op, len(rel))
	}
	return nil
}

// MarkDirty appends a "dirty" record for rel. Cheap when rel is already dirty
// (no write).
func (j *Journal) MarkDirty(rel string) error {
	if err := j.checkPath("mark dirty", rel, 0); err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.dirty[rel]; ok {
		return nil
	}
	if err := j._append(rel, kindDirty, ""); err != nil {
		return fmt.Errorf("journal %s: mark %q dirty: %w", j.path, rel, err)
	}
	j.apply(rel, kindDirty, "")
	return nil
}

// SetTomb records value as rel's tombstone (no write if it already is).
// Like every record it is durable at the next Sync, not before: a
// tombstone lost in a crash only makes the writeback more careful (D7).
func (j *Journal) SetTomb(rel string, value []byte) error {
	return j.setValue(&j.tombs, "set tombstone", rel, value)
}

// DropTomb removes rel's tombstone (no write if it has none).
func (j *Journal) DropTomb(rel string) error {
	return j.dropValue(&j.tombs, "drop tombstone", rel)
}

// SetWriting records value as rel's writing mark (no write if it already
// is): the attributes of what a writeback is about to put in place at rel
// on the host. Durable as SetTomb is: a kill of the process leaves it in
// the file; a power cut before the next Sync may not.
func (j *Journal) SetWriting(rel string, value []byte) error {
	return j.setValue(&j.writing, "set writing mark", rel, value)
}

// DropWriting removes rel's writing mark (no write if it has none).
func (j *Journal) DropWriting(rel string) error {
	return j.dropValue(&j.writing, "drop writing mark", rel)
}

func (j *Journal) setValue(t *valueTable, op, rel string, value []byte) error {
	if err := j.checkPath(op, rel, 1+len(value)); err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if old, ok := t.m[rel]; ok && old == string(value) {
		return nil
	}
	if err := j._append(rel, t.set, string(value)); err != nil {
		return fmt.Errorf("journal %s: %s %q: %w", j.path, op, rel, err)
	}
	j.apply(rel, t.set, string(value))
	return j._maybeCompact()
}

func (j *Journal) dropValue(t *valueTable, op, rel string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := t.m[rel]; !ok {
		return nil
	}
	if err := j._append(rel, t.drop, ""); err != nil {
		return fmt.Errorf("journal %s: %s %q: %w", j.path, op, rel, err)
	}
	j.apply(rel, t.drop, "")
	return j._maybeCompact()
}

// MarkClean appends a "clean" record for rel (no-op if rel is not dirty), and
// compacts the file when it has grown well past the dirty set.
//
// An error means the record may not have been written, so rel may still be
// named at the next Open; that only costs one needless writeback.
func (j *Journal) MarkClean(rel string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.dirty[rel]; !ok {
		return nil
	}
	if err := j._append(rel, kindClean, ""); err != nil {
		return fmt.Errorf("journal %s: mark %q clean: %w", j.path, rel, err)
	}
	j.apply(rel, kindClean, "")
	return j._maybeCompact()
}

// _maybeCompact compacts the file when it has grown well past its live
// records. An error leaves the record just written in place; the file is
// merely long.
func (j *Journal) _maybeCompact() error {
	if j._wantCompact() {
		return j._compact()
	}
	return nil
}

// _append writes one record. On a failed or short write it cuts the
// file back to its last complete record, so later appends stay readable; if
// even that fails the journal refuses further writes (broken).
func (j *Journal) _append(rel string, kind byte, value string) error {
	if j.f == nil {
		return ErrClosed
	}
	if j.broken != nil {
		return j.broken
	}
	j.buf = encode(j.buf[:0], rel, kind, value)
	if _, err := j.f.Write(j.buf); err != nil {
		if terr := j.f.Truncate(j.size); terr != nil {
			j.broken = fmt.Errorf("unusable after a failed append (%v) could not be undone: %w", err, terr)
		}
		return err
	}
	j.size += int64(len(j.buf))
	return nil
}

func (j *Journal) _wantCompact() bool {
	return j.size > j.floor && j.size > compactRatio*(headerLen+j.live)
}

// _compact rewrites the file to hold only the live records: write a temp
// file, fsync it, rename it over the journal, fsync the directory. A crash
// at any step leaves either the old file or the new one, both complete. On
// failure the old file stays in use and no new attempt is made until the
// file has doubled, so a persistent error does not cost two fsyncs per
// MarkClean.
func (j *Journal) _compact() error {
	err := j._rewrite()
	if err != nil {
		j.floor = 2 * j.size
		return fmt.Errorf("journal %s: compact: %w", j.path, err)
	}
	j.floor = compactMin
	return nil
}

func (j *Journal) _rewrite() error {
	tmp := tempPath(j.path)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return err
	}
	rels := make([]string, 0, len(j.dirty))
	for rel := range j.dirty {
		rels = append(rels, rel)
	}
	slices.Sort(rels) // deterministic files are easier to debug
	buf := make([]byte, 0, headerLen+j.live)
	buf = append(buf, magic...)
	for _, rel := range rels {
		buf = encode(buf, rel, kindDirty, "")
	}
	for _, t := range []*valueTable{&j.tombs, &j.writing} {
		for _, rel := range slices.Sorted(maps.Keys(t.m)) {
			buf = encode(buf, rel, t.set, t.m[rel])
		}
	}
	if _, err := f.Write(buf); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, j.path); err != nil {
		return fail(err)
	}
	// From here the new file is the journal whatever happens; a failed
	// directory sync only means the rename may not survive a power cut, in
	// which case the old file, equally valid, comes back.
	old := j.f
	j.f = f
	j.size = int64(len(buf))
	j.broken = nil
	old.Close()
	return syncDir(filepath.Dir(j.path))
}

// Sync makes every record so far durable (fsync).
func (j *Journal) Sync() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return ErrClosed
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("journal %s: sync: %w", j.path, err)
	}
	return nil
}

// Close syncs and closes the file.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	serr := j.f.Sync()
	cerr := j.f.Close()
	j.f = nil
	if err := errors.Join(serr, cerr); err != nil {
		return fmt.Errorf("journal %s: close: %w", j.path, err)
	}
	return nil
}

// encode appends one record to buf: rel, and for a kind with values
// (hasValue) the value.
func encode(buf []byte, rel string, kind byte, value string) []byte {
	start := len(buf)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(recSize(rel, kind, value)-recOverhead))
	buf = append(buf, kind)
	buf = append(buf, rel...)
	if hasValue(kind) {
		buf = append(buf, 0)
		buf = append(buf, value...)
	}
	return binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf[start:], castagnoli))
}

// decode reads the record at the start of b. ok is false if b holds no
// complete, intact record there.
func decode(b []byte) (rel string, kind byte, value string, n int64, ok bool) {
	if len(b) < recOverhead {
		return "", 0, "", 0, false
	}
	l := binary.LittleEndian.Uint32(b)
	if l > maxPath || uint64(len(b)) < uint64(l)+recOverhead {
		return "", 0, "", 0, false
	}
	body := b[:5+l]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[5+l:]) {
		return "", 0, "", 0, false
	}
	kind = body[4]
	p := body[5:]
	switch kind {
	case kindDirty, kindClean, kindUntomb, kindWritten:
		if bytes.IndexByte(p, 0) >= 0 {
			return "", 0, "", 0, false
		}
	case kindTomb, kindWriting:
		i := bytes.IndexByte(p, 0)
		if i < 0 {
			return "", 0, "", 0, false
		}
		p, value = p[:i], string(p[i+1:])
	default:
		return "", 0, "", 0, false
	}
	return string(p), kind, value, int64(l) + recOverhead, true
}

// recSize is the size of the record of kind for rel (and its value).
func recSize(rel string, kind byte, value string) int64 {
	n := int64(len(rel)) + recOverhead
	if hasValue(kind) {
		n += 1 + int64(len(value))
	}
	return n
}

func tempPath(path string) string { return path + ".tmp" }

// syncDir fsyncs a directory so that a create or rename in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
