package freeport

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestOutsideTheEphemeralRange(t *testing.T) {
	for _, tc := range []struct {
		name             string
		lo, hi           int
		wantMin, wantMax int
	}{
		{"linux default", 32768, 60999, 10000, 32767},
		{"iana", 49152, 65535, 10000, 49151},
		{"low range", 1024, 20000, 20001, 65535},
		{"everything", 1024, 65535, 0, -1}, // none: Take refuses
	} {
		t.Run(tc.name, func(t *testing.T) {
			lo, hi := outside(tc.lo, tc.hi)
			if tc.wantMin > tc.wantMax { // none
				if lo <= hi {
					t.Fatalf("outside(%d, %d) = %d..%d, want no ports", tc.lo, tc.hi, lo, hi)
				}
				return
			}
			if lo != tc.wantMin || hi != tc.wantMax {
				t.Fatalf("outside(%d, %d) = %d..%d, want %d..%d", tc.lo, tc.hi, lo, hi, tc.wantMin, tc.wantMax)
			}
		})
	}
}

func TestParseRange(t *testing.T) {
	for _, tc := range []struct {
		in     string
		lo, hi int
		ok     bool
	}{
		{"32768\t60999\n", 32768, 60999, true},
		{"1024 65535", 1024, 65535, true},
		{"60999 32768", 0, 0, false},
		{"32768", 0, 0, false},
		{"a b", 0, 0, false},
		{"0 70000", 0, 0, false},
	} {
		t.Run(strconv.Quote(tc.in), func(t *testing.T) {
			lo, hi, ok := parseRange(tc.in)
			if lo != tc.lo || hi != tc.hi || ok != tc.ok {
				t.Fatalf("parseRange(%q) = %d, %d, %v; want %d, %d, %v", tc.in, lo, hi, ok, tc.lo, tc.hi, tc.ok)
			}
		})
	}
}

func TestDefaultConfigIsOutsideTheKernelsRange(t *testing.T) {
	c := DefaultConfig()
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	lo, hi, ok := parseRange(string(b))
	if !ok {
		t.Fatalf("unreadable ip_local_port_range %q", b)
	}
	if c.Max >= lo && c.Min <= hi {
		t.Fatalf("DefaultConfig %d..%d overlaps the ephemeral range %d..%d", c.Min, c.Max, lo, hi)
	}
}

// testConfig is a private lock directory and a window of n ports, so that takers
// compete for few ports. Where it can, the window is the top of the port space, outside
// both the kernel's range and DefaultConfig's: then the end-to-end tests and benches
// that other processes run meanwhile never listen on its ports.
func testConfig(t *testing.T, n int) Config {
	t.Helper()
	c := DefaultConfig()
	c.Dir = t.TempDir()
	top := [2]int{65535 - n + 1, 65535}
	if _, hi := ephemeral(); hi < top[0] && c.Max < top[0] {
		c.Min, c.Max = top[0], top[1]
	} else {
		c.Max = c.Min + n - 1
	}
	t.Logf("ports %d..%d", c.Min, c.Max)
	return c
}

// TestTakeAcrossGoroutines: takers in one process that want more ports than the range
// has never hold the same port at the same time.
func TestTakeAcrossGoroutines(t *testing.T) {
	c := testConfig(t, 16)
	var (
		mu     sync.Mutex
		holder = map[int]int{} // port → taker holding it
		took   int
		wg     sync.WaitGroup
	)
	for g := range 8 {
		wg.Go(func() {
			for range 50 {
				s, err := c.Take(3)
				if err != nil {
					continue // the others hold the range: try again
				}
				mu.Lock()
				took++
				for _, p := range s.Ports() {
					if other, ok := holder[p]; ok {
						t.Errorf("port %d taken by %d while %d holds it", p, g, other)
					}
					holder[p] = g
				}
				mu.Unlock()
				mu.Lock()
				for _, p := range s.Ports() {
					delete(holder, p) // before Release: then nobody else can have it yet
				}
				mu.Unlock()
				s.Release()
			}
		})
	}
	wg.Wait()
	if took == 0 {
		t.Fatal("no Take succeeded")
	}
}

func TestTakeSkipsAPortInUse(t *testing.T) {
	c := testConfig(t, 4)
	ln, err := net.Listen("tcp", addr(c.Min))
	if err != nil {
		t.Skipf("port %d: %v", c.Min, err)
	}
	defer ln.Close()
	if s, err := c.Take(4); err == nil {
		s.Release()
		t.Fatalf("Take(4) of 4 ports, one of them listened on, gave %v", s.Ports())
	}
	s, err := c.Take(3)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	if slices.Contains(s.Ports(), c.Min) {
		t.Fatalf("Take gave %v, including %d which is in use", s.Ports(), c.Min)
	}
}

func TestReleaseGivesThePortsBack(t *testing.T) {
	c := testConfig(t, 2)
	s, err := c.Take(2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Take(1); err == nil {
		t.Fatal("Take succeeded while every port of the range was held")
	}
	s.Release()
	s.Release() // idempotent
	s2, err := c.Take(2)
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	s2.Release()
}

// helperEnv names the variables a helper process reads: the lock dir, the range and how
// many ports to take, one Take at a time.
const helperEnv = "FREEPORT_HELPER"

// TestHelperTaker is not a test: TestTakeAcrossProcesses runs the test binary with
// FREEPORT_HELPER="dir min max n". It takes up to n ports with Take(1), prints them on
// one line, holds them until its stdin closes, and exits.
func TestHelperTaker(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("a helper of TestTakeAcrossProcesses")
	}
	f := strings.Fields(spec)
	c := Config{Dir: f[0]}
	c.Min, _ = strconv.Atoi(f[1])
	c.Max, _ = strconv.Atoi(f[2])
	n, _ := strconv.Atoi(f[3])
	var ports []string
	for range n {
		s, err := c.Take(1)
		if err != nil {
			break // the range is held
		}
		ports = append(ports, strconv.Itoa(s.Ports()[0])) // held until exit
	}
	fmt.Println("ports", strings.Join(ports, " "))
	bufio.NewReader(os.Stdin).ReadString('\n') //nolint:errcheck // EOF: the parent is done
}

// TestTakeAcrossProcesses: processes that together want more ports than the range has
// never get the same port; a process's ports are free again once it is killed.
func TestTakeAcrossProcesses(t *testing.T) {
	c := testConfig(t, 20)
	const procs, each = 4, 8 // 32 wanted of 20
	type helper struct {
		cmd   *exec.Cmd
		out   *bufio.Reader
		ports []int
	}
	helpers := make([]*helper, procs)
	for i := range helpers {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperTaker$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d %d", helperEnv, c.Dir, c.Min, c.Max, each))
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stdin.Close(); cmd.Wait() }) //nolint:errcheck // one is killed
		helpers[i] = &helper{cmd: cmd, out: bufio.NewReader(stdout)}
	}
	// The helpers take at the same time; each holds its ports once it has printed them.
	owner := map[int]int{}
	for i, h := range helpers {
		for {
			line, err := h.out.ReadString('\n')
			if err != nil {
				t.Fatalf("helper %d: %v", i, err)
			}
			if rest, ok := strings.CutPrefix(line, "ports"); ok {
				for _, f := range strings.Fields(rest) {
					p, _ := strconv.Atoi(f)
					h.ports = append(h.ports, p)
				}
				break
			}
		}
		for _, p := range h.ports {
			if o, ok := owner[p]; ok {
				t.Errorf("port %d held by helpers %d and %d at once", p, o, i)
			}
			owner[p] = i
		}
	}
	if len(owner) == 0 {
		t.Fatal("no helper took a port")
	}
	t.Logf("%d ports of %d..%d held by %d processes", len(owner), c.Min, c.Max, procs)

	most := slices.MaxFunc(helpers, func(a, b *helper) int { return len(a.ports) - len(b.ports) })
	if err := most.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	most.cmd.Wait() //nolint:errcheck // killed
	for _, p := range most.ports {
		l, err := c.reserve(p)
		if err != nil {
			t.Fatalf("port %d of a killed helper: %v", p, err)
		}
		l.Close()
	}
}

func TestTakeRefusesABadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
	}{
		{"no ports", Config{Dir: t.TempDir(), Min: 10000, Max: 9999}},
		{"above 65535", Config{Dir: t.TempDir(), Min: 65535, Max: 65536}},
		{"no dir", Config{Min: 10000, Max: 10001}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := tc.c.Take(1); err == nil {
				s.Release()
				t.Fatalf("Take with %+v gave %v", tc.c, s.Ports())
			}
		})
	}
}
