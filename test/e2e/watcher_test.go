package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// watcherProc is internal/watcher subscribed to one node: an app in a process of its
// own, which a test can freeze with SIGSTOP while it goes on reading the node
// itself. A goroutine parses the watcher's lines into a recorder, so the usual checks
// (checkLatest, checkMonotonic) apply to what the watcher received.
type watcherProc struct {
	t      *testing.T
	rec    *recorder
	cmd    *exec.Cmd
	stderr bytes.Buffer  // written by exec's copier until cmd.Wait returns
	done   chan struct{} // closed when stdout is drained and cmd.Wait has returned
}

// startWatcher starts a watcher on node n of c and waits until the node counts one
// more subscriber. Cleanup kills it (SIGKILL also ends a stopped process).
func startWatcher(t *testing.T, c *cluster, n int, o subOpts) *watcherProc {
	t.Helper()
	before := subscribers(t, c.node(n))
	w := &watcherProc{
		t: t,
		rec: &recorder{
			name:   fmt.Sprintf("watcher process on %s (%s)", c.node(n).spec.ID, o),
			opts:   o,
			latest: make(map[string]delivery),
			live:   -1,
		},
		done: make(chan struct{}),
	}
	w.cmd = exec.Command(watcherBin, "-addr", c.node(n).appAddr, "-prefix", o.prefix,
		fmt.Sprintf("-snapshot=%t", o.snapshot), fmt.Sprintf("-max-batch=%d", o.maxBatch))
	w.cmd.Stderr = &w.stderr
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatalf("start watcher: %v", err)
	}
	go w.read(stdout)
	t.Cleanup(func() {
		w.cmd.Process.Kill()
		<-w.done
		if t.Failed() {
			t.Logf("---- %s: %v; stderr:\n%s", w.rec.name, w.rec.streamErr(), w.logs())
		}
	})
	eventually(t, readyTimeout, w.rec.name+" registered", func() error {
		if got := subscribers(t, c.node(n)); got <= before {
			return fmt.Errorf("node reports %d subscribers (watcher: %v)", got, w.rec.streamErr())
		}
		return nil
	})
	return w
}

// read parses the watcher's stdout until it closes, then reaps the process.
func (w *watcherProc) read(stdout io.Reader) {
	defer close(w.done)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	var failed error
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "S":
			w.rec.add(nil, true, 0, "")
		case strings.HasPrefix(line, "E\t"):
			d, err := parseWatcherLine(line)
			if err != nil {
				failed = err
				continue
			}
			w.rec.add([]delivery{d}, false, 0, "")
		case strings.HasPrefix(line, "X\t"):
			failed = errors.New(strings.TrimPrefix(line, "X\t"))
		default:
			failed = fmt.Errorf("watcher printed %q", line)
		}
	}
	err := w.cmd.Wait()
	w.rec.mu.Lock()
	w.rec.err = errors.Join(failed, err, sc.Err())
	if w.rec.err == nil {
		w.rec.err = io.EOF
	}
	w.rec.mu.Unlock()
}

// parseWatcherLine parses "E <revision> <version> <origin> <deleted> <task_id>".
func parseWatcherLine(line string) (delivery, error) {
	f := strings.SplitN(line, "\t", 6)
	if len(f) != 6 {
		return delivery{}, fmt.Errorf("watcher line %q", line)
	}
	rev, err1 := strconv.ParseUint(f[1], 10, 64)
	ver, err2 := strconv.ParseUint(f[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return delivery{}, fmt.Errorf("watcher line %q: %w", line, err)
	}
	return delivery{
		TaskID:   f[5],
		Stamp:    stamp{Version: ver, Origin: f[3]},
		Deleted:  f[4] == "1",
		Revision: rev,
		At:       time.Now(),
	}, nil
}

// signal sends sig to the watcher process. SIGSTOP returns once every thread of it
// has stopped, as node.signal does: until then a thread still reads the node, and on
// a loaded machine a "frozen" watcher read a whole run (TestFrozenSubscriber: 0 of
// 3000 tasks left for it after SIGCONT).
func (w *watcherProc) signal(sig syscall.Signal) {
	w.t.Helper()
	if err := w.cmd.Process.Signal(sig); err != nil {
		w.t.Fatalf("watcher: signal %s: %v", sig, err)
	}
	if sig == syscall.SIGSTOP {
		waitStopped(w.t, w.cmd.Process.Pid, w.rec.name)
	}
}

// logs returns what the watcher wrote on stderr; call it once the process has ended.
func (w *watcherProc) logs() string {
	select {
	case <-w.done:
		return w.stderr.String()
	default:
		return "(still running)"
	}
}

// countSince returns how many deliveries arrived after at.
func (r *recorder) countSince(at time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, d := range r.all {
		if d.At.After(at) {
			n++
		}
	}
	return n
}

// stampsOnly returns want without payloads: for a reader that does not see them.
func stampsOnly(want map[string]expected) map[string]expected {
	out := make(map[string]expected, len(want))
	for id, w := range want {
		out[id] = expected{Stamp: w.Stamp, Deleted: w.Deleted}
	}
	return out
}
