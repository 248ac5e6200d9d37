package peers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestClassify(t *testing.T) {
	cases := []struct {
		err  error
		want error
	}{
		{status.Error(codes.ResourceExhausted, "full"), ErrCongestion},
		{status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5000 vs. 4096)"), ErrTooLarge},
		{status.Error(codes.ResourceExhausted, "grpc: trying to send message larger than max (5000 vs. 4096)"), ErrTooLarge},
		{status.Error(codes.Internal, "message larger than max"), ErrPermanent},
		{fmt.Errorf("wrapped: %w", ErrTooLarge), ErrTooLarge},
		{status.Error(codes.DeadlineExceeded, "slow"), ErrCongestion},
		{context.DeadlineExceeded, ErrCongestion},
		{status.Error(codes.Unavailable, "down"), ErrNetwork},
		{status.Error(codes.Canceled, "gone"), ErrNetwork},
		{errors.New("connection refused"), ErrNetwork},
		{status.Error(codes.InvalidArgument, "bad"), ErrPermanent},
		{status.Error(codes.Unauthenticated, "who"), ErrPermanent},
		{status.Error(codes.Unimplemented, "what"), ErrPermanent},
		{status.Error(codes.Internal, "oops"), ErrPermanent},
		{fmt.Errorf("wrapped: %w", ErrCongestion), ErrCongestion},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.err), func(t *testing.T) {
			if got := Classify(c.err); !errors.Is(got, c.want) {
				t.Fatalf("Classify(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
	if Classify(nil) != nil {
		t.Fatal("Classify(nil) != nil")
	}
}

func TestParseList(t *testing.T) {
	cases := []struct {
		in      string
		want    string
		wantErr string
	}{
		{"", "", ""},
		{"a:1, b:2 ,,a:1", "a:1,b:2", ""},
		{"[::1]:7071", "[::1]:7071", ""},
		{"a:1,nope", "", `entry 1 "nope"`},
		{"a:0", "", "port must be 1..65535"},
		{":7071", "", "empty host"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseList(c.in)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || strings.Join(got, ",") != c.want {
				t.Fatalf("ParseList(%q) = %v, %v; want %s", c.in, got, err, c.want)
			}
		})
	}
}

// peerFunc serves PeerService with a function.
type peerFunc struct {
	fanoutv1.UnimplementedPeerServiceServer
	f func(*fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error)
}

func (p peerFunc) Replicate(_ context.Context, r *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	return p.f(r)
}

func TestConnOverLoopback(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	answer := func(r *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
		switch r.OriginNode {
		case "busy":
			return nil, status.Error(codes.ResourceExhausted, "busy")
		case "short":
			return &fanoutv1.ReplicateResponse{}, nil
		}
		return &fanoutv1.ReplicateResponse{NodeId: "p", Statuses: make([]fanoutv1.ItemStatus, len(r.Events))}, nil
	}
	fanoutv1.RegisterPeerServiceServer(srv, peerFunc{f: answer})
	go srv.Serve(lis)
	defer srv.Stop()

	c, err := Dial(lis.Addr().String(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	one := []*fanoutv1.Event{{TaskId: "k", Version: 1}}
	if resp, err := c.Replicate(ctx, &fanoutv1.ReplicateRequest{OriginNode: "x", Events: one}); err != nil || resp.NodeId != "p" {
		t.Fatalf("Replicate = %v, %v", resp, err)
	}
	if _, err := c.Replicate(ctx, &fanoutv1.ReplicateRequest{OriginNode: "busy", Events: one}); !errors.Is(err, ErrCongestion) {
		t.Fatalf("RESOURCE_EXHAUSTED → %v, want congestion", err)
	}
	if _, err := c.Replicate(ctx, &fanoutv1.ReplicateRequest{OriginNode: "short", Events: one}); !errors.Is(err, ErrPermanent) {
		t.Fatalf("wrong status count → %v, want permanent", err)
	}
	srv.Stop()
	if _, err := c.Replicate(ctx, &fanoutv1.ReplicateRequest{OriginNode: "x", Events: one}); !errors.Is(err, ErrNetwork) {
		t.Fatalf("stopped server → %v, want network failure", err)
	}
}

func TestFakeNetwork(t *testing.T) {
	n := NewFakeNetwork()
	c := n.Dial("p")
	if _, err := c.Replicate(context.Background(), &fanoutv1.ReplicateRequest{}); !errors.Is(err, ErrNetwork) {
		t.Fatalf("no handler → %v, want network failure", err)
	}
	n.Handle("p", func(context.Context, *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
		return nil, status.Error(codes.DeadlineExceeded, "slow")
	})
	if _, err := c.Replicate(context.Background(), &fanoutv1.ReplicateRequest{}); !errors.Is(err, ErrCongestion) {
		t.Fatalf("DEADLINE_EXCEEDED → %v, want congestion", err)
	}
}

// TestConnTooLarge: a request over the peer's receive limit, or over the
// connection's own send limit, is refused by gRPC itself with RESOURCE_EXHAUSTED,
// and Classify tells it from congestion by gRPC's message.
func TestConnTooLarge(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(4096))
	fanoutv1.RegisterPeerServiceServer(srv, peerFunc{f: func(r *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
		return &fanoutv1.ReplicateResponse{NodeId: "p", Statuses: make([]fanoutv1.ItemStatus, len(r.Events))}, nil
	}})
	go srv.Serve(lis)
	defer srv.Stop()
	big := &fanoutv1.ReplicateRequest{OriginNode: "x", Events: []*fanoutv1.Event{{TaskId: "k", Version: 1, Payload: make([]byte, 8192)}}}
	small := &fanoutv1.ReplicateRequest{OriginNode: "x", Events: []*fanoutv1.Event{{TaskId: "k", Version: 1}}}
	for _, tc := range []struct {
		name  string
		limit int
	}{{"the peer refuses it", 1 << 20}, {"this connection refuses to send it", 4096}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Dial(lis.Addr().String(), Options{MaxMessageBytes: tc.limit})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := c.Replicate(ctx, big); !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrCongestion) {
				t.Fatalf("8 KiB request, 4 KiB limit → %v, want too large", err)
			}
			if _, err := c.Replicate(ctx, small); err != nil {
				t.Fatalf("a small request after it → %v", err)
			}
		})
	}
}
