package event

import (
	"fmt"
	"math"
	"strings"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestEventBytesIsTheMost: an event at every limit (the longest task_id, payload
// and version, the most attributes of the most bytes, the longest ttl, deleted)
// encodes to at most EventBytes, and not much less: the bound leaves unknown fields
// no room beside a maximal event.
func TestEventBytesIsTheMost(t *testing.T) {
	for _, l := range []Limits{DefaultLimits(), {MaxTaskIDBytes: 16, MaxEventBytes: 64, MaxAttributes: 2, MaxAttributeBytes: 24}} {
		attrs := map[string]string{}
		per := l.MaxAttributeBytes / l.MaxAttributes
		for i := range l.MaxAttributes {
			k := fmt.Sprintf("%0*d", per/2, i)
			attrs[k] = strings.Repeat("v", per-len(k))
		}
		ev := &fanoutv1.Event{
			TaskId: strings.Repeat("t", l.MaxTaskIDBytes), Payload: make([]byte, l.MaxEventBytes), Attributes: attrs,
			Version: math.MaxUint64, Ttl: &durationpb.Duration{Seconds: 315576000000, Nanos: 999999999}, Deleted: true,
		}
		if err := l.validateEvent(0, ev); err != nil {
			t.Fatalf("the maximal event is invalid: %v", err)
		}
		size, bound := proto.Size(ev), l.EventBytes()
		if size > bound || bound-size > 4*l.MaxAttributes+8 {
			t.Errorf("limits %+v: the maximal event is %d bytes, EventBytes %d", l, size, bound)
		}
	}
}
