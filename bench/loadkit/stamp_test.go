package loadkit

import (
	"testing"
	"time"
)

func TestStamp(t *testing.T) {
	s := Stamp{Sent: 1234567 * time.Microsecond, Due: 1234000 * time.Microsecond}
	p := make([]byte, 100)
	s.Put(p)
	if got, ok := ReadStamp(p); !ok || got != s {
		t.Fatalf("ReadStamp = %+v, %v; want %+v", got, ok, s)
	}
	fromSent, fromDue := s.Latency(1235 * time.Millisecond)
	if fromSent != 433*time.Microsecond || fromDue != time.Millisecond {
		t.Fatalf("Latency = %s, %s; want 433µs, 1ms", fromSent, fromDue)
	}
	if !s.Measured(1234*time.Millisecond) || s.Measured(1235*time.Millisecond) {
		t.Fatal("Measured goes by the due time")
	}

	eight := make([]byte, SentBytes)
	s.Put(eight)
	if got, ok := ReadStamp(eight); !ok || got.Sent != s.Sent || got.Due != s.Sent {
		t.Fatalf("an 8-byte payload: %+v, %v; want the send time as both", got, ok)
	}
	short := make([]byte, SentBytes-1)
	s.Put(short) // must not panic
	if _, ok := ReadStamp(short); ok {
		t.Fatal("a 7-byte payload has no stamp")
	}
}

func TestUs(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{{-time.Second, 1}, {0, 1}, {1500 * time.Nanosecond, 1}, {2 * time.Millisecond, 2000}, {time.Hour, MaxUs}} {
		if got := Us(tc.d); got != tc.want {
			t.Errorf("Us(%s) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	if Summarize(NewHistogram()) != (Latency{}) {
		t.Fatal("an empty histogram summarises to zeros")
	}
	h := NewHistogram()
	for i := int64(1); i <= 1000; i++ {
		h.RecordValue(i) //nolint:errcheck // in range
	}
	l := Summarize(h)
	if l.P50 != 500 || l.P99 != 990 || l.Max != 1000 {
		t.Fatalf("Summarize = %+v", l)
	}
}
