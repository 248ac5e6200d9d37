package fanout

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestHLC(t *testing.T) {
	wall := time.UnixMilli(1_000_000)
	c := hlc{now: func() time.Time { return wall }}
	base := uint64(1_000_000) << logicalBits

	if v := c.reserve(3); v != base {
		t.Fatalf("first reserve = %d, want the wall version %d", v, base)
	}
	if v := c.reserve(1); v != base+3 {
		t.Fatalf("same millisecond: %d, want logical counter %d", v, base+3)
	}
	wall = wall.Add(-time.Hour) // the wall clock steps back
	if v := c.reserve(1); v != base+4 {
		t.Fatalf("clock stepped back: %d, want still monotonic %d", v, base+4)
	}
	wall = wall.Add(2 * time.Hour)
	if v := c.reserve(1); v != uint64(wall.UnixMilli())<<logicalBits {
		t.Fatalf("clock moved on: %d, want wall version", v)
	}
	ahead := wallVersion(wall.Add(30 * time.Second))
	c.observe(ahead)
	if v := c.reserve(1); v != ahead+1 {
		t.Fatalf("after observing a peer 30s ahead: %d, want %d", v, ahead+1)
	}
	c.observe(wallVersion(wall.Add(2 * time.Hour))) // beyond maxObservedSkew: ignored
	if v := c.reserve(1); v != ahead+2 {
		t.Fatalf("a far-future version moved the clock: %d", v)
	}
	c.observe(7) // an app's small counter: no effect
	if v := c.reserve(1); v != ahead+3 {
		t.Fatalf("small version moved the clock: %d", v)
	}
}

func TestHLCConcurrentUnique(t *testing.T) {
	c := hlc{now: time.Now}
	const goroutines, per = 8, 1000
	seen := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				seen[g] = append(seen[g], c.reserve(1))
			}
		}()
	}
	wg.Wait()
	all := map[uint64]bool{}
	for _, s := range seen {
		for i, v := range s {
			if all[v] {
				t.Fatalf("version %d handed out twice", v)
			}
			if i > 0 && v <= s[i-1] {
				t.Fatalf("not monotonic within a goroutine: %d after %d", v, s[i-1])
			}
			all[v] = true
		}
	}
}

func TestValidateSubmit(t *testing.T) {
	l := DefaultLimits()
	l.MaxEventBytes = 10
	many := map[string]string{}
	for i := range 65 {
		many[fmt.Sprint(i)] = ""
	}
	cases := []struct {
		name string
		req  *fanoutv1.SubmitRequest
		want string // "" means valid
	}{
		{"empty request is valid", &fanoutv1.SubmitRequest{}, ""},
		{"valid event", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "k", Payload: []byte("0123456789"), Ttl: durationpb.New(time.Second)}}}, ""},
		{"empty task_id", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "ok"}, {}}}, "events[1].task_id: empty"},
		{"long task_id", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: strings.Repeat("x", 1025)}}}, "events[0].task_id: 1025 bytes"},
		{"null event", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{nil}}, "events[0]: null event"},
		{"payload too big", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "k", Payload: make([]byte, 11)}}}, "events[0].payload: 11 bytes, at most 10"},
		{"too many attributes", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "k", Attributes: many}}}, "events[0].attributes: 65 entries"},
		{"attributes too big", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "k", Attributes: map[string]string{"k": strings.Repeat("v", 16<<10)}}}}, "events[0].attributes: 16385 bytes"},
		{"negative ttl", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "k", Ttl: durationpb.New(-time.Second)}}}, "events[0].ttl: negative"},
		{"malformed ttl", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "k", Ttl: &durationpb.Duration{Seconds: 1, Nanos: -1}}}}, "events[0].ttl"},
		{"negative ack_timeout", &fanoutv1.SubmitRequest{AckTimeout: durationpb.New(-time.Second)}, "ack_timeout: negative"},
		{"unknown ack policy", &fanoutv1.SubmitRequest{Ack: 99}, "ack: unknown policy 99"},
		{"too many events", &fanoutv1.SubmitRequest{Events: make([]*fanoutv1.Event, 10001)}, "events: 10001 events, at most 10000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := l.validateSubmit(c.req)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("rejected valid request: %v", err)
			case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
				t.Fatalf("err = %v, want prefix %q", err, c.want)
			}
		})
	}
}

func TestMaxMessageBytesFitsLimits(t *testing.T) {
	l := DefaultLimits()
	if got := l.MaxMessageBytes(250); got < 250*(l.MaxEventBytes+l.MaxAttributeBytes) {
		t.Fatalf("MaxMessageBytes(250) = %d: a full batch of maximal events would not fit", got)
	}
	if got := l.MaxMessageBytes(l.MaxEvents); got != 1<<30 {
		t.Fatalf("MaxMessageBytes(max) = %d, want the 1 GiB cap", got)
	}
}
