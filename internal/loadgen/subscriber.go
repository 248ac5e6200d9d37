package loadgen

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fanout/fanout/bench/loadkit"
	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/wire"
	"google.golang.org/grpc"
)

// keyState is the latest version of one hot key a subscriber has received, and when.
// The subscriber's goroutine is the only writer; it stores at before version, so a
// reader that sees a version also sees its arrival (or a later one).
type keyState struct {
	version atomic.Uint64
	at      atomic.Int64 // arrival offset from the epoch
}

// subscriber reads one node's Subscribe stream, filtered to the run's prefix, and
// records the latency of every event. Its goroutine is the caller of run.
type subscriber struct {
	index        int // among the subscribers, for the flow-control window
	addr, nodeID string
	client       fanoutv1.FanoutServiceClient
	cc           grpc.ClientConnInterface // for the raw Subscribe stream
	cfg          *Config
	clock        clock
	// measureFrom is the offset from the epoch where measurement starts; earlier
	// stamps are warmup. Run sets it before the first event is published.
	measureFrom atomic.Int64
	rec         *recorder
	keys        []keyState      // nil without hot keys
	window      *loadkit.Window // nil without flow control
	// fromSubmittedAt is set once an event had no payload stamp.
	fromSubmittedAt atomic.Bool
}

// run subscribes and records until ctx is done. The stream is opened before run
// returns from its first Recv, so callers confirm the subscription with GetStatus.
func (s *subscriber) run(ctx context.Context) error {
	streamCtx, cancel := withoutDeadline(ctx)
	defer cancel()
	// The stream reads frames, and wire.EachDelivery takes from each only what observe
	// needs. The bench shares the cores with the nodes it measures, and a full protobuf
	// decode of every delivery (an Event, its strings and payload, a Timestamp, all
	// allocated) was 45 % of its CPU in a saturated run: CPU the nodes did not get. A
	// NATS bench client, likewise, does not decode what it counts.
	desc := &fanoutv1.FanoutService_ServiceDesc.Streams[1]
	stream, err := s.cc.NewStream(streamCtx, desc, fanoutv1.FanoutService_Subscribe_FullMethodName)
	if err == nil {
		err = stream.SendMsg(&fanoutv1.SubscribeRequest{TaskIdPrefix: s.cfg.Prefix, MaxBatch: uint32(s.cfg.SubscribeBatch)})
	}
	if err == nil {
		err = stream.CloseSend()
	}
	if err != nil {
		return fmt.Errorf("subscriber on %s: %w", s.addr, err)
	}
	var frame frame.Frame
	for {
		if err := stream.RecvMsg(&frame); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("subscriber on %s: %w", s.addr, err)
		}
		arrival := s.clock.since()
		if err := wire.EachDelivery(frame.B, func(d *wire.Delivery) { s.observe(d, arrival) }); err != nil {
			return fmt.Errorf("subscriber on %s: SubscribeResponse: %w", s.addr, err)
		}
	}
}

// observe records one event that arrived at offset arrival.
func (s *subscriber) observe(d *wire.Delivery, arrival time.Duration) {
	st, ok := loadkit.ReadStamp(d.Payload)
	if !ok {
		s.fromSubmittedAt.Store(true)
		sent := arrival
		if d.Submitted != 0 {
			sent = time.Unix(0, d.Submitted).Sub(s.clock.epoch) // wall clock: the node's and ours
		}
		st = loadkit.Stamp{Sent: sent, Due: sent}
	}
	fromSent, fromDue := st.Latency(arrival)
	if measured := st.Measured(time.Duration(s.measureFrom.Load())); ok && measured && d.Submitted != 0 {
		accepted := time.Unix(0, d.Submitted).Sub(s.clock.epoch) // the origin's wall clock and ours
		s.rec.recordSplit(arrival, fromSent, fromDue, accepted-st.Sent, arrival-accepted)
	} else {
		s.rec.record(arrival, fromSent, fromDue, measured)
	}
	s.window.Received(s.index, 1)
	if s.keys == nil {
		return
	}
	if k, ok := parseKey(s.cfg.Prefix, d.TaskID); ok && k < len(s.keys) {
		st := &s.keys[k]
		if v := d.Version; v > st.version.Load() {
			st.at.Store(int64(arrival))
			st.version.Store(v)
		}
	}
}

// holds reports whether the subscriber has at least the version latest[k] of every key,
// and the latest arrival among those versions.
func (s *subscriber) holds(latest keyVersions) (time.Duration, bool) {
	var last time.Duration
	for k := range latest {
		want := latest[k].Load()
		if want == 0 {
			continue // never submitted
		}
		st := &s.keys[k]
		if st.version.Load() < want {
			return 0, false
		}
		last = max(last, time.Duration(st.at.Load()))
	}
	return last, true
}
