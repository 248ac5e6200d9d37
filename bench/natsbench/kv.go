package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fanout/fanout/bench/loadkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// kvMaxPending bounds the puts in flight (sent, not yet acknowledged): the publisher
// blocks past it, as a sidecar's outbox would.
const kvMaxPending = 4096

// kvClient is the NATS KV anchor: what a plain KV client does for the same work as the
// JetStream transport. The publisher puts each event under a unique key (a KV put is a
// JetStream publish to $KV.<bucket>.<key>; here acknowledged asynchronously) and every
// subscriber watches the bucket from its own server. Its goroutines (one per watcher)
// end in stop.
type kvClient struct {
	js     jetstream.JetStream
	bucket string
	prefix string // bench.<run start in hex>.
	next   uint64
	stall  time.Duration // how long a put waits for room under kvMaxPending
	errs   atomic.Int64  // puts whose acknowledgement was an error

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (k *kvClient) subject(key string) string { return "$KV." + k.bucket + "." + key }

// put publishes one event under the next key.
func (k *kvClient) put(value []byte) error {
	k.next++
	_, err := k.js.PublishAsync(k.subject(k.prefix+strconv.FormatUint(k.next, 10)), value, jetstream.WithStallWait(k.stall))
	return err
}

// complete waits until every put has its acknowledgement.
func (k *kvClient) complete(ctx context.Context, timeout time.Duration) error {
	select {
	case <-k.js.PublishAsyncComplete():
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("kv: %d puts not acknowledged after %s", k.js.PublishAsyncPending(), timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (k *kvClient) stop() {
	if k.cancel != nil {
		k.cancel()
	}
	k.wg.Wait()
}

// connectKV connects the publisher to pubURL, creates the bucket there, and starts a
// watcher of it on each of subURLs, one connection each.
func (b *bench) connectKV(ctx context.Context, pubURL string, subURLs []string) error {
	onErr := nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrSlowConsumer) {
			b.slow.Add(1)
		}
	})
	nc, err := nats.Connect(pubURL, nats.Name("natsbench-kv-pub"), onErr)
	if err != nil {
		return fmt.Errorf("publisher on %s: %w", pubURL, err)
	}
	b.pub = nc
	k := &kvClient{bucket: b.o.kv, prefix: fmt.Sprintf("bench.%x.", b.epoch.UnixNano()), stall: b.o.drainTimeout}
	k.js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(kvMaxPending),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { k.errs.Add(1) }))
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	k.cancel = cancel
	b.kv = k
	cctx, ccancel := context.WithTimeout(ctx, b.o.readyTimeout)
	defer ccancel()
	// Retried: a meta leader that has just been elected may not know every peer yet
	// ("no suitable peers for placement").
	for {
		_, err := k.js.CreateKeyValue(cctx, jetstream.KeyValueConfig{
			Bucket: b.o.kv, History: 1, Storage: kvStorage(b.o.kvStorage), Replicas: b.o.replicas,
		})
		if err == nil {
			break
		}
		select {
		case <-cctx.Done():
			return fmt.Errorf("kv: create bucket %s: %w", b.o.kv, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	for i, u := range subURLs {
		s := &subscriber{index: i, since: b.since, window: b.window, hist: loadkit.NewHistogram(), histDue: loadkit.NewHistogram()}
		snc, err := nats.Connect(u, nats.Name(fmt.Sprintf("natsbench-kv-watch-%d", i)), onErr)
		if err != nil {
			return fmt.Errorf("watcher %d on %s: %w", i, u, err)
		}
		s.conn = snc
		b.subs = append(b.subs, s)
		sjs, err := jetstream.New(snc)
		if err != nil {
			return err
		}
		kv, err := sjs.KeyValue(cctx, b.o.kv)
		if err != nil {
			return fmt.Errorf("watcher %d: bucket %s: %w", i, b.o.kv, err)
		}
		w, err := kv.WatchAll(wctx, jetstream.UpdatesOnly())
		if err != nil {
			return fmt.Errorf("watcher %d: %w", i, err)
		}
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			defer w.Stop() //nolint:errcheck // the connection closes next
			for {
				select {
				case e, ok := <-w.Updates():
					if !ok {
						return
					}
					if e != nil {
						s.handleData(e.Value())
					}
				case <-wctx.Done():
					return
				}
			}
		}()
	}
	return nil
}

// kvStorage is the bucket's storage of --kv-storage (validated: file or memory).
func kvStorage(s string) jetstream.StorageType {
	if s == "memory" {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// hold starts the servers with JetStream, prints their client URLs and process ids,
// and keeps them until ctx ends (SIGTERM, SIGINT).
func hold(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "natsbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	servers, err := startServers(ctx, o.natsServer, o.spawn, dir, o.readyTimeout, false)
	if err != nil {
		return err
	}
	defer stopServers(servers, stopWait)
	out := struct {
		URLs []string `json:"urls"`
		PIDs []int    `json:"pids"`
	}{}
	for _, s := range servers {
		out.URLs = append(out.URLs, s.url())
		out.PIDs = append(out.PIDs, s.cmd.Process.Pid)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}
