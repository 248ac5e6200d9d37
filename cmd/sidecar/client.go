package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// maxReplyBytes bounds one message the client commands accept. gRPC's default, 4 MiB,
// is below what a sidecar may send: a Subscribe batch may be up to 64 MiB
// (max_batch_bytes) and a Get page holds up to 10000 entries.
const maxReplyBytes = 128 << 20

// appOptions are the flags shared by the commands that call a sidecar's app listener
// (status, submit, get, watch). Only --addr and --token-file are also read from the
// environment.
type appOptions struct {
	addr      string
	timeout   time.Duration // 0: no deadline
	tokenFile string        // --token-file: the sidecar's --app-token-file
}

func defaultAppOptions(timeout time.Duration) appOptions {
	return appOptions{addr: "127.0.0.1:7070", timeout: timeout}
}

func (o *appOptions) addFlags(fs *pflag.FlagSet, timeoutUsage string) {
	fs.StringVar(&o.addr, "addr", o.addr, "the sidecar's app address (host:port or unix:///path)")
	fs.DurationVar(&o.timeout, "timeout", o.timeout, timeoutUsage)
	fs.StringVar(&o.tokenFile, "token-file", o.tokenFile, "file holding the token of a sidecar started with --app-token-file (sent as \"authorization: Bearer <token>\")")
}

// bearer sends a token with every call. The app listener is loopback or a unix
// socket, without TLS, so it does not require transport security.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// token reads --token-file ("" without one).
func (o appOptions) token() (string, error) {
	if o.tokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(o.tokenFile)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("--token-file %s is empty", o.tokenFile)
	}
	return tok, nil
}

// dialApp connects to a sidecar's app listener: host:port, or unix:///path.
func dialApp(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	target := addr
	if !strings.HasPrefix(addr, "unix://") {
		target = "passthrough:///" + addr
	}
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	return grpc.NewClient(target, opts...)
}

// connect dials --addr. The caller closes the connection.
func (o appOptions) connect() (*grpc.ClientConn, fanoutv1.FanoutServiceClient, error) {
	opts := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxReplyBytes))}
	tok, err := o.token()
	if err != nil {
		return nil, nil, err
	}
	if tok != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(tok)))
	}
	cc, err := dialApp(o.addr, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("--addr %q: %w (want host:port or unix:///path)", o.addr, err)
	}
	return cc, fanoutv1.NewFanoutServiceClient(cc), nil
}

// withTimeout bounds ctx by --timeout (not at all when it is 0).
func (o appOptions) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if o.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, o.timeout)
}

// call dials --addr and runs f under --timeout. A gRPC error f returns comes back as
// "method addr: CODE: message" (rpcError).
func (o appOptions) call(ctx context.Context, method string, f func(context.Context, fanoutv1.FanoutServiceClient) error) error {
	cc, client, err := o.connect()
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := o.withTimeout(ctx)
	defer cancel()
	return o.rpcError(method, f(ctx, client))
}

// rpcError turns a gRPC error from method into "method addr: CODE: message", with what
// to do about the codes a user can act on. Other errors (and nil) pass unchanged.
func (o appOptions) rpcError(method string, err error) error {
	st, ok := status.FromError(err)
	if err == nil || !ok {
		return err
	}
	msg := fmt.Sprintf("%s %s: %s: %s", method, o.addr, codeName(st.Code()), st.Message())
	switch st.Code() {
	case codes.Unavailable:
		msg += " (is a sidecar serving on --addr?)"
	case codes.Unauthenticated:
		if o.tokenFile == "" {
			msg += " (this sidecar requires a token: pass --token-file with the content of its --app-token-file)"
		} else {
			msg += " (--token-file does not hold this sidecar's token)"
		}
	case codes.DeadlineExceeded:
		msg += fmt.Sprintf(" (--timeout %s passed: raise it)", o.timeout)
	}
	return errors.New(msg)
}

// codeNames are the canonical names of the gRPC codes (those of grpc-status and
// grpcurl), indexed by code.
var codeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
	"UNAUTHENTICATED",
}

// codeName is c's canonical name, e.g. OUT_OF_RANGE.
func codeName(c codes.Code) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("CODE_%d", uint32(c))
}
