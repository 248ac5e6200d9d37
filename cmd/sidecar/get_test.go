package main

import (
	"strings"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestGet checks, for each command line, the GetRequests sent, the output and the exit
// status.
func TestGet(t *testing.T) {
	long := strings.Repeat("0123456789", 10)
	a := entry("reg/a", 5, "node-a", 11, "hello")
	b := entry("reg/b", 6, "node-b", 12, "\x00\xff")
	c := entry("reg/c", 7, "node-c", 13, long)
	d := entry("reg/d", 8, "node-a", 14, "")
	pages := map[string]*fanoutv1.GetResponse{
		"":   {Entries: []*fanoutv1.Entry{a, b}, NextPageToken: "p2", Revision: 20},
		"p2": {Entries: []*fanoutv1.Entry{c, d}, NextPageToken: "p3", Revision: 20},
		"p3": {Entries: []*fanoutv1.Entry{a}, Revision: 20},
	}
	const header = "TASK_ID  VERSION  ORIGIN  REVISION  SUBMITTED                 PAYLOAD\n"
	const rowA = "reg/a    5        node-a  11        2026-01-02T03:04:05.678Z  hello\n"
	const rowB = "reg/b    6        node-b  12        2026-01-02T03:04:05.678Z  base64:AP8=\n"
	rowC := "reg/c    7        node-c  13        2026-01-02T03:04:05.678Z  " + long[:59] + "…\n"
	const rowD = "reg/d    8        node-a  14        2026-01-02T03:04:05.678Z  \n"
	page := func(token string, limit uint32) proto.Message {
		return &fanoutv1.GetRequest{Prefix: "reg/", Limit: limit, PageToken: token}
	}
	for _, tc := range []struct {
		name       string
		args       []string
		env        map[string]string
		pages      map[string]*fanoutv1.GetResponse
		err        error
		want       []proto.Message
		wantOut    string
		wantStderr string
		wantErr    string
	}{
		{"by ids, in the order asked", []string{"reg/b", "reg/a"}, nil, nil, nil,
			[]proto.Message{&fanoutv1.GetRequest{TaskIds: []string{"reg/b", "reg/a"}}},
			header + rowB + rowA, "", ""},
		{"a missing id", []string{"reg/a", "nope", "reg/a"}, nil, nil, nil,
			[]proto.Message{&fanoutv1.GetRequest{TaskIds: []string{"reg/a", "nope", "reg/a"}}},
			header + rowA, "not found: nope\n", "1 of 2 task_ids not found"},
		{"by ids, json lines", []string{"reg/a", "reg/b", "--json"}, nil, nil, nil,
			[]proto.Message{&fanoutv1.GetRequest{TaskIds: []string{"reg/a", "reg/b"}}},
			`{"event":{"taskId":"reg/a","payload":"aGVsbG8=","version":"5"},"originNode":"node-a","submittedAt":"2026-01-02T03:04:05.678Z","revision":"11"}` + "\n" +
				`{"event":{"taskId":"reg/b","payload":"AP8=","version":"6"},"originNode":"node-b","submittedAt":"2026-01-02T03:04:05.678Z","revision":"12"}` + "\n",
			"", ""},
		{"by id, full payload", []string{"reg/c", "--full"}, nil, nil, nil,
			[]proto.Message{&fanoutv1.GetRequest{TaskIds: []string{"reg/c"}}},
			"TASK_ID  VERSION  ORIGIN  REVISION  SUBMITTED                 PAYLOAD\nreg/c    7        node-c  13        2026-01-02T03:04:05.678Z  " + long + "\n", "", ""},
		{"prefix, every page", []string{"--prefix", "reg/", "--limit", "2"}, nil, pages, nil,
			[]proto.Message{page("", 2), page("p2", 2), page("p3", 2)},
			header + rowA + rowB + rowC + rowD + rowA, "", ""},
		{"prefix, --max cuts the last page", []string{"--prefix", "reg/", "--limit", "2", "--max", "3"}, nil, pages, nil,
			[]proto.Message{page("", 2), page("p2", 1)},
			header + rowA + rowB + rowC, "", ""},
		{"FANOUT_* other than FANOUT_ADDR are serve's, not get's", []string{"--prefix", "reg/", "--max", "2"}, map[string]string{"FANOUT_MAX_BATCH": "99", "FANOUT_WORKERS": "1"}, pages, nil,
			[]proto.Message{page("", 2)},
			header + rowA + rowB, "", ""},
		{"nothing under the prefix", []string{"--prefix", "reg/"}, nil, map[string]*fanoutv1.GetResponse{"": {}}, nil,
			[]proto.Message{page("", 0)}, "", "no entries under prefix \"reg/\"\n", ""},
		{"grpc error", []string{"--prefix", "reg/"}, nil, nil, status.Error(codes.InvalidArgument, "page_token: unknown"),
			[]proto.Message{page("", 0)}, "", "", ": INVALID_ARGUMENT: page_token: unknown"},
		{"ids and prefix", []string{"reg/a", "--prefix", "reg/"}, nil, nil, nil,
			nil, "", "", `give TASK_IDs or --prefix "reg/", not both`},
		{"limit too large", []string{"--limit", "10001"}, nil, nil, nil,
			nil, "", "", "--limit 10001: want 0 (the sidecar's default) to 10000 entries per page"},
		{"negative max", []string{"--max", "-1"}, nil, nil, nil,
			nil, "", "", "--max -1: want 0 (every entry) or more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			f := &fakeApp{entries: []*fanoutv1.Entry{a, b, c}, pages: tc.pages, err: tc.err}
			addr := f.start(t, "")
			out, stderr, err := runCLI(testContext(t), append([]string{"get", "--addr", addr}, tc.args...), "")
			checkErr(t, err, tc.wantErr)
			checkRequests(t, f.requests(), tc.want...)
			if strings.HasPrefix(tc.wantOut, "TASK_ID") { // a table ends with the legend
				tc.wantOut += legend + "\n"
			}
			if out != tc.wantOut {
				t.Errorf("stdout:\n%s\nwant:\n%s", out, tc.wantOut)
			}
			if stderr != tc.wantStderr {
				t.Errorf("stderr %q, want %q", stderr, tc.wantStderr)
			}
		})
	}
}

func TestPageLimit(t *testing.T) {
	for _, tc := range []struct {
		name            string
		limit, max, got int
		want            uint32
	}{
		{"sidecar's default", 0, 0, 0, 0},
		{"--limit", 50, 0, 100, 50},
		{"--max below --limit", 50, 30, 0, 30},
		{"--max left after some pages", 50, 120, 100, 20},
		{"--max alone", 0, 300, 0, 300},
		{"--max alone, beyond a page", 0, 50000, 0, maxPage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pageLimit(tc.limit, tc.max, tc.got); got != tc.want {
				t.Fatalf("pageLimit(%d, %d, %d) = %d, want %d", tc.limit, tc.max, tc.got, got, tc.want)
			}
		})
	}
}
