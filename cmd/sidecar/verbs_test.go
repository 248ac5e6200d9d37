package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/freeport"
	"github.com/fanout/fanout/internal/testbin"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/sidecar"
	"google.golang.org/protobuf/encoding/protojson"
)

// grpcurlPath is the pinned grpcurl (tools/go.mod) that TestMain builds; the tests
// that call the admin port with it read it.
var grpcurlPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sidecar-cli-tools")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	grpcurlPath, err = testbin.BuildTool(dir, "github.com/fullstorydev/grpcurl/cmd/grpcurl")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// node is a real sidecar (pkg/sidecar) on loopback, for the client commands.
type node struct {
	sc    *sidecar.Sidecar
	app   string // its app address
	admin string // its admin address
}

// startNode starts a sidecar with peers (none: a single node) and stops it at the end
// of the test.
func startNode(t *testing.T, peers ...string) *node {
	t.Helper()
	ports, err := freeport.Take(1)
	if err != nil {
		t.Fatal(err)
	}
	admin := ports.Addrs()[0]
	ports.Release()
	cfg := sidecar.DefaultConfig()
	cfg.Node = fanout.DefaultConfig()
	cfg.Node.NodeID = "n1"
	cfg.Mesh.Peers = peers
	cfg.AppAddr, cfg.PeerAddr, cfg.AdminAddr, cfg.PprofAddr = "127.0.0.1:0", "127.0.0.1:0", admin, ""
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Build = sidecarBuild()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	sc, err := sidecar.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sc.Shutdown(ctx)
	})
	return &node{sc: sc, app: sc.AppAddr(), admin: admin}
}

// cli runs the command line against n's app address and fails the test on an error.
func (n *node) cli(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, stderr, err := runCLI(testContext(t), append(args, "--addr", n.app), stdin)
	if err != nil {
		t.Fatalf("sidecar %s: %v (stderr %q)", strings.Join(args, " "), err, stderr)
	}
	return out
}

// binary is a payload with every byte value, a newline and a NUL among them: -o raw
// must give it back exactly.
var binary = func() string {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(255 - i)
	}
	return string(b)
}()

// TestVerbsAgainstANode runs put, get, watch and del, in every output mode, against a
// real node.
func TestVerbsAgainstANode(t *testing.T) {
	n := startNode(t)

	// put: each output mode; submit is its other name.
	out := n.cli(t, "", "put", "flag/x", "on")
	if !regexp.MustCompile(`^accepted flag/x version \d+ revision \d+\n$`).MatchString(out) {
		t.Errorf("put: %q", out)
	}
	out = n.cli(t, "", "submit", "flag/xy", "off", "-o", "raw")
	if !regexp.MustCompile(`^\d{6,}\n$`).MatchString(out) {
		t.Errorf("put -o raw: %q, want the version alone", out)
	}
	out = n.cli(t, binary, "put", "bin/a", "--payload-file", "-", "-o", "json")
	var resp fanoutv1.SubmitResponse
	if err := protojson.Unmarshal([]byte(out), &resp); err != nil || len(resp.GetResults()) != 1 || resp.GetResults()[0].GetRevision() == 0 {
		t.Errorf("put -o json: %q (%v)", out, err)
	}

	// get: table with the legend, json, raw byte for byte.
	out = n.cli(t, "", "get", "flag/x")
	if !strings.HasPrefix(out, "TASK_ID  VERSION") || !strings.Contains(out, "flag/x ") || !strings.Contains(out, "  on\n") ||
		!strings.HasSuffix(out, legend+"\n") {
		t.Errorf("get -o table:\n%s", out)
	}
	if out = n.cli(t, "", "get", "bin/a", "-o", "raw", "--separator", ""); out != binary {
		t.Errorf("get -o raw of a binary payload: %q, want the %d bytes exactly", out, len(binary))
	}
	if out = n.cli(t, "", "get", "--prefix", "flag/", "-o", "raw"); out != "on\noff\n" {
		t.Errorf("get --prefix -o raw: %q", out)
	}
	if out = n.cli(t, "", "get", "flag/x", "flag/xy", "-o", "raw", "--separator", `\0`); out != "on\x00off\x00" {
		t.Errorf("get -o raw --separator \\0: %q", out)
	}
	// An argument is an exact key: flag/x is not a prefix of flag/xy here.
	out = n.cli(t, "", "get", "flag/x", "--json")
	var e fanoutv1.Entry
	if err := protojson.Unmarshal([]byte(out), &e); err != nil || e.GetEvent().GetTaskId() != "flag/x" || string(e.GetEvent().GetPayload()) != "on" {
		t.Errorf("get --json: %q (%v)", out, err)
	}
	out = n.cli(t, "", "get", "bin/a", "-o", "json")
	if err := protojson.Unmarshal([]byte(out), &e); err != nil || string(e.GetEvent().GetPayload()) != binary {
		t.Errorf("get -o json of a binary payload: %q (%v)", out, err)
	}

	// watch: an exact key, own writes included; the other key under it is not shown.
	t.Run("watch a key", func(t *testing.T) {
		w := n.watch(t, "flag/x", "--count", "2")
		w.waitFor(t, "--- snapshot complete (1 entries) ---")
		n.cli(t, "", "put", "flag/xy", "not watched")
		n.cli(t, "", "put", "flag/x", "on again")
		out, err := w.wait(t)
		want := regexp.MustCompile(`^\d+ flag/x v\d+ from n1: on\n--- snapshot complete \(1 entries\) ---\n\d+ flag/x v\d+ from n1: on again\n$`)
		if err != nil || !want.MatchString(out) {
			t.Errorf("watch flag/x: %v\n%s", err, out)
		}
	})
	t.Run("watch raw", func(t *testing.T) {
		w := n.watch(t, "--prefix", "bin/", "-o", "raw", "--separator", "", "--count", "3")
		w.waitFor(t, binary)
		n.cli(t, "", "put", "bin/b", "\n\x00")
		n.cli(t, "", "del", "bin/b") // a deletion: an empty payload
		if out, err := w.wait(t); err != nil || out != binary+"\n\x00" {
			t.Errorf("watch -o raw: %v %q", err, out)
		}
	})
	t.Run("watch json", func(t *testing.T) {
		w := n.watch(t, "--prefix", "flag/", "-o", "json", "--count", "3")
		w.waitFor(t, `{"snapshotComplete":true}`)
		n.cli(t, "", "put", "flag/x", "third")
		out, err := w.wait(t)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if err != nil || len(lines) != 4 || lines[2] != `{"snapshotComplete":true}` || !strings.Contains(lines[3], `"payload":"dGhpcmQ="`) {
			t.Fatalf("watch -o json: %v\n%s", err, out)
		}
		for _, l := range append(lines[:2:2], lines[3]) {
			if !json.Valid([]byte(l)) || !strings.Contains(l, `"taskId":"flag/x`) {
				t.Errorf("watch -o json line %q", l)
			}
		}
	})

	// del: exact keys, the old spelling, --prefix with --dry-run, --all.
	if out = n.cli(t, "", "del", "flag/x"); !regexp.MustCompile(`^deleted flag/x version \d+ revision \d+\n$`).MatchString(out) {
		t.Errorf("del: %q", out)
	}
	if _, stderr, err := runCLI(testContext(t), []string{"get", "flag/x", "--addr", n.app}, ""); err == nil || stderr != "not found: flag/x\n" {
		t.Errorf("get after del: %v %q", err, stderr)
	}
	n.cli(t, "", "put", "flag/z", "1")
	n.cli(t, "", "put", "flag/z", "--delete") // put --delete: the old spelling
	if out = n.cli(t, "", "get", "--prefix", "flag/", "-o", "raw"); out != "not watched\n" {
		t.Errorf("after del and put --delete, get --prefix flag/ -o raw: %q", out)
	}
	n.cli(t, "", "put", "flag/w", "2")
	if out = n.cli(t, "", "del", "--prefix", "flag/", "--dry-run"); out != "flag/xy\nflag/w\n" {
		t.Errorf("del --prefix --dry-run: %q", out)
	}
	if out = n.cli(t, "", "del", "--prefix", "flag/", "-o", "raw"); out != "flag/xy\nflag/w\n" {
		t.Errorf("del --prefix -o raw: %q", out)
	}
	out = n.cli(t, "", "del", "--all", "-o", "json")
	if err := protojson.Unmarshal([]byte(out), &resp); err != nil || len(resp.GetResults()) != 1 {
		t.Errorf("del --all -o json: %q (%v)", out, err) // bin/a was all that was left
	}
	if out = n.cli(t, "", "get", "-o", "raw"); out != "" {
		t.Errorf("get after del --all: %q", out)
	}
}

func TestDelArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "name what to delete: TASK_IDs, --prefix PREFIX, or --all"},
		{[]string{"--prefix", ""}, `--prefix "" would delete every key: say --all if that is what you mean`},
		{[]string{"a", "--all"}, "give one of TASK_IDs, --prefix and --all"},
		{[]string{"--prefix", "a", "--all"}, "give one of TASK_IDs, --prefix and --all"},
		{[]string{"a", "-o", "yaml"}, `-o "yaml": want table, json, raw`},
		{[]string{"a", "--ack", "most"}, `--ack "most": want queued, one, quorum or all`},
	} {
		f := &fakeApp{}
		addr := f.start(t, "")
		_, _, err := runCLI(testContext(t), append([]string{"del", "--addr", addr}, tc.args...), "")
		checkErr(t, err, tc.want)
		checkRequests(t, f.requests())
	}
}

// running is a watch command running in the background.
type running struct {
	out  *lineBuffer
	done chan error
}

func (n *node) watch(t *testing.T, args ...string) *running {
	t.Helper()
	r := &running{out: newLineBuffer(), done: make(chan error, 1)}
	ctx := testContext(t)
	go func() {
		_, err := runCLITo(ctx, r.out, append([]string{"watch", "--addr", n.app, "--timeout", "10s"}, args...), "")
		r.done <- err
	}()
	t.Cleanup(func() { <-r.done })
	return r
}

// waitFor returns once the output holds s.
func (r *running) waitFor(t *testing.T, s string) {
	t.Helper()
	ctx := testContext(t)
	for !strings.Contains(r.out.String(), s) {
		select {
		case <-r.out.wrote:
		case <-ctx.Done():
			t.Fatalf("watch never printed %q; it printed %q", s, r.out.String())
		}
	}
}

// wait returns the output once the command has ended.
func (r *running) wait(t *testing.T) (string, error) {
	t.Helper()
	err := <-r.done
	r.done <- err // for the cleanup
	return r.out.String(), err
}

// TestHealthCommand checks `sidecar health` against the admin port in the three
// states (serving, not serving, nothing listening), and grpcurl through the admin
// port's reflection.
func TestHealthCommand(t *testing.T) {
	n := startNode(t, "127.0.0.1:1") // a peer that is never there: the drain below waits for it
	ctx := testContext(t)
	health := func(args ...string) (string, int) {
		out, _, err := runCLI(ctx, append([]string{"health", "--addr", n.admin}, args...), "")
		if err == nil {
			return out, 0
		}
		return out, exitCode(err)
	}
	waitNodeReady(t, n, health)
	if out, code := health(); code != 0 || out != "status: SERVING\n" {
		t.Errorf("health (liveness): %d %q, want 0 SERVING", code, out)
	}
	if _, code := health("--service", "nope"); code != healthRPCError {
		t.Errorf("health of an unknown service: exit %d, want %d (NOT_FOUND is an RPC failure)", code, healthRPCError)
	}
	if _, code := health("--timeout", "0s"); code != healthBadArguments {
		t.Errorf("health --timeout 0s: exit %d, want %d", code, healthBadArguments)
	}

	// grpcurl, with no .proto: reflection knows the health service, and only it.
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(gctx, grpcurlPath, "-plaintext", "-d", `{"service":"fanout.v1.FanoutService"}`, n.admin,
		"grpc.health.v1.Health/Check").CombinedOutput(); err != nil || !strings.Contains(string(out), `"status": "SERVING"`) {
		t.Errorf("grpcurl Health/Check on the admin port: %v\n%s", err, out)
	}
	if out, err := exec.CommandContext(gctx, grpcurlPath, "-plaintext", n.admin, "list").CombinedOutput(); err != nil || string(out) != "grpc.health.v1.Health\n" {
		t.Errorf("grpcurl list on the admin port: %v %q, want the health service alone", err, out)
	}
	if out, err := exec.CommandContext(gctx, grpcurlPath, "-plaintext", n.admin, "describe", "fanout.v1.FanoutService").CombinedOutput(); err == nil {
		t.Errorf("grpcurl describe fanout.v1.FanoutService on the admin port answered: the API's descriptor is not for the admin port\n%s", out)
	}

	// Not serving: readiness while the node drains (its peer holds an event it cannot
	// send, so the drain lasts up to the 5 s shutdown timeout).
	n.cli(t, "", "put", "k", "v")
	stopped := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stopped <- n.sc.Shutdown(sctx)
	}()
	code := 0
	for code == 0 && ctx.Err() == nil {
		var out string
		out, code = health("--service", sidecar.ReadinessService)
		if code == healthNotServing && out != "status: NOT_SERVING\n" {
			t.Errorf("health while draining: %q", out)
		}
	}
	if code != healthNotServing {
		t.Errorf("health --service %s while draining: exit %d, want %d", sidecar.ReadinessService, code, healthNotServing)
	}
	<-stopped

	// Nothing listening.
	if _, code := health(); code != healthConnectionError {
		t.Errorf("health with no server: exit %d, want %d", code, healthConnectionError)
	}
}

// waitNodeReady waits until the node's readiness service is SERVING (the bootstrap has
// given up on the absent peer).
func waitNodeReady(t *testing.T, n *node, health func(...string) (string, int)) {
	t.Helper()
	ctx := testContext(t)
	for ctx.Err() == nil {
		if _, code := health("--service", sidecar.ReadinessService); code == 0 {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatal("the node never became ready")
}
