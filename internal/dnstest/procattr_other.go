//go:build !linux

package dnstest

import "syscall"

// procAttr is empty where the kernel has no parent-death signal: cleanup still kills
// dnsmasq, but a test process that dies leaves it running.
func procAttr() *syscall.SysProcAttr { return nil }
