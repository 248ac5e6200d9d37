//go:build !linux

package testbin

import "syscall"

// ProcAttr is empty where the kernel has no parent-death signal: a test's cleanup
// still kills its servers, but a test process that dies leaves them running.
func ProcAttr() *syscall.SysProcAttr { return nil }
