package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

func TestValueRoundTrip(t *testing.T) {
	cases := map[string]Record{
		"empty":      {Key: []byte("k")},
		"tombstone":  {Key: []byte("k"), Version: 7, Origin: "node-b", Submitted: -1, Deleted: true},
		"full":       {Key: []byte("k"), Raw: []byte("\x0a\x01k"), Version: 1<<64 - 1, Origin: "n", Submitted: 1 << 62},
		"max origin": {Key: []byte("k"), Raw: []byte{0}, Origin: strings.Repeat("o", MaxOriginBytes)},
	}
	for name, r := range cases {
		t.Run(name, func(t *testing.T) {
			enc := appendValue([]byte("prefix"), &r)[len("prefix"):]
			v, err := decodeValue(enc)
			if err != nil {
				t.Fatal(err)
			}
			if v.version != r.Version || v.submitted != r.Submitted || v.deleted != r.Deleted ||
				string(v.origin) != r.Origin || !bytes.Equal(v.raw, r.Raw) {
				t.Fatalf("decoded %+v from %+v", v, r)
			}
		})
	}
}

func TestDecodeValueErrors(t *testing.T) {
	valid := appendValue(nil, &Record{Key: []byte("k"), Raw: []byte("raw"), Origin: "abc"})
	longOrigin := bytes.Clone(valid)
	binary.BigEndian.PutUint16(longOrigin[18:20], MaxOriginBytes+1)
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"nil", nil, "0 bytes, shorter than the 20-byte header"},
		{"header cut", valid[:valueHeader-1], "19 bytes"},
		{"format 2", append([]byte{2}, valid[1:]...), "format 2"},
		{"flag 0x02", append([]byte{formatV1, 2}, valid[2:]...), "unknown flags 0x2"},
		{"origin cut", valid[:valueHeader+2], "origin of 3 bytes, only 2 left"},
		{"origin past its bound", longOrigin, "origin of 1025 bytes, over 1024"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := decodeValue(c.b)
			if !errors.Is(err, errValue) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("decodeValue = %v, want errValue with %q", err, c.want)
			}
		})
	}
}

// FuzzDecodeValue: decodeValue never panics, and what it decodes encodes back to
// the same bytes (one encoding per value).
func FuzzDecodeValue(f *testing.F) {
	for _, r := range []Record{
		{Key: []byte("k")},
		{Key: []byte("k"), Raw: []byte("\x0a\x01k\x12\x05hello"), Version: 42, Origin: "node-a", Submitted: 1_700_000_000_000_000_000},
		{Key: []byte("k"), Version: 43, Origin: "node-b", Deleted: true},
	} {
		f.Add(appendValue(nil, &r))
	}
	f.Add([]byte{})
	f.Add([]byte{formatV1, 0xff})
	f.Add(append([]byte{formatV1, 0}, bytes.Repeat([]byte{0xff}, 18)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeValue(b)
		if err != nil {
			if !errors.Is(err, errValue) {
				t.Fatalf("error %v does not wrap errValue", err)
			}
			return
		}
		r := Record{Key: []byte("k"), Raw: v.raw, Version: v.version, Origin: string(v.origin),
			Submitted: v.submitted, Deleted: v.deleted}
		if err := checkLens(len(r.Key), len(r.Origin), len(r.Raw)); err != nil {
			t.Fatalf("decoded a record past a bound: %v", err)
		}
		if got := appendValue(nil, &r); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded %x, decoded from %x", got, b)
		}
	})
}

// FuzzDecodeClock: the clock's decoder and merge operator never panic, and a clock
// decodes to what it was.
func FuzzDecodeClock(f *testing.F) {
	f.Add([]byte{}, uint64(0))
	f.Add(encodeClock(1<<64-1), uint64(1))
	f.Add([]byte{1, 2, 3}, uint64(7))
	f.Fuzz(func(t *testing.T, b []byte, v uint64) {
		if got, err := decodeClock(encodeClock(v)); err != nil || got != v {
			t.Fatalf("decodeClock(encodeClock(%d)) = %d, %v", v, got, err)
		}
		c, err := decodeClock(b)
		if err != nil {
			return
		}
		m, err := newMaxMerger(nil, encodeClock(v))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.MergeOlder(b); err != nil {
			t.Fatal(err)
		}
		out, _, err := m.Finish(true)
		if got, _ := decodeClock(out); err != nil || got != max(c, v) {
			t.Fatalf("max of %d and %d merged to %d (%v)", c, v, got, err)
		}
	})
}
