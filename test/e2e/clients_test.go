package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/testbin"
)

// Tests of the clients in other languages (examples/): each example runs as
// a process of its own against a real 3-node cluster, as a user would run it, and Go
// checks on every node what the example says it did. Each example also has to fail
// properly: nonzero, with a clear message, within its deadlines.
//
// A missing interpreter or library fails the test (it never skips): `bash
// test/deps.sh` installs them, and `make test` runs it first.

// pythonBin is Debian's Python, the one python3-grpcio and python3-grpc-tools install
// into (a python3 earlier on PATH, e.g. pyenv's, has no grpc).
const pythonBin = "/usr/bin/python3"

// exampleTimeout bounds one run of an example. A run takes about a second; the bound
// is for a loaded CI machine.
const exampleTimeout = 60 * time.Second

// failFast bounds a run that must fail: a deadline or retry budget of 1 s, the
// interpreter's start, and room for a loaded machine. Far below the 16 s the example's
// open watch would last if a failure left it running.
const failFast = 10 * time.Second

// clientExample is how to run one example: argv before the flags, run in dir.
type clientExample struct {
	name string
	argv []string
	dir  string
}

// TestPythonClient runs examples/python against a 3-node cluster (see testClientExample).
func TestPythonClient(t *testing.T) {
	testClientExample(t, pythonExample(t))
}

// TestNodeClient runs examples/node against a 3-node cluster (see testClientExample).
func TestNodeClient(t *testing.T) {
	testClientExample(t, nodeExample(t))
}

// testClientExample starts A, B and C and runs the example to submit to A with
// ACK_POLICY_ALL and watch B. It must exit 0, and its summary (task_id, version,
// payload of each event) must hold on all three nodes at once: every peer acknowledged,
// so every peer has each event at exactly the version Submit returned, from A.
// Then the example must fail, nonzero with the reason on stderr, when a peer cannot
// acknowledge (C stopped) and when the submit address has no sidecar.
func testClientExample(t *testing.T, ex clientExample) {
	c := startCluster(t, specs(3)...)
	a, b := c.node(0), c.node(1)
	prefix := "clients/" + strings.ToLower(ex.name) + "/"
	summary := filepath.Join(t.TempDir(), "summary.json")
	res := ex.run(t, "--submit-addr", a.appAddr, "--watch-addr", b.appAddr, "--prefix", prefix, "--summary", summary)
	if res.err != nil {
		t.Fatalf("%s example: %v\n%s", ex.name, res.err, res)
	}
	t.Logf("%s example ran in %s", ex.name, res.took.Round(time.Millisecond))
	checkConverged(t, c, prefix, readSummary(t, summary))

	// No subtests: the cluster's methods fail the test they were started in.
	t.Log("C stopped: the example must fail, as ACK_POLICY_ALL cannot be met")
	c.node(2).signal(syscall.SIGSTOP)
	res = ex.run(t, "--submit-addr", a.appAddr, "--watch-addr", b.appAddr, "--ack-timeout", "1")
	res.mustFail(t, "FAIL: ACK_POLICY_ALL not satisfied", a.peers[2]+" PEER_ACK_STATE_PENDING")
	c.node(2).signal(syscall.SIGCONT)

	t.Log("no sidecar at the submit address: the example must give up within its retry budget")
	closed := freeAddrs(t, 1)[0] // nothing listens there once freeAddrs returns
	res = ex.run(t, "--submit-addr", closed, "--watch-addr", b.appAddr, "--timeout", "1", "--retry-for", "1")
	res.mustFail(t, "FAIL: GetStatus on "+closed+": UNAVAILABLE", "is a sidecar running there?")
}

// TestGoClient runs examples/go, the walk with pkg/client, against a 3-node cluster
// (see testClientExample).
func TestGoClient(t *testing.T) {
	testClientExample(t, goExample(t))
}

func goExample(t *testing.T) clientExample {
	t.Helper()
	bin := filepath.Join(buildDir, "go-client")
	if _, err := os.Stat(bin); err != nil {
		product, err := testbin.ProductDir()
		if err != nil {
			t.Fatal(err)
		}
		if err := build(product, bin, "./examples/go", false); err != nil {
			t.Fatalf("building examples/go: %v", err)
		}
	}
	return clientExample{name: "Go", argv: []string{bin}}
}

func pythonExample(t *testing.T) clientExample {
	t.Helper()
	out, err := exec.Command(pythonBin, "-c", "import grpc, grpc_tools").CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n") // a traceback: its last line says what
		t.Fatalf("%s cannot import grpc and grpc_tools (%v: %s)\n"+
			"install Debian's python3-grpcio and python3-grpc-tools: bash test/deps.sh", pythonBin, err, lines[len(lines)-1])
	}
	return clientExample{name: "Python", argv: []string{pythonBin, repoPath(t, "examples/python/fanout_client.py")}}
}

func nodeExample(t *testing.T) clientExample {
	t.Helper()
	node := testbin.Find(t, "node", "Node.js 18 or later: Debian's nodejs package, if there is no node")
	dir := repoPath(t, "examples/node")
	check := exec.Command(node, "-e", `for (const m of ['@grpc/grpc-js', '@grpc/proto-loader']) {
		try { require.resolve(m) } catch (e) { console.error(e.message.split('\n')[0]); process.exit(1) } }`)
	check.Dir = dir
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("examples/node has no @grpc/grpc-js or @grpc/proto-loader (%v: %s)\n"+
			"install them (npm ci in examples/node): bash test/deps.sh", err, bytes.TrimSpace(out))
	}
	return clientExample{name: "Node", argv: []string{node, filepath.Join(dir, "client.js")}, dir: dir}
}

// repoPath returns the absolute path of rel, a path from the repository's root (a
// test runs in its package's directory, test/e2e).
func repoPath(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// exampleRun is one finished run of an example.
type exampleRun struct {
	stdout, stderr string
	took           time.Duration
	err            error // nil: exit status 0
}

func (r exampleRun) String() string {
	return fmt.Sprintf("---- stdout ----\n%s---- stderr ----\n%s", r.stdout, r.stderr)
}

// run runs the example with flags and waits for it, at most exampleTimeout.
func (ex clientExample) run(t *testing.T, flags ...string) exampleRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), exampleTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, ex.argv[0], append(ex.argv[1:], flags...)...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = ex.dir, &stdout, &stderr
	cmd.WaitDelay = time.Second
	start := time.Now()
	err := cmd.Run()
	r := exampleRun{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start), err: err}
	if ctx.Err() != nil {
		r.err = fmt.Errorf("still running after %s: %w", exampleTimeout, err)
	}
	t.Logf("%s %s: %v in %s\n%s", ex.name, strings.Join(flags, " "), r.err, r.took.Round(time.Millisecond), r)
	return r
}

// mustFail fails the test unless the run exited with status 1 within failFast and its
// stderr holds every one of want.
func (r exampleRun) mustFail(t *testing.T, want ...string) {
	t.Helper()
	var exit *exec.ExitError
	if !errors.As(r.err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("exit: %v, want exit status 1", r.err)
	}
	if r.took > failFast {
		t.Errorf("took %s to fail, want at most %s", r.took, failFast)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr does not say %q:\n%s", w, r.stderr)
		}
	}
}

// exampleSummary is what an example's --summary file holds: what it submitted, where,
// and the versions Submit returned (decimal strings: exact, whatever the language).
type exampleSummary struct {
	SubmitNode string `json:"submit_node"`
	WatchNode  string `json:"watch_node"`
	Events     []struct {
		TaskID  string `json:"task_id"`
		Version string `json:"version"`
		Payload string `json:"payload"`
	} `json:"events"`
}

func readSummary(t *testing.T, path string) exampleSummary {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the example wrote no summary: %v", err)
	}
	var s exampleSummary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("summary %s: %v", b, err)
	}
	if s.SubmitNode != "A" || s.WatchNode != "B" || len(s.Events) != 3 {
		t.Fatalf("summary: submitted %d events to %q, watched %q; want 3 events, A and B:\n%s", len(s.Events), s.SubmitNode, s.WatchNode, b)
	}
	return s
}

// checkConverged checks that every node holds exactly the summary's events under
// prefix, each at the version Submit returned, from the submit node, with its payload.
// It does not wait: ACK_POLICY_ALL was satisfied, so every peer had stored them.
func checkConverged(t *testing.T, c *cluster, prefix string, s exampleSummary) {
	t.Helper()
	for _, n := range c.nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := n.client().Get(ctx, &fanoutv1.GetRequest{Prefix: prefix})
		cancel()
		if err != nil {
			t.Fatalf("Get %q on %s: %v", prefix, n.spec.ID, err)
		}
		got := make(map[string]*fanoutv1.Entry)
		for _, e := range resp.GetEntries() {
			got[e.GetEvent().GetTaskId()] = e
		}
		if len(got) != len(s.Events) {
			t.Errorf("node %s holds %d keys under %q, want the example's %d", n.spec.ID, len(got), prefix, len(s.Events))
		}
		for _, ev := range s.Events {
			version, err := strconv.ParseUint(ev.Version, 10, 64)
			if err != nil {
				t.Fatalf("summary: %s version %q: %v", ev.TaskID, ev.Version, err)
			}
			e := got[ev.TaskID]
			switch {
			case e == nil:
				t.Errorf("node %s: %s missing", n.spec.ID, ev.TaskID)
			case e.GetEvent().GetVersion() != version || e.GetOriginNode() != s.SubmitNode:
				t.Errorf("node %s: %s is version %d from %s, want %d from %s", n.spec.ID, ev.TaskID, e.GetEvent().GetVersion(), e.GetOriginNode(), version, s.SubmitNode)
			case string(e.GetEvent().GetPayload()) != ev.Payload:
				t.Errorf("node %s: %s payload %q, want %q", n.spec.ID, ev.TaskID, e.GetEvent().GetPayload(), ev.Payload)
			}
		}
	}
}
