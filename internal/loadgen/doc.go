// Package loadgen is `sidecar bench`: a load generator for a fanout cluster, in the
// manner of `nats bench`. The command in cmd/sidecar turns flags into a Config and
// calls Run; everything else happens here.
//
// # The life of a run
//
// Nodes. With Config.Spawn, startCluster starts that many `sidecar serve` processes
// of Config.Binary on 127.0.0.1 ports reserved with internal/freeport (no other process
// takes them until the nodes have exited), admin listener off, each peered with all
// the others, and polls their gRPC health service until every one is SERVING. The
// processes get their own process group (Ctrl-C reaches only the bench) and SIGTERM
// if the bench dies. With Config.AppAddrs the nodes are already running.
//
// Subscribers. One Subscribe stream opens on every node but the first, filtered to
// the run's task_id prefix (Config.Prefix, unique per run, so that leftovers of an
// earlier run or other traffic are not counted). Run waits until each node's
// GetStatus counts the new subscriber: a stream follows changes from the moment it is
// counted, so an event published earlier would not reach it.
//
// The clock. All offsets are from one epoch read with Config.Now, using its monotonic
// reading. Publishing starts at window.start; events stamped before
// window.measureFrom (= start + Warmup) are warmup and are not measured; publishing
// stops at window.end (= measureFrom + Duration).
//
// Publishers. Each is one SubmitStream on its own connection to the first node. Its
// send loop follows the open-loop schedule of bench/loadkit.Pacer (shared with
// bench/natsbench): the request carrying events [n, n+batch) is due when the last of
// them has been offered at Rate/Publishers events/s, and a paced publisher never waits
// for responses. With Rate 0 at most Pipeline requests are in flight, and with Window
// at most that many events not yet received by every subscriber (loadkit.Window). The
// receive goroutine matches each SubmitResponse to its request by request_id, counts
// the events and, with hot keys, raises the latest version of each key from
// SubmitResponse.versions. Requests are written and responses read as bytes
// (wire.AppendSubmitEvent, wire.ParseSubmitResponse), as the subscribers read
// deliveries (wire.EachDelivery): the bench shares the machine with the nodes it
// measures, so it builds no message per event.
//
// With Config.Client = ClientPublisher (--client publisher) a publisher is instead
// what an app making one call per event is: the Go client's asynchronous Publisher
// (pkg/client, its defaults) on its own connection, one Put per event (a send of the
// schedule is Batch Puts sharing one stamp), the Publisher packing the Puts queued
// meanwhile into SubmitStream requests; a checker goroutine reads each Put's result in
// order and counts it as a response would be counted (asyncpub.go). The pacer, the
// stamps and the window are the same; Pipeline does not apply (the Publisher keeps at
// most 8 requests in flight).
//
// Latency. The first 16 bytes of every payload are a loadkit.Stamp: the actual send
// time (the clock read right before Send) and the time the request was due on the
// schedule, nanoseconds since the epoch. A subscriber subtracts both from the arrival
// time and records the differences in HdrHistograms (1 µs to 60 s, 3 significant
// figures): the latency is from the actual send; the one from the due time adds the
// publisher's lag, so a bench that falls behind shows the backlog there instead of
// hiding it (no coordinated omission). An event is measured when it was due in the
// measured window. Sender and receiver are the same process, so the figures are exact
// even when the nodes run on other machines. A payload shorter than 8 bytes carries no
// stamp; the origin's submitted_at is used then, which compares two wall clocks.
// With a stamp, the measured latency is also split at the origin's submitted_at
// (Result.ToOrigin and FromOrigin): the app's side of Submit, and replication and
// delivery. That split compares the origin's wall clock with the bench's.
//
// Live view. Every Interval a line shows submitted/s and delivered/s, the p50 and p99
// of the events delivered in that interval, and the sum of pending over the first
// node's peers (GetStatus).
//
// Drain. After the last response, Run waits until the subscribers have caught up:
// with hot keys, until every subscriber holds the latest version of every key (the
// convergence time is from the last submit to the arrival of the last such version);
// otherwise until every subscriber has every accepted event. It gives up after
// DrainTimeout, or when the first node has nothing pending or in flight and nothing
// has arrived for a while (the rest was dropped).
//
// Result. Lost is Submitted × subscribers − Delivered (unique keys). The counters of
// the first node's peers (overridden, wire
// events = succeeded + stale, dropped, retried) are differences of GetStatus between
// the start of the measured window and the end. The spawned nodes' CPU is the
// difference of /proc/<pid>/stat over the same span; their peak RSS comes from the
// rusage of each exited process. The nodes are stopped with SIGTERM and waited for
// (killed after StopTimeout).
//
// Every goroutine has an owner that cancels it and waits for it: Run owns the
// subscribers, the publishers and the reporter; a publisher owns its receive
// goroutine; the cluster owns one waiter per process.
package loadgen
