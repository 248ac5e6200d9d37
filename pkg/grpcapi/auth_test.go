package grpcapi

import (
	"context"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

type callerKey struct{}

// TestPeerCallerFromTheConnection: the peer handlers read the caller's identities
// from the call (here a context value in place of the TLS peer) and hand them to a
// node with peers authenticated, which takes a Replicate or Push only from the node it
// names: as another it is PERMISSION_DENIED, unauthenticated UNAUTHENTICATED.
// pkg/fanout's TestPeerCallsBoundToTheCaller checks the node's part (the counts, what
// is stored, relayed entries).
func TestPeerCallerFromTheConnection(t *testing.T) {
	cfg := testConfig("r")
	cfg.AuthenticatePeers = true
	var ps *PeerServer
	tn := startTestNode(t, cfg, func(p *PeerServer) {
		p.callerIDs = func(ctx context.Context) ([]string, bool) {
			ids, ok := ctx.Value(callerKey{}).([]string)
			return ids, ok
		}
		ps = p
	})
	as := func(ids ...string) context.Context { return context.WithValue(context.Background(), callerKey{}, ids) }
	replicate := func(ctx context.Context, origin string) error {
		_, err := ps.Replicate(ctx, &fanoutv1.ReplicateRequest{OriginNode: origin, Events: []*fanoutv1.Event{{TaskId: "t-" + origin, Version: 1}}})
		return err
	}
	push := func(ctx context.Context, caller string) error {
		raw, err := proto.Marshal(&fanoutv1.Event{TaskId: "p/" + caller, Version: 5})
		if err != nil {
			t.Fatal(err)
		}
		_, err = ps.Push(ctx, &fanoutv1.PushRequest{NodeId: caller, Entries: []*fanoutv1.SyncEntry{{Event: raw, Origin: caller}}})
		return err
	}
	if err := replicate(as("x"), "x"); err != nil {
		t.Fatalf("Replicate as itself: %v", err)
	}
	if err := push(as("x"), "x"); err != nil {
		t.Fatalf("Push as itself: %v", err)
	}
	for _, c := range []struct {
		what string
		err  error
		code codes.Code
	}{
		{"Replicate as another", replicate(as("x"), "y"), codes.PermissionDenied},
		{"Replicate unauthenticated", replicate(context.Background(), "y"), codes.Unauthenticated},
		{"Push as another", push(as("x"), "y"), codes.PermissionDenied},
		{"Push unauthenticated", push(context.Background(), "y"), codes.Unauthenticated},
	} {
		if status.Code(c.err) != c.code {
			t.Errorf("%s: %v, want %s", c.what, c.err, c.code)
		}
	}
	for key, want := range map[string]bool{"t-x": true, "p/x": true, "t-y": false, "p/y": false} {
		if got := stored(t, tn.node, key); got != want {
			t.Errorf("%s stored: %t, want %t", key, got, want)
		}
	}
	// NewPeerServer reads the caller from the TLS peer (peertls.Caller): over a
	// plaintext listener no call is authenticated.
	plain := startTestNode(t, cfg, nil)
	_, err := plain.peer.Replicate(context.Background(), &fanoutv1.ReplicateRequest{OriginNode: "x", Events: []*fanoutv1.Event{{TaskId: "z", Version: 1}}})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("Replicate over a plaintext listener: %v, want UNAUTHENTICATED", err)
	}
}
