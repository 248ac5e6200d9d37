package earlysignal

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// childEnv makes the test binary, run again by a test, act as the process under test.
const childEnv = "EARLYSIGNAL_TEST_CHILD"

// TestMain runs the child's part when childEnv is set: it signals itself with
// SIGTERM, waits until the early catch has the signal, then releases it ("release")
// or hands it over and exits 0 if it got SIGTERM ("handover"); "none" releases with
// no signal caught and exits 0.
func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "none":
		Release()
		os.Exit(0)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		os.Exit(3)
	}
	for deadline := time.Now().Add(10 * time.Second); len(caught) == 0; {
		if time.Now().After(deadline) {
			os.Exit(4) // the signal was not caught
		}
		time.Sleep(time.Millisecond)
	}
	switch os.Getenv(childEnv) {
	case "release":
		Release()
		os.Exit(5) // Release returned: the signal was not raised again
	case "handover":
		if Handover() == syscall.SIGTERM && Handover() == nil {
			os.Exit(0)
		}
		os.Exit(6)
	}
	os.Exit(7)
}

// run runs the test binary as a child in mode and returns how it ended.
func run(t *testing.T, mode string) *os.ProcessState {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState
}

// TestHandover: a SIGTERM that comes before the hand-over does not kill the process;
// the command that takes over learns of it, once.
func TestHandover(t *testing.T) {
	if st := run(t, "handover"); !st.Success() {
		t.Fatalf("child: %v, want exit 0 with SIGTERM handed over", st)
	}
}

// TestRelease: a command that handles no signal itself dies of a SIGTERM that came
// before, as if the package were not there; with none, Release returns.
func TestRelease(t *testing.T) {
	st := run(t, "release")
	ws, ok := st.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("child: %v, want killed by SIGTERM", st)
	}
	if st := run(t, "none"); !st.Success() {
		t.Fatalf("child with no signal: %v, want exit 0", st)
	}
}
