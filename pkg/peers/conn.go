package peers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The failure classes of a Replicate call (and ErrTooLarge, ours). Errors
// returned by Conn.Replicate wrap exactly one of them.
var (
	// ErrCongestion: the peer is overloaded; back off for the congestion delay.
	ErrCongestion = errors.New("peers: congestion")
	// ErrNetwork: the peer could not be reached; back off for the network-failure delay.
	ErrNetwork = errors.New("peers: network failure")
	// ErrPermanent: retrying the same batch will not help; drop it.
	ErrPermanent = errors.New("peers: permanent failure")
	// ErrTooLarge: the request was bigger than the peer accepts, or than this
	// connection sends (gRPC's RESOURCE_EXHAUSTED "message larger than max").
	// Retrying it whole will not help, and it is not congestion: split it.
	ErrTooLarge = errors.New("peers: message too large")
)

// Options configure a Conn.
type Options struct {
	// MaxMessageBytes bounds every message sent and received on the connection: a
	// Replicate request, an anti-entropy message. 0 means 4 MiB (gRPC's default
	// receive limit). A request bigger than this is refused before it is sent
	// (ErrTooLarge).
	MaxMessageBytes int
	// Creds are the transport credentials. nil means plaintext.
	Creds credentials.TransportCredentials
	// MaxReconnectDelay caps gRPC's reconnect backoff. 0 means 2s: gRPC's own default
	// cap is 120s, so a peer that was down for a minute would be found again only
	// minutes after it came back, long after the breaker probes.
	MaxReconnectDelay time.Duration
	// DialOptions are appended (interceptors, stats handlers).
	DialOptions []grpc.DialOption
	// Unary sends every batch as its own unary Replicate call instead of on the
	// connection's ReplicateStream (peer.proto; docs/BENCHMARKS.md compares the two).
	Unary bool
	// AnswerHold is how long a peer may hold the answer to a batch the caller says no
	// acknowledgement waits for (ReplicateFrame's mayHold; peer.proto's
	// answer_hold_micros) and send it with later ones: one message each way fewer
	// per batch. 0: every batch is answered at once.
	AnswerHold time.Duration
	// MaxHeld bounds the batches in flight whose answers may be held: the next is
	// sent without a hold and brings the held ones back with its own answer. A link
	// sets its workers less one, so that a worker is always free to send it.
	MaxHeld int
}

// Conn is a client of one peer's PeerService. It is safe for concurrent use. Batches
// travel on one ReplicateStream at a time (stream.go), opened on the first batch and
// again after one ends; concurrent batches share it. With Options.Unary, or for a
// minute after the peer answered that it has no ReplicateStream, each batch is a
// unary Replicate call instead (gRPC multiplexes concurrent calls over one HTTP/2
// connection).
type Conn struct {
	addr   string
	cc     *grpc.ClientConn
	client fanoutv1.PeerServiceClient
	max    int  // MaxMessageBytes
	unary  bool // Options.Unary
	// hold is Options.AnswerHold in microseconds (0: none); maxHeld is Options.MaxHeld.
	hold    uint32
	maxHeld int
	// promptEvery is the package's promptEvery (a test may lengthen it before the
	// first batch).
	promptEvery time.Duration
	// headerWait is the package's headerWait (a test may shorten it).
	headerWait time.Duration
	recalling  atomic.Bool // a Recall's empty batch is under way
	// peerMax is the largest message the peer takes, as it last said it (a stream's
	// header, or a refusal); 0: not known. Kept across streams, so that a new stream
	// does not send what the peer refused on the last one.
	peerMax atomic.Int64

	ctx    context.Context // the streams' parent; canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the streams' goroutines

	mu         sync.Mutex
	st         *replStream // the stream batches go on; nil: none opened yet. Guarded by mu.
	unaryUntil time.Time   // the peer has no ReplicateStream: unary calls until then. Guarded by mu.
	closed     bool        // guarded by mu
}

// Dial prepares a connection to addr. It does not block: gRPC connects lazily and
// reconnects with backoff on its own.
func Dial(addr string, opts Options) (*Conn, error) {
	creds := opts.Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	size := opts.MaxMessageBytes
	if size <= 0 {
		size = 4 << 20
	}
	maxDelay := opts.MaxReconnectDelay
	if maxDelay <= 0 {
		maxDelay = 2 * time.Second
	}
	bo := backoff.DefaultConfig
	bo.BaseDelay = min(bo.BaseDelay, maxDelay/10)
	bo.MaxDelay = maxDelay
	dopts := append(append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: maxDelay}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(size), grpc.MaxCallSendMsgSize(size)),
	}, frame.DialOptions()...), opts.DialOptions...)
	cc, err := grpc.NewClient(addr, dopts...)
	if err != nil {
		return nil, fmt.Errorf("peers: dial %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Conn{addr: addr, cc: cc, client: fanoutv1.NewPeerServiceClient(cc), max: size, unary: opts.Unary,
		hold: uint32(min(opts.AnswerHold, time.Hour).Microseconds()), maxHeld: opts.MaxHeld, promptEvery: promptEvery,
		headerWait: headerWait, ctx: ctx, cancel: cancel}, nil
}

// Addr is the peer's address as configured.
func (c *Conn) Addr() string { return c.addr }

// Replicate sends one batch. ctx carries the deadline (--replicate-timeout). The error,
// if any, wraps ErrCongestion, ErrNetwork or ErrPermanent.
// It is ReplicateFrame of the request encoded here; the node sends frames.
func (c *Conn) Replicate(ctx context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%w: encode the request: %v", ErrPermanent, err)
	}
	resp, _, err := c.ReplicateFrame(ctx, &frame.Frame{B: b}, len(req.GetEvents()), false)
	return resp, err
}

// ReplicateFrame sends one batch already encoded as a ReplicateRequest of events events
// (the origin encodes each event once for all its peers; internal/wire's
// AppendReplicate). mayHold: no acknowledgement waits for this batch, so the peer may
// hold its answer (Options.AnswerHold); held reports that it was sent so, and that the
// time to its answer is not a round trip. Errors are classified as Replicate's.
func (c *Conn) ReplicateFrame(ctx context.Context, f *frame.Frame, events int, mayHold bool) (resp *fanoutv1.ReplicateResponse, held bool, err error) {
	resp, held, err = c.replicate(ctx, f, events, mayHold)
	if err != nil {
		return nil, held, Classify(err)
	}
	if got := len(resp.GetStatuses()); got != events {
		return nil, held, fmt.Errorf("%w: %s answered %d statuses for %d events", ErrPermanent, c.addr, got, events)
	}
	return resp, held, nil
}

// Recall asks the peer now for the answers it holds, if any batch sent with a hold is
// in flight: a task waits for one of them (batcher.Config.OnPark). It sends an empty
// batch from origin without a hold, whose answer brings the held ones, on a goroutine
// of c's (Close waits for it), one at a time; it does not block.
func (c *Conn) Recall(origin string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.st
	// Under mu and not closed: Close waits for the goroutine (as for a stream's).
	if c.closed || st == nil || !st.holding() || !c.recalling.CompareAndSwap(false, true) {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer c.recalling.Store(false)
		ctx, cancel := context.WithTimeout(c.ctx, recallTimeout)
		defer cancel()
		f := &frame.Frame{B: wire.AppendReplicate(nil, origin, 0, nil, nil)}
		_, _, _ = st.do(ctx, f, 0, false) // a failure is the stream's: its batches hear of it
	}()
}

// recallTimeout bounds a Recall's wait for its answer (a peer that does not answer
// fails the stream's batches by their own deadlines).
const recallTimeout = 10 * time.Second

// replicate sends f on the stream, or as a unary call; the error is unclassified.
func (c *Conn) replicate(ctx context.Context, f *frame.Frame, events int, mayHold bool) (*fanoutv1.ReplicateResponse, bool, error) {
	if s := c.stream(); s != nil {
		resp, held, err := s.do(ctx, f, events, mayHold && c.hold > 0)
		if !errUnimplemented(err) {
			return resp, held, err
		}
		c.fallBack() // a peer from before ReplicateStream: this batch goes unary at once
	}
	resp := new(fanoutv1.ReplicateResponse)
	if err := c.cc.Invoke(ctx, fanoutv1.PeerService_Replicate_FullMethodName, f, resp); err != nil {
		return nil, false, err
	}
	return resp, false, nil
}

// Close ends the stream, waits for its goroutine and releases the connection. It is
// safe to call more than once.
func (c *Conn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	err := c.cc.Close()
	if status.Code(err) == codes.Canceled {
		return nil // already closed
	}
	return err
}

// Classify maps an error from a Replicate call to one of the classes:
// RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED are congestion (a timed-out peer is usually
// an overloaded one, Eureka PR #1031), except a RESOURCE_EXHAUSTED that says a
// message was larger than a limit, which is ErrTooLarge (ours: the same request would
// be refused again however long the sender waits); UNAVAILABLE, CANCELED and errors
// that carry no status (connection errors) are network failures; everything else is
// permanent.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrCongestion) || errors.Is(err, ErrNetwork) || errors.Is(err, ErrPermanent) || errors.Is(err, ErrTooLarge) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %v", ErrCongestion, err)
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: %v", ErrNetwork, err)
	}
	s, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%w: %v", ErrNetwork, err)
	}
	if tooLarge(s) {
		return fmt.Errorf("%w: %s", ErrTooLarge, s.Message())
	}
	return fmt.Errorf("%w: %s", classOf(s.Code()), s.Message())
}

// tooLarge reports whether s is gRPC refusing a message for its size: the receiving
// server's "grpc: received message larger than max (N vs. M)", or the sending
// client's "grpc: trying to send message larger than max (N vs. M)" (grpc-go's
// rpc_util.go; "after decompression" too). Only gRPC's own refusal says this: a
// handler's RESOURCE_EXHAUSTED (a busy peer) stays congestion.
func tooLarge(s *status.Status) bool {
	return s.Code() == codes.ResourceExhausted && strings.Contains(s.Message(), "larger than max")
}

func classOf(c codes.Code) error {
	switch c {
	case codes.ResourceExhausted, codes.DeadlineExceeded:
		return ErrCongestion
	case codes.Unavailable, codes.Canceled:
		return ErrNetwork
	default:
		return ErrPermanent
	}
}

// Digest calls the peer's anti-entropy Digest. Errors are classified as Replicate's.
func (c *Conn) Digest(ctx context.Context, req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error) {
	resp, err := c.client.Digest(ctx, req)
	return resp, Classify(err)
}

// Pull calls the peer's anti-entropy Pull and hands every message of the stream to
// recv. Errors are classified as Replicate's; recv's are returned as they are.
func (c *Conn) Pull(ctx context.Context, req *fanoutv1.PullRequest, recv func(*fanoutv1.PullResponse) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream if recv fails
	stream, err := c.client.Pull(ctx, req)
	if err != nil {
		return Classify(err)
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return Classify(err)
		}
		if err := recv(resp); err != nil {
			return err
		}
	}
}

// Push calls the peer's anti-entropy Push. Errors are classified as Replicate's.
func (c *Conn) Push(ctx context.Context, req *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error) {
	resp, err := c.client.Push(ctx, req)
	return resp, Classify(err)
}
