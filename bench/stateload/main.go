// Command stateload fills one sidecar's state table for bench/state-memory.sh: --keys
// distinct task_ids of 24 bytes ("register#ORDERS/i-000000" on) with --payload-byte
// payloads, through unary Submit calls of --batch events, then polls GetStatus until
// the table holds them all. It prints one JSON line: what the node answered and how
// long it took.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7070", "the node's app address")
	keys := flag.Int("keys", 1_000_000, "distinct task_ids to write")
	batch := flag.Int("batch", 1000, "events per Submit")
	payload := flag.Int("payload", 100, "payload bytes per event")
	conc := flag.Int("concurrency", 2, "Submit calls in flight")
	wait := flag.Duration("wait", 60*time.Second, "how long to wait for GetStatus to show every key")
	flag.Parse()
	if err := run(*addr, *keys, *batch, *payload, *conc, *wait); err != nil {
		fmt.Fprintln(os.Stderr, "stateload:", err)
		os.Exit(1)
	}
}

type result struct {
	Keys       int     `json:"keys"`
	Accepted   uint64  `json:"accepted"`
	Stale      uint64  `json:"stale"`
	Refused    uint64  `json:"refused"`
	LoadS      float64 `json:"load_s"`
	StateKeys  uint64  `json:"state_keys"`
	StateBytes uint64  `json:"state_bytes"`
}

func run(addr string, keys, batch, payload, conc int, wait time.Duration) error {
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	client := fanoutv1.NewFanoutServiceClient(cc)
	ctx := context.Background()

	body := make([]byte, payload)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	var res result
	var accepted, stale, refused atomic.Uint64
	next := make(chan int)
	errs := make(chan error, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first := range next {
				req := &fanoutv1.SubmitRequest{}
				for i := first; i < min(first+batch, keys); i++ {
					req.Events = append(req.Events, &fanoutv1.Event{TaskId: fmt.Sprintf("register#ORDERS/i-%06d", i), Payload: body})
				}
				resp, err := client.Submit(ctx, req)
				if err != nil {
					errs <- fmt.Errorf("Submit of keys %d..: %w", first, err)
					return
				}
				for _, r := range resp.GetResults() {
					switch r.GetOutcome() {
					case fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED:
						accepted.Add(1)
					case fanoutv1.EventOutcome_EVENT_OUTCOME_STALE:
						stale.Add(1)
					default:
						refused.Add(1)
					}
				}
			}
		}()
	}
	var sendErr error
feed:
	for first := 0; first < keys; first += batch {
		select {
		case next <- first:
		case sendErr = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	if sendErr != nil {
		return sendErr
	}
	select {
	case err := <-errs:
		return err
	default:
	}
	res.Keys, res.Accepted, res.Stale, res.Refused = keys, accepted.Load(), stale.Load(), refused.Load()
	res.LoadS = time.Since(start).Seconds()

	deadline := time.Now().Add(wait)
	for {
		st, err := client.GetStatus(ctx, &fanoutv1.GetStatusRequest{})
		if err != nil {
			return err
		}
		res.StateKeys, res.StateBytes = st.GetState().GetKeys(), st.GetState().GetBytes()
		if res.StateKeys == uint64(keys) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("GetStatus: %d keys after %s, want %d", res.StateKeys, wait, keys)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}
