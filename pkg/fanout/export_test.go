package fanout

// Exports for the external tests (package fanout_test): they serve a node through
// pkg/grpcapi, which imports this package, so only an external test can.

// TestConfig is testConfig: a node's config for tests, with its peers.
var TestConfig = testConfig

// AcceptedEvents is how many submitted events the node has accepted.
func (n *Node) AcceptedEvents() uint64 { return n.submitted[subAccepted].Load() }
