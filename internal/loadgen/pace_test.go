package loadgen

import (
	"testing"
)

func TestPublisherRate(t *testing.T) {
	for _, tc := range []struct {
		rate, pubs int
		want       float64
	}{{10000, 1, 10000}, {10000, 4, 2500}, {10, 3, 10.0 / 3}, {0, 2, 0}, {100, 0, 0}} {
		if got := publisherRate(tc.rate, tc.pubs); got != tc.want {
			t.Errorf("publisherRate(%d, %d) = %g, want %g", tc.rate, tc.pubs, got, tc.want)
		}
	}
}

// Publishers interleave so that together they update every key in turn.
func TestKeyIndexCyclesOverEveryKey(t *testing.T) {
	const keys, pubs = 10, 3
	seen := make(map[int]int)
	for seq := range int64(keys) {
		for p := range pubs {
			seen[keyIndex(seq, p, pubs, keys)]++
		}
	}
	for k := range keys {
		if seen[k] != pubs {
			t.Fatalf("key %d updated %d times in %d rounds of %d publishers, want %d: %v", k, seen[k], keys, pubs, pubs, seen)
		}
	}
}

func TestTaskIDAndParseKey(t *testing.T) {
	const prefix = "bench/1f/"
	for _, tc := range []struct {
		name      string
		keys      int
		seq       int64
		pub, pubs int
		want      string
		wantKey   int
		isKey     bool
	}{
		{"hot key", 100, 205, 0, 1, "bench/1f/k5", 5, true},
		{"hot key, second of three publishers", 100, 205, 1, 3, "bench/1f/k16", 16, true},
		{"unique", 0, 42, 2, 3, "bench/1f/p2-42", 0, false},
		{"unique keys recycle past the window", 0, uniqueWindow/4 + 7, 1, 4, "bench/1f/p1-7", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := taskID(prefix, tc.keys, tc.seq, tc.pub, tc.pubs)
			if id != tc.want {
				t.Fatalf("taskID = %q, want %q", id, tc.want)
			}
			if k, ok := parseKey(prefix, []byte(id)); ok != tc.isKey || k != tc.wantKey {
				t.Fatalf("parseKey(%q) = %d, %v; want %d, %v", id, k, ok, tc.wantKey, tc.isKey)
			}
		})
	}
	for _, bad := range []string{"other/k1", prefix + "kx", prefix + "k-1", prefix + "p1-2", prefix} {
		if k, ok := parseKey(prefix, []byte(bad)); ok {
			t.Errorf("parseKey(%q) = %d, true; want false", bad, k)
		}
	}
}
