package dnstest

import "syscall"

// procAttr makes the kernel kill dnsmasq when the thread that started it exits. Go
// ends its threads only in rare cases (a goroutine locked to one exits), so in
// practice that is when the test process dies, of a panic or go test's -timeout,
// and it leaves no server behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
