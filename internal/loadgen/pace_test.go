package loadgen

import (
	"testing"
	"time"
)

func TestDueAt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sent  int64
		batch int
		rate  float64
		want  time.Duration
	}{
		{"first single event at 1000/s", 0, 1, 1000, time.Millisecond},
		{"first batch of 10 at 1000/s waits for its 10th event", 0, 10, 1000, 10 * time.Millisecond},
		{"second batch of 10 at 1000/s", 10, 10, 1000, 20 * time.Millisecond},
		{"one second of events", 9990, 10, 10000, time.Second},
		{"fractional rate", 0, 1, 3, 333333333 * time.Nanosecond},
		{"unpaced is always due", 1 << 40, 10, 0, 0},
		{"negative rate is unpaced", 5, 1, -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := dueAt(tc.sent, tc.batch, tc.rate); got != tc.want {
				t.Fatalf("dueAt(%d, %d, %g) = %s, want %s", tc.sent, tc.batch, tc.rate, got, tc.want)
			}
		})
	}
}

// The schedule offers exactly rate events per second, whatever the batch.
func TestDueAtKeepsTheRate(t *testing.T) {
	for _, batch := range []int{1, 7, 10, 250} {
		const rate = 12345.0
		var sent int64
		for dueAt(sent, batch, rate) <= 10*time.Second {
			sent += int64(batch)
		}
		if got := float64(sent) / 10; got < rate-float64(batch) || got > rate+float64(batch) {
			t.Errorf("batch %d: %.0f events/s offered, want %.0f", batch, got, rate)
		}
	}
}

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

func TestStamp(t *testing.T) {
	p := make([]byte, 100)
	putStamp(p, 1234567*time.Microsecond)
	if got, ok := readStamp(p); !ok || got != 1234567*time.Microsecond {
		t.Fatalf("readStamp = %s, %v", got, ok)
	}
	short := make([]byte, stampBytes-1)
	putStamp(short, time.Second) // must not panic
	if _, ok := readStamp(short); ok {
		t.Fatal("a 7-byte payload has no stamp")
	}
}
