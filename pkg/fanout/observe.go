package fanout

import (
	"sync"
	"sync/atomic"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/promhist"
	"github.com/fanout/fanout/pkg/state"
	"github.com/prometheus/client_golang/prometheus"
)

// What the node observes for /metrics beyond the batchers' counters: latencies
// (Replicate per peer, the lag of received events, ack waits) and what it received
// and accepted. Each is a plain atomic counter or an unregistered
// prometheus.Histogram (lock-free Observe) held by the node or a link; the Collector
// turns them into series at scrape time, with the labels current then (a peer's
// node id, learned from its first answer), and a removed link's series go with it.

// LatencyBuckets returns the histogram buckets (seconds) of the node's latencies, for
// other latency histograms of the same process (gRPC's handling time).
func LatencyBuckets() []float64 { return promhist.LatencyBuckets() }

// lagBuckets (seconds) go on to minutes: a peer back from a pause receives what
// waited for it, and its lag shows how long that was.
var lagBuckets = append(promhist.LatencyBuckets(), 30, 60, 300)

// Received outcomes, one per ItemStatus a Replicate answers, named as in the API.
const (
	recvOK = iota
	recvStale
	recvBusy
	recvInvalid
	recvOutcomes
)

var recvOutcomeNames = [recvOutcomes]string{"ok", "stale", "busy", "invalid"}

func recvOutcome(s fanoutv1.ItemStatus) int {
	switch s {
	case fanoutv1.ItemStatus_ITEM_STATUS_OK:
		return recvOK
	case fanoutv1.ItemStatus_ITEM_STATUS_STALE:
		return recvStale
	case fanoutv1.ItemStatus_ITEM_STATUS_BUSY:
		return recvBusy
	}
	return recvInvalid
}

// originRecv is what this node received from one origin by Replicate.
type originRecv struct {
	outcomes [recvOutcomes]atomic.Uint64
	lag      prometheus.Histogram // now - submitted_at of each event that carried one
}

// maxOriginSeries bounds the origins received counts are kept for: the origin is a
// string a peer sends, and each one is a set of series. Until peers are
// authenticated, a client of the peer port could send any number of them; past this
// many, the rest are counted together under otherOrigin.
const maxOriginSeries = 64

// otherOrigin labels the events of origins past maxOriginSeries. A node id is never
// empty, so this label cannot be a real origin's.
const otherOrigin = ""

// boundedSeries holds one *V per label (an origin, a source: a string a peer sends,
// and each one a set of series), for at most maxOriginSeries labels; the rest share
// otherOrigin. Lookups are lock-free (a copy-on-write map); adding a label takes mu.
type boundedSeries[V any] struct {
	m  atomic.Pointer[map[string]*V]
	mu sync.Mutex // serialises adding a label
}

// of returns label's value, adding one made by newV if there is room.
func (s *boundedSeries[V]) of(label string, newV func() *V) *V {
	if m := s.m.Load(); m != nil {
		if v, ok := (*m)[label]; ok {
			return v
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := map[string]*V{}
	if m := s.m.Load(); m != nil {
		old = *m
	}
	if v, ok := old[label]; ok {
		return v
	}
	key := label
	if len(old) >= maxOriginSeries { // otherOrigin is among them once the bound is hit
		key = otherOrigin
		if v, ok := old[key]; ok {
			return v
		}
	}
	next := make(map[string]*V, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	v := newV()
	next[key] = v
	s.m.Store(&next)
	return v
}

// snapshot returns the labels and their values (the map is never written).
func (s *boundedSeries[V]) snapshot() map[string]*V {
	if m := s.m.Load(); m != nil {
		return *m
	}
	return nil
}

// receivedStats counts received events per origin and outcome, and their lag.
type receivedStats struct{ boundedSeries[originRecv] }

// of returns origin's counters, adding them if there is room.
func (r *receivedStats) of(origin string) *originRecv {
	return r.boundedSeries.of(origin, func() *originRecv { return &originRecv{lag: promhist.New(lagBuckets)} })
}

// add adds a request's counts by outcome.
func (o *originRecv) add(counts *[recvOutcomes]uint64) {
	for i, c := range counts {
		if c > 0 {
			o.outcomes[i].Add(c)
		}
	}
}

// observeLag records the lag of an event submitted at submittedNanos (0: unknown,
// e.g. from an old peer). A peer's clock ahead of ours gives a negative lag, which
// counts as 0: the histogram's lowest bucket then holds clock skew too.
func (o *originRecv) observeLag(now time.Time, submittedNanos int64) {
	if submittedNanos == 0 {
		return
	}
	o.lag.Observe(max(0, float64(now.UnixNano()-submittedNanos)/1e9))
}

// Submitted outcomes, one per EventOutcome a Submit answers, named as in the API.
const (
	subAccepted = iota
	subStale
	subRefused
	subOutcomes
)

var subOutcomeNames = [subOutcomes]string{"accepted", "stale", "refused"}

func submittedOutcome(o state.Outcome) int {
	switch o {
	case state.Applied:
		return subAccepted
	case state.Stale:
		return subStale
	}
	return subRefused
}

// ackPolicies are the policies that wait, by AckPolicy number; ackWait holds one
// histogram per policy and answer (satisfied or not).
var ackPolicies = []fanoutv1.AckPolicy{
	fanoutv1.AckPolicy_ACK_POLICY_ONE, fanoutv1.AckPolicy_ACK_POLICY_QUORUM, fanoutv1.AckPolicy_ACK_POLICY_ALL,
}

func ackPolicyName(p fanoutv1.AckPolicy) string {
	switch p {
	case fanoutv1.AckPolicy_ACK_POLICY_ONE:
		return "one"
	case fanoutv1.AckPolicy_ACK_POLICY_QUORUM:
		return "quorum"
	case fanoutv1.AckPolicy_ACK_POLICY_ALL:
		return "all"
	}
	return "queued"
}

// ackWaits holds the time ack-waiting Submits spent waiting for their peers, by
// policy and by whether the policy was satisfied (false: the ack_timeout passed, or
// enough peers failed).
type ackWaits struct {
	h [fanoutv1.AckPolicy_ACK_POLICY_ALL + 1][2]prometheus.Histogram
}

func newAckWaits() *ackWaits {
	w := &ackWaits{}
	for _, p := range ackPolicies {
		w.h[p][0], w.h[p][1] = promhist.New(promhist.LatencyBuckets()), promhist.New(promhist.LatencyBuckets())
	}
	return w
}

func (w *ackWaits) observe(p fanoutv1.AckPolicy, satisfied bool, d time.Duration) {
	if int(p) >= len(w.h) || w.h[p][0] == nil {
		return
	}
	i := 0
	if satisfied {
		i = 1
	}
	w.h[p][i].Observe(d.Seconds())
}
