package natstest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// serverBin is the pinned nats-server that TestMain builds.
var serverBin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "natstest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "natstest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if serverBin, err = Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "natstest:", err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		return code
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, "natstest: leaked goroutines:", err)
		return 1
	}
	return 0
}
