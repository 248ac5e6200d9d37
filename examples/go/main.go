// Command go is the fanout client example in Go, with package pkg/client: submit to
// one sidecar, watch the events arrive on another. It does the walk of
// examples/python/fanout_client.py (see examples/README.md), against two sidecars of
// one cluster:
//
//	go run ./examples/go --submit-addr 127.0.0.1:7070 --watch-addr 127.0.0.1:7080
//
// What it does, in order, checking each step:
//  1. Client.Status on both sidecars: they must be two different nodes;
//  2. Client.Watch on the watch node under a prefix of its own, read up to
//     EventSynced (the snapshot is complete);
//  3. a Publisher with ack ALL on the submit node: one Put per event, each with its
//     own Pending result: every event must be accepted, every peer ACKED;
//  4. reads the watch until every event arrived, at the version its result gave,
//     from the submit node;
//  5. Client.Get on the watch node: every key at that version;
//  6. a Put with an empty key must fail with client.ErrInvalid.
//
// Every call has a deadline; UNAVAILABLE is retried with exponential backoff for
// --retry-for seconds. Exit status 0 means every check passed; 1 means one failed (the
// reason is on stderr, starting with "FAIL:"); 2 is a usage error.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type config struct {
	submitAddr, watchAddr, prefix, summary string
	events                                 int
	timeout, ackTimeout, watchTimeout      time.Duration
	retryFor                               time.Duration
}

func main() {
	cfg := parseFlags()
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
}

func parseFlags() config {
	env := func(name, def string) string {
		if v := os.Getenv(name); v != "" {
			return v
		}
		return def
	}
	var cfg config
	var timeout, ackTimeout, watchTimeout, retryFor float64
	fs := flag.NewFlagSet("fanout-go-client", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Submit events to one fanout sidecar and watch them arrive on another (pkg/client).")
		fs.PrintDefaults()
	}
	b := make([]byte, 4)
	rand.Read(b)
	fs.StringVar(&cfg.submitAddr, "submit-addr", env("FANOUT_SUBMIT_ADDR", "127.0.0.1:7070"), "app address of the sidecar to submit to (env FANOUT_SUBMIT_ADDR)")
	fs.StringVar(&cfg.watchAddr, "watch-addr", env("FANOUT_WATCH_ADDR", "127.0.0.1:7080"), "app address of another sidecar of the cluster, to watch (env FANOUT_WATCH_ADDR)")
	fs.StringVar(&cfg.prefix, "prefix", "example/go/"+hex.EncodeToString(b)+"/", "task_id prefix of the events (default: a new one per run)")
	fs.IntVar(&cfg.events, "events", 3, "how many events to submit")
	fs.Float64Var(&timeout, "timeout", 5, "deadline of each call, in seconds (a put gets --ack-timeout on top)")
	fs.Float64Var(&ackTimeout, "ack-timeout", 3, "how long, in seconds, a put waits for the peers' acks")
	fs.Float64Var(&watchTimeout, "watch-timeout", 10, "how long, in seconds, the watch may take to see every event")
	fs.Float64Var(&retryFor, "retry-for", 5, "how long, in seconds, to retry a call answered UNAVAILABLE")
	fs.StringVar(&cfg.summary, "summary", "", "write what was submitted (task_id, version, payload) to this file as JSON")
	fs.Parse(os.Args[1:])
	if cfg.events < 1 || timeout <= 0 || ackTimeout <= 0 || watchTimeout <= 0 || retryFor < 0 || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "fanout-go-client: --events and the timeouts must be positive, --retry-for not negative, and no arguments")
		os.Exit(2)
	}
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	cfg.timeout, cfg.ackTimeout, cfg.watchTimeout, cfg.retryFor = sec(timeout), sec(ackTimeout), sec(watchTimeout), sec(retryFor)
	return cfg
}

// node is one sidecar: its client and node id.
type node struct {
	name, addr, id string
	c              *client.Client
}

func run(cfg config) error {
	fmt.Printf("fanout Go client: submit to %s, watch %s, prefix %q\n", cfg.submitAddr, cfg.watchAddr, cfg.prefix)
	submit, watch := &node{name: "submit", addr: cfg.submitAddr}, &node{name: "watch", addr: cfg.watchAddr}
	for _, n := range []*node{submit, watch} {
		c, err := client.Dial(n.addr)
		if err != nil {
			return err
		}
		defer c.Close()
		n.c = c
	}
	// 1. Two different nodes.
	for _, n := range []*node{submit, watch} {
		st, err := retryUnavailable(cfg, "GetStatus on "+n.addr, func(ctx context.Context) (*fanoutv1.GetStatusResponse, error) {
			return n.c.Status(ctx)
		})
		if err != nil {
			return err
		}
		n.id = st.GetNodeId()
		fmt.Printf("%s node: %s at %s\n", n.name, n.id, n.addr)
	}
	if submit.id == watch.id {
		return fmt.Errorf("--submit-addr and --watch-addr are the same node (%s): give the app addresses of two sidecars of one cluster", submit.id)
	}

	// 2. The watch, up to the end of its snapshot. Its context bounds the whole watch.
	wctx, cancel := context.WithTimeout(context.Background(), cfg.timeout+cfg.ackTimeout+cfg.watchTimeout)
	defer cancel()
	w := watch.c.Watch(wctx, cfg.prefix)
	defer w.Close()
	snapshot := 0
	for {
		ev, err := w.Next()
		if err != nil {
			return fmt.Errorf("Subscribe on %s: %w", watch.addr, err)
		}
		if ev.Type == client.EventSynced {
			break
		}
		snapshot++
	}
	fmt.Printf("watch %s: subscribed to %q (snapshot: %d entries)\n", watch.id, cfg.prefix, snapshot)

	// 3. The events, through a Publisher with ack ALL.
	want, err := publish(cfg, submit)
	if err != nil {
		return err
	}

	// 4. Every event on the watch, at its version, from the submit node.
	started := time.Now()
	missing := make(map[string]client.Entry, len(want))
	for k, e := range want {
		missing[k] = e
	}
	for len(missing) > 0 {
		ev, err := w.Next()
		if err != nil {
			return fmt.Errorf("watch on %s: %w; never saw %v", watch.addr, err, keys(missing))
		}
		m, ok := missing[ev.Entry.Key]
		if !ok || ev.Type != client.EventPut {
			continue
		}
		delete(missing, ev.Entry.Key)
		e := ev.Entry
		fmt.Printf("watch %s: %s version %d from %s, revision %d (+%.3fs)\n", watch.id, e.Key, e.Version, e.Origin, e.Revision, time.Since(started).Seconds())
		if e.Version != m.Version || e.Origin != submit.id || string(e.Value) != string(m.Value) {
			return fmt.Errorf("watch saw %s as version %d from %s, want version %d from %s", e.Key, e.Version, e.Origin, m.Version, submit.id)
		}
	}

	// 5. Get on the watch node.
	ctx, cancel2 := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel2()
	got, err := watch.c.Get(ctx, keys(want)...)
	if err != nil {
		return fmt.Errorf("Get on %s: %w", watch.addr, err)
	}
	fmt.Printf("get %s: %d of %d keys\n", watch.id, len(got), len(want))
	for _, k := range keys(want) {
		e, ok := got[k]
		if !ok {
			return fmt.Errorf("Get on %s: %s missing", watch.addr, k)
		}
		fmt.Printf("  %s  version %d  origin %s  payload %s\n", k, e.Version, e.Origin, e.Value)
		if e.Version != want[k].Version || e.Origin != submit.id || string(e.Value) != string(want[k].Value) {
			return fmt.Errorf("Get on %s: %s is version %d from %s, want %d from %s", watch.addr, k, e.Version, e.Origin, want[k].Version, submit.id)
		}
	}

	// 6. An invalid key.
	_, err = submit.c.Put(ctx, "", []byte("x"))
	if !errors.Is(err, client.ErrInvalid) || status.Code(err) != codes.InvalidArgument {
		return fmt.Errorf("empty key: got %v, want client.ErrInvalid (INVALID_ARGUMENT)", err)
	}
	fmt.Printf("invalid: Put with an empty key -> %v (as expected)\n", err)

	if cfg.summary != "" {
		if err := writeSummary(cfg.summary, submit.id, watch.id, want); err != nil {
			return err
		}
	}
	fmt.Printf("OK: %d events submitted to %s with ACK_POLICY_ALL, acknowledged by every peer, seen on %s's watch and read back by Get\n", len(want), submit.id, watch.id)
	return nil
}

// publish puts the events through a Publisher with ack ALL and checks each result.
func publish(cfg config, submit *node) (map[string]client.Entry, error) {
	p, err := client.NewPublisher(submit.c, client.PublisherConfig{Ack: client.All, AckTimeout: cfg.ackTimeout})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ackTimeout+cfg.timeout)
	defer cancel()
	want := make(map[string]client.Entry)
	var order []string
	pending := make(map[string]*client.Pending)
	for i := range cfg.events {
		key := fmt.Sprintf("%si-%d", cfg.prefix, i)
		value, _ := json.Marshal(map[string]any{"status": "UP", "n": i})
		f, err := p.Put(ctx, key, value, client.WithAttributes(map[string]string{"lang": "go"}))
		if err != nil {
			return nil, fmt.Errorf("put %s: %w", key, err)
		}
		order, pending[key], want[key] = append(order, key), f, client.Entry{Key: key, Value: value}
	}
	fmt.Printf("submit %s: %d events, ack ALL within %s\n", submit.id, len(order), cfg.ackTimeout)
	var last client.Result
	for _, key := range order {
		r, err := pending[key].Wait(ctx)
		fmt.Printf("  %s  %s  version %d  revision %d\n", key, r.Outcome, r.Version, r.Revision)
		switch {
		case errors.Is(err, client.ErrNotSatisfied):
			var acks []string
			for _, a := range r.PeerAcks {
				acks = append(acks, a.Peer+" "+a.State.String())
			}
			return nil, fmt.Errorf("ACK_POLICY_ALL not satisfied: %s", strings.Join(acks, ", "))
		case err != nil:
			return nil, fmt.Errorf("put %s on %s: %w", key, submit.addr, err)
		}
		e := want[key]
		e.Version = r.Version
		want[key] = e
		last = r
	}
	for _, a := range last.PeerAcks {
		fmt.Printf("  peer %s: %s\n", a.Peer, a.State)
		if a.State != fanoutv1.PeerAckState_PEER_ACK_STATE_ACKED {
			return nil, fmt.Errorf("satisfied, yet peer %s is %s", a.Peer, a.State)
		}
	}
	if len(last.PeerAcks) == 0 {
		return nil, errors.New("satisfied, yet no peer listed: a cluster of one node?")
	}
	fmt.Printf("  satisfied: every one of %d peers acknowledged every event\n", len(last.PeerAcks))
	return want, nil
}

// retryUnavailable runs call with a deadline of --timeout; while it fails with
// UNAVAILABLE (nothing was applied: no sidecar there yet, or one draining), it waits
// and tries again, the pause doubling from 50ms up to 1s, for at most --retry-for.
func retryUnavailable[T any](cfg config, what string, call func(context.Context) (T, error)) (T, error) {
	giveUp := time.Now().Add(cfg.retryFor)
	pause := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
		v, err := call(ctx)
		cancel()
		if err == nil {
			return v, nil
		}
		st := status.Convert(err)
		msg := fmt.Sprintf("%s: %s: %s", what, client.CodeName(st.Code()), st.Message())
		if !errors.Is(err, client.ErrUnavailable) {
			return v, errors.New(msg)
		}
		if time.Now().Add(pause).After(giveUp) {
			return v, fmt.Errorf("%s (gave up after %d attempts in %s: is a sidecar running there?)", msg, attempt, cfg.retryFor)
		}
		fmt.Fprintf(os.Stderr, "  %s: UNAVAILABLE (%s); retry %d in %s\n", what, st.Message(), attempt, pause)
		time.Sleep(pause)
		pause = min(2*pause, time.Second)
	}
}

func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func writeSummary(path, submitID, watchID string, want map[string]client.Entry) error {
	type event struct {
		TaskID  string `json:"task_id"`
		Version string `json:"version"`
		Payload string `json:"payload"`
	}
	s := struct {
		SubmitNode string  `json:"submit_node"`
		WatchNode  string  `json:"watch_node"`
		Events     []event `json:"events"`
	}{SubmitNode: submitID, WatchNode: watchID}
	for _, k := range keys(want) {
		s.Events = append(s.Events, event{TaskID: k, Version: strconv.FormatUint(want[k].Version, 10), Payload: string(want[k].Value)})
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
