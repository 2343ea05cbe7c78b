package engine

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"path/filepath"
	"time"

	"mvkv/vfs"
	"mvkv/wal"
)

// The control file records where recovery starts, as PostgreSQL's
// pg_control. It is small enough to be written in one sector and is replaced
// atomically: written to control.tmp, fsynced, renamed over control, and the
// directory fsynced. Part of the format; do not change:
//
//	 0          8           12            20                 28          36             44            52         56
//	+----------+-----------+-------------+------------------+-----------+--------------+-------------+----------+
//	| magic 8  | version 4 | redo LSN 8  | checkpoint LSN 8 | nextXid 8 | heapBlocks 8 | systemID 8  | CRC-32C 4|
//	+----------+-----------+-------------+------------------+-----------+--------------+-------------+----------+
//
// The CRC covers everything before it. heapBlocks is the heap's size in
// blocks once the checkpoint had written every page: the heap shrinks only
// by a logged HEAP_TRUNCATE (vacuum's truncation), so a heap shorter at the
// next Open than this, or than the shortest length such a record logged
// after the checkpoint leaves, means lost data. systemID
// names the database, as PostgreSQL's system_identifier: a random number
// drawn when the directory is created, copied into every index file, so
// that an index file from another database is refused even when its
// checkpoint positions happen to match. Version 1 (48 bytes) had no
// systemID; it is read, and the next checkpoint writes version 2 with an
// identifier drawn at Open.
const (
	controlName    = "control"
	controlTmpName = "control.tmp"
	controlMagic   = 0x6d766b76_636f6e74 // "mvkvcont"
	controlVersion = 2
	controlSize    = 56
	controlSizeV1  = 48
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type controlData struct {
	RedoLSN       wal.LSN // where redo starts
	CheckpointLSN wal.LSN // the checkpoint record itself
	NextXid       uint64  // no xid at or above this was handed out before the checkpoint
	HeapBlocks    uint64  // heap size in blocks after the checkpoint wrote every page
	SystemID      uint64  // the database's identifier; 0 in a version 1 file
}

func (c controlData) encode() []byte {
	b := make([]byte, 0, controlSize)
	b = binary.LittleEndian.AppendUint64(b, controlMagic)
	b = binary.LittleEndian.AppendUint32(b, controlVersion)
	b = binary.LittleEndian.AppendUint64(b, uint64(c.RedoLSN))
	b = binary.LittleEndian.AppendUint64(b, uint64(c.CheckpointLSN))
	b = binary.LittleEndian.AppendUint64(b, c.NextXid)
	b = binary.LittleEndian.AppendUint64(b, c.HeapBlocks)
	b = binary.LittleEndian.AppendUint64(b, c.SystemID)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeControl(b []byte, name string) (controlData, error) {
	var c controlData
	if len(b) != controlSize && len(b) != controlSizeV1 {
		return c, fmt.Errorf("%w: %s: size %d, want %d", ErrCorruption, name, len(b), controlSize)
	}
	if got := binary.LittleEndian.Uint64(b); got != controlMagic {
		return c, fmt.Errorf("%w: %s offset 0: bad magic %#x", ErrCorruption, name, got)
	}
	end := len(b) - 4
	if want, got := crc32.Checksum(b[:end], castagnoli), binary.LittleEndian.Uint32(b[end:]); want != got {
		// The checksum cannot say which byte is wrong: the damage is
		// somewhere in the file, the checksum stored at its end
		// included, so the offset named is the file's start.
		return c, fmt.Errorf("%w: %s offset 0: checksum mismatch over the file's %d bytes: stored %#08x (at offset %d), computed %#08x", ErrCorruption, name, len(b), got, end, want)
	}
	v := binary.LittleEndian.Uint32(b[8:])
	if !(v == controlVersion && len(b) == controlSize) && !(v == 1 && len(b) == controlSizeV1) {
		return c, fmt.Errorf("%w: %s offset 8: unsupported version %d in a file of %d bytes", ErrCorruption, name, v, len(b))
	}
	c.RedoLSN = wal.LSN(binary.LittleEndian.Uint64(b[12:]))
	c.CheckpointLSN = wal.LSN(binary.LittleEndian.Uint64(b[20:]))
	c.NextXid = binary.LittleEndian.Uint64(b[28:])
	c.HeapBlocks = binary.LittleEndian.Uint64(b[36:])
	if c.HeapBlocks > math.MaxUint32 {
		// Block numbers are 32 bits: no checkpoint writes a longer
		// length, and taken as one it would pass for the length a heap
		// truncation left (Open compares the two).
		return c, fmt.Errorf("%w: %s offset 36: heap length %d blocks, more than a heap holds (%d)", ErrCorruption, name, c.HeapBlocks, uint64(math.MaxUint32))
	}
	if v == controlVersion {
		c.SystemID = binary.LittleEndian.Uint64(b[44:])
		if c.SystemID == 0 {
			return c, fmt.Errorf("%w: %s offset 44: system identifier is zero", ErrCorruption, name)
		}
	}
	return c, nil
}

// newIdentifier draws a random identifier, never zero: a database's system
// identifier, and each checkpoint's (see the index file).
func newIdentifier() uint64 {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			// crypto/rand does not fail on supported systems; the
			// clock is a fallback that still tells databases apart.
			return uint64(time.Now().UnixNano()) | 1
		}
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}

// readControl returns the control data, or found=false for a directory that
// never completed a checkpoint.
func readControl(fsys vfs.FS, dir string) (c controlData, found bool, err error) {
	name := filepath.Join(dir, controlName)
	size, err := fsys.Stat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return c, false, nil
	}
	if err != nil {
		return c, false, wrapf(err, "read the control file")
	}
	if size != controlSize && size != controlSizeV1 {
		if _, derr := fsys.ReadDir(name); derr == nil {
			return c, false, fmt.Errorf("%w: %s is a directory, not the control file", ErrCorruption, name)
		}
		return c, false, fmt.Errorf("%w: %s: size %d, want %d", ErrCorruption, name, size, controlSize)
	}
	f, err := fsys.OpenReadOnly(name)
	if err != nil {
		return c, false, wrapf(err, "read the control file")
	}
	defer f.Close()
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil {
		return c, false, wrapf(err, "read the control file")
	}
	c, err = decodeControl(b, name)
	return c, err == nil, err
}

// writeControl replaces the control file atomically and durably. Its
// errors are the operating system's, said without the engine's prefix:
// the checkpoint, its only caller outside tests, stops writes with them
// behind ErrIOFailure, whose text begins with it.
func writeControl(fsys vfs.FS, dir string, c controlData) error {
	tmp := filepath.Join(dir, controlTmpName)
	f, err := fsys.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(c.encode(), 0); err != nil {
		f.Close()
		return fmt.Errorf("write the control file: %w", err) // the error names the file
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("%w: %w", ErrIOFailure, withPath("fsync", tmp, err))
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fsys.Rename(tmp, filepath.Join(dir, controlName)); err != nil {
		return err
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("%w: %w", ErrIOFailure, withPath("fsync", dir, err))
	}
	return nil
}
