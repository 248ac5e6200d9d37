package loadkit

import (
	"os"
	"time"
)

// NodeUsage is one server process's CPU and peak RSS over a measurement.
type NodeUsage struct {
	NodeID       string  `json:"id"`
	CPUSeconds   float64 `json:"cpu_seconds"`
	PeakRSSBytes int64   `json:"peak_rss_bytes"`
	// TCPConns is the established TCP connections the process held at the end of the
	// measurement (a node's: not counting its app port, where the bench's clients are).
	TCPConns *int `json:"tcp_conns,omitempty"`
}

// Process is one exited server process of a measurement: its id and its state.
type Process struct {
	ID    string
	State *os.ProcessState
}

// NodesUsage sums the servers' resource use the same way for both benches: CPU is the
// difference of the /proc samples cpu0 and cpu1 (the measured window and the drain)
// when both have one per process, else each process's whole life (its rusage); peak
// RSS comes from the rusage of the exited process. A process without usage is left
// out.
func NodesUsage(procs []Process, cpu0, cpu1 []time.Duration) (nodes []NodeUsage, total time.Duration, peakRSS int64) {
	for i, p := range procs {
		cpu, rss, err := ExitUsage(p.State)
		if err != nil {
			continue
		}
		if len(cpu0) == len(procs) && len(cpu1) == len(procs) {
			cpu = cpu1[i] - cpu0[i]
		}
		total += cpu
		peakRSS = max(peakRSS, rss)
		nodes = append(nodes, NodeUsage{NodeID: p.ID, CPUSeconds: cpu.Seconds(), PeakRSSBytes: rss})
	}
	return nodes, total, peakRSS
}
