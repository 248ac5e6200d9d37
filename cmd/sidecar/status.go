package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
)

// statusOptions are the flags of `sidecar status`.
type statusOptions struct {
	app      appOptions
	output   string // table, wide or json
	json     bool   // --json: -o json
	watch    bool
	interval time.Duration
}

func newStatusCmd() *cobra.Command {
	o := statusOptions{app: defaultAppOptions(5 * time.Second), output: "table", interval: 2 * time.Second}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print a sidecar's state and its peers (GetStatus)",
		Long: `Print a sidecar's state and its peers, from GetStatus.

The header says whether the sidecar is ready and why, and its transport: the
mesh and its peers, or the JetStream stream, the NATS server it is connected to,
the feed's applied and last stream sequence, its lag, the events not yet
acknowledged by the stream (outbox) and the connection's reconnects.

The default table has one line per peer: its node id, breaker, events waiting
(PENDING) and in a call (IN-FLIGHT), events the peer took (SENT: answered OK or
STALE) and events given up on (DROPPED: evicted from a full queue, expired, or
refused as invalid), when anti-entropy last synced with it and its last error.
-o wide prints every counter of the API (OVERRIDDEN: replaced by a newer event of
the same task_id before it was sent; REPLAYED: sent again after a failed call;
CONGESTION, TRANSIENT, PERMANENT: events in calls that failed so) and the
anti-entropy table. -o json (or --json) prints the GetStatusResponse as protojson:
64-bit counters are JSON strings, as protojson writes them.`,
		Example: `  sidecar status
  sidecar status -o wide
  sidecar status --json | jq '.peers[] | {address, nodeId, pending}'
  sidecar status --watch --interval 1s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.json {
				o.output = "json"
			}
			render, err := statusRenderer(o.output)
			if err != nil {
				return err
			}
			if !o.watch {
				st, err := fetchStatus(cmd.Context(), o.app)
				if err != nil {
					return err
				}
				return render(cmd.OutOrStdout(), st)
			}
			if o.interval <= 0 {
				return fmt.Errorf("--interval %s: want a positive duration", o.interval)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return watchStatus(ctx, cmd.OutOrStdout(), o, render, time.Now)
		},
	}
	fs := cmd.Flags()
	o.app.addFlags(fs, "give up on one GetStatus after this long")
	fs.StringVarP(&o.output, "output", "o", o.output, "table (one line per peer), wide (every counter, and anti-entropy) or json (protojson)")
	fs.BoolVar(&o.json, "json", false, "the same as -o json")
	fs.BoolVarP(&o.watch, "watch", "w", false, "print the status again every --interval until Ctrl-C (on a terminal, in place)")
	fs.DurationVar(&o.interval, "interval", o.interval, "with --watch: how often")
	envOnly(fs, "addr", "token-file")
	return cmd
}

// statusRenderer returns the printer of an --output.
func statusRenderer(output string) (func(io.Writer, *fanoutv1.GetStatusResponse) error, error) {
	switch output {
	case "table":
		return func(w io.Writer, st *fanoutv1.GetStatusResponse) error { printStatus(w, st); return nil }, nil
	case "wide":
		return func(w io.Writer, st *fanoutv1.GetStatusResponse) error { printStatusWide(w, st); return nil }, nil
	case "json":
		return printStatusJSON, nil
	}
	return nil, fmt.Errorf("-o %q: want table, wide or json", output)
}

// printStatusJSON prints st as protojson, every field present (zeros included), so
// that a script's query never finds a key missing.
func printStatusJSON(w io.Writer, st *fanoutv1.GetStatusResponse) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(st)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// watchStatus prints the status every o.interval until ctx ends. On a terminal it
// redraws in place; elsewhere (a pipe, a file) it appends each snapshot after a
// timestamped header line, without escape codes. A failed GetStatus prints its error
// and the watch goes on: a restarting sidecar comes back.
func watchStatus(ctx context.Context, w io.Writer, o statusOptions, render func(io.Writer, *fanoutv1.GetStatusResponse) error, now func() time.Time) error {
	tty := isTerminal(w)
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for {
		var frame bytes.Buffer
		fmt.Fprintf(&frame, "every %s: sidecar status --addr %s   %s\n\n", o.interval, o.app.addr, now().Format(time.TimeOnly))
		st, err := fetchStatus(ctx, o.app)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			fmt.Fprintf(&frame, "error: %v (retrying)\n", err)
		default:
			if err := render(&frame, st); err != nil {
				return err
			}
		}
		if tty {
			_, _ = io.WriteString(w, "\x1b[H\x1b[2J") // home, clear screen
		} else {
			_, _ = io.WriteString(w, "\n")
		}
		if _, err := w.Write(frame.Bytes()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// fetchStatus calls GetStatus on the sidecar at o.addr.
func fetchStatus(ctx context.Context, o appOptions) (*fanoutv1.GetStatusResponse, error) {
	var st *fanoutv1.GetStatusResponse
	err := o.call(ctx, "GetStatus", func(ctx context.Context, c fanoutv1.FanoutServiceClient) (err error) {
		st, err = c.GetStatus(ctx, &fanoutv1.GetStatusRequest{})
		return err
	})
	return st, err
}

// printHeader prints the node's own line and its readiness.
func printHeader(w io.Writer, st *fanoutv1.GetStatusResponse) {
	state := st.GetState()
	ready := "no"
	if st.GetReady() {
		ready = "yes"
	}
	fmt.Fprintf(w, "node %s   ready %s   keys %d/%d   bytes %d/%d   revision %d   subscribers %d   delivered %d\n",
		st.GetNodeId(), ready, state.GetKeys(), state.GetMaxKeys(), state.GetBytes(), state.GetMaxBytes(),
		state.GetRevision(), st.GetSubscribers(), st.GetDelivered())
	fmt.Fprintf(w, "%s\n%s\n", st.GetReadyReason(), statusLegend)
	printTransport(w, st.GetTransport())
	fmt.Fprintln(w)
}

// printTransport prints the "transport:" line: the mesh's peers, or the JetStream
// stream, the server the sidecar is connected to, and how far its feed and outbox
// are. Nothing for a sidecar too old to report it.
func printTransport(w io.Writer, t *fanoutv1.TransportStatus) {
	switch t.GetKind() {
	case "":
		return
	case "jetstream":
		server := "not connected"
		if t.GetServer() != "" {
			server = t.GetServer() + " (" + t.GetServerVersion() + ")"
		}
		fmt.Fprintf(w, "transport: jetstream   stream %s   bucket %s   replicas %d   server %s\n"+
			"           applied %d/%d   lag %d   outbox %d events %d bytes   reconnects %d\n",
			t.GetStream(), t.GetBucket(), t.GetReplicas(), server,
			t.GetAppliedSequence(), t.GetLastSequence(), t.GetLag(), t.GetOutboxEvents(), t.GetOutboxBytes(), t.GetReconnects())
	default:
		fmt.Fprintf(w, "transport: %s   peers %d\n", t.GetKind(), t.GetPeers())
	}
}

// statusLegend says what the header's revision is, and how it differs from a version.
const statusLegend = "(revision: this node's change counter, +1 per change from its start; versions are per key)"

// printStatus prints the narrow table: a line per peer that fits 100 columns.
func printStatus(w io.Writer, st *fanoutv1.GetStatusResponse) {
	now := time.Now()
	printHeader(w, st)
	if len(st.GetPeers()) == 0 {
		fmt.Fprintln(w, "no peers")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tNODE\tUP\tBREAKER\tPENDING\tIN-FLIGHT\tSENT\tDROPPED\tLAST ERROR")
	for _, p := range st.GetPeers() {
		lastErr := "-"
		if e := p.GetLastError(); e != nil && e.GetRecoveredAt() == nil {
			lastErr = fmt.Sprintf("%s %s ago", strings.ToLower(e.GetClass()), age(now, e.GetAt().AsTime()))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", shortAddr(p.GetAddress(), peerColumn), peerNode(p), peerUp(p, now),
			peerBreaker(p), p.GetPending(), p.GetInFlight(), p.GetSucceeded()+p.GetStale(), p.GetOverflow()+p.GetExpired()+p.GetPermanent(), lastErr)
	}
	tw.Flush()
	printPeerErrors(w, st, now, false)
}

// peerUp is the UP column: "yes", or "no" and for how long the peer has been down.
func peerUp(p *fanoutv1.PeerStatus, now time.Time) string {
	switch {
	case p.GetUp():
		return "yes"
	case p.GetUpChangedAt() != nil:
		return "no " + age(now, p.GetUpChangedAt().AsTime())
	}
	return "no"
}

// printStatusWide prints every counter of every peer, and the anti-entropy table.
func printStatusWide(w io.Writer, st *fanoutv1.GetStatusResponse) {
	now := time.Now()
	printHeader(w, st)
	if len(st.GetPeers()) == 0 {
		fmt.Fprintln(w, "no peers")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PEER\tNODE\tUP\tBREAKER\tPENDING\tIN-FLIGHT\tACCEPTED\tSUCCEEDED\tOVERRIDDEN\tOVERFLOW\tEXPIRED\tREPLAYED\tCONGESTION\tTRANSIENT\tPERMANENT\tSTALE\t")
	for _, p := range st.GetPeers() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n",
			p.GetAddress(), peerNode(p)+leaving(p), peerUp(p, now), p.GetBreaker(), p.GetPending(), p.GetInFlight(), p.GetAccepted(), p.GetSucceeded(),
			p.GetOverridden(), p.GetOverflow(), p.GetExpired(), p.GetReplayed(), p.GetCongestion(), p.GetTransient(),
			p.GetPermanent(), p.GetStale())
	}
	tw.Flush()
	printPeerErrors(w, st, now, true)
	printSync(w, st, now)
}

// peerColumn is the width of the narrow table's PEER column: a Kubernetes DNS name
// is cut in the middle, keeping its first label and the port (-o wide has it whole).
const peerColumn = 23

// shortAddr cuts addr to n characters, keeping its start and its port.
func shortAddr(addr string, n int) string {
	r := []rune(addr)
	if len(r) <= n {
		return addr
	}
	port := ""
	if i := strings.LastIndexByte(addr, ':'); i >= 0 && len(addr)-i < n/2 {
		port = addr[i:]
	}
	keep := n - len([]rune(port)) - 1
	return string(r[:keep]) + "…" + port
}

// peerNode is a peer's node id, "?" until it has answered; "!" marks an id that
// clashes (the lines under the table say why).
func peerNode(p *fanoutv1.PeerStatus) string {
	id := p.GetNodeId()
	if id == "" {
		id = "?"
	}
	if p.GetNodeIdConflict() != "" {
		id += "!"
	}
	return id
}

// peerBreaker is the narrow table's BREAKER column: the breaker's state, or "leaving"
// for a peer out of the set that is still sent what it had pending (-o wide shows
// both).
func peerBreaker(p *fanoutv1.PeerStatus) string {
	if p.GetRemoving() {
		return "leaving"
	}
	return p.GetBreaker()
}

// age is now - t rounded for a table: 850ms, 12s, 3m4s.
func age(now, t time.Time) string {
	d := now.Sub(t)
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// printPeerErrors prints why each failing peer fails: its latest failed call, with
// the table's age; recovered, one a call has been answered since, only if all (-o
// wide).
func printPeerErrors(w io.Writer, st *fanoutv1.GetStatusResponse, now time.Time, all bool) {
	for _, p := range st.GetPeers() {
		if c := p.GetNodeIdConflict(); c != "" {
			fmt.Fprintf(w, "\nnode id conflict at %s: %s", p.GetAddress(), c)
		}
		e := p.GetLastError()
		switch {
		case e == nil:
		case e.GetRecoveredAt() == nil:
			fmt.Fprintf(w, "\nlast error to %s (%s, %s ago): %s", p.GetAddress(), e.GetClass(), age(now, e.GetAt().AsTime()), e.GetMessage())
		case all:
			fmt.Fprintf(w, "\nlast error to %s (%s, %s ago; recovered %s ago): %s", p.GetAddress(), e.GetClass(),
				age(now, e.GetAt().AsTime()), age(now, e.GetRecoveredAt().AsTime()), e.GetMessage())
		}
	}
	fmt.Fprintln(w)
}

// printSync prints each peer's anti-entropy rounds.
func printSync(w io.Writer, st *fanoutv1.GetStatusResponse, now time.Time) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PEER\tSYNC ROUNDS\tFAILED\tLAST SUCCESS\tTOOK\tPULLED\tPUSHED\tDIGEST BYTES\tBYTES\tLAST ERROR\t")
	for _, p := range st.GetPeers() {
		s := p.GetSync()
		last := "never"
		if s.GetLastSuccess() != nil {
			last = now.Sub(s.GetLastSuccess().AsTime()).Round(time.Second).String() + " ago"
		}
		errText := s.GetLastError()
		if errText == "" {
			errText = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t\n", p.GetAddress(), s.GetRounds(), s.GetFailed(), last,
			s.GetLastDuration().AsDuration().Round(time.Millisecond), s.GetPulled(), s.GetPushed(), s.GetDigestBytes(), s.GetBytes(), errText)
	}
	tw.Flush()
}

func leaving(p *fanoutv1.PeerStatus) string {
	if p.GetRemoving() {
		return " (leaving)"
	}
	return ""
}
