package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/event"
	"github.com/fanout/fanout/pkg/state"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

func TestCheckServer(t *testing.T) {
	for v, ok := range map[string]bool{
		"2.15.2": true, "2.9.21": true, "2.10.0": true, "3.0.0": true, "2.11.0-RC.1": true,
		"2.9.20": false, "2.9.10": false, "1.99.99": false, "": false, "2.x.1": false,
	} {
		if err := checkServer(v); (err == nil) != ok {
			t.Errorf("checkServer(%q) = %v, want ok %t", v, err, ok)
		}
	}
}

func testStreamConfig(bucket string, replicas int) Config {
	c := DefaultConfig()
	c.Bucket, c.Replicas = bucket, replicas
	return c
}

func connect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func testMessage(t testing.TB, taskID string, st state.Stamp, payload int) *message {
	t.Helper()
	raw, err := proto.Marshal(&fanoutv1.Event{TaskId: taskID, Payload: make([]byte, payload), Version: st.Version})
	if err != nil {
		t.Fatal(err)
	}
	m, err := messageOf(st.Origin, raw, st.Version, 1)
	if err != nil {
		t.Fatal(err)
	}
	return &m
}

// TestStream: against a real server, the stream is created in the KV format and
// found again; a stream of another shape is refused; a put lands, a repeat is
// stored, an older event is stale and a newer one lands after a conflict; `nats kv`
// reads what was written; an event over max_payload is refused naming both limits.
func TestStream(t *testing.T) {
	nc := connect(t, startCluster(t, 1).URL(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := event.DefaultLimits()

	st, err := openStream(ctx, nc, testStreamConfig("b", 1), l)
	if err != nil {
		t.Fatal(err)
	}
	if !st.created {
		t.Fatal("the stream was not created")
	}
	if again, err := openStream(ctx, nc, testStreamConfig("b", 1), l); err != nil || again.created {
		t.Fatalf("second open: created %t, %v", again != nil && again.created, err)
	}
	js, _ := jetstream.New(nc)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "hist", History: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := openStream(ctx, nc, testStreamConfig("hist", 1), l); err == nil || !strings.Contains(err.Error(), "keeps 5 messages per subject") {
		t.Fatalf("a bucket with history 5: %v", err)
	}

	a5 := state.Stamp{Version: 5, Origin: "a"}
	for _, step := range []struct {
		name string
		m    *message
		want verdict
	}{
		{"new key", testMessage(t, "app/k", a5, 1), publish},
		{"the same event again", testMessage(t, "app/k", a5, 1), stored},
		{"older", testMessage(t, "app/k", state.Stamp{Version: 4, Origin: "z"}, 1), stale},
		{"same version, lower origin", testMessage(t, "app/k", state.Stamp{Version: 5, Origin: "0"}, 1), stale},
		{"newer", testMessage(t, "app/k", state.Stamp{Version: 6, Origin: "a"}, 1), publish},
	} {
		before := st.conflicts.Load()
		got, err := st.put(ctx, step.m, &current{})
		if err != nil || got.verdict != step.want {
			t.Fatalf("%s: %v, %v; want %v", step.name, got.verdict, err, step.want)
		}
		if step.name != "new key" && st.conflicts.Load() != before+1 {
			t.Fatalf("%s: %d conflicts, want one (the hint said absent)", step.name, st.conflicts.Load()-before)
		}
	}
	kv, err := js.KeyValue(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "app.k")
	if err != nil {
		t.Fatalf("nats kv get app.k: %v", err)
	}
	var got fanoutv1.Event
	if err := proto.Unmarshal(e.Value(), &got); err != nil || got.GetVersion() != 6 {
		t.Fatalf("nats kv get app.k: version %d, %v; want 6", got.GetVersion(), err)
	}
	del := testMessage(t, "app/k", state.Stamp{Version: 7, Origin: "a"}, 0)
	del.Deleted = true
	if _, err := st.put(ctx, del, &current{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "app.k"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("nats kv get of a deleted key: %v, want ErrKeyNotFound", err)
	}

	big := testMessage(t, "big", a5, int(nc.MaxPayload()))
	_, err = st.put(ctx, big, &current{})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), fmt.Sprintf("max_payload of %d bytes", nc.MaxPayload())) ||
		!strings.Contains(err.Error(), "--max-event-bytes") {
		t.Fatalf("an event over max_payload: %v", err)
	}
}

// TestConcurrentWriters: 8 writers of one key on an R3 stream, each with its own
// connection (to the three servers in turn) and a different (version, origin), put
// at once, round after round: the stream ends holding the highest, every writer's
// verdict agrees with it, and none gives up.
func TestConcurrentWriters(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const writers, rounds = 8, 20
	streams := make([]*stream, writers)
	for i := range streams {
		st, err := openStream(ctx, connect(t, c.URL(i%3)), testStreamConfig("race", 3), event.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = st
	}
	for r := range rounds {
		key := fmt.Sprintf("round/%d", r)
		stamps := make([]state.Stamp, writers)
		var highest state.Stamp
		for i := range stamps {
			stamps[i] = state.Stamp{Version: uint64(100 + (i*7+r)%5), Origin: fmt.Sprintf("n%d", i)}
			if stamps[i].Newer(highest) {
				highest = stamps[i]
			}
		}
		outcomes := make([]outcome, writers)
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() { outcomes[i], errs[i] = streams[i].put(ctx, testMessage(t, key, stamps[i], 8), &current{}) })
		}
		wg.Wait()
		cur, err := streams[0].current(ctx, streams[0].prefix+encodeKey(key))
		if err != nil {
			t.Fatal(err)
		}
		if cur.stamp != highest {
			t.Fatalf("round %d: the stream holds %+v, want the highest %+v", r, cur.stamp, highest)
		}
		for i, o := range outcomes {
			if errs[i] != nil {
				t.Fatalf("round %d writer %d: %v", r, i, errs[i])
			}
			switch want := stamps[i] == highest; {
			case o.verdict == gaveUp:
				t.Fatalf("round %d writer %d gave up", r, i)
			case want && o.verdict != publish && o.verdict != stored, !want && o.verdict != stale && o.verdict != publish:
				t.Fatalf("round %d writer %d (%+v): %v; the highest is %+v", r, i, stamps[i], o.verdict, highest)
			}
		}
	}
	var conflicts uint64
	for _, st := range streams {
		conflicts += st.conflicts.Load()
	}
	t.Logf("%d rounds of %d writers: %d conflicts", rounds, writers, conflicts)
}
