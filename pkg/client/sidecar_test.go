package client_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fanout/fanout/internal/freeport"
	"github.com/fanout/fanout/internal/testbin"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The tests run the client against real sidecar processes: cmd/sidecar built once by
// TestMain, started on ports of internal/freeport, killed with SIGKILL and restarted
// on the same ports.

var sidecarBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fanout-client-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "client test:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	product, err := testbin.ProductDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, "client test:", err)
		return 1
	}
	sidecarBin = filepath.Join(dir, "sidecar")
	build := exec.Command("go", "build", "-o", sidecarBin, "./cmd/sidecar")
	build.Dir, build.Stdout, build.Stderr = product, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "client test: go build ./cmd/sidecar:", err)
		return 1
	}
	stop, err := startExampleNode()
	if err != nil {
		fmt.Fprintln(os.Stderr, "client test: the examples' sidecar:", err)
		return 1
	}
	code := m.Run()
	stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "client test: leaked goroutines:", err)
			return 1
		}
	}
	return code
}

// exampleAddr is the app address of the sidecar the examples (example_test.go) run
// against, started by TestMain: a node alone, as an app's own sidecar would be.
var exampleAddr string

// startExampleNode starts a sidecar for the examples and waits until it is ready.
func startExampleNode() (stop func(), err error) {
	ports, err := freeport.Take(3)
	if err != nil {
		return nil, err
	}
	a := ports.Addrs()
	cmd := exec.Command(sidecarBin, "serve", "--node-id=example", "--app-addr="+a[0], "--peer-addr="+a[1], "--admin-addr="+a[2], "--log-level=error")
	cmd.SysProcAttr = testbin.ProcAttr()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		ports.Release()
		return nil, err
	}
	stop = func() {
		cmd.Process.Kill()
		cmd.Wait()
		ports.Release()
	}
	cc, err := grpc.NewClient("passthrough:///"+a[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		stop()
		return nil, err
	}
	defer cc.Close()
	h := healthpb.NewHealthClient(cc)
	for deadline := time.Now().Add(readyTimeout); ; time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: "fanout.v1.FanoutService"})
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("not ready after %s: %v %v", readyTimeout, r, err)
		}
	}
	exampleAddr = a[0]
	return stop, nil
}

// readyTimeout bounds a node's start on a loaded 2-core machine.
const readyTimeout = 60 * time.Second

// node is one sidecar process; its ports stay across restarts.
type node struct {
	t                *testing.T
	id               string
	app, peer, admin string
	peers            []string
	flags            []string
	log              string
	cmd              *exec.Cmd
	done             chan struct{}
}

// startNodes starts n sidecars (ids A, B, …), each peered with all the others, with
// extra serve flags, and waits until they are ready.
func startNodes(t *testing.T, n int, flags ...string) []*node {
	t.Helper()
	ports, err := freeport.Take(3 * n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ports.Release)
	addrs := ports.Addrs()
	dir := t.TempDir()
	nodes := make([]*node, n)
	for i := range nodes {
		nodes[i] = &node{t: t, id: string(rune('A' + i)), app: addrs[3*i], peer: addrs[3*i+1], admin: addrs[3*i+2],
			flags: flags, log: filepath.Join(dir, fmt.Sprintf("node-%c.log", 'A'+i))}
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				a.peers = append(a.peers, b.peer)
			}
		}
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			nd.kill()
			if t.Failed() {
				b, _ := os.ReadFile(nd.log)
				t.Logf("---- log of node %s ----\n%s", nd.id, tail(string(b), 40))
			}
		}
	})
	for _, nd := range nodes {
		nd.launch()
	}
	for _, nd := range nodes {
		nd.waitReady()
	}
	return nodes
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (n *node) launch() {
	n.t.Helper()
	args := append([]string{"serve", "--node-id=" + n.id, "--app-addr=" + n.app, "--peer-addr=" + n.peer,
		"--admin-addr=" + n.admin, "--peers=" + strings.Join(n.peers, ","), "--sync-timeout=10s", "--log-level=warn"}, n.flags...)
	f, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(sidecarBin, args...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FANOUT_") {
			env = append(env, kv)
		}
	}
	cmd.Env, cmd.Stderr, cmd.SysProcAttr = env, f, testbin.ProcAttr()
	if err := cmd.Start(); err != nil {
		n.t.Fatalf("node %s: %v", n.id, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	n.cmd, n.done = cmd, done
}

// waitReady waits until the node's readiness health service is SERVING (its
// bootstrap has ended).
func (n *node) waitReady() {
	n.t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+n.app, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond}, MinConnectTimeout: time.Second}))
	if err != nil {
		n.t.Fatal(err)
	}
	defer cc.Close()
	h := healthpb.NewHealthClient(cc)
	deadline := time.Now().Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: "fanout.v1.FanoutService"})
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		select {
		case <-n.done:
			n.t.Fatalf("node %s exited while starting: %v", n.id, n.cmd.ProcessState)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("node %s not ready after %s: %v %v", n.id, readyTimeout, r, err)
		}
	}
}

// kill sends SIGKILL and waits for the process to end.
func (n *node) kill() {
	if n.cmd == nil {
		return
	}
	select {
	case <-n.done:
	default:
		n.cmd.Process.Kill()
		<-n.done
	}
}

// restart kills the node (SIGKILL) if it runs, starts it again and waits until ready.
func (n *node) restart() {
	n.t.Helper()
	n.kill()
	n.launch()
	n.waitReady()
}

// signal sends sig to the process. SIGSTOP returns once every thread has stopped:
// kill(2) wakes one thread to begin the group stop, and until it has run the others
// run on, so a thread that network data woke can still answer a call (on a loaded
// machine, a "stopped" peer acknowledged an event).
func (n *node) signal(sig syscall.Signal) {
	n.t.Helper()
	if err := n.cmd.Process.Signal(sig); err != nil {
		n.t.Fatal(err)
	}
	if sig != syscall.SIGSTOP {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := testbin.AllStopped(n.cmd.Process.Pid)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("node %s not stopped 30s after SIGSTOP: %v", n.id, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// within returns a context that ends after d, cancelled at the test's end.
func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
