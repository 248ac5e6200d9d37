package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fanout/fanout/internal/testbin"
	"go.uber.org/goleak"
)

// sidecarBin is the path of the sidecar binary that TestMain builds.
var sidecarBin string

// watcherBin is the path of internal/watcher, a Subscribe client in a process of its
// own, that TestMain builds.
var watcherBin string

// buildDir is TestMain's temporary directory, where the binaries are built.
var buildDir string

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
	buildDir = dir
	product, err := testbin.ProductDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	sidecarBin = filepath.Join(dir, "sidecar")
	if err := build(product, sidecarBin, "./cmd/sidecar", sidecarRace); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	watcherBin = filepath.Join(dir, "watcher")
	if err := build("", watcherBin, "github.com/fanout/fanout/test/e2e/internal/watcher", false); err != nil {
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

// build runs go build in dir ("": here). The sidecar is built in the product's own
// module, with its go.mod and go.sum: the binary under test is the one `make build`
// makes, and this module need not require what the sidecar alone uses.
func build(dir, out, pkg string, race bool) error {
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	args = append(args, pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %v in %s: %w", args, dir, err)
	}
	return nil
}
