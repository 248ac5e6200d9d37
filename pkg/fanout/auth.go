package fanout

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// Errors of peer authentication; the gRPC edge maps them to UNAUTHENTICATED and
// PERMISSION_DENIED.
var (
	// ErrUnauthenticated: peers must authenticate (mutual TLS) and this call did not.
	ErrUnauthenticated = errors.New("fanout: peer not authenticated")
	// ErrForbidden: the caller wrote as another node than itself.
	ErrForbidden = errors.New("fanout: origin is not the caller")
)

// Caller is the peer that made a call, as its listener authenticated it. The edge
// reads it from its connection (pkg/grpcapi: the verified client certificate of
// mutual TLS) and hands it to the node as data; the node decides with it
// (Config.AuthenticatePeers).
type Caller struct {
	// IDs are the node identities the caller's certificate names.
	IDs []string
	// Authenticated: the call came with a verified client certificate. The zero
	// Caller is a call that did not.
	Authenticated bool
}

// refusals counts the peer calls authorize refused, for /metrics, and spaces the
// WARN lines about them.
type refusals struct {
	unauthenticated, origin atomic.Uint64
	lastLog                 atomic.Int64 // unix nanos of the last WARN line
}

// refusalLogEvery spaces the WARN lines: a misconfigured or hostile peer retries.
const refusalLogEvery = 10 * time.Second

// authorize checks, with peers authenticated (Config.AuthenticatePeers), that from
// is origin: a peer writes (Replicate) and pushes (anti-entropy Push) only as itself.
func (n *Node) authorize(from Caller, origin string) error {
	if !n.cfg.AuthenticatePeers {
		return nil
	}
	ids := from.IDs
	var err error
	switch {
	case !from.Authenticated:
		n.refused.unauthenticated.Add(1)
		err = fmt.Errorf("%w: the peer listener requires a client certificate", ErrUnauthenticated)
	case !slices.Contains(ids, origin):
		n.refused.origin.Add(1)
		err = fmt.Errorf("%w: the call names node %q, but the caller's certificate names %q", ErrForbidden, origin, ids)
	default:
		return nil
	}
	now := n.cfg.Now().UnixNano()
	if last := n.refused.lastLog.Load(); now-last >= int64(refusalLogEvery) && n.refused.lastLog.CompareAndSwap(last, now) {
		n.log.Warn("refused a peer's call", "err", err.Error(),
			"refused_unauthenticated", n.refused.unauthenticated.Load(), "refused_origin", n.refused.origin.Load())
	}
	return err
}
