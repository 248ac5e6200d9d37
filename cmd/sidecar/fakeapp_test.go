package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fakeApp is a FanoutService for the client commands' tests: it records every request
// and answers with canned responses.
type fakeApp struct {
	fanoutv1.UnimplementedFanoutServiceServer

	// The canned answers, set before the server starts.
	submit    *fanoutv1.SubmitResponse
	entries   []*fanoutv1.Entry                // Get by task_ids answers those of these
	pages     map[string]*fanoutv1.GetResponse // Get by prefix: the page for each page_token
	stream    []*fanoutv1.SubscribeResponse    // Subscribe sends these, then:
	streamErr error                            // ends with this, or
	hold      bool                             // waits until the client cancels or its deadline
	err       error                            // every unary call fails with this

	mu   sync.Mutex      // guards reqs
	reqs []proto.Message // every request, in order
}

// start serves f on a loopback port (or the unix socket path given) until the test ends.
// It returns the address for --addr.
func (f *fakeApp) start(t *testing.T, unixPath string) string {
	t.Helper()
	network, addr := "tcp", "127.0.0.1:0"
	if unixPath != "" {
		network, addr = "unix", unixPath
	}
	lis, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fanoutv1.RegisterFanoutServiceServer(srv, f)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return listenerAddr(lis)
}

// listenerAddr is l's address as --addr takes it: host:port, or unix:///path.
func listenerAddr(l net.Listener) string {
	if l.Addr().Network() == "unix" {
		return "unix://" + l.Addr().String()
	}
	return l.Addr().String()
}

func (f *fakeApp) record(req proto.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, req)
}

// requests are the requests received so far.
func (f *fakeApp) requests() []proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]proto.Message(nil), f.reqs...)
}

func (f *fakeApp) Submit(_ context.Context, req *fanoutv1.SubmitRequest) (*fanoutv1.SubmitResponse, error) {
	f.record(req)
	return f.submit, f.err
}

func (f *fakeApp) Get(_ context.Context, req *fanoutv1.GetRequest) (*fanoutv1.GetResponse, error) {
	f.record(req)
	if f.err != nil {
		return nil, f.err
	}
	if len(req.GetTaskIds()) == 0 {
		return f.pages[req.GetPageToken()], nil
	}
	resp := &fanoutv1.GetResponse{}
	for _, e := range f.entries {
		for _, id := range req.GetTaskIds() {
			if e.GetEvent().GetTaskId() == id {
				resp.Entries = append(resp.Entries, e)
				break
			}
		}
	}
	return resp, nil
}

func (f *fakeApp) Subscribe(req *fanoutv1.SubscribeRequest, stream grpc.ServerStreamingServer[fanoutv1.SubscribeResponse]) error {
	f.record(req)
	for _, r := range f.stream {
		if err := stream.Send(r); err != nil {
			return err
		}
	}
	if f.hold { // like the real server: the client's cancel or deadline ends the stream
		<-stream.Context().Done()
		return status.FromContextError(stream.Context().Err()).Err()
	}
	return f.streamErr
}

// runCLI runs the sidecar command line with args and stdin, until it returns.
func runCLI(ctx context.Context, args []string, stdin string) (stdout, stderr string, err error) {
	out := newLineBuffer()
	stderr, err = runCLITo(ctx, out, args, stdin)
	return out.String(), stderr, err
}

// runCLITo is runCLI writing its standard output to out.
func runCLITo(ctx context.Context, out io.Writer, args []string, stdin string) (stderr string, err error) {
	var errOut bytes.Buffer
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(out)
	root.SetErr(&errOut)
	err = root.ExecuteContext(ctx)
	return errOut.String(), err
}

// lineBuffer is an output that a test can wait on, line by line.
type lineBuffer struct {
	mu    sync.Mutex // guards buf
	buf   bytes.Buffer
	wrote chan struct{} // capacity 1: something was written since the last wait
}

func newLineBuffer() *lineBuffer { return &lineBuffer{wrote: make(chan struct{}, 1)} }

func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	n, err := b.buf.Write(p)
	b.mu.Unlock()
	select {
	case b.wrote <- struct{}{}:
	default:
	}
	return n, err
}

func (b *lineBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitLines returns once n lines are out, or ctx is done.
func (b *lineBuffer) waitLines(ctx context.Context, n int) error {
	for strings.Count(b.String(), "\n") < n {
		select {
		case <-b.wrote:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// testContext is a context that ends with the test, or after 10 s: no command under
// test may hang it.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// checkRequests fails the test unless got are exactly want, in order.
func checkRequests(t *testing.T, got []proto.Message, want ...proto.Message) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("the sidecar got %d requests, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("request %d:\n got %v\nwant %v", i, got[i], want[i])
		}
	}
}

// checkErr fails the test unless err contains want, or is nil when want is "".
func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("err = %v, want none", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("err = %v, want it to contain %q", err, want)
	}
}

// entry builds a state table entry submitted at 2026-01-02T03:04:05.678Z.
func entry(id string, version uint64, origin string, revision uint64, payload string) *fanoutv1.Entry {
	return &fanoutv1.Entry{
		Event:       &fanoutv1.Event{TaskId: id, Version: version, Payload: []byte(payload)},
		OriginNode:  origin,
		SubmittedAt: timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 678e6, time.UTC)),
		Revision:    revision,
	}
}
