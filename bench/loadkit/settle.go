package loadkit

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// How Settle decides that the resident sets have settled.
const (
	settlePoll = 250 * time.Millisecond
	// SettleQuiet and SettleSlack: settled once no process's VmRSS has fallen by more
	// than SettleSlack over the last SettleQuiet.
	SettleQuiet = 2 * time.Second
	SettleSlack = 1 << 20
)

// Settled is what Settle read: each process's VmRSS once settled (bytes, in the order
// of the pids), and how long it waited after the collections for the scavenger.
type Settled struct {
	RSS      []int64
	Waited   time.Duration
	TimedOut bool // max passed before the resident sets stopped falling
}

// Settle reads the settled resident set of Go processes: it forces a garbage
// collection in each (an HTTP GET of its gcURL, net/http/pprof's
// /debug/pprof/heap?gc=1, which both `sidecar serve --pprof-addr` and
// `nats-server --profile` serve), then waits for the runtime's background scavenger.
// A collection frees heap spans but does not give their pages back to the kernel: the
// scavenger returns them in the background, paced at about 1 % of one CPU, down to
// about 10 % over the heap goal, so VmRSS goes on falling for seconds after the
// collection (hundreds of MiB take several seconds). Settle reads every process's
// VmRSS each 250 ms and returns once none has fallen by more than SettleSlack over the
// last SettleQuiet, or max has passed (TimedOut: the figures are then an upper
// bound).
func Settle(ctx context.Context, pids []int, gcURLs []string, max time.Duration) (Settled, error) {
	if len(pids) != len(gcURLs) {
		return Settled{}, fmt.Errorf("loadkit: Settle: %d pids, %d GC URLs", len(pids), len(gcURLs))
	}
	for i, u := range gcURLs {
		if err := Fetch(ctx, u, io.Discard); err != nil {
			return Settled{}, fmt.Errorf("loadkit: forced GC of process %d: %w", pids[i], err)
		}
	}
	start := time.Now()
	keep := int(SettleQuiet/settlePoll) + 1 // samples spanning SettleQuiet
	var hist [][]int64                      // the last keep samples
	tick := time.NewTicker(settlePoll)
	defer tick.Stop()
	for {
		cur := make([]int64, len(pids))
		for i, pid := range pids {
			r, err := RSS(pid)
			if err != nil {
				return Settled{}, err
			}
			cur[i] = r
		}
		hist = append(hist, cur)
		if len(hist) > keep {
			hist = hist[1:]
		}
		waited := time.Since(start)
		if len(hist) == keep && !falling(hist[0], cur) {
			return Settled{RSS: cur, Waited: waited}, nil
		}
		if waited >= max {
			return Settled{RSS: cur, Waited: waited, TimedOut: true}, nil
		}
		select {
		case <-ctx.Done():
			return Settled{}, ctx.Err()
		case <-tick.C:
		}
	}
}

// falling reports whether some process's RSS went down by more than SettleSlack from
// then to now.
func falling(then, now []int64) bool {
	for i := range now {
		if then[i]-now[i] > SettleSlack {
			return true
		}
	}
	return false
}

// Fetch GETs url into w (an http.StatusOK answer, else an error), bounded by 30 s.
func Fetch(ctx context.Context, url string, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// NodeMemory is one process's resident set before the keys and after, both settled.
type NodeMemory struct {
	ID          string  `json:"id"`
	BaselineRSS int64   `json:"baseline_rss_bytes"`
	SettledRSS  int64   `json:"settled_rss_bytes"`
	PerKey      float64 `json:"bytes_per_key"` // (settled − baseline) / keys
}

// MemorySummary is the memory workload's result for one system: every node's
// settled resident sets, and the bytes per live key of the node that grew the most.
type MemorySummary struct {
	NodeMemory     []NodeMemory `json:"node_memory"`
	BytesPerKey    float64      `json:"bytes_per_key"` // the largest of the nodes'
	BytesPerKeyOf  string       `json:"bytes_per_key_node"`
	BaselineWaitS  float64      `json:"baseline_settle_s"`
	SettleWaitS    float64      `json:"settle_s"`
	SettleTimedOut bool         `json:"settle_timed_out,omitempty"`
}

// SummarizeMemory puts two Settle readings of the same processes (ids, in order)
// together, at keys live keys.
func SummarizeMemory(ids []string, before, after Settled, keys int) MemorySummary {
	m := MemorySummary{BaselineWaitS: before.Waited.Seconds(), SettleWaitS: after.Waited.Seconds(),
		SettleTimedOut: before.TimedOut || after.TimedOut}
	for i, id := range ids {
		n := NodeMemory{ID: id, BaselineRSS: before.RSS[i], SettledRSS: after.RSS[i]}
		if keys > 0 {
			n.PerKey = float64(n.SettledRSS-n.BaselineRSS) / float64(keys)
		}
		if i == 0 || n.PerKey > m.BytesPerKey {
			m.BytesPerKey, m.BytesPerKeyOf = n.PerKey, id
		}
		m.NodeMemory = append(m.NodeMemory, n)
	}
	return m
}
