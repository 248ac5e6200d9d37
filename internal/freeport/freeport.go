package freeport

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Config says where ports come from and where their locks live.
type Config struct {
	// Dir holds the lock files, one per port. Every process that must not share a
	// port with another uses the same Dir.
	Dir string
	// Min and Max bound the ports handed out, both included. They must lie outside
	// the kernel's ephemeral range, or the kernel may take a port between the bind
	// check and the child's bind.
	Min, Max int
}

// floor is the lowest port DefaultConfig hands out: the services a developer runs
// locally (databases, caches, 8080, 9090) mostly live below it.
const floor = 10000

// fallbackEphemeral is assumed where /proc cannot tell the kernel's range: it covers
// Linux's default (32768–60999) and the IANA one that BSDs, macOS and Windows use
// (49152–65535).
var fallbackEphemeral = [2]int{32768, 65535}

// DefaultConfig returns the shared lock directory under os.TempDir() and the largest
// run of ports from 10000 up that lies outside the kernel's ephemeral range.
func DefaultConfig() Config {
	c := Config{Dir: filepath.Join(os.TempDir(), "fanout-ports")}
	c.Min, c.Max = outside(ephemeral())
	return c
}

// ephemeral returns the kernel's ephemeral port range, both ends included.
func ephemeral() (lo, hi int) {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if l, h, ok := parseRange(string(b)); ok {
			return l, h
		}
	}
	return fallbackEphemeral[0], fallbackEphemeral[1]
}

// parseRange reads ip_local_port_range: two numbers separated by white space.
func parseRange(s string) (lo, hi int, ok bool) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, 0, false
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || lo < 1 || hi > 65535 || lo > hi {
		return 0, 0, false
	}
	return lo, hi, true
}

// outside returns the larger of the runs [floor, lo-1] and [max(hi+1, floor), 65535]
// next to the ephemeral range [lo, hi]. min > max means there is none.
func outside(lo, hi int) (minPort, maxPort int) {
	below := [2]int{floor, lo - 1}
	above := [2]int{max(hi+1, floor), 65535}
	if below[1]-below[0] >= above[1]-above[0] {
		return below[0], below[1]
	}
	return above[0], above[1]
}

func (c Config) validate() error {
	if c.Dir == "" {
		return errors.New("freeport: Config.Dir is empty")
	}
	if c.Min < 1 || c.Max > 65535 || c.Min > c.Max {
		return fmt.Errorf("freeport: no ports in Config.Min..Max = %d..%d", c.Min, c.Max)
	}
	return nil
}

// Set is ports this process holds until Release.
type Set struct {
	ports []int
	locks []io.Closer
	once  sync.Once
}

// Take reserves n ports with DefaultConfig.
func Take(n int) (*Set, error) { return DefaultConfig().Take(n) }

// Take reserves n distinct ports of c's range: each is locked in c.Dir and was free on
// 127.0.0.1 when checked. It does not wait for a port: if fewer than n are free it
// releases what it took and fails.
func (c Config) Take(n int) (*Set, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.Dir, 0o777); err != nil {
		return nil, fmt.Errorf("freeport: %w", err)
	}
	os.Chmod(c.Dir, 0o777|os.ModeSticky) //nolint:errcheck // shared like /tmp; fails harmlessly if another user made it
	s := &Set{}
	span := c.Max - c.Min + 1
	start := rand.IntN(span) // concurrent takers start apart and rarely meet
	var lastErr error
	for i := 0; i < span && len(s.ports) < n; i++ {
		p := c.Min + (start+i)%span
		l, err := c.reserve(p)
		if err != nil {
			lastErr = err
			continue
		}
		s.ports, s.locks = append(s.ports, p), append(s.locks, l)
	}
	if len(s.ports) < n {
		s.Release()
		return nil, fmt.Errorf("freeport: only %d of %d ports free in %d..%d (last: %v)", len(s.ports), n, c.Min, c.Max, lastErr)
	}
	return s, nil
}

// errLocked reports a port another Set holds.
var errLocked = errors.New("freeport: port reserved by another holder")

// reserve locks port p and checks that nothing listens on it.
func (c Config) reserve(p int) (io.Closer, error) {
	f, err := os.OpenFile(filepath.Join(c.Dir, strconv.Itoa(p)+".lock"), os.O_RDONLY|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	if err := lock(f); err != nil {
		f.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", addr(p))
	if err != nil {
		f.Close()
		return nil, err
	}
	ln.Close()
	return f, nil
}

func addr(p int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)) }

// Ports returns the ports, in the order they were taken.
func (s *Set) Ports() []int { return append([]int(nil), s.ports...) }

// Addrs returns the ports as 127.0.0.1:port addresses.
func (s *Set) Addrs() []string {
	out := make([]string, len(s.ports))
	for i, p := range s.ports {
		out[i] = addr(p)
	}
	return out
}

// Release gives the ports back: another Take may hand them out from now on. Call it
// once nothing binds them any more (the children have exited). It is idempotent; the
// process's exit releases them too.
func (s *Set) Release() {
	s.once.Do(func() {
		for _, l := range s.locks {
			l.Close() // closing the file drops its flock
		}
	})
}
