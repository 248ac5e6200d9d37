package jetstream

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fanout/fanout/internal/freeport"
	"github.com/nats-io/nats.go"
)

// startServer starts one pinned nats-server with JetStream on loopback for the test
// and returns its URL. (Until internal/natstest lands: then its cluster.)
func startServer(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "nats-server")
	build := exec.Command("go", "build", "-modfile="+filepath.Join(root, "tools/go.mod"), "-o", bin, "github.com/nats-io/nats-server/v2")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	ports, err := freeport.Take(1)
	if err != nil {
		t.Fatal(err)
	}
	port := ports.Ports()[0]
	ports.Release()
	cmd := exec.Command(bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", t.TempDir())
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err := nats.Connect(url)
		if err == nil {
			nc.Close()
			return url
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server at %s: not up within 10s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
