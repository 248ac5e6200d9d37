package testbin

import "syscall"

// ProcAttr is for a server a test starts (exec.Cmd.SysProcAttr): the kernel kills the
// child when the thread that started it exits. Go ends its threads only in rare cases
// (a goroutine locked to one exits), so in practice that is when the test process
// dies, of a panic or go test's -timeout, and it leaves no server behind.
func ProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
