package sidecar

import (
	"log/slog"
	"time"

	"github.com/fanout/fanout/pkg/fanout"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// readinessPoll is how often the readiness health service is read again from the
// node once its bootstrap has ended. Readiness changes with time as well as with
// events (a peer certificate expires; a renewed one is written), and a second is
// well within the kubelet's probe period (10s by default). A read is a few atomic
// loads.
const readinessPoll = time.Second

// readinessNode is what publishReadiness reads: *fanout.Node.
type readinessNode interface {
	Ready() <-chan struct{}
	Done() <-chan struct{}
	Draining() bool
	Readiness() (bool, string)
	ReadinessChanged() <-chan struct{}
}

var _ readinessNode = (*fanout.Node)(nil)

// publishReadiness keeps the named health service ReadinessService equal to
// n.Readiness() (which /readyz, GetStatus and fanout_ready read directly): it stays
// NOT_SERVING until the bootstrap ends, then follows every change, read at once when
// the node signals one (ReadinessChanged: a data dir whose commits fail, then work) and
// at every tick of poll (for what changes with time alone, such as a certificate's
// expiry; the caller owns the ticker, every readinessPoll), and logs each (INFO when
// ready, WARN with the reason when not). It returns when the node closes. After
// h.Shutdown (draining) its updates are no-ops.
func publishReadiness(n readinessNode, h *health.Server, poll <-chan time.Time, log *slog.Logger) {
	select {
	case <-n.Ready():
	case <-n.Done():
		return
	}
	first, was := true, false
	for {
		changed := n.ReadinessChanged() // before Readiness: a change after it closes this
		if ready, reason := n.Readiness(); (first || ready != was) && !n.Draining() {
			first, was = false, ready
			if ready {
				h.SetServingStatus(ReadinessService, healthpb.HealthCheckResponse_SERVING)
				log.Info("ready", "reason", reason)
			} else {
				h.SetServingStatus(ReadinessService, healthpb.HealthCheckResponse_NOT_SERVING)
				log.Warn("not ready", "reason", reason)
			}
		}
		select {
		case <-poll:
		case <-changed:
		case <-n.Done():
			return
		}
	}
}
