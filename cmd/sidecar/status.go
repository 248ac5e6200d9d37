package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/spf13/cobra"
)

func newStatusCmd() *cobra.Command {
	o := defaultAppOptions(5 * time.Second)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print a sidecar's GetStatus as a table",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := fetchStatus(cmd.Context(), o)
			if err != nil {
				return err
			}
			printStatus(cmd.OutOrStdout(), st)
			return nil
		},
	}
	o.addFlags(cmd.Flags(), "give up after this long")
	envOnly(cmd.Flags(), "addr")
	return cmd
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

func printStatus(w io.Writer, st *fanoutv1.GetStatusResponse) {
	state := st.GetState()
	fmt.Fprintf(w, "node %s   keys %d/%d   bytes %d/%d   revision %d   subscribers %d   delivered %d\n\n",
		st.GetNodeId(), state.GetKeys(), state.GetMaxKeys(), state.GetBytes(), state.GetMaxBytes(),
		state.GetRevision(), st.GetSubscribers(), st.GetDelivered())
	ready := "no"
	if st.GetReady() {
		ready = "yes"
	}
	fmt.Fprintf(w, "ready %s: %s\n\n", ready, st.GetReadyReason())
	if len(st.GetPeers()) == 0 {
		fmt.Fprintln(w, "no peers")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PEER\tNODE\tBREAKER\tPENDING\tIN-FLIGHT\tACCEPTED\tSUCCEEDED\tOVERRIDDEN\tOVERFLOW\tEXPIRED\tREPLAYED\tCONGESTION\tTRANSIENT\tPERMANENT\tSTALE\t")
	for _, p := range st.GetPeers() {
		node := p.GetNodeId()
		if node == "" {
			node = "?"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n",
			p.GetAddress(), node, p.GetBreaker(), p.GetPending(), p.GetInFlight(), p.GetAccepted(), p.GetSucceeded(),
			p.GetOverridden(), p.GetOverflow(), p.GetExpired(), p.GetReplayed(), p.GetCongestion(), p.GetTransient(),
			p.GetPermanent(), p.GetStale())
	}
	tw.Flush()
	printPeerErrors(w, st, time.Now())
	printSync(w, st, time.Now())
}

// printPeerErrors prints why each failing peer fails: its latest failed Replicate.
func printPeerErrors(w io.Writer, st *fanoutv1.GetStatusResponse, now time.Time) {
	for _, p := range st.GetPeers() {
		if e := p.GetLastError(); e != nil {
			fmt.Fprintf(w, "\nlast error to %s (%s, %s ago): %s", p.GetAddress(), e.GetClass(),
				now.Sub(e.GetAt().AsTime()).Round(time.Second), e.GetMessage())
		}
	}
	fmt.Fprintln(w)
}

// printSync prints each peer's anti-entropy rounds (SPEC §14).
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
