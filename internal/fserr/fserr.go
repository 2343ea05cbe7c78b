// Package fserr words the errors of file operations so that a message
// names the file once: the operating system's and the vfs's errors already
// name it (an *fs.PathError says "read /d/wal/000...: input/output
// error"), and a package that wrapped one as "read %s: %w" said the path
// twice. Errors stay matchable with errors.Is and errors.As.
package fserr

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Wrap returns err, from operation op on the file or directory name, as
// "pkg: op name: err", or as "pkg: err" when err names the file itself.
func Wrap(pkg, op, name string, err error) error {
	if NamesFile(err) {
		return fmt.Errorf("%s: %w", pkg, err)
	}
	return fmt.Errorf("%s: %s %s: %w", pkg, op, name, err)
}

// WrapAt is Wrap for an operation at byte offset off of the file: "pkg:
// op name at offset off: err", or "pkg: err (at offset off)".
func WrapAt(pkg, op, name string, off int64, err error) error {
	if NamesFile(err) {
		return fmt.Errorf("%s: %w (at offset %d)", pkg, err, off)
	}
	return fmt.Errorf("%s: %s %s at offset %d: %w", pkg, op, name, off, err)
}

// NamesFile reports whether err's message names the file it is about: it
// is or wraps an *fs.PathError or an *os.LinkError.
func NamesFile(err error) bool {
	var pe *fs.PathError
	var le *os.LinkError
	return errors.As(err, &pe) || errors.As(err, &le)
}
