package fanout

import (
	"context"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

type callerKey struct{}

// TestPeerCallsBoundToTheCaller: with peers authenticated, Replicate and anti-entropy
// Push are refused unless they name the caller's own id (PERMISSION_DENIED) or when
// the call is not authenticated (UNAUTHENTICATED), and counted; a Push from the caller
// may carry other origins' entries, which are taken and counted as relayed.
func TestPeerCallsBoundToTheCaller(t *testing.T) {
	cfg := testConfig("r")
	cfg.CallerIDs = func(ctx context.Context) ([]string, bool) {
		ids, ok := ctx.Value(callerKey{}).([]string)
		return ids, ok
	}
	tn := startTestNode(t, cfg)
	n := tn.node
	ps := NewPeerServer(n, tn.mesh)
	as := func(ids ...string) context.Context { return context.WithValue(context.Background(), callerKey{}, ids) }
	replicate := func(ctx context.Context, origin string) error {
		_, err := ps.Replicate(ctx, &fanoutv1.ReplicateRequest{OriginNode: origin, Events: []*fanoutv1.Event{{TaskId: "t-" + origin, Version: 1}}})
		return err
	}
	entry := func(task, origin string) *fanoutv1.SyncEntry {
		raw, err := proto.Marshal(&fanoutv1.Event{TaskId: task, Version: 5})
		if err != nil {
			t.Fatal(err)
		}
		return &fanoutv1.SyncEntry{Event: raw, Origin: origin}
	}
	push := func(ctx context.Context, caller string, entries ...*fanoutv1.SyncEntry) error {
		_, err := ps.Push(ctx, &fanoutv1.PushRequest{NodeId: caller, Entries: entries})
		return err
	}

	if err := replicate(as("x"), "x"); err != nil {
		t.Fatalf("Replicate as itself: %v", err)
	}
	for _, c := range []struct {
		what string
		err  error
		code codes.Code
	}{
		{"Replicate as another", replicate(as("x"), "y"), codes.PermissionDenied},
		{"Replicate unauthenticated", replicate(context.Background(), "x"), codes.Unauthenticated},
		{"Push as another", push(as("x"), "y", entry("p/1", "y")), codes.PermissionDenied},
		{"Push unauthenticated", push(context.Background(), "x", entry("p/2", "x")), codes.Unauthenticated},
	} {
		if status.Code(c.err) != c.code {
			t.Errorf("%s: %v, want %s", c.what, c.err, c.code)
		}
	}
	if got := n.refused.origin.Load(); got != 2 {
		t.Errorf("refused for origin: %d, want 2", got)
	}
	if got := n.refused.unauthenticated.Load(); got != 2 {
		t.Errorf("refused unauthenticated: %d, want 2", got)
	}
	if _, ok := n.table.Get([]byte("p/1")); ok {
		t.Fatal("a refused Push was applied")
	}

	// The caller's own entries, a relayed one, and this node's own: one relayed.
	if err := push(as("x"), "x", entry("p/own", "x"), entry("p/relayed", "z"), entry("p/mine", "r")); err != nil {
		t.Fatalf("Push as itself: %v", err)
	}
	for _, k := range []string{"p/own", "p/relayed", "p/mine"} {
		if _, ok := n.table.Get([]byte(k)); !ok {
			t.Errorf("%s not stored", k)
		}
	}
	if got := n.relayed.Load(); got != 1 {
		t.Errorf("relayed entries: %d, want 1", got)
	}
}
