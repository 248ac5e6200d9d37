package loadgen

import (
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"google.golang.org/protobuf/proto"
)

// observeMsg sends resp through the wire format and the bench's raw reader, as a
// subscriber's stream does.
func observeMsg(t *testing.T, s *subscriber, resp *fanoutv1.SubscribeResponse, arrival time.Duration) {
	t.Helper()
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.EachDelivery(b, func(d *wire.Delivery) { s.observe(d, arrival) }); err != nil {
		t.Fatal(err)
	}
}
