// Package e2e holds the end-to-end tests of fanout: they build cmd/sidecar once, start
// real `sidecar serve` processes on loopback ports and talk to them over gRPC, the way
// an application and its peers do.
//
// The harness lives in the _test.go files next to the tests:
//
//   - main_test.go builds the binary (TestMain) and checks for leaked goroutines.
//   - cluster_test.go starts N processes with free ports, waits for their health
//     service, and stops, kills, signals and restarts them. A node's --peers entry can
//     be routed through another address (a proxy) before the cluster starts.
//   - recorder_test.go subscribes to a node and records every delivery, and checks
//     that versions never go backwards and that the latest version per task_id is the
//     expected one.
//   - load_test.go generates events, submits them (Submit and SubmitStream) and keeps
//     the expected latest version of every task_id from the responses.
//   - convergence_test.go is the convergence checker: a ledger of what every origin
//     accepted, and the deliveries of every node across restarts and reconnects. It
//     checks that every live node ends with the winning (version, origin) of every
//     task, and that no Subscribe stream ever sees a version go backwards.
//   - faults_test.go is the fault matrix of docs/RELIABILITY.md: kill -9, SIGSTOP, a
//     slow and cut link (an in-process toxiproxy), a full inbox, a killed origin and
//     two origins on the same tasks, each during a paced load, then healed.
//
// Nothing waits with time.Sleep: every wait polls a condition with a deadline. (A
// fault's duration, e.g. "stay SIGSTOPped for 3s", is a timer: it is the fault, not
// a wait.)
//
// Set E2E_SIDECAR_RACE=1 to build the sidecar with -race as well; a node whose log
// reports a data race then fails its test.
package e2e
