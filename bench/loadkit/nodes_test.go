package loadkit

import (
	"os/exec"
	"runtime"
	"testing"
	"time"
)

func TestNodesUsage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("rusage of an exited child: linux only")
	}
	var procs []Process
	for _, id := range []string{"a", "b"} {
		cmd := exec.Command("true")
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, Process{ID: id, State: cmd.ProcessState})
	}
	procs = append(procs, Process{ID: "never-ran"}) // no state: left out
	nodes, _, peak := NodesUsage(procs, nil, nil)
	if len(nodes) != 2 || nodes[0].NodeID != "a" || nodes[1].NodeID != "b" || peak <= 0 {
		t.Fatalf("whole-life usage: %+v, peak %d; want a and b with a peak RSS", nodes, peak)
	}
	// With a /proc sample per process, CPU is their difference, not the whole life.
	cpu0 := []time.Duration{time.Second, 2 * time.Second, 0}
	cpu1 := []time.Duration{3 * time.Second, 2 * time.Second, 0}
	nodes, total, _ := NodesUsage(procs, cpu0, cpu1)
	if total != 2*time.Second || nodes[0].CPUSeconds != 2 || nodes[1].CPUSeconds != 0 {
		t.Fatalf("windowed usage: %+v, total %s; want 2s and 0s, 2s in all", nodes, total)
	}
}
