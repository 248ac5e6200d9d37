package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fanout/fanout/bench/loadkit"
)

// Result is what a run measured. Its JSON form is the one line `sidecar bench --json`
// prints; docs/BENCH.md explains every field.
type Result struct {
	// The workload.
	Nodes       int     `json:"nodes"`
	Spawned     bool    `json:"spawned"`
	Publishers  int     `json:"publishers"`
	Client      string  `json:"client"`
	Subscribers int     `json:"subscribers"`
	Rate        int     `json:"rate"`
	Batch       int     `json:"batch"`
	Pipeline    int     `json:"pipeline"`
	Window      int     `json:"window"`
	Payload     int     `json:"payload"`
	Keys        int     `json:"keys"`
	DurationSec float64 `json:"duration_s"`
	WarmupSec   float64 `json:"warmup_s"`

	// Submitted counts the events sent in the measured window that the first node
	// accepted; Delivered the deliveries of those events, summed over subscribers.
	Submitted       uint64  `json:"submitted"`
	Delivered       uint64  `json:"delivered"`
	SubmitPerSec    float64 `json:"submit_per_sec"`
	DeliveredPerSec float64 `json:"delivered_per_sec"`
	// Latency is from the actual send to the arrival at a subscriber, over every
	// measured delivery.
	Latency
	// LatencyFromDue is from the time the send was due on the schedule to the arrival:
	// Latency plus the publisher's lag (timer rounding, backlog). Equal to Latency
	// for --rate 0.
	LatencyFromDue Latency `json:"latency_from_due"`
	// SendLag is the publishers' lateness per send: actual send minus due time.
	SendLag Latency `json:"send_lag"`
	// ToOrigin and FromOrigin split Latency at the origin's accept (each delivery's
	// submitted_at, the first node's wall clock): from the send to the accept (the
	// app's side of Submit), and from the accept to the arrival at a subscriber
	// (replication and delivery). Percentiles of the two parts do not add up to
	// Latency's. Absent when the payload holds no stamp.
	ToOrigin   *Latency `json:"to_origin,omitempty"`
	FromOrigin *Latency `json:"from_origin,omitempty"`
	// LatencyFrom says where the send time came from: "payload" (a stamp in the
	// first 8 bytes) or "submitted_at" (the origin's accept time, for --payload < 8).
	LatencyFrom string `json:"latency_from"`

	// Counters of the first node's peers over the run (differences of GetStatus).
	Overridden uint64 `json:"overridden"`
	WireEvents uint64 `json:"wire_events"`
	Dropped    uint64 `json:"dropped"`
	Retried    uint64 `json:"retried"`
	// NotAccepted counts the events the first node did not accept (STALE, or
	// REFUSED at a state table bound), over the whole run. They are not in Submitted.
	NotAccepted uint64 `json:"not_accepted"`
	// Lost is Submitted × Subscribers − Delivered at the end of the drain: measured
	// events some subscriber never received. Unique keys only (absent with --keys,
	// where coalescing is the point).
	Lost *uint64 `json:"lost,omitempty"`
	// WindowStalls counts the times the window waited 2 s for the subscribers in
	// vain and wrote the outstanding events off (WrittenOff of them).
	WindowStalls int64 `json:"window_stalls,omitempty"`
	WrittenOff   int64 `json:"window_written_off,omitempty"`

	// ConvergeMs is, with --keys > 0, the time from the last submit until every
	// subscriber held the latest version of every key; Converged is false if the
	// drain timed out first.
	ConvergeMs *float64 `json:"converge_ms,omitempty"`
	Converged  *bool    `json:"converged,omitempty"`

	// Resource use of the spawned nodes (absent with --app-addrs). CPU is user+sys
	// over the measured window and the drain; peak RSS is the largest node's.
	NodeCPUSeconds    float64 `json:"node_cpu_seconds,omitempty"`
	NodePeakRSSBytes  int64   `json:"node_peak_rss_bytes,omitempty"`
	CPUUsPerDelivered float64 `json:"cpu_us_per_delivered,omitempty"`

	// BenchCPUSeconds is the bench process's own user+sys CPU over the same window:
	// on one machine it competes with the nodes, so a saturated run is only as fast as
	// the cores left over.
	BenchCPUSeconds float64 `json:"bench_cpu_seconds,omitempty"`

	// Interrupted is set when the run was stopped (Ctrl-C) before it finished.
	Interrupted bool `json:"interrupted,omitempty"`

	// NodeResults are the spawned nodes' CPU and peak RSS, one by one.
	NodeResults []NodeResult `json:"node_usage,omitempty"`
	// EngineCPUSeconds and EngineResults are the --engine-pid processes' (the NATS
	// servers of the JetStream transport) over the same window as the nodes'.
	EngineCPUSeconds float64      `json:"engine_cpu_seconds,omitempty"`
	EngineResults    []NodeResult `json:"engine_usage,omitempty"`
	// SubscriberResults are for the table only.
	SubscriberResults []SubscriberResult `json:"-"`
}

// SubscriberResult is one subscriber's share of a Result.
type SubscriberResult struct {
	Addr      string
	NodeID    string
	Delivered uint64
	PerSec    float64
	Latency   Latency
}

// NodeResult is one spawned node's CPU and peak RSS.
type NodeResult = loadkit.NodeUsage

// WriteJSON writes r as one line of JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// WriteTable writes r for a human: one row per subscriber, then the totals.
func (r *Result) WriteTable(w io.Writer) error {
	var b strings.Builder
	if r.Interrupted {
		b.WriteString("\ninterrupted: the figures cover the run until Ctrl-C\n")
	}
	fmt.Fprintf(&b, "\n%s\n\n", r.headline())
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SUBSCRIBER\tNODE\tDELIVERED\tPER SEC\tP50\tP90\tP99\tP99.9\tMAX\t")
	for _, s := range r.SubscriberResults {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%s\t", s.Addr, s.NodeID, s.Delivered, s.PerSec, latencyCells(s.Latency))
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "all\t\t%d\t%.0f\t%s\t\n", r.Delivered, r.DeliveredPerSec, latencyCells(r.Latency))
	tw.Flush()
	fmt.Fprintf(&b, "\nsubmitted %d (%.0f/s)   latency from %s   bench cpu %.2f s\n", r.Submitted, r.SubmitPerSec, r.LatencyFrom, r.BenchCPUSeconds)
	if r.Rate > 0 {
		fmt.Fprintf(&b, "from the due time: p50 %s  p99 %s  p99.9 %s   send lag p99 %s  max %s\n",
			fmtUs(r.LatencyFromDue.P50), fmtUs(r.LatencyFromDue.P99), fmtUs(r.LatencyFromDue.P999), fmtUs(r.SendLag.P99), fmtUs(r.SendLag.Max))
	}
	if r.ToOrigin != nil {
		fmt.Fprintf(&b, "split at the origin's accept: send to accept p50 %s  p99 %s   accept to arrival p50 %s  p99 %s\n",
			fmtUs(r.ToOrigin.P50), fmtUs(r.ToOrigin.P99), fmtUs(r.FromOrigin.P50), fmtUs(r.FromOrigin.P99))
	}
	if r.Lost != nil {
		fmt.Fprintf(&b, "lost %d of %d (submitted × subscribers)", *r.Lost, r.Submitted*uint64(r.Subscribers))
		if r.Window > 0 {
			fmt.Fprintf(&b, "   window %d events, %d stalls", r.Window, r.WindowStalls)
		}
		fmt.Fprintln(&b)
	}
	fmt.Fprintf(&b, "first node's peers: overridden %d   wire events %d   retried %d   dropped %d\n", r.Overridden, r.WireEvents, r.Retried, r.Dropped)
	if r.NotAccepted > 0 {
		fmt.Fprintf(&b, "not accepted by the first node: %d events (STALE, or REFUSED at --state-max-keys/--state-max-bytes)\n", r.NotAccepted)
	}
	r.writeConvergence(&b)
	r.writeNodes(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Result) headline() string {
	rate := "unpaced"
	if r.Rate > 0 {
		rate = fmt.Sprintf("%d events/s", r.Rate)
	}
	keys := "every task_id unique"
	if r.Keys > 0 {
		keys = fmt.Sprintf("%d hot keys", r.Keys)
	}
	return fmt.Sprintf("fanout bench: %d nodes, %d publisher(s) (--client %s) → %d subscriber(s); %s, batch %d, payload %d B, %s; %s measured after %s warmup",
		r.Nodes, r.Publishers, r.Client, r.Subscribers, rate, r.Batch, r.Payload, keys, fmtSeconds(r.DurationSec), fmtSeconds(r.WarmupSec))
}

func (r *Result) writeConvergence(w io.Writer) {
	switch {
	case r.Converged == nil:
	case *r.Converged && r.ConvergeMs != nil:
		fmt.Fprintf(w, "converged: every subscriber held the latest version of every key %.1f ms after the last submit\n", *r.ConvergeMs)
	default:
		fmt.Fprintln(w, "NOT converged: some subscriber lacked the latest version of some key when the drain timed out")
	}
}

func (r *Result) writeNodes(w io.Writer) {
	for _, n := range r.EngineResults {
		fmt.Fprintf(w, "engine %s: cpu %.2f s   peak rss %.1f MiB%s\n", n.NodeID, n.CPUSeconds, float64(n.PeakRSSBytes)/(1<<20), connsCell(n.TCPConns))
	}
	if len(r.EngineResults) > 0 && r.Delivered > 0 {
		fmt.Fprintf(w, "engine: cpu %.2f s (%.1f µs per delivered event)\n", r.EngineCPUSeconds, r.EngineCPUSeconds*1e6/float64(r.Delivered))
	}
	if len(r.NodeResults) == 0 {
		return
	}
	for _, n := range r.NodeResults {
		fmt.Fprintf(w, "node %s: cpu %.2f s   peak rss %.1f MiB%s\n", n.NodeID, n.CPUSeconds, float64(n.PeakRSSBytes)/(1<<20), connsCell(n.TCPConns))
	}
	fmt.Fprintf(w, "nodes: cpu %.2f s (%.1f µs per delivered event)   peak rss %.1f MiB\n",
		r.NodeCPUSeconds, r.CPUUsPerDelivered, float64(r.NodePeakRSSBytes)/(1<<20))
}

// connsCell is a process's established TCP connections, when they were read.
func connsCell(n *int) string {
	if n == nil {
		return ""
	}
	return fmt.Sprintf("   tcp connections %d", *n)
}

func latencyCells(l Latency) string {
	return strings.Join([]string{fmtUs(l.P50), fmtUs(l.P90), fmtUs(l.P99), fmtUs(l.P999), fmtUs(l.Max)}, "\t")
}

// fmtUs prints microseconds at a readable scale: 412µs, 2.13ms, 1.20s.
func fmtUs(us int64) string {
	switch {
	case us < 1000:
		return fmt.Sprintf("%dµs", us)
	case us < 1_000_000:
		return fmt.Sprintf("%.2fms", float64(us)/1e3)
	default:
		return fmt.Sprintf("%.2fs", float64(us)/1e6)
	}
}

func fmtSeconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).String()
}
