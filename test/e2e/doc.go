// Package e2e holds the end-to-end tests of fanout: they build cmd/sidecar once, start
// real `sidecar serve` processes on loopback ports and talk to them over gRPC, the way
// an application and its peers do.
//
// The harness lives in the _test.go files next to the tests:
//
//   - main_test.go builds the binary and internal/watcher (TestMain) and checks for
//     leaked goroutines.
//   - cluster_test.go starts N processes on ports reserved with internal/freeport
//     (outside the kernel's ephemeral range, locked across processes), waits until
//     each is live (the empty health service name) and ready (the named service
//     fanout.v1.FanoutService: its bootstrap sync has ended), and stops, kills,
//     signals and restarts them (with changed flags, if need be). A node's --peers
//     entry can be routed through another address (a proxy) before the cluster
//     starts. It reads GetStatus (readiness, peers) and /metrics.
//   - recorder_test.go subscribes to a node (any SubscribeRequest: prefix, snapshot,
//     from_revision, include_own, batches) and records every delivery with its
//     revision, and checks what a stream promises: versions never go backwards,
//     revisions rise, a snapshot is closed by one snapshot_complete, and the latest
//     version per task_id is the expected one.
//   - watcher_test.go runs internal/watcher, a Subscribe client in a process of its
//     own, so that a test can freeze an app with SIGSTOP.
//   - state_test.go reads a node's state table with Get and compares it with what
//     the origins accepted.
//   - load_test.go generates events, submits them (Submit and SubmitStream, back to
//     back or paced) and keeps the expected latest state of every task_id from the
//     responses (versions, and results: STALE and REFUSED events are nobody's state).
//   - convergence_test.go is the convergence checker: a ledger of what every origin
//     accepted, and the deliveries of every node across restarts and reconnects. It
//     checks that every live node's app and state table end with the winning
//     (version, origin) of every task (a restarted node too: bootstrap and
//     anti-entropy bring it back), and that no Subscribe stream ever sees a version
//     go backwards.
//   - catchup_test.go checks catch-up with real processes: a new node
//     bootstraps 10,000 keys before it turns ready, anti-entropy repairs what an
//     overflowing queue lost for a killed or a frozen peer, and a frozen peer does
//     not hold up the repair between the others.
//   - durability_test.go checks --data-dir and restarts under load, with
//     writers that keep going while nodes die (only what a node acknowledged is
//     promised): 20 rounds of kill -9 of a random node with a data dir on every
//     node lose no acknowledged event; a rolling restart, with and without data
//     dirs, loses no key; SIGTERM of a receiver under ACK_POLICY_ALL loses no
//     satisfied event and its senders keep what it refused; a restarted node's
//     clock never goes below its persisted high-water mark.
//   - faults_test.go is the fault matrix of docs/RELIABILITY.md: kill -9, SIGSTOP, a
//     slow and cut link (an in-process toxiproxy), a state table at its bound, an
//     absent app, a killed origin and two origins on the same tasks, each during a
//     paced load, then healed.
//
// bytes_test.go checks that every byte is bounded (issue 12, item 4): a 300 MiB
// message to either listener is refused within seconds while the node's peak RSS
// (/proc/<pid>/status VmHWM) stays far below it; unknown fields count toward an
// event's bytes on both paths; a peer that takes smaller messages than its sender
// sends gets split batches and drops (too_large) what it refuses alone, never a retry
// loop.
//
// jetstream_test.go runs sidecars on --transport=jetstream against a real 3-server
// NATS cluster (internal/natstest, its pinned nats-server built on first use, not by
// TestMain): every node converges under the convergence checker, a node started later
// turns ready with every key in its Subscribe snapshot, and --peers on that transport
// exits with an error naming --transport.
//
// The tests of the state table are watch_test.go (snapshot, resume,
// prefixes, large batches), isolation_test.go (a frozen subscriber, a publish-only
// node), lww_test.go (the highest version wins) and TestFullStateTablePushesBack in
// delivery_test.go.
//
// Nothing waits with time.Sleep: every wait polls a condition with a deadline. (A
// fault's duration, e.g. "stay SIGSTOPped for 3s", is a timer: it is the fault, not
// a wait.)
//
// Set E2E_SIDECAR_RACE=1 to build the sidecar with -race as well; a node whose log
// reports a data race then fails its test.
//
// test/ is a module of its own (test/go.mod replaces the product with this checkout),
// so that toxiproxy and its dependencies stay out of the product's go.mod: run the
// tests with `go -C test test ./e2e/` from the repository's root, or `make unit`.
// TestMain builds cmd/sidecar in the product's module, with the product's go.mod.
package e2e
