package main

import (
	"context"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestWatchRequest checks the SubscribeRequest each command line sends.
func TestWatchRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want *fanoutv1.SubscribeRequest
	}{
		{"snapshot and own writes by default", nil, nil, &fanoutv1.SubscribeRequest{Snapshot: true, IncludeOwn: true}},
		{"prefix, no snapshot", []string{"--prefix", "reg/", "--no-snapshot"}, nil, &fanoutv1.SubscribeRequest{TaskIdPrefix: "reg/", IncludeOwn: true}},
		{"one exact key: its own prefix, filtered by the CLI", []string{"reg/a"}, nil, &fanoutv1.SubscribeRequest{TaskIdPrefix: "reg/a", Snapshot: true, IncludeOwn: true}},
		{"exact keys: their common prefix", []string{"reg/ab", "reg/ac", "reg/b"}, nil, &fanoutv1.SubscribeRequest{TaskIdPrefix: "reg/", Snapshot: true, IncludeOwn: true}},
		{"--exclude-own", []string{"--exclude-own"}, nil, &fanoutv1.SubscribeRequest{Snapshot: true}},
		{"the old --include-own is the default", []string{"--include-own"}, nil, &fanoutv1.SubscribeRequest{Snapshot: true, IncludeOwn: true}},
		{"resume takes no snapshot", []string{"--from-revision", "42"}, nil, &fanoutv1.SubscribeRequest{FromRevision: 42, IncludeOwn: true}},
		{"every other flag", []string{"--prefix", "reg/", "--max-batch", "100", "--max-batch-bytes", "65536"}, nil,
			&fanoutv1.SubscribeRequest{TaskIdPrefix: "reg/", Snapshot: true, IncludeOwn: true, MaxBatch: 100, MaxBatchBytes: 65536}},
		{"FANOUT_* other than FANOUT_ADDR are serve's, not watch's", nil, map[string]string{"FANOUT_NO_SNAPSHOT": "true", "FANOUT_MAX_BATCH": "7", "FANOUT_EXCLUDE_OWN": "true"},
			&fanoutv1.SubscribeRequest{Snapshot: true, IncludeOwn: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			f := &fakeApp{}
			addr := f.start(t, "")
			// The fake ends the stream at once: watch reports that, after the request.
			_, _, err := runCLI(testContext(t), append([]string{"watch", "--addr", addr}, tc.args...), "")
			checkErr(t, err, "the sidecar ended the stream after 0 entries")
			checkRequests(t, f.requests(), tc.want)
		})
	}
}

// TestWatchOutput checks what watch prints for both response shapes and the snapshot
// marker, and how each way the stream ends sets the exit status.
func TestWatchOutput(t *testing.T) {
	a := entry("reg/a", 5, "node-a", 11, "hello")
	b := entry("reg/b", 6, "node-b", 12, "\x00\xff")
	c := entry("reg/c", 7, "node-c", 13, "")
	c.Event.Deleted = true
	stream := []*fanoutv1.SubscribeResponse{
		{Event: a.Event, OriginNode: a.OriginNode, SubmittedAt: a.SubmittedAt, Revision: a.Revision}, // one entry
		{SnapshotComplete: true},
		{Batch: []*fanoutv1.Entry{b, c}}, // several
	}
	const text = "11 reg/a v5 from node-a: hello\n--- snapshot complete (1 entries) ---\n12 reg/b v6 from node-b: base64:AP8=\n13 reg/c deleted (v7 from node-c)\n"
	for _, tc := range []struct {
		name        string
		args        []string
		streamErr   error
		hold        bool // the stream stays open
		cancelAfter int  // Ctrl-C once this many lines are out
		wantOut     string
		wantErr     string
	}{
		{"both shapes and the marker", []string{"--count", "3"}, nil, false, 0, text, ""},
		{"json lines", []string{"--count", "3", "--json"}, nil, false, 0,
			`{"event":{"taskId":"reg/a","payload":"aGVsbG8=","version":"5"},"originNode":"node-a","submittedAt":"2026-01-02T03:04:05.678Z","revision":"11"}` + "\n" +
				`{"snapshotComplete":true}` + "\n" +
				`{"event":{"taskId":"reg/b","payload":"AP8=","version":"6"},"originNode":"node-b","submittedAt":"2026-01-02T03:04:05.678Z","revision":"12"}` + "\n" +
				`{"event":{"taskId":"reg/c","version":"7","deleted":true},"originNode":"node-c","submittedAt":"2026-01-02T03:04:05.678Z","revision":"13"}` + "\n",
			""},
		{"--count stops inside a batch", []string{"--count", "2"}, nil, true, 0,
			"11 reg/a v5 from node-a: hello\n--- snapshot complete (1 entries) ---\n12 reg/b v6 from node-b: base64:AP8=\n", ""},
		{"Ctrl-C", nil, nil, true, 4, text, ""},
		{"--timeout", []string{"--timeout", "50ms"}, nil, true, 0, text, ""},
		{"--timeout before --count", []string{"--timeout", "50ms", "--count", "5"}, nil, true, 0, text,
			"--timeout 50ms passed after 3 of --count 5 entries"},
		{"the sidecar ends the stream", nil, nil, false, 0, text,
			"the sidecar ended the stream after 3 entries (is it shutting down?)"},
		{"compacted revision", []string{"--from-revision", "5"}, status.Error(codes.OutOfRange, "from_revision 5 is compacted (oldest 100)"), false, 0, text,
			": OUT_OF_RANGE: from_revision 5 is compacted (oldest 100): resubscribe with a snapshot (drop --from-revision)"},
		{"stream error", nil, status.Error(codes.Unavailable, "node closed"), false, 0, text,
			": UNAVAILABLE: node closed (is a sidecar serving on --addr?)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeApp{stream: stream, streamErr: tc.streamErr, hold: tc.hold}
			addr := f.start(t, "")
			ctx, cancel := context.WithCancel(testContext(t))
			defer cancel()
			out := newLineBuffer()
			stopped := make(chan struct{})
			go func() { // Ctrl-C
				defer close(stopped)
				if tc.cancelAfter > 0 && out.waitLines(ctx, tc.cancelAfter) == nil {
					cancel()
				}
			}()
			_, err := runCLITo(ctx, out, append([]string{"watch", "--addr", addr}, tc.args...), "")
			cancel()
			<-stopped
			checkErr(t, err, tc.wantErr)
			if got := out.String(); got != tc.wantOut {
				t.Errorf("stdout:\n%s\nwant:\n%s", got, tc.wantOut)
			}
		})
	}
}

func TestWatchFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"keys and a prefix", []string{"a", "--prefix", "b"}, `give TASK_IDs or --prefix "b", not both`},
		{"--exclude-own and --include-own", []string{"--exclude-own", "--include-own"}, "--exclude-own and --include-own contradict each other"},
		{"unknown -o", []string{"-o", "yaml"}, `-o "yaml": want table, json, raw`},
		{"bad separator", []string{"-o", "raw", "--separator", `\q`}, `--separator "\\q": unknown escape \q`},
		{"batch too large", []string{"--max-batch", "10001"}, "--max-batch 10001: want 0 to 10000"},
		{"batch bytes too large", []string{"--max-batch-bytes", "67108865"}, "--max-batch-bytes 67108865: want 0 (the sidecar's default) to 67108864"},
		{"negative count", []string{"--count", "-1"}, "--count -1: want 0 (no limit) or more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeApp{}
			addr := f.start(t, "")
			_, _, err := runCLI(testContext(t), append([]string{"watch", "--addr", addr}, tc.args...), "")
			checkErr(t, err, tc.want)
			checkRequests(t, f.requests())
		})
	}
}
