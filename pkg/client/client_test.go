package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/freeport"
	"github.com/fanout/fanout/pkg/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func dial(t *testing.T, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(context.Background(), addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestPutGetDelete: a Put's typed result, Get, a paged List, Delete, a stale write
// and an invalid key, against one real sidecar.
func TestPutGetDelete(t *testing.T) {
	n := startNodes(t, 1)[0]
	c := dial(t, n.app)
	ctx := within(t, 30*time.Second)

	var last client.Result
	for i := range 5 {
		r, err := c.Put(ctx, fmt.Sprintf("pgd/k%d", i), []byte(fmt.Sprintf("v%d", i)), client.WithAttributes(map[string]string{"n": fmt.Sprint(i)}))
		if err != nil {
			t.Fatalf("put: %v", err)
		}
		if r.Outcome != client.Accepted || r.Version == 0 || r.Revision <= last.Revision || !r.Satisfied {
			t.Fatalf("put k%d: %+v, want accepted, a version, a revision above %d, satisfied", i, r, last.Revision)
		}
		last = r
	}
	got, err := c.Get(ctx, "pgd/k4", "pgd/k0", "pgd/missing")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got["pgd/k4"].Value) != "v4" || got["pgd/k4"].Version != last.Version ||
		got["pgd/k4"].Origin != "A" || got["pgd/k4"].Revision != last.Revision || got["pgd/k4"].Attributes["n"] != "4" {
		t.Fatalf("get: %+v, want k0 and k4 (v4 at version %d, revision %d, from A)", got, last.Version, last.Revision)
	}

	// A listing in pages of 2: 3 pages, every key once, in revision order.
	var keys []string
	token, pages := "", 0
	for {
		p, err := c.List(ctx, "pgd/", 2, token)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, e := range p.Entries {
			keys = append(keys, e.Key)
		}
		if p.Revision < last.Revision {
			t.Errorf("page revision %d, below the last write's %d", p.Revision, last.Revision)
		}
		if token = p.Next; token == "" {
			break
		}
	}
	if want := "pgd/k0 pgd/k1 pgd/k2 pgd/k3 pgd/k4"; strings.Join(keys, " ") != want || pages != 3 {
		t.Errorf("list in pages of 2: %d pages %v, want 3 pages %s", pages, keys, want)
	}

	d, err := c.Delete(ctx, "pgd/k0")
	if err != nil || d.Outcome != client.Accepted || d.Version <= got["pgd/k0"].Version {
		t.Fatalf("delete: %+v %v, want accepted above the put's version", d, err)
	}
	all, err := c.ListAll(ctx, "pgd/")
	if err != nil || len(all) != 4 || all["pgd/k0"].Key != "" {
		t.Fatalf("list after delete: %d keys %v, want 4 without k0", len(all), err)
	}

	// A version below the key's: STALE, with the winner; the error carries the result.
	r, err := c.Put(ctx, "pgd/k1", []byte("old"), client.WithVersion(1))
	var re *client.ResultError
	if !errors.Is(err, client.ErrStale) || !errors.As(err, &re) || r.Outcome != client.Stale ||
		r.CurrentVersion != all["pgd/k1"].Version || r.CurrentOrigin != "A" || re.Result.CurrentVersion != r.CurrentVersion {
		t.Fatalf("stale put: %+v, %v; want ErrStale naming version %d from A", r, err, all["pgd/k1"].Version)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(all["pgd/k1"].Version)) {
		t.Errorf("stale error %q does not name the winning version", err)
	}

	// Invalid: refused by the client (an empty key) and by the sidecar (a version past
	// its bounds); both keep a gRPC status.
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"empty key", second(c.Put(ctx, "", []byte("x"))), "key: empty"},
		{"huge version", second(c.Put(ctx, "pgd/x", []byte("x"), client.WithVersion(^uint64(0)))), "version"},
	} {
		if !errors.Is(tc.err, client.ErrInvalid) || status.Code(tc.err) != codes.InvalidArgument || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v (code %s), want ErrInvalid, INVALID_ARGUMENT, saying %q", tc.name, tc.err, status.Code(tc.err), tc.want)
		}
	}

	// A deadline passed is context.DeadlineExceeded too.
	dctx, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-dctx.Done()
	if _, err := c.Get(dctx, "pgd/k1"); !errors.Is(err, context.DeadlineExceeded) || status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("get past its deadline: %v, want context.DeadlineExceeded", err)
	}
}

func second[T any](_ T, err error) error { return err }

// TestAckPolicies: ALL on two nodes is satisfied with the peer ACKED; with the peer
// stopped it is ErrNotSatisfied after the ack timeout, naming the peer PENDING.
func TestAckPolicies(t *testing.T) {
	nodes := startNodes(t, 2)
	c := dial(t, nodes[0].app)
	ctx := within(t, 30*time.Second)
	for _, p := range []client.AckPolicy{client.Queued, client.One, client.Quorum, client.All} {
		r, err := c.Put(ctx, "ack/"+p.String(), []byte("x"), client.WithAck(p), client.WithAckTimeout(5*time.Second))
		if err != nil || !r.Satisfied {
			t.Fatalf("put with %s: %+v %v", p, r, err)
		}
		if p != client.Queued && (len(r.PeerAcks) != 1 || r.PeerAcks[0].State != fanoutv1.PeerAckState_PEER_ACK_STATE_ACKED || r.PeerAcks[0].Peer != nodes[1].peer) {
			t.Errorf("put with %s: peer acks %+v, want %s ACKED", p, r.PeerAcks, nodes[1].peer)
		}
	}
	b := dial(t, nodes[1].app)
	if got, err := b.Get(ctx, "ack/ACK_POLICY_ALL"); err != nil || len(got) != 1 {
		t.Fatalf("ALL satisfied but the peer lacks the key: %v %v", got, err)
	}

	nodes[1].signal(syscall.SIGSTOP)
	defer nodes[1].signal(syscall.SIGCONT)
	start := time.Now()
	r, err := c.Put(ctx, "ack/stopped", []byte("x"), client.WithAck(client.All), client.WithAckTimeout(time.Second))
	if !errors.Is(err, client.ErrNotSatisfied) || r.Outcome != client.Accepted || r.Satisfied ||
		len(r.PeerAcks) != 1 || r.PeerAcks[0].State == fanoutv1.PeerAckState_PEER_ACK_STATE_ACKED {
		t.Fatalf("ALL with the peer stopped: %+v %v, want ErrNotSatisfied, accepted, the peer not acked", r, err)
	}
	if !strings.Contains(err.Error(), nodes[1].peer) || time.Since(start) < 900*time.Millisecond {
		t.Errorf("error %q (after %s): want the peer's address, after the 1s ack timeout", err, time.Since(start))
	}
}

// TestTokenAndUnavailable: a sidecar with --app-token-file refuses a client without
// the token (ErrUnauthenticated) and serves one with it; no sidecar is ErrUnavailable.
func TestTokenAndUnavailable(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNodes(t, 1, "--app-token-file="+tokenFile)[0]
	ctx := within(t, 30*time.Second)
	_, err := dial(t, n.app).Put(ctx, "tok/a", []byte("x"))
	if !errors.Is(err, client.ErrUnauthenticated) || !strings.Contains(err.Error(), "WithToken") {
		t.Errorf("without a token: %v, want ErrUnauthenticated saying what to pass", err)
	}
	if _, err := dial(t, n.app, client.WithToken("wrong")).Put(ctx, "tok/a", []byte("x")); !errors.Is(err, client.ErrUnauthenticated) {
		t.Errorf("a wrong token: %v, want ErrUnauthenticated", err)
	}
	if _, err := dial(t, n.app, client.WithTokenFile(tokenFile)).Put(ctx, "tok/a", []byte("x")); err != nil {
		t.Errorf("with the token file: %v", err)
	}
	if _, err := client.New(ctx, n.app, client.WithTokenFile(filepath.Join(dir, "none"))); err == nil || !strings.Contains(err.Error(), "token file") {
		t.Errorf("a missing token file: %v, want an error naming it", err)
	}

	ports, err := freeport.Take(1)
	if err != nil {
		t.Fatal(err)
	}
	defer ports.Release()
	_, err = dial(t, ports.Addrs()[0]).Get(ctx, "x")
	if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "is a sidecar serving") {
		t.Errorf("no sidecar: %v, want ErrUnavailable", err)
	}
}
