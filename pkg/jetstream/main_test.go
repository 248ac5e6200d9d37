package jetstream

import (
	"fmt"
	"os"
	"testing"

	"github.com/fanout/fanout/internal/natstest"
	"go.uber.org/goleak"
)

// serverBin is the pinned nats-server, built once by TestMain.
var serverBin string

// TestMain builds the pinned nats-server, runs the tests, and checks that none left
// a goroutine behind: the feed's, the transport's and the NATS connections' all end
// with their owners.
func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "jetstream-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "jetstream:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if serverBin, err = natstest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "jetstream:", err)
		return 1
	}
	if code := m.Run(); code != 0 {
		return code
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, "jetstream: leaked goroutines:", err)
		return 1
	}
	return 0
}

// startCluster starts n pinned servers with JetStream on loopback (natstest): one
// for what needs a server, three for what needs an R3 stream's Raft.
func startCluster(t *testing.T, n int) *natstest.Cluster {
	t.Helper()
	cfg := natstest.DefaultConfig()
	cfg.Binary, cfg.Servers = serverBin, n
	return natstest.Start(t, cfg)
}
