package fanout

// Exports for the external tests (package fanout_test): they serve a node through
// pkg/grpcapi, which imports this package, so only an external test can.

// NodeConfig is nodeConfig: a node's config and its mesh's, for tests.
type NodeConfig = nodeConfig

// TestConfig is testConfig: a node's config for tests, with its peers.
var TestConfig = testConfig

// NewMeshNode is newMeshNode: the node of cfg with its mesh, wired as the sidecar
// wires them.
var NewMeshNode = newMeshNode

// AcceptedEvents is how many submitted events the node has accepted.
func (n *Node) AcceptedEvents() uint64 { return n.submitted[subAccepted].Load() }
