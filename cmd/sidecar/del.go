package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"
)

// delBatch is how many tombstones del sends per Submit: well under the 10000 events
// and the default --max-request-bytes of one request, with keys up to their bound.
const delBatch = 500

// delOptions are the flags of `sidecar del`. Only --addr is also read from the
// environment (FANOUT_ADDR).
type delOptions struct {
	app        appOptions
	prefix     string
	all        bool
	dryRun     bool
	ack        string
	ackTimeout time.Duration
	out        outputFlags
}

func newDelCmd() *cobra.Command {
	o := delOptions{app: defaultAppOptions(30 * time.Second)}
	cmd := &cobra.Command{
		Use:     "del TASK_ID... | del --prefix PREFIX | del --all",
		Aliases: []string{"delete", "rm"},
		Short:   "Delete keys (like `etcdctl del`, `nats kv del`)",
		Long: `del deletes keys on the sidecar at --addr: it submits a deletion (a tombstone, with a
version the sidecar assigns, so newer than what it holds) for each key, which the node
fans out to every peer like any other change. Each argument is an exact key, as in get
and watch. --prefix PREFIX deletes every key that starts with PREFIX that the node holds
now (a key written after the listing is not deleted); an empty --prefix is refused:
deleting every key takes --all, said on purpose. --dry-run lists the keys that would be
deleted and deletes nothing.

It prints one line per key deleted:
  deleted register#ORDERS/i-17 version 117655171390570499 revision 43
-o json prints each SubmitResponse as one line of protojson; -o raw the keys alone,
one per line. A key the node does not hold is still deleted (its tombstone tells the
peers, which may hold it). The exit status is 1 when a deletion was refused or the ack
policy was not satisfied.

'sidecar put TASK_ID --delete' (and 'submit --delete') is the old spelling of 'del
TASK_ID', still read.

--addr also reads FANOUT_ADDR, e.g. FANOUT_ADDR=unix:///run/fanout.sock; the other flags
read no environment variable (a pod's FANOUT_* variables are meant for serve).`,
		Example: `  sidecar del 'register#ORDERS/i-17'
  sidecar del --prefix 'register#ORDERS/' --dry-run
  sidecar del --prefix 'register#ORDERS/' --ack all
  sidecar del --all`,
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := o.out.mode(outTable, outJSON, outRaw)
			if err != nil {
				return err
			}
			if err := o.validate(cmd, args); err != nil {
				return err
			}
			return o.run(cmd.Context(), args, mode, cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	o.app.addFlags(fs, "deadline of the whole deletion, listing and acks included (0: none)")
	fs.StringVar(&o.prefix, "prefix", "", "delete every key that starts with this (not empty: see --all)")
	fs.BoolVar(&o.all, "all", false, "delete every key the node holds")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print the keys that would be deleted, one per line, and delete nothing")
	fs.StringVar(&o.ack, "ack", "", "when to return: queued (in every peer's queue, the default), one, quorum or all (peers acknowledged)")
	fs.DurationVar(&o.ackTimeout, "ack-timeout", 0, "with --ack one|quorum|all: wait at most this long for the acks (0: the sidecar's default, 5s)")
	o.out.addFlags(fs, "table (a line per key deleted), json (each SubmitResponse, one protojson line) or raw (the keys deleted, one per line)", false)
	envOnly(fs, "addr", "token-file")
	return cmd
}

func (o delOptions) validate(cmd *cobra.Command, args []string) error {
	prefixGiven := cmd.Flags().Changed("prefix")
	ways := 0
	for _, given := range []bool{len(args) > 0, prefixGiven, o.all} {
		if given {
			ways++
		}
	}
	switch {
	case ways == 0:
		return errors.New("name what to delete: TASK_IDs, --prefix PREFIX, or --all")
	case ways > 1:
		return errors.New("give one of TASK_IDs, --prefix and --all")
	case prefixGiven && o.prefix == "":
		return errors.New("--prefix \"\" would delete every key: say --all if that is what you mean")
	}
	if _, err := parseAck(o.ack); err != nil {
		return err
	}
	_, err := optionalDuration("--ack-timeout", o.ackTimeout)
	return err
}

func (o delOptions) run(ctx context.Context, args []string, mode string, out io.Writer) error {
	ack, _ := parseAck(o.ack)
	ackTimeout, _ := optionalDuration("--ack-timeout", o.ackTimeout)
	return o.app.call(ctx, "Submit", func(ctx context.Context, c fanoutv1.FanoutServiceClient) error {
		keys := dedup(args)
		if len(args) == 0 {
			var err error
			if keys, err = listKeys(ctx, c, o.prefix); err != nil {
				return err
			}
		}
		if o.dryRun {
			for _, k := range keys {
				fmt.Fprintln(out, k)
			}
			return nil
		}
		for len(keys) > 0 {
			n := min(len(keys), delBatch)
			if err := o.deleteBatch(ctx, c, keys[:n], ack, ackTimeout, mode, out); err != nil {
				return err
			}
			keys = keys[n:]
		}
		return nil
	})
}

// deleteBatch submits the tombstones of keys in one request and prints the outcome.
func (o delOptions) deleteBatch(ctx context.Context, c fanoutv1.FanoutServiceClient, keys []string, ack fanoutv1.AckPolicy,
	ackTimeout *durationpb.Duration, mode string, out io.Writer) error {
	req := &fanoutv1.SubmitRequest{Ack: ack, AckTimeout: ackTimeout}
	for _, k := range keys {
		req.Events = append(req.Events, &fanoutv1.Event{TaskId: k, Deleted: true})
	}
	resp, err := c.Submit(ctx, req)
	if err != nil {
		return err
	}
	if mode == outJSON {
		if err := writeJSONLine(out, resp); err != nil {
			return err
		}
	}
	var failed []error
	for i, k := range keys {
		res := &fanoutv1.EventResult{Outcome: fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED}
		if rs := resp.GetResults(); i < len(rs) {
			res = rs[i]
		}
		switch res.GetOutcome() {
		case fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED:
		case fanoutv1.EventOutcome_EVENT_OUTCOME_STALE: // only a writer's own version could be stale; del leaves it to the sidecar
			failed = append(failed, fmt.Errorf("stale %s: node holds version %d from %s", k, res.GetCurrentVersion(), res.GetCurrentOrigin()))
			continue
		default:
			failed = append(failed, fmt.Errorf("refused %s: %s %s", k, res.GetOutcome(), res.GetDetail()))
			continue
		}
		switch mode {
		case outTable:
			fmt.Fprintf(out, "deleted %s version %d revision %d\n", k, versionAt(resp, i), res.GetRevision())
		case outRaw:
			fmt.Fprintln(out, k)
		}
	}
	if mode == outTable {
		for _, a := range resp.GetPeerAcks() {
			fmt.Fprintf(out, "peer %s: %s\n", a.GetPeer(), peerAckText(a))
		}
	}
	if !resp.GetSatisfied() && ack != fanoutv1.AckPolicy_ACK_POLICY_UNSPECIFIED {
		failed = append(failed, fmt.Errorf("--ack %s was not satisfied: %d of %d peers acknowledged (raise --ack-timeout to wait longer)",
			ackName(ack), countAcked(resp.GetPeerAcks()), len(resp.GetPeerAcks())))
	}
	return errors.Join(failed...)
}

// listKeys is every key under prefix that the node holds, page by page.
func listKeys(ctx context.Context, c fanoutv1.FanoutServiceClient, prefix string) ([]string, error) {
	var keys []string
	token := ""
	for {
		resp, err := c.Get(ctx, &fanoutv1.GetRequest{Prefix: prefix, Limit: maxPage, PageToken: token})
		if err != nil {
			return nil, err
		}
		for _, e := range resp.GetEntries() {
			if !e.GetEvent().GetDeleted() {
				keys = append(keys, e.GetEvent().GetTaskId())
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			return keys, nil
		}
	}
}

// dedup is keys without repeats, in their first order.
func dedup(keys []string) []string {
	seen := make(map[string]bool, len(keys))
	var out []string
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}
