package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func newStatusCmd() *cobra.Command {
	addr := "127.0.0.1:7070"
	timeout := 5 * time.Second
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print a sidecar's GetStatus as a table",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			st, err := fetchStatus(ctx, addr)
			if err != nil {
				return err
			}
			printStatus(cmd.OutOrStdout(), st)
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", addr, "the sidecar's app address (host:port or unix:///path)")
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "give up after this long")
	return cmd
}

// dialApp connects to a sidecar's app listener.
func dialApp(addr string) (*grpc.ClientConn, error) {
	target := addr
	if !strings.HasPrefix(addr, "unix://") {
		target = "passthrough:///" + addr
	}
	return grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

func fetchStatus(ctx context.Context, addr string) (*fanoutv1.GetStatusResponse, error) {
	cc, err := dialApp(addr)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	st, err := fanoutv1.NewFanoutServiceClient(cc).GetStatus(ctx, &fanoutv1.GetStatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("GetStatus %s: %w", addr, err)
	}
	return st, nil
}

func printStatus(w io.Writer, st *fanoutv1.GetStatusResponse) {
	state := st.GetState()
	fmt.Fprintf(w, "node %s   keys %d/%d   bytes %d/%d   revision %d   subscribers %d   delivered %d\n\n",
		st.GetNodeId(), state.GetKeys(), state.GetMaxKeys(), state.GetBytes(), state.GetMaxBytes(),
		state.GetRevision(), st.GetSubscribers(), st.GetDelivered())
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
}
