package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// sidecarBin is the path of the sidecar binary that TestMain builds.
var sidecarBin string

// sidecarRace reports whether the binary was built with -race (E2E_SIDECAR_RACE=1).
var sidecarRace = os.Getenv("E2E_SIDECAR_RACE") == "1"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fanout-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	sidecarBin = filepath.Join(dir, "sidecar")
	if err := build(sidecarBin); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		return code
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: leaked goroutines:", err)
		return 1
	}
	return 0
}

func build(out string) error {
	args := []string{"build", "-o", out}
	if sidecarRace {
		args = append(args, "-race")
	}
	args = append(args, "github.com/fanout/fanout/cmd/sidecar")
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %v: %w", args, err)
	}
	return nil
}
