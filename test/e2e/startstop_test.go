package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
)

// Start and stop (issue 25): a signal that comes while a node starts ends it cleanly,
// and an app that lists a node's table while the node bootstraps gets the synced
// table, not a half-synced one.

// TestSubscribeSnapshotWaitsForBootstrap restarts C, memory-only, while its links to
// A and B answer 30s late, so its bootstrap cannot end until they are healed:
//
//   - a Subscribe with snapshot on C sends nothing while C bootstraps;
//   - one with allow_unsynced gets C's table at once, which misses keys C's stream
//     had before the restart: what an informer would have listed;
//   - once the links are healed and C has synced, the waiting stream's snapshot
//     holds every key at its winner, so nothing goes backwards or vanishes against
//     what the app saw before the restart.
//
// Anti-entropy rounds are off, so that C gets the keys from its bootstrap only.
// Every node ends with every winner; no stream sees a version go backwards.
func TestSubscribeSnapshotWaitsForBootstrap(t *testing.T) {
	const keys = 3000
	c := newCluster(t, specs(3, "--anti-entropy-interval=0", "--sync-timeout=2m")...)
	a, b, cn := c.node(0), c.node(1), c.node(2)
	toA := startProxy(t, "C-to-A", a.peerAddr)
	toB := startProxy(t, "C-to-B", b.peerAddr)
	c.route(2, 0, toA.Listen)
	c.route(2, 1, toB.Listen)
	c.start()
	cv := watch(t, c)
	l := newLedger()
	submit(t, c, 0, changes("waitsync/", "A", keys, 500), l)
	submit(t, c, 1, changes("waitsync/", "B", keys, 500), l)
	cv.wait(convergeTimeout, l, 0, 1, 2)
	winner, _ := l.snapshot()

	cn.kill()
	for _, p := range []*toxiproxy.Proxy{toA, toB} {
		addToxic(t, p, `{"name":"late","type":"latency","stream":"upstream","attributes":{"latency":30000}}`)
	}
	cn.launch()
	cn.waitServing("")
	cv.open(2, subOpts{snapshot: true})
	waiting := cv.streams[2][len(cv.streams[2])-1]
	cv.open(2, subOpts{snapshot: true, allowUnsynced: true})
	unsynced := cv.streams[2][len(cv.streams[2])-1]
	snapU := unsynced.waitSnapshot(t, readyTimeout)
	ok, reason, err := cn.readiness()
	if err != nil || ok || !strings.Contains(reason, "(bootstrap)") {
		t.Fatalf("C after its allow_unsynced snapshot: ready %t, %q (%v); want not ready, bootstrapping", ok, reason, err)
	}
	if part, done := waiting.snapshotPart(); len(part) > 0 || done {
		t.Errorf("the waiting stream got %d entries (snapshot_complete %t) while C bootstraps (%q)", len(part), done, reason)
	}
	missing := len(winner) - len(snapU)
	if missing <= 0 {
		t.Errorf("the allow_unsynced snapshot during the bootstrap holds %d entries of %d: with its links to A and B stalled, C had nothing to fill its table from", len(snapU), len(winner))
	}

	for _, p := range []*toxiproxy.Proxy{toA, toB} {
		if err := p.Toxics.RemoveToxic(context.Background(), "late"); err != nil {
			t.Fatal(err)
		}
	}
	healed := time.Now()
	snapW := waiting.waitSnapshot(t, convergeTimeout)
	took := time.Since(healed)
	ok, reason, err = cn.readiness()
	if err != nil || !ok || !strings.Contains(reason, "synced with 2 of 2 peers") {
		t.Errorf("C once its waiting snapshot came: ready %t, %q (%v); want ready, synced with 2 of 2 peers", ok, reason, err)
	}
	// The winners are what C's stream had before the restart (it had converged): a
	// snapshot that holds each at its winner has nothing older, and misses nothing.
	checkSnapshot(t, waiting.name, snapW, winner)

	submit(t, c, 0, changes("waitsync/", "A2", keys/10, 100), l)
	cv.wait(convergeTimeout, l, 0, 1, 2)
	t.Logf("C bootstrapping: the allow_unsynced snapshot came at once with %d of %d keys (%d missing); "+
		"the waiting one came %s after the links were healed, with all %d at their winners (C: %q)",
		len(snapU), len(winner), missing, ms(took), len(snapW), reason)
}

// signalAfterStart is when TestSigtermRightAfterStart sends SIGTERM: 20ms after the
// exec, as issue 25's probe did, in the process's own time. Go's runtime and the
// packages' initialisation take ~20 ms of CPU here before main; internal/earlysignal
// installs the handler 4-5 ms into them (GODEBUG=inittrace=1 sidecar version), and
// nothing can come sooner. A machine too busy to run the process would test the scheduler, not the
// sidecar: the time its main thread waited for a CPU (its run-queue delay, from
// /proc/<pid>/schedstat) does not count. Time it ran or slept does: a start-up that
// did something slow before installing the handler still fails.
const signalAfterStart = 20 * time.Millisecond

// TestSigtermRightAfterStart sends SIGTERM 20ms after the exec: to a memory-only
// node, and to one whose start-up is slow (a data dir to open, then a first DNS
// lookup that the DNS server never answers, which would take 10s). Both exit 0 with
// a clean drain, and the slow one does not wait its lookup out.
func TestSigtermRightAfterStart(t *testing.T) {
	dns := silentDNS(t)
	cases := []struct {
		name  string
		flags []string
		cut   string // a log line that says the slow part was cut short
	}{
		{"memory only", nil, ""},
		{"data dir and a DNS server that never answers", []string{"--data-dir=" + t.TempDir(),
			"--peers-dns=fanout-peers.test:7071", "--dns-server=" + dns}, "first DNS lookup failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, nodeSpec{ID: "A", Flags: tc.flags})
			n := c.node(0)
			mark := n.logSize()
			n.launch()
			pid := n.cmd.Process.Pid
			// Polled every millisecond: the point is when the signal lands.
			var own time.Duration
			for own < signalAfterStart {
				var err error
				if own, err = ownTime(pid, n.launched); err != nil {
					t.Fatal(err)
				}
				if time.Since(n.launched) > readyTimeout {
					t.Fatalf("the process had %s of its own time after %s", own, readyTimeout)
				}
				<-time.After(time.Millisecond)
			}
			sent := time.Now()
			n.signal(syscall.SIGTERM)
			st, err := n.wait(exitTimeout)
			if err != nil {
				t.Fatal(err)
			}
			exited := time.Since(sent)
			n.closeConn()
			log := n.logSince(mark)
			if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.Fatalf("killed by signal %d (%s): it came before the handler was installed\n%s", ws.Signal(), ws.Signal(), log)
			}
			if st.ExitCode() != 0 {
				t.Fatalf("exit code %d after SIGTERM during the start, want 0\n%s", st.ExitCode(), log)
			}
			for _, want := range []string{"signal received; draining", "sidecar stopped"} {
				if !strings.Contains(log, want) {
					t.Errorf("the log has no %q line\n%s", want, log)
				}
			}
			if tc.cut != "" && !strings.Contains(log, tc.cut) {
				t.Errorf("the log has no %q line: the signal did not cut the start-up short\n%s", tc.cut, log)
			}
			if strings.Contains(log, "panic") || strings.Contains(log, "goroutine ") {
				t.Errorf("the log has a panic or a stack trace\n%s", log)
			}
			// The lookup's own timeout is 10s: an exit after it means the start-up
			// waited it out instead of being cut short by the signal.
			if exited >= 10*time.Second {
				t.Errorf("exited %s after the signal: the start-up was not cut short", ms(exited))
			}
			t.Logf("SIGTERM %s after the exec (%s of the process's own time); exit 0 %s later", ms(sent.Sub(n.launched)), ms(own), ms(exited))
		})
	}
}

// ownTime is how long process pid has existed since start, less the time its main
// thread waited for a CPU (the second field of /proc/<pid>/schedstat, in ns): the
// time it ran or slept.
func ownTime(pid int, start time.Time) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/schedstat: %q", pid, b)
	}
	wait, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/schedstat: %q: %w", pid, b, err)
	}
	return time.Since(start) - time.Duration(wait), nil
}

// logSince returns n's log after the first mark bytes (logSize).
func (n *node) logSince(mark int64) string {
	b, err := os.ReadFile(n.logPath)
	if err != nil || int64(len(b)) < mark {
		return ""
	}
	return string(b[mark:])
}

// silentDNS is a DNS server address that reads every query and answers none. It
// stops when the test ends.
func silentDNS(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return pc.LocalAddr().String()
}
