package store

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// crashDirEnv tells the test binary it is the child of TestCrash, and where its
// store is.
const crashDirEnv = "FANOUT_STORE_CRASH_DIR"

// crashWriters commit at once in the child, so that its commits share syncs as the
// sidecar's do.
const crashWriters = 4

// TestCrash kills a process that commits in a loop with SIGKILL at a random moment,
// five times over one data dir, and checks after each kill that every Commit the
// child acknowledged (printed after Commit returned) is on disk, with its version,
// and that the clock is at least the highest acknowledged version.
//
// Each commit of sequence number n puts two records: r/<n> (version n; every 7th a
// tombstone), new each time, and w/<writer> (version n), which the writer overwrites.
func TestCrash(t *testing.T) {
	if os.Getenv(crashDirEnv) != "" {
		t.Skip("in the child")
	}
	if testing.Short() {
		t.Skip("spawns processes (-short)")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(10, 20)) // fixed: the same kill points each run
	acked := map[uint64]int{}            // acknowledged sequence number → its writer
	for round := range 5 {
		killAfter := 20 + rng.IntN(400) // acknowledgements before the kill
		got := crashChild(t, dir, killAfter)
		for n, w := range got {
			acked[n] = w
		}
		t.Logf("round %d: killed after %d acknowledgements (asked for %d); %d in all",
			round, len(got), killAfter, len(acked))
		checkAcked(t, dir, acked)
	}
}

// crashChild runs the child on dir, kills it with SIGKILL once it has acknowledged
// killAfter commits, and returns every commit it acknowledged before it died.
func crashChild(t *testing.T, dir string, killAfter int) map[uint64]int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[uint64]int{}
	enough := make(chan struct{})
	readDone := make(chan error, 1)
	go func() { // owned: ends at the child's death (EOF), waited for below
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var n uint64
			var w int
			if _, err := fmt.Sscanf(sc.Text(), "ack %d %d", &n, &w); err != nil {
				continue // the test framework's own lines
			}
			acked[n] = w
			if len(acked) == killAfter {
				close(enough)
			}
		}
		readDone <- sc.Err()
	}()
	select {
	case <-enough:
	case <-time.After(time.Minute):
		t.Errorf("no %d acknowledgements within a minute; child's stderr:\n%s", killAfter, stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-readDone; err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, not by SIGKILL; its stderr:\n%s", err, stderr.String())
	}
	return acked
}

// checkAcked reopens dir and checks every acknowledged commit.
func checkAcked(t *testing.T, dir string, acked map[uint64]int) {
	t.Helper()
	s := open(t, dir)
	defer s.Close()
	records := map[string]Record{}
	for _, r := range load(t, s) {
		records[string(r.Key)] = r
	}
	var top uint64
	latest := map[int]uint64{} // writer → its highest acknowledged number
	for n, w := range acked {
		top = max(top, n)
		latest[w] = max(latest[w], n)
		want := crashRecord(n)
		r, ok := records[string(want.Key)]
		if !ok || r.Version != n || r.Deleted != want.Deleted || !bytes.Equal(r.Raw, want.Raw) || r.Origin != want.Origin {
			t.Fatalf("acknowledged %s (version %d, deleted %v): found %v, %+v", want.Key, n, want.Deleted, ok, r)
		}
	}
	for w, n := range latest {
		if r := records[fmt.Sprintf("w/%d", w)]; r.Version < n {
			t.Fatalf("w/%d at version %d, below its acknowledged %d", w, r.Version, n)
		}
	}
	if c := s.Clock(); c < top {
		t.Fatalf("Clock() = %d, below the highest acknowledged version %d", c, top)
	}
}

// crashRecord is the r/<n> record of commit n.
func crashRecord(n uint64) Record {
	r := Record{Key: fmt.Appendf(nil, "r/%08d", n), Version: n, Origin: "crash-child",
		Submitted: int64(n), Raw: fmt.Appendf(nil, "event %d", n)}
	if n%7 == 0 {
		r.Deleted, r.Raw = true, []byte{}
	}
	return r
}

// TestCrashChild is the child of TestCrash: it commits until it is killed, numbering
// its commits on from the store's clock, and prints "ack <n> <writer>" after each
// Commit returns.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("run by TestCrash")
	}
	s, err := Open(dir, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var next atomic.Uint64
	next.Store(s.Clock())
	var mu sync.Mutex // one line per write to stdout
	var wg sync.WaitGroup
	for w := range crashWriters {
		wg.Go(func() {
			for {
				n := next.Add(1)
				tick := crashRecord(n)
				tick.Key, tick.Deleted, tick.Raw = fmt.Appendf(nil, "w/%d", w), false, nil
				if err := s.Commit([]Record{crashRecord(n), tick}, nil); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				_, err := os.Stdout.WriteString("ack " + strconv.FormatUint(n, 10) + " " + strconv.Itoa(w) + "\n")
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait() // until the kill; only an error gets here
	t.Error("a writer stopped: ", strings.TrimSpace(fmt.Sprint(s.Close())))
}
