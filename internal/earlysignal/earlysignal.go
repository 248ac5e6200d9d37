// Package earlysignal catches SIGINT and SIGTERM from early in the process's package
// initialisation until the command that runs takes them over. Go's runtime and the
// packages' initialisation take ~20 ms of CPU before main (more on a busy machine),
// and until a handler is installed Go's default kills the process: a sidecar told to
// stop while it starts would die by the signal instead of exiting 0. Importing this
// package moves the handler to the first few milliseconds: it needs only os/signal,
// so it is initialised before the heavy packages are.
//
// It is the process's one init-time registration, on purpose: nothing else runs
// that early. A command either hands over (Handover: it has installed its own
// handling and learns of a signal that came before) or releases (Release: Go's
// default again, and a signal that came before is raised again, so that the process
// ends as it would have without this package).
package earlysignal

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

// caught holds the first signal that came before the hand-over; later ones are
// dropped (one is all a command needs to know).
var caught = make(chan os.Signal, 1)

func init() {
	sigs := []os.Signal{syscall.SIGTERM}
	// A process started with SIGINT ignored (a shell's background job) keeps it
	// ignored: Notify would un-ignore it.
	if !signal.Ignored(syscall.SIGINT) {
		sigs = append(sigs, syscall.SIGINT)
	}
	signal.Notify(caught, sigs...)
}

// Handover ends the early catch and returns the signal that came before it, if any
// (nil: none). Call it after installing the command's own handling (signal.Notify or
// NotifyContext), so that no signal falls between the two. It may be called more
// than once; later calls return nil.
func Handover() os.Signal {
	signal.Stop(caught)
	select {
	case s := <-caught:
		return s
	default:
		return nil
	}
}

// Release ends the early catch for a command that handles no signal itself, and
// raises a signal that came before it again: Go's default then ends the process as
// the signal would have. It returns only if none came.
func Release() {
	s, ok := Handover().(syscall.Signal)
	if !ok {
		return
	}
	_ = syscall.Kill(os.Getpid(), s)
	// The signal is delivered to some thread of the process, which dies of it; the
	// wait is for that thread to run. Exit as a shell reports a death by signal if
	// it somehow does not.
	time.Sleep(5 * time.Second)
	os.Exit(128 + int(s))
}
