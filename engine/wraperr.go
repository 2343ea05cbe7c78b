package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// errPrefix begins the text of the engine's sentinel errors and of the
// errors wrapf builds, which is nearly every error the engine returns
// (a failed write of the control file, for one, reads "write the control
// file: ...", behind the text of the I/O failure that wraps it).
const errPrefix = "mvkv: "

// prefixedError is an error of the engine that says what it was doing
// and wraps the error that stopped it. Its text has errPrefix once: the
// wrapped error's own leading errPrefix is left out, so an abort by a
// deadlock reads "mvkv: transaction rolled back: deadlock detected",
// not "... rolled back: mvkv: deadlock detected". Only the text changes:
// Unwrap gives the wrapped error itself, so errors.Is and errors.As
// match what they matched in it.
type prefixedError struct {
	msg string // what was being done, errPrefix included
	err error
}

func (e *prefixedError) Error() string {
	return e.msg + ": " + strings.TrimPrefix(e.err.Error(), errPrefix)
}

func (e *prefixedError) Unwrap() error { return e.err }

// wrapf returns err behind "mvkv: " and the text format and args make,
// with err's own "mvkv: " dropped from the message (prefixedError). It
// is what fmt.Errorf("mvkv: "+format+": %w", args..., err) would be,
// said once.
func wrapf(err error, format string, args ...any) error {
	return &prefixedError{msg: errPrefix + fmt.Sprintf(format, args...), err: err}
}

// withPath returns err behind "op name: ", unless err is an *fs.PathError,
// which names the operation and the file itself (the operating system's
// errors and the vfs's are), so that a message names the file once.
func withPath(op, name string, err error) error {
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		return err
	}
	return fmt.Errorf("%s %s: %w", op, name, err)
}
