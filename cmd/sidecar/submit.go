package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"
)

// submitOptions are the flags of `sidecar submit`. Only --addr is also read from the environment (FANOUT_ADDR).
type submitOptions struct {
	app         appOptions
	payloadFile string // "-": stdin
	version     uint64
	attrs       []string // key=value
	ttl         time.Duration
	deleted     bool
	ack         string
	ackTimeout  time.Duration
	out         outputFlags
}

func newSubmitCmd() *cobra.Command {
	o := submitOptions{app: defaultAppOptions(10 * time.Second)}
	cmd := &cobra.Command{
		Use:     "put TASK_ID [PAYLOAD]",
		Aliases: []string{"submit"},
		Short:   "Write one event to a sidecar (like `etcdctl put`, `nats kv put`; also spelt submit)",
		Long: `put (or submit, its first name) sends one change event for TASK_ID to the sidecar at
--addr, which keeps it as the key's latest state and fans it out to every peer.
PAYLOAD is taken as text; for bytes use --payload-file FILE (- reads stdin). To
delete a key use 'sidecar del' ('put --delete' is the old spelling, still read).

On success it prints what the node did:
  accepted register#ORDERS/i-17 version 117655171390570496 revision 42
(the version is the key's, rising per key: an HLC time stamp unless --version chose
it; the revision is this node's change counter, see 'watch --from-revision') and with
--ack one|quorum|all one line per peer:
  peer 10.0.0.2:7071: ACKED
  peer 10.0.0.3:7071: DROPPED (overflow)
-o json (or --json) prints the SubmitResponse as one line of protojson instead; -o raw
the version alone.

The exit status is 1, with the reason on stderr, when the event was not accepted:
STALE (the node holds this version or a newer one) or REFUSED (its state table is at a
bound), or when the ack policy was not satisfied.

--addr also reads FANOUT_ADDR, e.g. FANOUT_ADDR=unix:///run/fanout.sock; the other flags
read no environment variable (a pod's FANOUT_* variables are meant for serve).`,
		Example: `  sidecar put 'register#ORDERS/i-17' '{"status":"UP"}'
  sidecar put 'register#ORDERS/i-17' --payload-file state.bin --ack quorum
  echo -n UP | sidecar put 'heartbeat#i-17' --payload-file - --attr zone=eu-1 --ttl 30s
  sidecar submit 'register#ORDERS/i-17' '{"status":"DOWN"}' --addr unix:///run/fanout.sock`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return fmt.Errorf("want TASK_ID [PAYLOAD], got %d arguments (quote a payload with spaces)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := o.out.mode(outTable, outJSON, outRaw)
			if err != nil {
				return err
			}
			req, err := o.request(args, cmd.InOrStdin())
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), req, mode, cmd.OutOrStdout())
		},
	}
	o.addFlags(cmd)
	envOnly(cmd.Flags(), "addr", "token-file")
	return cmd
}

func (o *submitOptions) addFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	o.app.addFlags(fs, "deadline of the call, the wait for acks included (0: none)")
	fs.StringVar(&o.payloadFile, "payload-file", "", "read the payload from this file, as bytes (-: stdin) instead of the PAYLOAD argument")
	fs.Uint64Var(&o.version, "version", 0, "the event's version, rising per task_id (0: the sidecar assigns a hybrid-logical-clock one)")
	fs.StringArrayVar(&o.attrs, "attr", nil, "an attribute key=value (repeatable)")
	fs.DurationVar(&o.ttl, "ttl", 0, "drop the event if a peer's queue holds it longer than this (0: the node's --task-ttl)")
	fs.BoolVar(&o.deleted, "delete", false, "delete TASK_ID: send a tombstone, with no payload (the old spelling of 'sidecar del TASK_ID')")
	fs.StringVar(&o.ack, "ack", "", "when to return: queued (in every peer's queue, the default), one, quorum or all (peers acknowledged)")
	fs.DurationVar(&o.ackTimeout, "ack-timeout", 0, "with --ack one|quorum|all: wait at most this long for the acks (0: the sidecar's default, 5s)")
	o.out.addFlags(fs, "table (what the node did, a line per peer with --ack), json (the SubmitResponse, one protojson line) or raw (the version alone)", false)
}

// request maps the arguments and flags onto a one-event SubmitRequest.
func (o submitOptions) request(args []string, stdin io.Reader) (*fanoutv1.SubmitRequest, error) {
	payload, err := o.payload(args[1:], stdin)
	if err != nil {
		return nil, err
	}
	attrs, err := parseAttrs(o.attrs)
	if err != nil {
		return nil, err
	}
	ack, err := parseAck(o.ack)
	if err != nil {
		return nil, err
	}
	ttl, err := optionalDuration("--ttl", o.ttl)
	if err != nil {
		return nil, err
	}
	ackTimeout, err := optionalDuration("--ack-timeout", o.ackTimeout)
	if err != nil {
		return nil, err
	}
	ev := &fanoutv1.Event{TaskId: args[0], Payload: payload, Attributes: attrs, Version: o.version, Ttl: ttl, Deleted: o.deleted}
	return &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev}, Ack: ack, AckTimeout: ackTimeout}, nil
}

// payload is the PAYLOAD argument as text, or --payload-file's bytes.
func (o submitOptions) payload(rest []string, stdin io.Reader) ([]byte, error) {
	switch {
	case o.deleted && (len(rest) > 0 || o.payloadFile != ""):
		return nil, errors.New("--delete sends a tombstone, which has no payload: drop PAYLOAD and --payload-file")
	case len(rest) > 0 && o.payloadFile != "":
		return nil, errors.New("give the payload either as the PAYLOAD argument or with --payload-file, not both")
	case len(rest) > 0:
		return []byte(rest[0]), nil
	case o.payloadFile == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("--payload-file -: read stdin: %w", err)
		}
		return b, nil
	case o.payloadFile != "":
		b, err := os.ReadFile(o.payloadFile)
		if err != nil {
			return nil, fmt.Errorf("--payload-file: %w", err)
		}
		return b, nil
	}
	return nil, nil
}

func parseAttrs(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	attrs := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--attr %q: want key=value", kv)
		}
		attrs[k] = v
	}
	return attrs, nil
}

var ackPolicies = map[string]fanoutv1.AckPolicy{
	"":       fanoutv1.AckPolicy_ACK_POLICY_UNSPECIFIED,
	"queued": fanoutv1.AckPolicy_ACK_POLICY_QUEUED,
	"one":    fanoutv1.AckPolicy_ACK_POLICY_ONE,
	"quorum": fanoutv1.AckPolicy_ACK_POLICY_QUORUM,
	"all":    fanoutv1.AckPolicy_ACK_POLICY_ALL,
}

func parseAck(s string) (fanoutv1.AckPolicy, error) {
	p, ok := ackPolicies[strings.ToLower(s)]
	if !ok {
		return 0, fmt.Errorf("--ack %q: want queued, one, quorum or all", s)
	}
	return p, nil
}

// optionalDuration is d as a protobuf Duration; nil (the sidecar's default) for 0.
func optionalDuration(flag string, d time.Duration) (*durationpb.Duration, error) {
	switch {
	case d < 0:
		return nil, fmt.Errorf("%s %s: must not be negative (0: the sidecar's default)", flag, d)
	case d == 0:
		return nil, nil
	}
	return durationpb.New(d), nil
}

func (o submitOptions) run(ctx context.Context, req *fanoutv1.SubmitRequest, mode string, out io.Writer) error {
	var resp *fanoutv1.SubmitResponse
	err := o.app.call(ctx, "Submit", func(ctx context.Context, c fanoutv1.FanoutServiceClient) (err error) {
		resp, err = c.Submit(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	if mode == outJSON {
		if err := writeJSONLine(out, resp); err != nil {
			return err
		}
	}
	return reportSubmit(out, req, resp, mode)
}

// reportSubmit prints the outcome of a one-event Submit (-o table: the line; raw: the
// version; json: nothing more) and returns an error when the event was not accepted
// or the ack policy was not satisfied.
func reportSubmit(out io.Writer, req *fanoutv1.SubmitRequest, resp *fanoutv1.SubmitResponse, mode string) error {
	id := req.GetEvents()[0].GetTaskId()
	var res *fanoutv1.EventResult
	if rs := resp.GetResults(); len(rs) > 0 {
		res = rs[0]
	} else {
		res = &fanoutv1.EventResult{Outcome: fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED} // a sidecar without results
	}
	switch res.GetOutcome() {
	case fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED:
	case fanoutv1.EventOutcome_EVENT_OUTCOME_STALE:
		return fmt.Errorf("stale %s: node holds version %d from %s (to replace it, submit a higher --version, or 0 to let the sidecar assign one)",
			id, res.GetCurrentVersion(), res.GetCurrentOrigin())
	case fanoutv1.EventOutcome_EVENT_OUTCOME_REFUSED:
		return fmt.Errorf("refused %s: %s", id, res.GetDetail())
	default:
		return fmt.Errorf("%s: the sidecar answered no outcome (%s)", id, res.GetOutcome())
	}
	switch mode {
	case outTable:
		printAccepted(out, id, resp, res)
	case outRaw:
		fmt.Fprintln(out, versionAt(resp, 0))
	}
	if !resp.GetSatisfied() {
		return fmt.Errorf("%s was accepted but --ack %s was not satisfied: %d of %d peers acknowledged (raise --ack-timeout to wait longer)",
			id, ackName(req.GetAck()), countAcked(resp.GetPeerAcks()), len(resp.GetPeerAcks()))
	}
	return nil
}

func printAccepted(out io.Writer, id string, resp *fanoutv1.SubmitResponse, res *fanoutv1.EventResult) {
	version := versionAt(resp, 0)
	if len(resp.GetResults()) > 0 {
		fmt.Fprintf(out, "accepted %s version %d revision %d\n", id, version, res.GetRevision())
	} else { // a sidecar from before the state table: no revision
		fmt.Fprintf(out, "accepted %s version %d\n", id, version)
	}
	for _, a := range resp.GetPeerAcks() {
		fmt.Fprintf(out, "peer %s: %s\n", a.GetPeer(), peerAckText(a))
	}
}

// peerAckText is a peer's ack state, e.g. "ACKED" or "DROPPED (overflow)".
func peerAckText(a *fanoutv1.PeerAck) string {
	state := strings.TrimPrefix(a.GetState().String(), "PEER_ACK_STATE_")
	if a.GetDetail() != "" {
		state += " (" + a.GetDetail() + ")"
	}
	return state
}

// versionAt is the version the node gave the i-th event (0 from a sidecar that
// answered none).
func versionAt(resp *fanoutv1.SubmitResponse, i int) uint64 {
	if vs := resp.GetVersions(); i < len(vs) {
		return vs[i]
	}
	return 0
}

func countAcked(acks []*fanoutv1.PeerAck) int {
	n := 0
	for _, a := range acks {
		if a.GetState() == fanoutv1.PeerAckState_PEER_ACK_STATE_ACKED {
			n++
		}
	}
	return n
}

func ackName(p fanoutv1.AckPolicy) string {
	if p == fanoutv1.AckPolicy_ACK_POLICY_UNSPECIFIED {
		return "queued"
	}
	return strings.ToLower(strings.TrimPrefix(p.String(), "ACK_POLICY_"))
}
