package peers

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ParseList parses a comma-separated --peers value ("host:port,host:port"). Blank
// entries are ignored and duplicates are removed, keeping the first occurrence. An
// entry that is not host:port with a port in 1..65535 is an error naming it.
func ParseList(s string) ([]string, error) {
	var out []string
	seen := make(map[string]bool)
	for i, raw := range strings.Split(s, ",") {
		addr := strings.TrimSpace(raw)
		if addr == "" {
			continue
		}
		if err := checkAddr(addr); err != nil {
			return nil, fmt.Errorf("--peers entry %d %q: %w", i, addr, err)
		}
		if !seen[addr] {
			seen[addr] = true
			out = append(out, addr)
		}
	}
	return out, nil
}

func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port: %w", err)
	}
	if host == "" {
		return fmt.Errorf("empty host")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port must be 1..65535, got %q", port)
	}
	return nil
}
