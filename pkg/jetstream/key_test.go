package jetstream

import (
	"strings"
	"testing"

	"github.com/fanout/fanout/pkg/event"
)

func TestEncodeKey(t *testing.T) {
	for _, tc := range []struct{ taskID, key string }{
		{"a", "a"},
		{"app/instance-1", "app.instance-1"},
		{"action#app/instance", "action=23app.instance"},
		{"/lead", "=.lead"},
		{"trail/", "trail.="},
		{"a//b", "a.=.b"},
		{"/", "=.="},
		{"a.b", "a=2Eb"},
		{"x=y", "x=3Dy"},
		{"*>", "=2A=3E"},
		{"é", "=C3=A9"},
		{"sp ace", "sp=20ace"},
	} {
		t.Run(tc.taskID, func(t *testing.T) {
			if got := encodeKey(tc.taskID); got != tc.key {
				t.Fatalf("encodeKey(%q) = %q, want %q", tc.taskID, got, tc.key)
			}
			if got, err := decodeKey(tc.key); err != nil || got != tc.taskID {
				t.Fatalf("decodeKey(%q) = %q, %v", tc.key, got, err)
			}
		})
	}
}

func TestDecodeKeyRefuses(t *testing.T) {
	for _, key := range []string{"", ".", "a.", ".a", "a..b", "=41", "=2f", "=2", "a=", "a=.b", "=Z0", "a b", "a*", "=2F", "a=x"} {
		t.Run(key, func(t *testing.T) {
			if got, err := decodeKey(key); err == nil {
				t.Fatalf("decodeKey(%q) = %q, want an error", key, got)
			}
		})
	}
}

// validKey is what NATS takes as a KV key (nats.go's keyValid) and as a subject's
// tokens: [-/_=.a-zA-Z0-9], no empty token. The encoding never writes '/'.
func validKey(k string) bool {
	if k == "" || k[0] == '.' || k[len(k)-1] == '.' || strings.Contains(k, "..") {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; !plain(c) && c != '=' && c != '.' {
			return false
		}
	}
	return true
}

func TestMaxKeyFitsTheServer(t *testing.T) {
	l := event.DefaultLimits()
	worst := strings.Repeat("é", l.MaxTaskIDBytes/2)
	if n := len(encodeKey(worst)); n > MaxKeyBytes(l.MaxTaskIDBytes) {
		t.Fatalf("key of %d bytes, MaxKeyBytes says %d", n, MaxKeyBytes(l.MaxTaskIDBytes))
	}
	// The longest API subject carries the key: a direct get by subject, with its
	// reply inbox, on one protocol line within the server's max_control_line.
	c := DefaultConfig()
	c.Bucket = strings.Repeat("b", maxBucketBytes)
	if err := c.validate(l); err != nil {
		t.Fatal(err)
	}
}

func FuzzKey(f *testing.F) {
	for _, s := range []string{"a", "app/x", "/", "a//b/", "é/=/.", "*>", strings.Repeat("/", 9)} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, taskID string, cut int) {
		if taskID == "" {
			return
		}
		k := encodeKey(taskID)
		if !validKey(k) {
			t.Fatalf("encodeKey(%q) = %q: not a valid KV key", taskID, k)
		}
		if len(k) > MaxKeyBytes(len(taskID)) {
			t.Fatalf("encodeKey(%q) = %d bytes, over %d", taskID, len(k), MaxKeyBytes(len(taskID)))
		}
		back, err := decodeKey(k)
		if err != nil || back != taskID {
			t.Fatalf("decodeKey(encodeKey(%q)) = %q, %v", taskID, back, err)
		}
		if got := strings.Count(k, ".") + 1; got != strings.Count(taskID, "/")+1 {
			t.Fatalf("encodeKey(%q) = %q: %d tokens, want one per segment", taskID, k, got)
		}
		// Prefixes: the key of a prefix is a prefix of the key, but for its last
		// empty segment ("=") if it ends with '/'.
		if cut < 0 {
			cut = -cut
		}
		p := taskID[:cut%(len(taskID)+1)]
		if p != "" {
			pk := encodeKey(p)
			if strings.HasSuffix(p, "/") {
				pk = strings.TrimSuffix(pk, "=")
			}
			if !strings.HasPrefix(k, pk) {
				t.Fatalf("key %q of %q does not start with %q, the key of its prefix %q", k, taskID, pk, p)
			}
		}
		// The prefix filter matches the key; exactly when it says so.
		if filter, _ := prefixFilter(p); !subjectMatch(filter, k) {
			t.Fatalf("prefixFilter(%q) = %q does not match %q, the key of %q", p, filter, k, taskID)
		}
	})
}

// FuzzDecodeKey: decodeKey takes exactly the keys encodeKey writes.
func FuzzDecodeKey(f *testing.F) {
	for _, s := range []string{"a", "a.b", "=", "=.=", "=2E", "=2e", "a..b", "=41"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		taskID, err := decodeKey(key)
		if err != nil {
			return
		}
		if got := encodeKey(taskID); got != key {
			t.Fatalf("decodeKey(%q) = %q, whose key is %q", key, taskID, got)
		}
	})
}

// TestPrefixFilterExact: an exact filter matches a key only if its task_id has the
// prefix.
func TestPrefixFilterExact(t *testing.T) {
	ids := []string{"a", "a/", "a/b", "a/b/c", "ab", "ab/c", "/", "/a", "//", "x/a/b", "a=/b", "a.b/c"}
	for _, p := range []string{"", "a/", "a/b/", "/", "//", "x/", "a=/", "a.b/"} {
		filter, exact := prefixFilter(p)
		if !exact {
			t.Fatalf("prefixFilter(%q) = %q, not exact", p, filter)
		}
		for _, id := range ids {
			if got, want := subjectMatch(filter, encodeKey(id)), strings.HasPrefix(id, p); got != want {
				t.Errorf("prefixFilter(%q) = %q matches %q (%q): %t, want %t", p, filter, id, encodeKey(id), got, want)
			}
		}
	}
	for _, p := range []string{"a", "a/b", "ab/c"} {
		if f, exact := prefixFilter(p); exact {
			t.Errorf("prefixFilter(%q) = %q, exact; want inexact (ends inside a segment)", p, f)
		}
	}
}

// subjectMatch is NATS's match of a subject against a filter of tokens, '*' and a
// last '>'.
func subjectMatch(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, f := range ft {
		if f == ">" {
			return len(st) > i
		}
		if i >= len(st) || (f != "*" && f != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}
