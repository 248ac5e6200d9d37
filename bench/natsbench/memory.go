package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fanout/fanout/bench/loadkit"
)

// memoryResult is the settled memory of the KV anchor at --memory-keys live keys:
// the field names `bench/fanoutmem` prints for fanout's nodes.
type memoryResult struct {
	System    string `json:"system"`
	KVStorage string `json:"kv_storage"`
	Replicas  int    `json:"replicas"`
	Nodes     int    `json:"nodes"`
	Watchers  int    `json:"watchers"`
	Keys      int    `json:"keys"`
	Payload   int    `json:"payload"`
	// LoadSec is from the first put until every watcher had every key.
	LoadSec       float64 `json:"load_s"`
	PublishErrors int64   `json:"publish_errors"`
	// StreamServer is the server that leads the bucket's stream (with R1, the one
	// that holds it).
	StreamServer string `json:"stream_server"`
	StreamMsgs   uint64 `json:"stream_msgs"`
	loadkit.MemorySummary
}

// runMemory puts o.memoryKeys keys of o.payload bytes (one asynchronous put each, as
// the saturated KV rows do) into the bucket on server 0, waits until every watcher has
// received every one, and reads every server's settled resident set (loadkit.Settle:
// a forced collection through its --profile port, then the scavenger) before the
// keys and after.
func runMemory(ctx context.Context, o options) (*memoryResult, error) {
	b := &bench{o: o, epoch: time.Now()}
	cleanup, err := b.setup(ctx)
	defer cleanup()
	if err != nil {
		return nil, err
	}
	pids, gcURLs := make([]int, len(b.servers)), make([]string, len(b.servers))
	ids := make([]string, len(b.servers))
	for i, s := range b.servers {
		pids[i], ids[i] = s.cmd.Process.Pid, s.id
		gcURLs[i] = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?gc=1", s.profPort)
	}
	before, err := loadkit.Settle(ctx, pids, gcURLs, o.settleMax)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	start := time.Now()
	value := make([]byte, o.payload)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	for range o.memoryKeys {
		if err := b.kv.put(value); err != nil {
			return nil, fmt.Errorf("kv put: %w", err)
		}
	}
	if err := b.kv.complete(ctx, o.drainTimeout); err != nil {
		return nil, err
	}
	if err := b.waitWatchers(ctx, uint64(o.memoryKeys)); err != nil {
		return nil, err
	}
	r := &memoryResult{System: "nats-kv", KVStorage: o.kvStorage, Replicas: o.replicas, Nodes: len(b.servers),
		Watchers: len(b.subs), Keys: o.memoryKeys, Payload: o.payload, LoadSec: time.Since(start).Seconds(),
		PublishErrors: b.kv.errs.Load()}
	info, err := b.kv.js.Stream(ctx, "KV_"+o.kv)
	if err != nil {
		return nil, fmt.Errorf("stream of bucket %s: %w", o.kv, err)
	}
	si, err := info.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream of bucket %s: %w", o.kv, err)
	}
	r.StreamMsgs = si.State.Msgs
	if si.Cluster != nil {
		r.StreamServer = si.Cluster.Leader
	}
	after, err := loadkit.Settle(ctx, pids, gcURLs, o.settleMax)
	if err != nil {
		return nil, fmt.Errorf("settled: %w", err)
	}
	r.MemorySummary = loadkit.SummarizeMemory(ids, before, after, o.memoryKeys)
	return r, nil
}

// waitWatchers waits until every watcher has received n puts, bounded by the drain
// timeout.
func (b *bench) waitWatchers(ctx context.Context, n uint64) error {
	ctx, cancel := context.WithTimeout(ctx, b.o.drainTimeout)
	defer cancel()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		done := true
		for _, s := range b.subs {
			done = done && s.total.Load() >= n
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			var got []uint64
			for _, s := range b.subs {
				got = append(got, s.total.Load())
			}
			return fmt.Errorf("the watchers have %v of %d keys after %s: %w", got, n, b.o.drainTimeout, ctx.Err())
		case <-tick.C:
		}
	}
}
