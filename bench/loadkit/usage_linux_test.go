package loadkit

import (
	"os"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// A command name with spaces and a parenthesis, as a process may choose.
	stat := "4242 (side car) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 12 0 100 1000 200"
	got, err := parseProcStat(stat)
	if err != nil || got != 3250*time.Millisecond {
		t.Fatalf("parseProcStat = %s, %v; want 3.25s (325 ticks)", got, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 ab 5"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("parseProcStat(%q) succeeded", bad)
		}
	}
}

func TestProcCPUOfThisProcess(t *testing.T) {
	d, err := ProcCPU(os.Getpid())
	if err != nil || d < 0 {
		t.Fatalf("ProcCPU(self) = %s, %v", d, err)
	}
	if s, err := SelfCPU(); err != nil || s <= 0 {
		t.Fatalf("SelfCPU = %s, %v", s, err)
	}
}
