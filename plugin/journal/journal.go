// Package journal is the crash-safe record of which store paths hold changes
// that the host has not seen yet.
//
// It is an append-only file of small checksummed records ("dirty P",
// "clean P"). A record is appended (write(2), no fsync) BEFORE the change it
// covers is made in the store, so a plugin crash at any point leaves every
// change a container saw succeed either on the host or named here. Sync
// fsyncs it (for fsync from the container and at shutdown). Open replays the
// file and drops a torn final record. When most records are obsolete the file
// is rewritten (write temp, fsync, rename) to hold only the dirty set.
package journal

import "errors"

// Journal is safe for concurrent use.
type Journal struct{}

// Open opens (creating if needed) the journal at path and replays it.
func Open(path string) (*Journal, error) { return nil, errors.New("unimplemented") }

// Pending returns the dirty paths found at Open plus those marked since and
// not yet marked clean, sorted.
func (j *Journal) Pending() []string { return nil }

// MarkDirty appends a "dirty" record for rel. Cheap when rel is already dirty
// (no write).
func (j *Journal) MarkDirty(rel string) error { return errors.New("unimplemented") }

// MarkClean appends a "clean" record for rel (no-op if rel is not dirty), and
// compacts the file when it has grown well past the dirty set.
func (j *Journal) MarkClean(rel string) error { return errors.New("unimplemented") }

// Sync makes every record so far durable (fsync).
func (j *Journal) Sync() error { return errors.New("unimplemented") }

// Close syncs and closes the file.
func (j *Journal) Close() error { return nil }
