package filecopy

import (
	"errors"
	"fmt"
	"io"

	"mvkv/vfs"
)

// Synced copies the file src on sfs to the new file dst on dfs and
// fsyncs dst. The first keep bytes are copied, and the copy then holds
// zeros up to size bytes; a src shorter than keep is copied whole, with no
// zeros after it. A negative keep copies src to its end, and a size not
// above keep adds no zeros. buf is the copy's
// buffer (its length is the unit of each read and write; it must not be
// empty) and is overwritten.
//
// Errors: src's open error as the file system gives it (an *fs.PathError,
// matching fs.ErrNotExist when src is missing); dst's create error;
// errors naming the file and offset of a failed read or write, or the
// file of a failed fsync or close. dst is left as far as it got.
func Synced(sfs vfs.FS, src string, dfs vfs.FS, dst string, keep, size int64, buf []byte) (err error) {
	if len(buf) == 0 {
		return errors.New("filecopy: empty buffer")
	}
	in, err := sfs.OpenReadOnly(src)
	if err != nil {
		return err // the path error names the file
	}
	defer in.Close()
	out, err := dfs.Create(dst)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close %s: %w", dst, cerr)
		}
	}()
	off, short := int64(0), false
	for keep < 0 || off < keep {
		want := int64(len(buf))
		if keep >= 0 {
			want = min(want, keep-off)
		}
		n, rerr := in.ReadAt(buf[:want], off)
		if n > 0 {
			if _, err := out.WriteAt(buf[:n], off); err != nil {
				return fmt.Errorf("write %s at offset %d: %w", dst, off, err)
			}
			off += int64(n)
		}
		if errors.Is(rerr, io.EOF) {
			short = keep < 0 || off < keep
			break
		}
		if rerr != nil {
			return fmt.Errorf("read %s at offset %d: %w", src, off, rerr)
		}
	}
	if !short && off < size {
		// Zeros, not the bytes there: see the package doc.
		clear(buf)
		for off < size {
			n := min(int64(len(buf)), size-off)
			if _, err := out.WriteAt(buf[:n], off); err != nil {
				return fmt.Errorf("write %s at offset %d: %w", dst, off, err)
			}
			off += n
		}
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dst, err)
	}
	return nil
}
