package engine

import "time"

// LastCheckpoint returns when the last checkpoint (or the end of recovery
// at Open) completed: the moment from which the data directory holds every
// page as of a checkpoint, which Redis's LASTSAVE reports for a save.
func (db *DB) LastCheckpoint() time.Time { return time.Unix(0, db.lastCkpt.Load()) }
