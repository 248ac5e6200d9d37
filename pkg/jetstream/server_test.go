package jetstream

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout/internal/freeport"
	"github.com/nats-io/nats.go"
)

// startServer starts one pinned nats-server with JetStream on loopback for the test
// and returns its URL, with conf (lines of a server configuration file) if any.
// (Until internal/natstest lands: then its cluster.)
func startServer(t *testing.T, conf ...string) string {
	t.Helper()
	return startServerOn(t, takePort(t), conf...)
}

// takePort is a loopback port for a server the test starts later.
func takePort(t *testing.T) int {
	t.Helper()
	ports, err := freeport.Take(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ports.Release)
	return ports.Ports()[0]
}

// startServerOn is startServer on a given port.
func startServerOn(t *testing.T, port int, conf ...string) string {
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
	args := []string{"-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", t.TempDir()}
	if len(conf) > 0 {
		file := filepath.Join(t.TempDir(), "nats.conf")
		if err := os.WriteFile(file, []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-c", file)
	}
	cmd := exec.Command(bin, args...)
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
