//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package freeport

import (
	"errors"
	"os"
	"syscall"
)

// lock takes an exclusive flock on f without waiting. It is released when f is closed,
// or when the process exits.
func lock(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errLocked
	}
	return err
}
