package loadkit

import (
	"fmt"
	"os"
	"slices"
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

// PeakRSS reads a running process's peak resident set (VmHWM in /proc/<pid>/status),
// for a process the bench did not start and so cannot wait for (a NATS server).
func PeakRSS(pid int) (int64, error) { return statusBytes(pid, "VmHWM") }

// RSS reads a running process's resident set now (VmRSS in /proc/<pid>/status).
func RSS(pid int) (int64, error) { return statusBytes(pid, "VmRSS") }

// statusBytes reads a "<field>: <n> kB" line of /proc/<pid>/status, in bytes.
func statusBytes(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest) // "1234 kB"
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("loadkit: /proc/%d/status %s: %q", pid, field, line)
			}
			kib, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("loadkit: /proc/%d/status %s: %w", pid, field, err)
			}
			return kib * 1024, nil
		}
	}
	return 0, fmt.Errorf("loadkit: /proc/%d/status has no %s", pid, field)
}

// TCPConns counts the established TCP connections a process holds: its socket file
// descriptors matched by inode against the established rows of /proc/<pid>/net/tcp
// and tcp6. A connection whose local port is one of skipLocal (e.g. a node's app
// port, where the bench's own clients arrive) is not counted.
func TCPConns(pid int, skipLocal ...int) (int, error) {
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return 0, err
	}
	inodes := make(map[string]bool, len(ents))
	for _, e := range ents {
		l, err := os.Readlink(fdDir + "/" + e.Name())
		if err != nil {
			continue // closed since the listing
		}
		if ino, ok := strings.CutPrefix(l, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	n := 0
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			if os.IsNotExist(err) {
				continue // no IPv6
			}
			return 0, err
		}
		c, err := countEstablished(string(b), inodes, skipLocal)
		if err != nil {
			return 0, err
		}
		n += c
	}
	return n, nil
}

// tcpEstablished is the st column of an established socket in /proc/net/tcp.
const tcpEstablished = "01"

// countEstablished counts the rows of a /proc/net/tcp table (a header line, then
// "sl local_address rem_address st ... uid timeout inode ...") that are established,
// whose inode is in inodes, and whose local port is not in skipLocal.
func countEstablished(table string, inodes map[string]bool, skipLocal []int) (int, error) {
	n := 0
	for i, line := range strings.Split(strings.TrimSpace(table), "\n") {
		if i == 0 {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 10 {
			return 0, fmt.Errorf("loadkit: /proc net/tcp row too short: %q", line)
		}
		if f[3] != tcpEstablished || !inodes[f[9]] {
			continue
		}
		_, portHex, ok := strings.Cut(f[1], ":")
		if !ok {
			return 0, fmt.Errorf("loadkit: /proc net/tcp local address %q", f[1])
		}
		port, err := strconv.ParseUint(portHex, 16, 16)
		if err != nil {
			return 0, fmt.Errorf("loadkit: /proc net/tcp local port %q: %w", portHex, err)
		}
		if !slices.Contains(skipLocal, int(port)) {
			n++
		}
	}
	return n, nil
}
