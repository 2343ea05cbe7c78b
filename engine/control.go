package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path/filepath"

	"mvkv/vfs"
	"mvkv/wal"
)

// The control file records where recovery starts, as PostgreSQL's
// pg_control. It is small enough to be written in one sector and is replaced
// atomically: written to control.tmp, fsynced, renamed over control, and the
// directory fsynced. Part of the format; do not change:
//
//	 0          8           12            20                 28          36             44         48
//	+----------+-----------+-------------+------------------+-----------+--------------+----------+
//	| magic 8  | version 4 | redo LSN 8  | checkpoint LSN 8 | nextXid 8 | heapBlocks 8 | CRC-32C 4|
//	+----------+-----------+-------------+------------------+-----------+--------------+----------+
//
// The CRC covers bytes 0..44. heapBlocks is the heap's size in blocks once
// the checkpoint had written every page: the heap never shrinks, so a
// shorter heap at the next Open means lost data.
const (
	controlName    = "control"
	controlTmpName = "control.tmp"
	controlMagic   = 0x6d766b76_636f6e74 // "mvkvcont"
	controlVersion = 1
	controlSize    = 48
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type controlData struct {
	RedoLSN       wal.LSN // where redo starts
	CheckpointLSN wal.LSN // the checkpoint record itself
	NextXid       uint64  // no xid at or above this was handed out before the checkpoint
	HeapBlocks    uint64  // heap size in blocks after the checkpoint wrote every page
}

func (c controlData) encode() []byte {
	b := make([]byte, 0, controlSize)
	b = binary.LittleEndian.AppendUint64(b, controlMagic)
	b = binary.LittleEndian.AppendUint32(b, controlVersion)
	b = binary.LittleEndian.AppendUint64(b, uint64(c.RedoLSN))
	b = binary.LittleEndian.AppendUint64(b, uint64(c.CheckpointLSN))
	b = binary.LittleEndian.AppendUint64(b, c.NextXid)
	b = binary.LittleEndian.AppendUint64(b, c.HeapBlocks)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeControl(b []byte, name string) (controlData, error) {
	var c controlData
	if len(b) != controlSize {
		return c, fmt.Errorf("%w: %s: size %d, want %d", ErrCorruption, name, len(b), controlSize)
	}
	if got := binary.LittleEndian.Uint64(b); got != controlMagic {
		return c, fmt.Errorf("%w: %s offset 0: bad magic %#x", ErrCorruption, name, got)
	}
	if want, got := crc32.Checksum(b[:44], castagnoli), binary.LittleEndian.Uint32(b[44:]); want != got {
		return c, fmt.Errorf("%w: %s offset 44: checksum mismatch", ErrCorruption, name)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != controlVersion {
		return c, fmt.Errorf("%w: %s offset 8: unsupported version %d", ErrCorruption, name, v)
	}
	c.RedoLSN = wal.LSN(binary.LittleEndian.Uint64(b[12:]))
	c.CheckpointLSN = wal.LSN(binary.LittleEndian.Uint64(b[20:]))
	c.NextXid = binary.LittleEndian.Uint64(b[28:])
	c.HeapBlocks = binary.LittleEndian.Uint64(b[36:])
	return c, nil
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
		return c, false, err
	}
	if size != controlSize {
		return c, false, fmt.Errorf("%w: %s: size %d, want %d", ErrCorruption, name, size, controlSize)
	}
	f, err := fsys.OpenReadOnly(name)
	if err != nil {
		return c, false, err
	}
	defer f.Close()
	b := make([]byte, controlSize)
	if _, err := f.ReadAt(b, 0); err != nil {
		return c, false, fmt.Errorf("read %s: %w", name, err)
	}
	c, err = decodeControl(b, name)
	return c, err == nil, err
}

// writeControl replaces the control file atomically and durably.
func writeControl(fsys vfs.FS, dir string, c controlData) error {
	tmp := filepath.Join(dir, controlTmpName)
	f, err := fsys.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(c.encode(), 0); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("%w: fsync %s: %v", ErrIOFailure, tmp, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fsys.Rename(tmp, filepath.Join(dir, controlName)); err != nil {
		return err
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("%w: fsync %s: %v", ErrIOFailure, dir, err)
	}
	return nil
}
