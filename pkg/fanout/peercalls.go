package fanout

import (
	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// The anti-entropy calls of PeerService (sync.go runs the rounds; these answer a
// peer's), as the edge calls them: a draining node takes none (ErrShuttingDown).

// Digest answers a peer's Digest: the digests of this node's key ranges, for the
// peer to compare with its own. It notes the caller (a peer that is not in the set:
// Config.OnUnknownPeer).
func (n *Node) Digest(req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error) {
	if n.Draining() {
		return nil, ErrShuttingDown
	}
	n.noteCaller(req.GetNodeId())
	return n.syncer.Digest(req)
}

// Pull answers a peer's Pull: the entries of the ranges it asks for, through send.
func (n *Node) Pull(req *fanoutv1.PullRequest, send func(*fanoutv1.PullResponse) error) error {
	if n.Draining() {
		return ErrShuttingDown
	}
	return n.syncer.Pull(req, send)
}

// Push takes the entries a peer pushes, from that peer as its listener authenticated
// it: with peers authenticated (Config.AuthenticatePeers), a Push names its caller
// truly, as a Replicate does, and the entries' relayer (sync.go) is then who the
// certificate says.
func (n *Node) Push(from Caller, req *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error) {
	if err := n.authorize(from, req.GetNodeId()); err != nil {
		return nil, err
	}
	if n.Draining() {
		return nil, ErrShuttingDown
	}
	return n.syncer.Push(req)
}
