package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// payloadWidth is how many characters of a payload get and watch print without --full.
const payloadWidth = 60

// entryFormat is how get and watch print entries. Both are flags.
type entryFormat struct {
	json bool // one protojson Entry per line
	full bool // payloads whole, not cut to payloadWidth
}

func (f *entryFormat) addFlags(fs *pflag.FlagSet, jsonUsage string) {
	fs.BoolVar(&f.json, "json", false, jsonUsage)
	fs.BoolVar(&f.full, "full", false, fmt.Sprintf("print payloads whole, not cut to %d characters", payloadWidth))
}

// payloadText renders a payload for a terminal: as text when it is printable UTF-8,
// else as "base64:…" (so is text that itself starts with "base64:"). Unless full, it
// is cut to payloadWidth characters, the last one an ellipsis.
func payloadText(p []byte, full bool) string {
	s := string(p)
	if !printable(s) || strings.HasPrefix(s, "base64:") {
		s = "base64:" + base64.StdEncoding.EncodeToString(p)
	}
	if full || utf8.RuneCountInString(s) <= payloadWidth {
		return s
	}
	return string([]rune(s)[:payloadWidth-1]) + "…"
}

// printable reports whether s is valid UTF-8 without control characters (tabs and
// newlines included: they would break a table or a line).
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// timeText is ts in RFC 3339 with milliseconds, in UTC; "-" when unset.
func timeText(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// entryLine is watch's line for one entry:
//
//	REVISION TASK_ID vVERSION from ORIGIN: PAYLOAD
//	REVISION TASK_ID deleted (vVERSION from ORIGIN)
func entryLine(e *fanoutv1.Entry, full bool) string {
	ev := e.GetEvent()
	if ev.GetDeleted() {
		return fmt.Sprintf("%d %s deleted (v%d from %s)", e.GetRevision(), ev.GetTaskId(), ev.GetVersion(), e.GetOriginNode())
	}
	return fmt.Sprintf("%d %s v%d from %s: %s", e.GetRevision(), ev.GetTaskId(), ev.GetVersion(), e.GetOriginNode(),
		payloadText(ev.GetPayload(), full))
}

// writeJSONLine writes m as protojson on one line. protojson varies its whitespace on
// purpose; compacting it makes the output stable for diffs and tests.
func writeJSONLine(w io.Writer, m proto.Message) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err = w.Write(buf.Bytes())
	return err
}
