package testbin

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// AllStopped reports whether every thread of process pid is in state T (stopped by
// SIGSTOP), from /proc/<pid>/task/<tid>/stat: kill(2) returns before the threads
// stop, and one still running can answer a call meanwhile. nil when all are stopped.
func AllStopped(pid int) error {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "stat"))
		if err != nil {
			return err
		}
		// "tid (comm) S ...": the state follows the last ')'; comm may hold spaces.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return fmt.Errorf("thread %s: unreadable stat %q", t.Name(), b)
		}
		if st := b[i+2]; st != 'T' {
			return fmt.Errorf("thread %s is in state %c", t.Name(), st)
		}
	}
	return nil
}
