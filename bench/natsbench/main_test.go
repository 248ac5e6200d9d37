package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout/internal/natstest"
)

func TestLogPatterns(t *testing.T) {
	// Lines as nats-server writes them (v2.9 and v2.15 alike).
	client := "[7828] 2026/11/23 03:41:35.350287 [INF] Listening for client connections on 127.0.0.1:46721"
	route := "[7828] 2026/11/23 03:41:35.351038 [INF] Listening for route connections on 127.0.0.1:37791"
	if m := clientRe.FindStringSubmatch(client); m == nil || m[1] != "46721" {
		t.Fatalf("client port from %q: %v", client, m)
	}
	if m := routeRe.FindStringSubmatch(route); m == nil || m[1] != "37791" {
		t.Fatalf("route port from %q: %v", route, m)
	}
}

func TestValidate(t *testing.T) {
	ok := options{spawn: 3, subscribers: 2, kvStorage: "file", settleMax: time.Second, duration: time.Second, drainTimeout: time.Second, readyTimeout: time.Second, rate: 10, batch: 1, payload: 100}
	if err := ok.validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		change func(*options)
		want   string
	}{
		{func(o *options) { o.payload = 7 }, "--payload must be >= 8"},
		{func(o *options) { o.window = 10 }, "--window is the flow control of --rate 0"},
		{func(o *options) { o.batch = 0 }, "--batch must be >= 1"},
		{func(o *options) { o.spawn = 0 }, "give --spawn N or --url"},
		{func(o *options) { o.kv, o.replicas = "b", 5 }, "--replicas must be 1..--spawn (3), got 5"},
		{func(o *options) { o.watchers = 4 }, "only with --kv on a cluster"},
		{func(o *options) { o.memoryKeys = 10 }, "--memory-keys must be >= 0, and only with --kv and --spawn"},
		{func(o *options) { o.kv, o.kvStorage = "b", "disk" }, `--kv-storage must be file or memory, got "disk"`},
	} {
		o := ok
		tc.change(&o)
		if err := o.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("validate() = %v, want %q", err, tc.want)
		}
	}
}

// A second of a 3-server cluster of the pinned nats-server (as make bench-compare
// runs it), paced and saturated.
func TestRunCluster(t *testing.T) {
	bin, err := natstest.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	base := options{spawn: 3, natsServer: bin, subject: "bench", duration: time.Second, warmup: 200 * time.Millisecond,
		drainTimeout: 5 * time.Second, readyTimeout: 15 * time.Second, batch: 10, payload: 100}
	for _, tc := range []struct {
		name         string
		rate, window int
	}{{"paced", 2000, 0}, {"saturated", 0, 1000}} {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			o.rate, o.window = tc.rate, tc.window
			r, err := run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if r.System != "nats-cluster" || r.Subscribers != 2 || r.Submitted == 0 || r.Lost != 0 || r.Delivered != 2*r.Submitted {
				t.Fatalf("%+v", r)
			}
			if r.P50 <= 0 || r.LatencyFromDue.P50 < r.P50 || len(r.NodeResults) != 3 || r.NodePeakRSSBytes <= 0 {
				t.Fatalf("latency %+v from due %+v, nodes %+v", r.Latency, r.LatencyFromDue, r.NodeResults)
			}
			if tc.rate > 0 && (r.SubmitPerSec < 0.9*float64(tc.rate) || r.SubmitPerSec > 1.1*float64(tc.rate)) {
				t.Fatalf("submitted %.0f/s at %d offered", r.SubmitPerSec, tc.rate)
			}
		})
	}
}

// A second of each KV anchor on a 3-server JetStream cluster of the pinned
// nats-server (R3 file with 3 watchers on the 2 servers but the publisher's, R1
// memory with one on each): every put reaches every watcher, none fails.
func TestRunKV(t *testing.T) {
	bin, err := natstest.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		storage            string
		replicas, watchers int
	}{{"file", 3, 3}, {"memory", 1, 0}} {
		t.Run(fmt.Sprintf("r%d-%s", tc.replicas, tc.storage), func(t *testing.T) {
			o := options{spawn: 3, natsServer: bin, subject: "bench", duration: time.Second, warmup: 200 * time.Millisecond,
				drainTimeout: 10 * time.Second, readyTimeout: 30 * time.Second, batch: 10, payload: 100, window: 1000,
				kv: "anchor", kvStorage: tc.storage, replicas: tc.replicas, watchers: tc.watchers, settleMax: time.Second}
			if err := o.validate(); err != nil {
				t.Fatal(err)
			}
			r, err := run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			subs := max(tc.watchers, 2)
			if r.System != "nats-kv" || r.KVStorage != tc.storage || r.Replicas != tc.replicas || r.Subscribers != subs ||
				r.Submitted == 0 || r.Lost != 0 || r.Delivered != uint64(subs)*r.Submitted || r.PublishErrors != 0 {
				t.Fatalf("%+v", r)
			}
			if r.P50 <= 0 || len(r.NodeResults) != 3 || r.NodeCPUSeconds <= 0 {
				t.Fatalf("latency %+v, nodes %+v", r.Latency, r.NodeResults)
			}
		})
	}
}

// --memory-keys on R1 memory: every watcher gets every key, the stream holds them
// (and the readiness probe's), and the server that holds the stream is the one that
// grew the most, by at least the payloads.
func TestRunMemory(t *testing.T) {
	bin, err := natstest.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const keys = 20000
	o := options{spawn: 3, natsServer: bin, subject: "bench", duration: time.Second, drainTimeout: 30 * time.Second,
		readyTimeout: 30 * time.Second, batch: 1, payload: 100, kv: "mem", kvStorage: "memory", replicas: 1,
		memoryKeys: keys, settleMax: 10 * time.Second}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	r, err := runMemory(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Keys != keys || r.StreamMsgs != keys+1 || r.PublishErrors != 0 || r.Watchers != 2 || len(r.NodeMemory) != 3 {
		t.Fatalf("%+v", r)
	}
	if r.StreamServer == "" || r.BytesPerKeyOf != r.StreamServer || r.BytesPerKey < 100 {
		t.Fatalf("stream on %q, most growth %g B/key on %q: %+v", r.StreamServer, r.BytesPerKey, r.BytesPerKeyOf, r.NodeMemory)
	}
	for _, n := range r.NodeMemory {
		if n.BaselineRSS <= 0 || n.SettledRSS <= 0 {
			t.Fatalf("%+v", r.NodeMemory)
		}
	}
	t.Logf("%d keys: %.0f B/key on %s (stream's server), settled in %.1f s", keys, r.BytesPerKey, r.BytesPerKeyOf, r.SettleWaitS)
}
