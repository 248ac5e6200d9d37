package loadgen

import (
	"fmt"
	"time"

	"github.com/fanout/fanout/bench/loadkit"
)

// engine samples the --engine-pid processes (the NATS servers of the JetStream
// transport), which the bench did not start: CPU from /proc at the start of the
// measured window and at the end of the drain, as for the nodes; peak RSS (VmHWM) and
// established TCP connections at the end, since they cannot be waited for.
type engine struct {
	pids       []int
	cpu0, cpu1 []time.Duration
	rss        []int64
	conns      []*int
}

// start samples the CPU of pids. A process that cannot be read at either end counts
// no CPU, rather than its whole life or a negative share.
func (e *engine) start(pids []int) {
	e.pids = pids
	e.cpu0 = procCPUs(pids)
}

// end samples CPU, peak RSS and connections.
func (e *engine) end() {
	if len(e.pids) == 0 || e.cpu0 == nil {
		return
	}
	e.cpu1 = procCPUs(e.pids)
	e.rss = make([]int64, len(e.pids))
	e.conns = make([]*int, len(e.pids))
	for i, pid := range e.pids {
		e.rss[i], _ = loadkit.PeakRSS(pid)
		if n, err := loadkit.TCPConns(pid); err == nil {
			e.conns[i] = &n
		}
	}
}

// usage is each process's share and the total CPU; nothing before end.
func (e *engine) usage() ([]NodeResult, float64) {
	if e.cpu1 == nil {
		return nil, 0
	}
	out := make([]NodeResult, len(e.pids))
	var total time.Duration
	for i, pid := range e.pids {
		var cpu time.Duration
		if e.cpu0[i] >= 0 && e.cpu1[i] >= 0 {
			cpu = e.cpu1[i] - e.cpu0[i]
		}
		total += cpu
		out[i] = NodeResult{NodeID: fmt.Sprintf("pid-%d", pid), CPUSeconds: cpu.Seconds(), PeakRSSBytes: e.rss[i], TCPConns: e.conns[i]}
	}
	return out, total.Seconds()
}

func procCPUs(pids []int) []time.Duration {
	out := make([]time.Duration, len(pids))
	for i, pid := range pids {
		d, err := loadkit.ProcCPU(pid)
		if err != nil {
			d = -1
		}
		out[i] = d
	}
	return out
}
