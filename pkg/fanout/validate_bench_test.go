package fanout

import (
	"fmt"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// BenchmarkValidateSubmit measures validateSubmit of a request of batch events of 100
// bytes with a ttl and two attributes, as an app sends them (no unknown fields).
func BenchmarkValidateSubmit(b *testing.B) {
	l := DefaultLimits()
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			req := &fanoutv1.SubmitRequest{Events: make([]*fanoutv1.Event, batch)}
			for i := range req.Events {
				req.Events[i] = &fanoutv1.Event{TaskId: fmt.Sprintf("register#ORDERS/i-%d", i), Payload: make([]byte, 100),
					Attributes: map[string]string{"zone": "a", "status": "UP"}, Ttl: durationpb.New(30e9)}
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := l.validateSubmit(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
