package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Subscribe's bounds (SubscribeRequest.max_batch and max_batch_bytes).
const (
	maxSubscribeBatch      = 10000
	maxSubscribeBatchBytes = 64 << 20
)

// watchOptions are the flags of `sidecar watch`. Only --addr is also read from the environment (FANOUT_ADDR).
type watchOptions struct {
	app           appOptions // timeout 0: watch until Ctrl-C or --count
	noSnapshot    bool
	fromRevision  uint64
	includeOwn    bool
	maxBatch      int
	maxBatchBytes int
	count         int // entries; 0: no limit
	format        entryFormat
}

func newWatchCmd() *cobra.Command {
	o := watchOptions{app: defaultAppOptions(0)}
	cmd := &cobra.Command{
		Use:   "watch [PREFIX]",
		Short: "Print the entries under a prefix, then every change as it arrives (like `nats kv watch`)",
		Long: `watch subscribes to the sidecar at --addr. It first prints every current entry whose
task_id starts with PREFIX (every entry when PREFIX is empty), then the line
  --- snapshot complete (N entries) ---
then each change as it arrives, one line each:
  42 register#ORDERS/i-17 v117655171390570496 from node-b: {"status":"UP"}
  43 register#ORDERS/i-18 deleted (v117655171390570497 from node-c)
The first number is the node's revision of the change. To resume after an interruption
without a new snapshot, pass the last one seen as --from-revision. Payloads print as
text when they are printable UTF-8, else as base64:…, cut to 60 characters unless --full.
On a node that has just started, the snapshot waits until the node has synced with its
peers (at most its --sync-timeout): it is never a half-synced table.

Live changes are the ones that peers sent; --include-own adds the ones submitted to
this node. --json prints one protojson Entry per line, and {"snapshotComplete":true}
for the marker.

watch runs until Ctrl-C (exit status 0), --count entries (0), or --timeout (0, or 1
when --count entries did not arrive). A stream that ends otherwise exits 1.

--addr also reads FANOUT_ADDR, e.g. FANOUT_ADDR=unix:///run/fanout.sock; the other flags
read no environment variable (a pod's FANOUT_* variables are meant for serve).`,
		Example: `  sidecar watch 'register#ORDERS/'
  sidecar watch 'heartbeat#i-17' --no-snapshot --include-own --count 1 --timeout 30s
  sidecar watch --from-revision 42 --json | jq -c .event`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return fmt.Errorf("want at most one PREFIX, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := o.request(args)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return o.run(ctx, req, cmd.OutOrStdout())
		},
	}
	o.addFlags(cmd)
	envOnly(cmd.Flags(), "addr", "token-file")
	return cmd
}

func (o *watchOptions) addFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	o.app.addFlags(fs, "stop watching after this long (0: run until Ctrl-C or --count)")
	fs.BoolVar(&o.noSnapshot, "no-snapshot", false, "skip the current entries: print only the changes from now on")
	fs.Uint64Var(&o.fromRevision, "from-revision", 0, "resume instead of a snapshot: every key changed after this revision, once at its latest, then live changes")
	fs.BoolVar(&o.includeOwn, "include-own", false, "also print the live changes submitted to this node, not only those from peers")
	fs.IntVar(&o.maxBatch, "max-batch", 0, fmt.Sprintf("let the sidecar pack up to this many entries into one message, up to %d (0 or 1: one per message)", maxSubscribeBatch))
	fs.IntVar(&o.maxBatchBytes, "max-batch-bytes", 0, "cap one message's size, up to 64 MiB (0: the sidecar's default, 1 MiB)")
	fs.IntVar(&o.count, "count", 0, "exit after printing this many entries (0: no limit)")
	o.format.addFlags(fs, `print one protojson Entry per line, and {"snapshotComplete":true} for the marker`)
}

// request maps the arguments and flags onto a SubscribeRequest. A resume
// (--from-revision) takes no snapshot.
func (o watchOptions) request(args []string) (*fanoutv1.SubscribeRequest, error) {
	switch {
	case o.maxBatch < 0 || o.maxBatch > maxSubscribeBatch:
		return nil, fmt.Errorf("--max-batch %d: want 0 to %d entries per message", o.maxBatch, maxSubscribeBatch)
	case o.maxBatchBytes < 0 || o.maxBatchBytes > maxSubscribeBatchBytes:
		return nil, fmt.Errorf("--max-batch-bytes %d: want 0 (the sidecar's default) to %d", o.maxBatchBytes, maxSubscribeBatchBytes)
	case o.count < 0:
		return nil, fmt.Errorf("--count %d: want 0 (no limit) or more", o.count)
	}
	req := &fanoutv1.SubscribeRequest{
		Snapshot:      !o.noSnapshot && o.fromRevision == 0,
		FromRevision:  o.fromRevision,
		IncludeOwn:    o.includeOwn,
		MaxBatch:      uint32(o.maxBatch),
		MaxBatchBytes: uint32(o.maxBatchBytes),
	}
	if len(args) > 0 {
		req.TaskIdPrefix = args[0]
	}
	return req, nil
}

// run prints the stream until ctx is done (Ctrl-C: no error), --count entries,
// --timeout, or the stream fails.
func (o watchOptions) run(ctx context.Context, req *fanoutv1.SubscribeRequest, out io.Writer) error {
	cc, client, err := o.app.connect()
	if err != nil {
		return err
	}
	defer cc.Close()
	sctx, cancel := o.app.withTimeout(ctx)
	defer cancel() // also ends the stream when --count is reached
	w := &watcher{o: o, out: out}
	stream, err := client.Subscribe(sctx, req)
	if err != nil {
		return w.ended(ctx, sctx, err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return w.ended(ctx, sctx, err)
		}
		if done, err := w.print(resp); done || err != nil {
			return err
		}
	}
}

// watcher prints one Subscribe stream.
type watcher struct {
	o       watchOptions
	out     io.Writer
	entries int // printed so far
}

// print writes resp's entries, or the snapshot marker. done is true once --count
// entries are out.
func (w *watcher) print(resp *fanoutv1.SubscribeResponse) (done bool, err error) {
	if resp.GetSnapshotComplete() {
		if w.o.format.json {
			return false, writeJSONLine(w.out, &fanoutv1.SubscribeResponse{SnapshotComplete: true})
		}
		_, err := fmt.Fprintf(w.out, "--- snapshot complete (%d entries) ---\n", w.entries)
		return false, err
	}
	for _, e := range entriesOf(resp) {
		if err := w.printEntry(e); err != nil {
			return true, err
		}
		w.entries++
		if w.o.count > 0 && w.entries >= w.o.count {
			return true, nil
		}
	}
	return false, nil
}

func (w *watcher) printEntry(e *fanoutv1.Entry) error {
	if w.o.format.json {
		return writeJSONLine(w.out, e)
	}
	_, err := fmt.Fprintln(w.out, entryLine(e, w.o.format.full))
	return err
}

// entriesOf reads both shapes of a response: several entries in batch, or one in
// event/origin_node/submitted_at/revision.
func entriesOf(resp *fanoutv1.SubscribeResponse) []*fanoutv1.Entry {
	if len(resp.GetBatch()) > 0 {
		return resp.GetBatch()
	}
	if resp.GetEvent() == nil {
		return nil
	}
	return []*fanoutv1.Entry{{Event: resp.GetEvent(), OriginNode: resp.GetOriginNode(), SubmittedAt: resp.GetSubmittedAt(), Revision: resp.GetRevision()}}
}

// ended says what the end of the stream with err means: Ctrl-C (ctx done) and --timeout
// (sctx's deadline) are normal ends, unless --count entries were wanted and did not all
// come; anything else is an error.
func (w *watcher) ended(ctx, sctx context.Context, err error) error {
	// The server may see the deadline (sent with the call) a moment before sctx does.
	timedOut := errors.Is(sctx.Err(), context.DeadlineExceeded) ||
		(w.o.app.timeout > 0 && status.Code(err) == codes.DeadlineExceeded)
	switch {
	case ctx.Err() != nil:
		return nil
	case timedOut && w.o.count > 0:
		return fmt.Errorf("--timeout %s passed after %d of --count %d entries", w.o.app.timeout, w.entries, w.o.count)
	case timedOut:
		return nil
	case errors.Is(err, io.EOF):
		return fmt.Errorf("Subscribe %s: the sidecar ended the stream after %d entries (is it shutting down?)", w.o.app.addr, w.entries)
	case status.Code(err) == codes.OutOfRange:
		return fmt.Errorf("%w: resubscribe with a snapshot (drop --from-revision)", w.o.app.rpcError("Subscribe", err))
	}
	return w.o.app.rpcError("Subscribe", err)
}
