package engine

import "time"

// LastCheckpoint returns when the last checkpoint (or the end of recovery
// at Open) completed: the moment from which the data directory holds every
// page as of a checkpoint, which Redis's LASTSAVE reports for a save.
func (db *DB) LastCheckpoint() time.Time { return time.Unix(0, db.lastCkpt.Load()) }

// Failure returns the error that stopped the database taking writes (an
// fsync or write of the WAL, a heap, visibility-map or CLOG file that
// failed, or damage found where a write needed it: errors.Is matches
// ErrWALSyncFailed, ErrIOFailure or ErrCorruption), or nil while it takes
// them. The state is sticky until the database is closed and reopened,
// when recovery redoes the WAL from the last checkpoint; a health check
// or a server's status report reads it here rather than from a failed
// write. Safe to call concurrently.
func (db *DB) Failure() error { return db.writable() }
