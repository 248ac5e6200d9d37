package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The exit statuses of `sidecar health`, those of grpc_health_probe.
const (
	healthBadArguments    = 1
	healthConnectionError = 2
	healthRPCError        = 3
	healthNotServing      = 4
)

// exitError is an error that sets the process's exit status (main prints it and
// exits with code; other errors exit 1).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode is the exit status err asks for: its exitError's code, else 1.
func exitCode(err error) int {
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return 1
}

// healthOptions are the flags of `sidecar health`. Whether any is read from the
// environment: none is (FANOUT_ADDR is the app address, not the admin one).
type healthOptions struct {
	addr    string
	service string
	timeout time.Duration
}

func newHealthCmd() *cobra.Command {
	o := healthOptions{addr: "127.0.0.1:9090", timeout: time.Second}
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Check a sidecar's gRPC health, as grpc_health_probe does",
		Long: `health calls grpc.health.v1.Health/Check on --addr (the sidecar's --admin-addr,
where Kubernetes' probes go; the app and peer listeners answer it too) for --service and
prints the answer:
  status: SERVING

The services: "" (the default) is liveness, SERVING once the process listens and
until it drains; fanout.v1.FanoutService is readiness, NOT_SERVING until the node has
synced with its peers at start, and again while draining; fanout.v1.PeerService is
SERVING while the node takes peer traffic.

The exit status is grpc_health_probe's: 0 SERVING, 1 bad arguments, 2 the connection
failed (nothing listening, or not within --timeout), 3 the call failed (e.g. an
unknown --service: NOT_FOUND), 4 NOT_SERVING (or another status than SERVING).

The admin port also serves gRPC reflection for the health service alone, so that
  grpcurl -plaintext 127.0.0.1:9090 grpc.health.v1.Health/Check
works there without a .proto file.`,
		Example: `  sidecar health --addr 127.0.0.1:9090
  sidecar health --addr 10.0.0.2:9090 --service fanout.v1.FanoutService --timeout 2s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.timeout <= 0 {
				return &exitError{healthBadArguments, fmt.Errorf("--timeout %s: want a positive duration", o.timeout)}
			}
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.addr, "addr", o.addr, "the sidecar's admin address host:port (its --admin-addr; the app's and peer's answer too)")
	fs.StringVar(&o.service, "service", o.service, `the service to check: "" liveness, fanout.v1.FanoutService readiness, fanout.v1.PeerService`)
	fs.DurationVar(&o.timeout, "timeout", o.timeout, "give up connecting, and the call, after this long (each)")
	envOnly(fs)
	return cmd
}

// run connects (exit status 2 if that fails within --timeout), calls Check (3 if
// that fails) and prints the status (4 unless SERVING).
func (o healthOptions) run(ctx context.Context, out io.Writer) error {
	cc, err := dialApp(o.addr)
	if err != nil {
		return &exitError{healthBadArguments, fmt.Errorf("--addr %q: %w (want host:port)", o.addr, err)}
	}
	defer cc.Close()
	cctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := waitReady(cctx, cc); err != nil {
		return &exitError{healthConnectionError, fmt.Errorf("connect to %s: %w (is a sidecar's --admin-addr there?)", o.addr, err)}
	}
	rctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(rctx, &healthpb.HealthCheckRequest{Service: o.service})
	if err != nil {
		app := appOptions{addr: o.addr, timeout: o.timeout}
		return &exitError{healthRPCError, app.rpcError("Health/Check", err)}
	}
	fmt.Fprintf(out, "status: %s\n", resp.GetStatus())
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return &exitError{healthNotServing, fmt.Errorf("service %q is %s", o.service, resp.GetStatus())}
	}
	return nil
}

// waitReady connects cc and waits until it is ready, or ctx ends.
func waitReady(ctx context.Context, cc *grpc.ClientConn) error {
	cc.Connect()
	for {
		s := cc.GetState()
		if s == connectivity.Ready {
			return nil
		}
		if !cc.WaitForStateChange(ctx, s) {
			if s == connectivity.TransientFailure {
				return errors.New("connection refused or failed")
			}
			return fmt.Errorf("not connected within the --timeout (%s)", s)
		}
	}
}
