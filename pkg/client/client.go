package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// MaxReplyBytes bounds one message the client accepts from the sidecar. gRPC's
// default, 4 MiB, is below what a sidecar may send: a Get page holds up to 10000
// entries and a Subscribe batch is at most max_batch_bytes (the client asks for 1 MiB).
const MaxReplyBytes = 128 << 20

// Client is a connection to one sidecar's app listener (FanoutService). It is safe
// for concurrent use. Close it when done.
type Client struct {
	cc  *grpc.ClientConn
	api fanoutv1.FanoutServiceClient
	cfg options
}

// Option configures New.
type Option func(*options)

type options struct {
	creds    credentials.TransportCredentials
	token    string
	tokenErr error
	dial     []grpc.DialOption
	backoff  time.Duration // Watch's longest pause between two attempts
}

// WithTLS dials with these transport credentials instead of plaintext (the app
// listener is plaintext on loopback or a unix socket by default).
func WithTLS(c credentials.TransportCredentials) Option {
	return func(o *options) { o.creds = c }
}

// WithToken sends token as "authorization: Bearer <token>" with every call: the
// content of the sidecar's --app-token-file.
func WithToken(token string) Option {
	return func(o *options) { o.token = strings.TrimSpace(token) }
}

// WithTokenFile reads the token from path (the file the sidecar's --app-token-file
// names, or a copy of it), as WithToken. The file is read once, by New.
func WithTokenFile(path string) Option {
	return func(o *options) {
		b, err := os.ReadFile(path)
		switch {
		case err != nil:
			o.tokenErr = fmt.Errorf("client: token file: %w", err)
		case strings.TrimSpace(string(b)) == "":
			o.tokenErr = fmt.Errorf("client: token file %s is empty: it must hold the sidecar's --app-token-file content", path)
		default:
			o.token = strings.TrimSpace(string(b))
		}
	}
}

// WithDialOptions adds gRPC dial options (interceptors, a custom dialer, ...).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dial = append(o.dial, opts...) }
}

// WithMaxBackoff bounds the pause between two attempts of a Watch to resume after a
// broken stream (default 2s; the pauses start at 50ms and double).
func WithMaxBackoff(d time.Duration) Option {
	return func(o *options) { o.backoff = d }
}

// bearer sends the app token with every call. The app listener is loopback or a unix
// socket, so it does not require transport security.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// New connects to the sidecar whose app listener is addr: host:port or
// unix:///path. Like grpc.NewClient it does not wait for the connection: the first
// call does, and an unreachable sidecar is an ErrUnavailable error of that call. ctx
// is not kept; it is there for options that may need it.
func New(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o := options{backoff: 2 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	if o.tokenErr != nil {
		return nil, o.tokenErr
	}
	if addr == "" {
		return nil, errors.New("client: empty address: give the sidecar's --app-addr, host:port or unix:///path")
	}
	target := addr
	if !strings.HasPrefix(addr, "unix://") {
		target = "passthrough:///" + addr
	}
	creds := o.creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxReplyBytes)),
	}
	if o.token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer(o.token)))
	}
	cc, err := grpc.NewClient(target, append(dial, o.dial...)...)
	if err != nil {
		return nil, fmt.Errorf("client: address %q: %w (want host:port or unix:///path)", addr, err)
	}
	return &Client{cc: cc, api: fanoutv1.NewFanoutServiceClient(cc), cfg: o}, nil
}

// Dial is New with a background context.
func Dial(addr string, opts ...Option) (*Client, error) {
	return New(context.Background(), addr, opts...)
}

// Close closes the connection. Watches, caches and publishers on it fail afterwards.
func (c *Client) Close() error { return c.cc.Close() }

// Conn is the gRPC connection, for other services on the app listener (the health
// service, reflection).
func (c *Client) Conn() *grpc.ClientConn { return c.cc }

// API is the generated client on the same connection, for what this package does not
// wrap (GetStatus, Subscribe with options of your own).
func (c *Client) API() fanoutv1.FanoutServiceClient { return c.api }

// AckPolicy says when a Put or Delete returns; see docs/API.md.
type AckPolicy int32

const (
	// Queued: the event is in every peer's queue (the default; fastest).
	Queued = AckPolicy(fanoutv1.AckPolicy_ACK_POLICY_QUEUED)
	// One: at least one peer acknowledged it.
	One = AckPolicy(fanoutv1.AckPolicy_ACK_POLICY_ONE)
	// Quorum: more than half of the peers did.
	Quorum = AckPolicy(fanoutv1.AckPolicy_ACK_POLICY_QUORUM)
	// All: every peer did.
	All = AckPolicy(fanoutv1.AckPolicy_ACK_POLICY_ALL)
)

func (p AckPolicy) String() string { return fanoutv1.AckPolicy(p).String() }

// PutOption configures one Put or Delete.
type PutOption func(*putOptions)

type putOptions struct {
	ack        AckPolicy
	ackTimeout time.Duration
	version    uint64
	ttl        time.Duration
	attrs      map[string]string
}

// WithAck sets the ack policy (default Queued).
func WithAck(p AckPolicy) PutOption { return func(o *putOptions) { o.ack = p } }

// WithAckTimeout bounds the wait for acknowledgements (the sidecar's default is 5s,
// and never later than ctx's deadline).
func WithAckTimeout(d time.Duration) PutOption { return func(o *putOptions) { o.ackTimeout = d } }

// WithVersion sets the event's version instead of letting the sidecar assign one
// (rising per key; see docs/API.md for the schemes a sidecar takes).
func WithVersion(v uint64) PutOption { return func(o *putOptions) { o.version = v } }

// WithTTL bounds how long the event may wait in a peer's queue.
func WithTTL(d time.Duration) PutOption { return func(o *putOptions) { o.ttl = d } }

// WithAttributes sets the event's attributes.
func WithAttributes(a map[string]string) PutOption { return func(o *putOptions) { o.attrs = a } }

func collect(opts []PutOption) putOptions {
	var o putOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

func (o putOptions) event(key string, value []byte, deleted bool) *fanoutv1.Event {
	ev := &fanoutv1.Event{TaskId: key, Payload: value, Version: o.version, Deleted: deleted, Attributes: o.attrs}
	if o.ttl != 0 {
		ev.Ttl = durationpb.New(o.ttl)
	}
	return ev
}

func (o putOptions) request(events ...*fanoutv1.Event) *fanoutv1.SubmitRequest {
	req := &fanoutv1.SubmitRequest{Events: events, Ack: fanoutv1.AckPolicy(o.ack)}
	if o.ackTimeout != 0 {
		req.AckTimeout = durationpb.New(o.ackTimeout)
	}
	return req
}

// Put writes value under key through the sidecar (a Submit of one event) and returns
// what the sidecar did with it. The error is nil only if the event was accepted and
// the ack policy satisfied; otherwise it is a *ResultError (errors.Is ErrStale,
// ErrRefused or ErrNotSatisfied, with the Result) or an *Error of the call (errors.Is
// ErrInvalid, ErrUnavailable, ...; status.FromError gives its gRPC status).
func (c *Client) Put(ctx context.Context, key string, value []byte, opts ...PutOption) (Result, error) {
	return c.submit(ctx, "put", key, value, false, opts)
}

// Delete deletes key: a tombstone event, replicated and ordered by version like a
// Put. Results and errors as Put's.
func (c *Client) Delete(ctx context.Context, key string, opts ...PutOption) (Result, error) {
	return c.submit(ctx, "delete", key, nil, true, opts)
}

func (c *Client) submit(ctx context.Context, op, key string, value []byte, deleted bool, opts []PutOption) (Result, error) {
	o := collect(opts)
	if err := validKey(key); err != nil {
		return Result{}, &Error{Op: op, Key: key, Code: codeInvalid, Msg: err.Error()}
	}
	resp, err := c.api.Submit(ctx, o.request(o.event(key, value, deleted)))
	if err != nil {
		return Result{}, wrap(op, key, err)
	}
	r := results(resp)
	if len(r) != 1 {
		return Result{}, &Error{Op: op, Key: key, Code: codeInternal, Msg: fmt.Sprintf("the sidecar answered %d results for 1 event", len(r))}
	}
	return r[0], r[0].err(op, key)
}

// Entry is one key's latest state on the sidecar.
type Entry struct {
	Key   string
	Value []byte
	// Version orders the writes of a key (last-writer-wins on (Version, Origin)): the
	// same on every node.
	Version uint64
	// Origin is the node id of the sidecar the write was submitted to.
	Origin string
	// Revision is the sidecar's node-local revision of this change (rising per node,
	// not comparable between nodes or across a restart).
	Revision   uint64
	Attributes map[string]string
	// SubmittedAt is when the origin sidecar accepted the write (zero if unknown).
	SubmittedAt time.Time
	Deleted     bool
}

func entry(e *fanoutv1.Entry) Entry {
	return fromEvent(e.GetEvent(), e.GetOriginNode(), e.GetRevision(), asTime(e.GetSubmittedAt()))
}

// asTime is t as a time.Time, the zero time if the sidecar did not say.
func asTime(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

func fromEvent(ev *fanoutv1.Event, origin string, rev uint64, at time.Time) Entry {
	return Entry{
		Key: ev.GetTaskId(), Value: ev.GetPayload(), Version: ev.GetVersion(), Origin: origin,
		Revision: rev, Attributes: ev.GetAttributes(), SubmittedAt: at, Deleted: ev.GetDeleted(),
	}
}

// newer reports whether (version, origin) of a wins over b's: the sidecars' own rule.
func (e Entry) newer(b mark) bool {
	return e.Version > b.version || (e.Version == b.version && e.Origin > b.origin)
}

// Get reads keys from the sidecar's state table. Missing and deleted keys are left
// out of the map. At most 10000 keys per call.
func (c *Client) Get(ctx context.Context, keys ...string) (map[string]Entry, error) {
	resp, err := c.api.Get(ctx, &fanoutv1.GetRequest{TaskIds: keys})
	if err != nil {
		return nil, wrap("get", "", err)
	}
	m := make(map[string]Entry, len(resp.GetEntries()))
	for _, e := range resp.GetEntries() {
		m[e.GetEvent().GetTaskId()] = entry(e)
	}
	return m, nil
}

// Page is one page of a prefix listing.
type Page struct {
	Entries []Entry
	// Next continues the listing (List's pageToken); empty on the last page.
	Next string
	// Revision is the table's revision when the page was read.
	Revision uint64
}

// List reads one page of the keys under prefix ("" lists every key), in revision
// order (oldest change first). limit bounds the page (0: the sidecar's 1000, at most
// 10000); pageToken is "" for the first page, then the previous page's Next. A key
// changed while paging may appear again on a later page at its newer state; no key
// present throughout is missed.
func (c *Client) List(ctx context.Context, prefix string, limit int, pageToken string) (Page, error) {
	if limit < 0 {
		return Page{}, &Error{Op: "list", Code: codeInvalid, Msg: fmt.Sprintf("limit %d: want 0 (the sidecar's default) to 10000", limit)}
	}
	resp, err := c.api.Get(ctx, &fanoutv1.GetRequest{Prefix: prefix, Limit: uint32(limit), PageToken: pageToken})
	if err != nil {
		return Page{}, wrap("list", prefix, err)
	}
	p := Page{Entries: make([]Entry, 0, len(resp.GetEntries())), Next: resp.GetNextPageToken(), Revision: resp.GetRevision()}
	for _, e := range resp.GetEntries() {
		p.Entries = append(p.Entries, entry(e))
	}
	return p, nil
}

// ListAll reads every page under prefix into one map (a key that changed while
// paging is there at its latest state seen).
func (c *Client) ListAll(ctx context.Context, prefix string) (map[string]Entry, error) {
	m := make(map[string]Entry)
	token := ""
	for {
		p, err := c.List(ctx, prefix, 0, token)
		if err != nil {
			return nil, err
		}
		for _, e := range p.Entries {
			if old, ok := m[e.Key]; !ok || e.newer(mark{version: old.Version, origin: old.Origin}) {
				m[e.Key] = e
			}
		}
		if p.Next == "" {
			return m, nil
		}
		token = p.Next
	}
}

// Status is the sidecar's GetStatus.
func (c *Client) Status(ctx context.Context) (*fanoutv1.GetStatusResponse, error) {
	st, err := c.api.GetStatus(ctx, &fanoutv1.GetStatusRequest{})
	return st, wrap("status", "", err)
}
