// Package loadkit is what the two load generators of `make bench-compare` share, so
// that fanout and NATS are offered the same load and timed the same way:
//
//   - Pacer: the open-loop schedule. A send is due when the last of its events has
//     been offered at the rate; the pacer never waits for replies.
//   - Stamp: the two times written into the first 16 bytes of every payload, the
//     actual send time and the due time, and the two latencies read from them.
//   - NewHistogram and Summarize: one histogram range and one set of percentiles.
//   - Window: the end-to-end flow control of a saturated run, so that neither
//     system is overrun and loses events.
//   - ProcCPU, ExitUsage, SelfCPU, ChildAttr: CPU and peak RSS of the server
//     processes, read the same way for both.
//   - Settle: the settled resident set of server processes (after a forced GC and
//     the scavenger), for the memory workload.
//
// `sidecar bench` (internal/loadgen) and bench/natsbench import it. It is not under
// internal/ because bench/natsbench is a module of its own (so that the NATS client
// stays out of the product's go.mod), and Go refuses an import of another module's
// internal packages. It is not part of the product: nothing under pkg/ imports it,
// and it depends only on the standard library and HdrHistogram.
package loadkit
