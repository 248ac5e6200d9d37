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
	prefix        string
	excludeOwn    bool
	includeOwn    bool // the old --include-own: the default now, kept so scripts still run
	maxBatch      int
	maxBatchBytes int
	count         int // entries; 0: no limit
	format        entryFormat
}

func newWatchCmd() *cobra.Command {
	o := watchOptions{app: defaultAppOptions(0)}
	cmd := &cobra.Command{
		Use:   "watch [TASK_ID...] | watch --prefix PREFIX",
		Short: "Print entries, then every change as it arrives (like `etcdctl watch`, `nats kv watch`)",
		Long: `watch subscribes to the sidecar at --addr. Each argument is an exact key, as in get
and del; --prefix PREFIX selects every key that starts with PREFIX instead, and with
neither every key is watched. (Before, the argument was a prefix: write
'watch --prefix P' for what 'watch P' did.)

It first prints every current entry it watches, then the line
  --- snapshot complete (N entries) ---
then each change as it arrives, one line each:
  42 register#ORDERS/i-17 v117655171390570496 from node-b: {"status":"UP"}
  43 register#ORDERS/i-18 deleted (v117655171390570497 from node-c)
The first number is the node's revision of the change (this node's change counter);
the v number is the key's version (rising per key: an HLC time stamp unless the writer
chose one). To resume after an interruption without a new snapshot, pass the last
revision seen as --from-revision. Payloads print as text when they are printable
UTF-8, else as base64:…, cut to 60 characters unless --full. On a node that has just
started, the snapshot waits until the node has synced with its peers (at most its
--sync-timeout): it is never a half-synced table.

Every change is printed, the ones submitted to this node included (as etcdctl and
nats do); --exclude-own prints only the changes that came from peers. (The API's
Subscribe leaves a node's own writes out unless include_own is set; the old
--include-own flag is the default now.)

-o json (or --json) prints one protojson Entry per line, and {"snapshotComplete":true}
for the marker. -o raw prints the payloads alone, byte for byte, each followed by
--separator (a newline unless set), no marker; a deletion prints as an empty payload.

watch runs until Ctrl-C (exit status 0), --count entries (0), or --timeout (0, or 1
when --count entries did not arrive). A stream that ends otherwise exits 1.

--addr also reads FANOUT_ADDR, e.g. FANOUT_ADDR=unix:///run/fanout.sock; the other flags
read no environment variable (a pod's FANOUT_* variables are meant for serve).`,
		Example: `  sidecar watch --prefix 'register#ORDERS/'
  sidecar watch 'heartbeat#i-17' --no-snapshot --count 1 --timeout 30s
  sidecar watch 'flag/a' 'flag/b' -o raw
  sidecar watch --from-revision 42 -o json | jq -c .event`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.format.resolve(); err != nil {
				return err
			}
			req, err := o.request(args)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return o.run(ctx, req, args, cmd.OutOrStdout())
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
	fs.StringVar(&o.prefix, "prefix", "", "watch every key that starts with this (instead of TASK_IDs)")
	fs.BoolVar(&o.excludeOwn, "exclude-own", false, "leave out the live changes submitted to this node: print only those from peers")
	fs.BoolVar(&o.includeOwn, "include-own", false, "print the changes submitted to this node too (the default now)")
	_ = fs.MarkDeprecated("include-own", "it is the default now (--exclude-own leaves them out)")
	fs.IntVar(&o.maxBatch, "max-batch", 0, fmt.Sprintf("let the sidecar pack up to this many entries into one message, up to %d (0 or 1: one per message)", maxSubscribeBatch))
	fs.IntVar(&o.maxBatchBytes, "max-batch-bytes", 0, "cap one message's size, up to 64 MiB (0: the sidecar's default, 1 MiB)")
	fs.IntVar(&o.count, "count", 0, "exit after printing this many entries (0: no limit)")
	o.format.addFlags(fs, `lines (table), json (one protojson Entry per line, and {"snapshotComplete":true} for the marker) or raw (the payloads alone, each followed by --separator)`)
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
	case len(args) > 0 && o.prefix != "":
		return nil, fmt.Errorf("give TASK_IDs or --prefix %q, not both", o.prefix)
	case o.excludeOwn && o.includeOwn:
		return nil, errors.New("--exclude-own and --include-own contradict each other: drop --include-own (it is the default)")
	}
	req := &fanoutv1.SubscribeRequest{
		Snapshot:      !o.noSnapshot && o.fromRevision == 0,
		FromRevision:  o.fromRevision,
		IncludeOwn:    !o.excludeOwn,
		MaxBatch:      uint32(o.maxBatch),
		MaxBatchBytes: uint32(o.maxBatchBytes),
	}
	req.TaskIdPrefix = o.prefix
	if len(args) > 0 {
		// Subscribe filters by prefix only: ask for the keys' common prefix, and
		// print only the keys asked for (watcher.wanted).
		req.TaskIdPrefix = commonPrefix(args)
	}
	return req, nil
}

// run prints the stream until ctx is done (Ctrl-C: no error), --count entries,
// --timeout, or the stream fails.
func (o watchOptions) run(ctx context.Context, req *fanoutv1.SubscribeRequest, keys []string, out io.Writer) error {
	cc, client, err := o.app.connect()
	if err != nil {
		return err
	}
	defer cc.Close()
	sctx, cancel := o.app.withTimeout(ctx)
	defer cancel() // also ends the stream when --count is reached
	w := &watcher{o: o, out: out, keys: keySet(keys)}
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
	keys    map[string]bool // the exact keys asked for; nil: all under the prefix
	entries int             // printed so far
}

// commonPrefix is the longest prefix that every key has.
func commonPrefix(keys []string) string {
	p := keys[0]
	for _, k := range keys[1:] {
		n := 0
		for n < len(p) && n < len(k) && p[n] == k[n] {
			n++
		}
		p = p[:n]
	}
	return p
}

// keySet is keys as a set; nil without keys.
func keySet(keys []string) map[string]bool {
	if len(keys) == 0 {
		return nil
	}
	set := make(map[string]bool, len(keys))
	for _, k := range keys {
		set[k] = true
	}
	return set
}

// print writes resp's entries, or the snapshot marker. done is true once --count
// entries are out.
func (w *watcher) print(resp *fanoutv1.SubscribeResponse) (done bool, err error) {
	if resp.GetSnapshotComplete() {
		switch w.o.format.mode {
		case outRaw:
			return false, nil
		case outJSON:
			return false, writeJSONLine(w.out, &fanoutv1.SubscribeResponse{SnapshotComplete: true})
		}
		_, err := fmt.Fprintf(w.out, "--- snapshot complete (%d entries) ---\n", w.entries)
		return false, err
	}
	for _, e := range entriesOf(resp) {
		if w.keys != nil && !w.keys[e.GetEvent().GetTaskId()] {
			continue
		}
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
	switch w.o.format.mode {
	case outJSON:
		return writeJSONLine(w.out, e)
	case outRaw:
		return writeRaw(w.out, e.GetEvent().GetPayload(), w.o.format.sep) // a deletion has none
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
