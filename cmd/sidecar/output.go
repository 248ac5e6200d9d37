package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
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

// Output modes of -o: a table (or lines) for people, protojson lines for jq, or the
// payload bytes alone.
const (
	outTable = "table"
	outJSON  = "json"
	outRaw   = "raw"
)

// outputFlags are -o/--output and --json (the old spelling of -o json), shared by the
// client commands; --separator is raw's record separator.
type outputFlags struct {
	output string
	json   bool
	sep    string
}

// addFlags adds -o and --json, and with separator --separator.
func (f *outputFlags) addFlags(fs *pflag.FlagSet, usage string, separator bool) {
	f.sep = "\\n"
	fs.StringVarP(&f.output, "output", "o", outTable, usage)
	fs.BoolVar(&f.json, "json", false, "the same as -o json (the old spelling)")
	if !separator {
		return
	}
	fs.StringVar(&f.sep, "separator", "\\n", `with -o raw: what follows each payload (the escapes \n \t \r \0 \\ and \xHH are read; "" for none: payloads back to back)`)
}

// mode is the -o in effect: --json wins as -o json; an unknown -o is an error naming
// the choices.
func (f outputFlags) mode(choices ...string) (string, error) {
	if f.json {
		if f.output != outTable && f.output != outJSON {
			return "", fmt.Errorf("--json and -o %s disagree: give one of them", f.output)
		}
		return outJSON, nil
	}
	for _, c := range choices {
		if f.output == c {
			return c, nil
		}
	}
	return "", fmt.Errorf("-o %q: want %s", f.output, strings.Join(choices, ", "))
}

// separator is --separator with its escapes read.
func (f outputFlags) separator() ([]byte, error) {
	return unescape(f.sep)
}

// unescape reads \n, \t, \r, \0, \\ and \xHH in s; any other byte stands for itself.
func unescape(s string) ([]byte, error) {
	var out []byte
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			out = append(out, s[i])
			continue
		}
		if i+1 == len(s) {
			return nil, fmt.Errorf("--separator %q: a lone \\ at the end (write \\\\ for a backslash)", s)
		}
		i++
		switch s[i] {
		case 'n':
			out = append(out, '\n')
		case 't':
			out = append(out, '\t')
		case 'r':
			out = append(out, '\r')
		case '0':
			out = append(out, 0)
		case '\\':
			out = append(out, '\\')
		case 'x':
			if i+3 > len(s) {
				return nil, fmt.Errorf("--separator %q: \\x wants two hex digits", s)
			}
			b, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return nil, fmt.Errorf("--separator %q: \\x wants two hex digits", s)
			}
			out = append(out, byte(b))
			i += 2
		default:
			return nil, fmt.Errorf("--separator %q: unknown escape \\%c (known: \\n \\t \\r \\0 \\\\ \\xHH)", s, s[i])
		}
	}
	return out, nil
}

// entryFormat is how get and watch print entries: -o (table, json or raw),
// --separator and --full.
type entryFormat struct {
	out  outputFlags
	full bool // payloads whole, not cut to payloadWidth

	mode string // set by resolve: outTable, outJSON or outRaw
	sep  []byte // set by resolve: raw's separator
}

func (f *entryFormat) addFlags(fs *pflag.FlagSet, usage string) {
	f.out.addFlags(fs, usage, true)
	fs.BoolVar(&f.full, "full", false, fmt.Sprintf("print payloads whole, not cut to %d characters", payloadWidth))
}

// resolve checks the flags and sets mode and sep.
func (f *entryFormat) resolve() error {
	m, err := f.out.mode(outTable, outJSON, outRaw)
	if err != nil {
		return err
	}
	f.mode = m
	if f.sep, err = f.out.separator(); err != nil {
		return err
	}
	return nil
}

// writeRaw writes p then sep: nothing else, so binary payloads come out byte for byte.
func writeRaw(w io.Writer, p, sep []byte) error {
	buf := make([]byte, 0, len(p)+len(sep))
	buf = append(append(buf, p...), sep...)
	_, err := w.Write(buf)
	return err
}

// legend says what the two numbers of an entry are. get's and status's tables end with
// it; docs/CLI.md repeats it.
const legend = "VERSION rises per key (an HLC time stamp unless the writer chose it); " +
	"REVISION is this node's change counter (watch --from-revision)"

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
