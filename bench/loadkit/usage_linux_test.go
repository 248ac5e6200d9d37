package loadkit

import (
	"net"
	"os"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// A command name with spaces and a parenthesis, as a process may choose.
	stat := "4242 (side car) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 12 0 100 1000 200"
	got, err := parseProcStat(stat)
	if err != nil || got != 3250*time.Millisecond {
		t.Fatalf("parseProcStat = %s, %v; want 3.25s (325 ticks)", got, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 ab 5"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("parseProcStat(%q) succeeded", bad)
		}
	}
}

func TestProcCPUOfThisProcess(t *testing.T) {
	d, err := ProcCPU(os.Getpid())
	if err != nil || d < 0 {
		t.Fatalf("ProcCPU(self) = %s, %v", d, err)
	}
	if s, err := SelfCPU(); err != nil || s <= 0 {
		t.Fatalf("SelfCPU = %s, %v", s, err)
	}
}

// TestTCPConnsOfThisProcess opens real loopback connections and counts them: both ends
// are this process's, so each connection counts twice, and once when the listener's
// port is skipped (its accepted ends have that local port).
func TestTCPConnsOfThisProcess(t *testing.T) {
	before, err := TCPConns(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	const conns = 3
	for range conns {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
	}
	if got, err := TCPConns(os.Getpid()); err != nil || got != before+2*conns {
		t.Errorf("TCPConns = %d, %v; want %d", got, err, before+2*conns)
	}
	if got, err := TCPConns(os.Getpid(), port); err != nil || got != before+conns {
		t.Errorf("TCPConns skipping port %d = %d, %v; want %d", port, got, err, before+conns)
	}
}

func TestCountEstablished(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1
   2: 0100007F:C350 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0 20 4 30 10 -1
   3: 0100007F:C351 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 444 1 0 20 4 30 10 -1
`
	mine := map[string]bool{"111": true, "222": true, "333": true} // 444: another process's
	if n, err := countEstablished(table, mine, nil); err != nil || n != 2 {
		t.Errorf("countEstablished = %d, %v; want 2 (the listener is not established, 444 is not ours)", n, err)
	}
	if n, err := countEstablished(table, mine, []int{0x1F90}); err != nil || n != 1 {
		t.Errorf("countEstablished skipping 8080 = %d, %v; want 1", n, err)
	}
	if _, err := countEstablished("header\n 0: x y 01 a b c d e 5", map[string]bool{"5": true}, nil); err == nil {
		t.Error("a local address without a port was accepted")
	}
}

func TestPeakRSSOfThisProcess(t *testing.T) {
	if rss, err := PeakRSS(os.Getpid()); err != nil || rss <= 0 {
		t.Fatalf("PeakRSS(self) = %d, %v", rss, err)
	}
}
