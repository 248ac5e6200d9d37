// Package grpcmetrics is the Prometheus metrics of the sidecar's gRPC servers and
// connections: the metrics of go-grpc-middleware's providers/prometheus, with the
// same names, help, labels and buckets (TestSameAsTheLibrary compares the two on the
// same calls), through the library's own interceptors (interceptors.Reportable).
//
// The difference is the cost of a stream message. The library looks a message's
// counter up by its labels (CounterVec.WithLabelValues: hashing, a lock, a map) for
// every message of every stream; a ReplicateStream or SubmitStream carries hundreds
// of thousands a second, and the lookups were 6-8 % of a node's CPU at one event per
// send (docs/BENCHMARKS.md). Here a call looks each message counter up once, at its
// first message, and every later message is one atomic add; and a stream reads the
// clock at its start and its end only, not around each message as the library's
// stream interceptors do (two reads a message, for a duration its Prometheus
// reporter does not use).
package grpcmetrics

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Metrics counts the calls of one side, server or client: started, handled (by
// code), stream messages received and sent, and a histogram of handling time. It is
// a prometheus.Collector.
type Metrics struct {
	started  *prometheus.CounterVec   // grpc_type, grpc_service, grpc_method
	handled  *prometheus.CounterVec   // ... and grpc_code
	received *prometheus.CounterVec   // grpc_type, grpc_service, grpc_method
	sent     *prometheus.CounterVec   // grpc_type, grpc_service, grpc_method
	handling *prometheus.HistogramVec // grpc_type, grpc_service, grpc_method
}

var (
	callLabels = []string{"grpc_type", "grpc_service", "grpc_method"}
	codeLabels = []string{"grpc_type", "grpc_service", "grpc_method", "grpc_code"}
)

// side is what differs between a server's metrics and a client's: the names' prefix
// and the help texts, word for word the library's.
type side struct {
	prefix                                    string
	started, handled, received, sent, latency string
}

var (
	serverSide = side{prefix: "grpc_server_",
		started:  "Total number of RPCs started on the server.",
		handled:  "Total number of RPCs completed on the server, regardless of success or failure.",
		received: "Total number of RPC stream messages received on the server.",
		sent:     "Total number of gRPC stream messages sent by the server.",
		latency:  "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server."}
	clientSide = side{prefix: "grpc_client_",
		started:  "Total number of RPCs started on the client.",
		handled:  "Total number of RPCs completed by the client, regardless of success or failure.",
		received: "Total number of RPC stream messages received by the client.",
		sent:     "Total number of gRPC stream messages sent by the client.",
		latency:  "Histogram of response latency (seconds) of the gRPC until it is finished by the application."}
)

// NewServer returns the metrics of a server (grpc_server_*), with the handling-time
// histogram's buckets.
func NewServer(buckets []float64) *Metrics { return newMetrics(serverSide, buckets) }

// NewClient returns the metrics of a client (grpc_client_*), with the handling-time
// histogram's buckets.
func NewClient(buckets []float64) *Metrics { return newMetrics(clientSide, buckets) }

func newMetrics(s side, buckets []float64) *Metrics {
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: s.prefix + name, Help: help}, labels)
	}
	return &Metrics{
		started:  counter("started_total", s.started, callLabels),
		handled:  counter("handled_total", s.handled, codeLabels),
		received: counter("msg_received_total", s.received, callLabels),
		sent:     counter("msg_sent_total", s.sent, callLabels),
		handling: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: s.prefix + "handling_seconds",
			Help: s.latency, Buckets: buckets}, callLabels),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.started.Describe(ch)
	m.handled.Describe(ch)
	m.received.Describe(ch)
	m.sent.Describe(ch)
	m.handling.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.started.Collect(ch)
	m.handled.Collect(ch)
	m.received.Collect(ch)
	m.sent.Collect(ch)
	m.handling.Collect(ch)
}

// UnaryServerInterceptor counts a server's unary calls.
func (m *Metrics) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return interceptors.UnaryServerInterceptor(m)
}

// StreamServerInterceptor counts a server's streams and their messages. It is the
// library's stream interceptor without its two clock reads per message (it times
// each message for a reporter that does not use the time): a stream reads the
// clock at its start and end only.
func (m *Metrics) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		c := m.start(interceptors.NewServerCallMeta(info.FullMethod, info, nil))
		err := handler(srv, &serverStream{ServerStream: ss, c: c})
		c.PostCall(err, time.Since(start))
		return err
	}
}

// serverStream counts a server stream's messages.
type serverStream struct {
	grpc.ServerStream
	c *call
}

func (s *serverStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	s.c.PostMsgSend(m, err, 0)
	return err
}

func (s *serverStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	s.c.PostMsgReceive(m, err, 0)
	return err
}

// UnaryClientInterceptor counts a connection's unary calls.
func (m *Metrics) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return interceptors.UnaryClientInterceptor(m)
}

// StreamClientInterceptor counts a connection's streams and their messages, like
// the library's (a stream ends when a receive fails; io.EOF after a server stream is
// its success), without a clock read per message.
func (m *Metrics) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		start := time.Now()
		c := m.start(interceptors.NewClientCallMeta(method, desc, nil))
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			c.PostCall(err, time.Since(start))
			return nil, err
		}
		return &clientStream{ClientStream: cs, c: c, start: start, serverStreams: desc.ServerStreams}, nil
	}
}

// clientStream counts a client stream's messages and reports its end.
type clientStream struct {
	grpc.ClientStream
	c             *call
	start         time.Time
	serverStreams bool
}

func (s *clientStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	s.c.PostMsgSend(m, err, 0)
	return err
}

func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.c.PostMsgReceive(m, err, 0)
	switch {
	case !s.serverStreams:
		s.c.PostCall(err, time.Since(s.start))
	case errors.Is(err, io.EOF):
		s.c.PostCall(nil, time.Since(s.start))
	case err != nil:
		s.c.PostCall(err, time.Since(s.start))
	}
	return err
}

// InitializeMetrics creates every series of a server's methods at zero, as the
// library's does, so that they show before the first call.
func (m *Metrics) InitializeMetrics(s interface {
	GetServiceInfo() map[string]grpc.ServiceInfo
}) {
	for service, info := range s.GetServiceInfo() {
		for _, mi := range info.Methods {
			typ := string(typeOf(mi))
			m.started.WithLabelValues(typ, service, mi.Name)
			m.received.WithLabelValues(typ, service, mi.Name)
			m.sent.WithLabelValues(typ, service, mi.Name)
			m.handling.WithLabelValues(typ, service, mi.Name)
			for _, code := range interceptors.AllCodes {
				m.handled.WithLabelValues(typ, service, mi.Name, code.String())
			}
		}
	}
}

func typeOf(mi grpc.MethodInfo) interceptors.GRPCType {
	switch {
	case !mi.IsClientStream && !mi.IsServerStream:
		return interceptors.Unary
	case mi.IsClientStream && !mi.IsServerStream:
		return interceptors.ClientStream
	case !mi.IsClientStream && mi.IsServerStream:
		return interceptors.ServerStream
	}
	return interceptors.BidiStream
}

// ServerReporter implements interceptors.ServerReportable.
func (m *Metrics) ServerReporter(ctx context.Context, meta interceptors.CallMeta) (interceptors.Reporter, context.Context) {
	return m.start(meta), ctx
}

// ClientReporter implements interceptors.ClientReportable.
func (m *Metrics) ClientReporter(ctx context.Context, meta interceptors.CallMeta) (interceptors.Reporter, context.Context) {
	return m.start(meta), ctx
}

// start counts a call as started.
func (m *Metrics) start(meta interceptors.CallMeta) *call {
	m.started.WithLabelValues(string(meta.Typ), meta.Service, meta.Method).Inc()
	return &call{m: m, meta: meta}
}

// call reports one call's messages and end. Its message counters are looked up at
// its first message of each direction (so a call that sends none creates no series,
// as with the library) and kept. gRPC sends (and receives) one message at a time on
// a stream, so each is written by one goroutine at a time.
type call struct {
	m              *Metrics
	meta           interceptors.CallMeta
	received, sent prometheus.Counter
}

func (c *call) PostCall(err error, d time.Duration) {
	s, ok := status.FromError(err)
	if !ok { // as gRPC itself does: a context error is its status
		s = status.FromContextError(err)
	}
	typ := string(c.meta.Typ)
	c.m.handled.WithLabelValues(typ, c.meta.Service, c.meta.Method, s.Code().String()).Inc()
	c.m.handling.WithLabelValues(typ, c.meta.Service, c.meta.Method).Observe(d.Seconds())
}

func (c *call) PostMsgSend(_ any, err error, _ time.Duration) {
	if err == nil {
		c.count(&c.sent, c.m.sent)
	}
}

func (c *call) PostMsgReceive(_ any, err error, _ time.Duration) {
	if err == nil {
		c.count(&c.received, c.m.received)
	}
}

// count adds a message to *ctr, looking it up in vec by the call's labels the first
// time.
func (c *call) count(ctr *prometheus.Counter, vec *prometheus.CounterVec) {
	if *ctr == nil {
		*ctr = vec.WithLabelValues(string(c.meta.Typ), c.meta.Service, c.meta.Method)
	}
	(*ctr).Inc()
}
