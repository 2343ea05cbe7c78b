package vfs

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// timerfd is a fineTimer on a Linux timerfd opened non-blocking, so os.File
// registers it with the runtime's network poller: a Read parks only the
// goroutine, and the poller wakes it when the kernel's high-resolution timer
// fires, not at the millisecond granularity of Go's own timers.
// The raw descriptor is kept apart because os.File.Fd would switch the file
// back to blocking mode.
type timerfd struct {
	f  *os.File
	fd int
}

func newFineTimer() (fineTimer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("vfs: timerfd_create: %w", err)
	}
	return timerfd{f: os.NewFile(uintptr(fd), "timerfd"), fd: fd}, nil
}

// sleep arms the timer d from now and waits for it to fire.
func (t timerfd) sleep(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(t.fd, 0, &spec, nil); err != nil {
		return fmt.Errorf("vfs: timerfd_settime: %w", err)
	}
	// The read returns the 8-byte count of expirations once it has fired.
	var buf [8]byte
	for {
		_, err := t.f.Read(buf[:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err
	}
}

func (t timerfd) close() { t.f.Close() }
