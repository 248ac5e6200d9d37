package jetstream

import (
	"errors"
	"strings"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/state"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
)

func eventBytes(t testing.TB, taskID string, version uint64, deleted bool) []byte {
	t.Helper()
	b, err := proto.Marshal(&fanoutv1.Event{TaskId: taskID, Payload: []byte("p"), Version: version, Deleted: deleted})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMessageRoundTrip(t *testing.T) {
	for _, deleted := range []bool{false, true} {
		raw := eventBytes(t, "app/x y", 42, deleted)
		m, err := messageOf("node-a", raw, 42, 1700)
		if err != nil {
			t.Fatal(err)
		}
		h := encodeHeader(&m)
		if got := h.Get(HeaderOperation) == "DEL"; got != deleted {
			t.Fatalf("deleted %t: KV-Operation %q", deleted, h.Get(HeaderOperation))
		}
		back, err := decodeMessage(encodeKey("app/x y"), h, raw)
		if err != nil {
			t.Fatal(err)
		}
		if back.TaskID != "app/x y" || back.Stamp != (state.Stamp{Version: 42, Origin: "node-a"}) || back.SubmittedAt != 1700 ||
			back.Deleted != deleted || string(back.Raw) != string(raw) {
			t.Fatalf("round trip: %+v", back)
		}
	}
}

func TestDecodeMessageRefuses(t *testing.T) {
	raw := eventBytes(t, "k", 7, false)
	good := func() nats.Header {
		return nats.Header{HeaderVersion: {"7"}, HeaderOrigin: {"a"}, HeaderSubmittedAt: {"1"}}
	}
	for _, tc := range []struct {
		name, want string
		key        string
		edit       func(nats.Header)
		data       []byte
	}{
		{"no version", "header Fanout-Version: missing", "k", func(h nats.Header) { delete(h, HeaderVersion) }, raw},
		{"two versions", "header Fanout-Version: 2 values", "k", func(h nats.Header) { h.Add(HeaderVersion, "7") }, raw},
		{"version text", "header Fanout-Version: \"x\"", "k", func(h nats.Header) { h.Set(HeaderVersion, "x") }, raw},
		{"version signed", "header Fanout-Version: \"+7\"", "k", func(h nats.Header) { h.Set(HeaderVersion, "+7") }, raw},
		{"version disagrees", "header Fanout-Version: 8, the event's version is 7", "k", func(h nats.Header) { h.Set(HeaderVersion, "8") }, raw},
		{"no origin", "header Fanout-Origin: missing", "k", func(h nats.Header) { delete(h, HeaderOrigin) }, raw},
		{"empty origin", "header Fanout-Origin: 0 bytes", "k", func(h nats.Header) { h.Set(HeaderOrigin, "") }, raw},
		{"long origin", "header Fanout-Origin: 1025 bytes", "k", func(h nats.Header) { h.Set(HeaderOrigin, strings.Repeat("o", 1025)) }, raw},
		{"no submitted", "header Fanout-Submitted-At: missing", "k", func(h nats.Header) { delete(h, HeaderSubmittedAt) }, raw},
		{"submitted text", "header Fanout-Submitted-At: \"1e9\"", "k", func(h nats.Header) { h.Set(HeaderSubmittedAt, "1e9") }, raw},
		{"purge", "header KV-Operation: [\"PURGE\"]", "k", func(h nats.Header) { h.Set(HeaderOperation, "PURGE") }, raw},
		{"del of a value", "header KV-Operation: a delete marker", "k", func(h nats.Header) { h.Set(HeaderOperation, "DEL") }, raw},
		{"not an event", "value: not a fanout.v1.Event", "k", func(nats.Header) {}, []byte{0xff}},
		{"other key", "value: task_id \"k\", the subject's is \"j\"", "j", func(nats.Header) {}, raw},
		{"bad subject", "subject:", "k..", func(nats.Header) {}, raw},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := good()
			tc.edit(h)
			_, err := decodeMessage(tc.key, h, tc.data)
			if !errors.Is(err, errMessage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an errMessage with %q", err, tc.want)
			}
		})
	}
}

// FuzzDecodeMessage: garbage headers and values give an error, never a panic; what
// decodes re-encodes to the same headers.
func FuzzDecodeMessage(f *testing.F) {
	f.Add("k", "7", "a", "1", "", eventBytes(f, "k", 7, false))
	f.Add("k", "7", "a", "1", "DEL", eventBytes(f, "k", 7, true))
	f.Add("k..", "-1", "", "x", "PURGE", []byte{0xff, 0x01})
	f.Fuzz(func(t *testing.T, key, version, origin, submitted, op string, data []byte) {
		h := nats.Header{HeaderVersion: {version}, HeaderOrigin: {origin}, HeaderSubmittedAt: {submitted}}
		if op != "" {
			h.Set(HeaderOperation, op)
		}
		m, err := decodeMessage(key, h, data)
		if err != nil {
			if !errors.Is(err, errMessage) {
				t.Fatalf("error %v is not an errMessage", err)
			}
			return
		}
		again := encodeHeader(&m)
		if _, err := decodeMessage(key, again, m.Raw); err != nil {
			t.Fatalf("re-encoded %+v: %v", again, err)
		}
		if encodeKey(m.TaskID) != key {
			t.Fatalf("task_id %q from key %q", m.TaskID, key)
		}
	})
}
