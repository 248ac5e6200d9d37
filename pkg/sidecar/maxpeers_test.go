package sidecar

import (
	"math"
	"slices"
	"testing"
)

func TestCapPeers(t *testing.T) {
	addrs := []string{"10.0.0.1:7", "10.0.0.2:7", "10.0.0.3:7", "10.0.0.10:7"}
	for _, c := range []struct {
		name        string
		cur         []string
		max         int
		want        []string
		wantRefused int
	}{
		{"under the cap", nil, 4, addrs, 0},
		{"the first in order", nil, 2, []string{"10.0.0.1:7", "10.0.0.2:7"}, 2},
		{"the peers kept first", []string{"10.0.0.10:7", "10.0.0.3:7"}, 2, []string{"10.0.0.3:7", "10.0.0.10:7"}, 2},
		{"a peer gone from DNS makes room", []string{"10.0.0.9:7", "10.0.0.3:7"}, 2, []string{"10.0.0.1:7", "10.0.0.3:7"}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, refused := capPeers(addrs, c.cur, c.max)
			if !slices.Equal(got, c.want) || refused != c.wantRefused {
				t.Errorf("capPeers = %v, %d refused; want %v, %d", got, refused, c.want, c.wantRefused)
			}
		})
	}
}

func TestPendingBudget(t *testing.T) {
	for _, c := range []struct {
		limit int64
		want  int
	}{
		{math.MaxInt64, 256 << 20},
		{128 << 20, 32 << 20},
		{4 << 30, 1 << 30},
	} {
		if got, note := pendingBudget(c.limit); got != c.want || note == "" {
			t.Errorf("pendingBudget(%d) = %d (%q), want %d", c.limit, got, note, c.want)
		}
	}
}
