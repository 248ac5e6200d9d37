//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package freeport

import "os"

// lock does nothing where there is no flock: only the range and the bind check apply.
func lock(*os.File) error { return nil }
