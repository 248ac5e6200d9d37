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
//
// Nothing waits with time.Sleep: every wait polls a condition with a deadline.
//
// Set E2E_SIDECAR_RACE=1 to build the sidecar with -race as well; a node whose log
// reports a data race then fails its test.
package e2e
