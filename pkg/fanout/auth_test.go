package fanout

import (
	"context"
	"errors"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/proto"
)

// TestPeerCallsBoundToTheCaller: with peers authenticated, Replicate and anti-entropy
// Push are refused unless they name the caller's own id (ErrForbidden: the edge says
// PERMISSION_DENIED) or when the call is not authenticated (ErrUnauthenticated:
// UNAUTHENTICATED), and counted; a Push from the caller may carry other origins'
// entries, which are taken and counted as relayed. pkg/grpcapi's
// TestPeerCallerFromTheConnection checks the edge's part: the caller it reads, the codes.
func TestPeerCallsBoundToTheCaller(t *testing.T) {
	cfg := testConfig("r")
	cfg.AuthenticatePeers = true
	n := startTestNode(t, cfg).node
	as := func(ids ...string) Caller { return Caller{IDs: ids, Authenticated: true} }
	unauthenticated := Caller{}
	replicate := func(from Caller, origin string) error {
		_, err := n.Replicate(context.Background(), from, &fanoutv1.ReplicateRequest{OriginNode: origin, Events: []*fanoutv1.Event{{TaskId: "t-" + origin, Version: 1}}})
		return err
	}
	entry := func(task, origin string) *fanoutv1.SyncEntry {
		raw, err := proto.Marshal(&fanoutv1.Event{TaskId: task, Version: 5})
		if err != nil {
			t.Fatal(err)
		}
		return &fanoutv1.SyncEntry{Event: raw, Origin: origin}
	}
	push := func(from Caller, caller string, entries ...*fanoutv1.SyncEntry) error {
		_, err := n.Push(from, &fanoutv1.PushRequest{NodeId: caller, Entries: entries})
		return err
	}

	if err := replicate(as("x"), "x"); err != nil {
		t.Fatalf("Replicate as itself: %v", err)
	}
	for _, c := range []struct {
		what string
		err  error
		want error
	}{
		{"Replicate as another", replicate(as("x"), "y"), ErrForbidden},
		{"Replicate unauthenticated", replicate(unauthenticated, "x"), ErrUnauthenticated},
		{"Push as another", push(as("x"), "y", entry("p/1", "y")), ErrForbidden},
		{"Push unauthenticated", push(unauthenticated, "x", entry("p/2", "x")), ErrUnauthenticated},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.what, c.err, c.want)
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
