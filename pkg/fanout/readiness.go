package fanout

// Ready is closed when the node's transport has brought it up to date at start (the
// mesh: its first sync with its peers ended, or its SyncTimeout passed): the named
// health service fanout.v1.FanoutService turns SERVING.
func (n *Node) Ready() <-chan struct{} { return n.tr.Ready() }

// Readiness reports whether the node is ready, and why (or why not) in words: not
// while it drains, nor while its data dir refuses commits, nor while its transport is
// not ready (the mesh: its ReadyCheck fails, or its bootstrap has not ended).
func (n *Node) Readiness() (bool, string) {
	if n.draining.Load() {
		return false, "draining: shutting down"
	}
	if n.persist != nil {
		if ok, reason := n.persist.Fault(); !ok {
			return false, reason
		}
	}
	return n.tr.Readiness()
}

// ReadinessChanged is closed when Readiness may have changed after Ready: a data dir
// whose commits start or stop failing. Ask for it again after each close.
func (n *Node) ReadinessChanged() <-chan struct{} {
	if n.persist == nil {
		return nil
	}
	return n.persist.FaultChanged()
}
