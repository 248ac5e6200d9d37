package loadkit

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is USER_HZ, the unit of utime and stime in /proc/<pid>/stat: 100 on every
// Linux architecture Go supports.
const clockTick = 100

// ChildAttr is for a spawned server: it gets SIGTERM if the bench dies without
// stopping it, and it is put in its own process group, so that Ctrl-C reaches only the
// bench, which then stops the servers itself.
func ChildAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
}

// ProcCPU reads the user+sys CPU time of a running process from /proc/<pid>/stat.
// Both benches read it for every server process at the start of the measured window
// and at the end of the drain.
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStat(string(b))
}

// parseProcStat returns utime+stime (fields 14 and 15) of a /proc/<pid>/stat line. The
// command name (field 2) is in parentheses and may hold spaces, so fields are counted
// from its closing parenthesis.
func parseProcStat(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("loadkit: /proc stat without a command name: %q", stat)
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3, the state
	if len(f) < 13 {
		return 0, fmt.Errorf("loadkit: /proc stat too short: %q", stat)
	}
	var ticks int64
	for _, s := range f[11:13] { // fields 14 and 15
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("loadkit: /proc stat field %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTick, nil
}

// ExitUsage returns the CPU time and peak RSS of a child that has been waited for.
// Both benches take a server's peak RSS from here: ru_maxrss of the exited process.
func ExitUsage(ps *os.ProcessState) (time.Duration, int64, error) {
	if ps == nil {
		return 0, 0, ErrNoUsage
	}
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return 0, 0, ErrNoUsage
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return cpu, ru.Maxrss * 1024, nil // Linux reports ru_maxrss in KiB
}

// SelfCPU returns the user+sys CPU the calling process has used so far.
func SelfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
