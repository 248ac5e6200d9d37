package grpcmetrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// testService answers every kind of call: unary (an error when the request asks for
// a response of size 404), server stream, client stream and bidi (echo).
type testService struct {
	testpb.UnimplementedTestServiceServer
}

func (testService) UnaryCall(_ context.Context, r *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if r.GetResponseSize() == 404 {
		return nil, status.Error(codes.NotFound, "asked for")
	}
	return &testpb.SimpleResponse{}, nil
}

func (testService) StreamingOutputCall(r *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	for range r.GetResponseParameters() {
		if err := s.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return nil
}

func (testService) StreamingInputCall(s grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	for {
		if _, err := s.Recv(); errors.Is(err, io.EOF) {
			return s.SendAndClose(&testpb.StreamingInputCallResponse{})
		} else if err != nil {
			return err
		}
	}
}

func (testService) FullDuplexCall(s grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	for {
		if _, err := s.Recv(); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if err := s.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
}

// TestSameAsTheLibrary runs the same calls of every kind (unary, failed unary, server,
// client and bidi streams) through go-grpc-middleware's providers/prometheus and this
// package at once, on one server and one connection, and compares what the two
// registries gather: every family's name, help, type and series, every counter's
// value, every histogram's bucket bounds and count (not its sum, nor which bucket a call
// fell in: the two time the same call a little apart). Before any call too, after InitializeMetrics.
func TestSameAsTheLibrary(t *testing.T) {
	buckets := []float64{0.001, 0.01, 0.1, 1}
	libSrv := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(buckets)))
	libCli := grpcprom.NewClientMetrics(grpcprom.WithClientHandlingTimeHistogram(grpcprom.WithHistogramBuckets(buckets)))
	ourSrv, ourCli := NewServer(buckets), NewClient(buckets)
	lib, ours := prometheus.NewPedanticRegistry(), prometheus.NewPedanticRegistry()
	lib.MustRegister(libSrv, libCli)
	ours.MustRegister(ourSrv, ourCli)

	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(libSrv.UnaryServerInterceptor(), ourSrv.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(libSrv.StreamServerInterceptor(), ourSrv.StreamServerInterceptor()))
	testpb.RegisterTestServiceServer(srv, testService{})
	libSrv.InitializeMetrics(srv)
	ourSrv.InitializeMetrics(srv)
	compare(t, "after InitializeMetrics", lib, ours)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(libCli.UnaryClientInterceptor(), ourCli.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(libCli.StreamClientInterceptor(), ourCli.StreamClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := testpb.NewTestServiceClient(cc)
	ctx := context.Background()
	for range 3 {
		if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 404}); status.Code(err) != codes.NotFound {
		t.Fatalf("want NotFound, got %v", err)
	}
	if _, err := c.EmptyCall(ctx, &testpb.Empty{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("want Unimplemented, got %v", err)
	}
	out, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: make([]*testpb.ResponseParameters, 4)})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := out.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	in, err := c.StreamingInputCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := in.Send(&testpb.StreamingInputCallRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	bidi, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := bidi.Send(&testpb.StreamingOutputCallRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := bidi.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if err := bidi.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := bidi.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("want the stream's end, got %v", err)
	}
	srv.GracefulStop() // every server-side PostCall has run
	compare(t, "after the calls", lib, ours)
}

// compare fails unless the two registries gather the same families and series.
func compare(t *testing.T, when string, lib, ours prometheus.Gatherer) {
	t.Helper()
	a, b := gather(t, lib), gather(t, ours)
	if !slices.Equal(a, b) {
		t.Fatalf("%s:\nlibrary:\n%s\nthis package:\n%s", when, strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	if len(a) == 0 {
		t.Fatalf("%s: nothing gathered", when)
	}
}

// gather renders every series as one line: family, help, type, labels, and the
// counter's value or the histogram's count and buckets' bounds.
func gather(t *testing.T, g prometheus.Gatherer) []string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
			}
			line := fmt.Sprintf("%s %q %s {%s}", mf.GetName(), mf.GetHelp(), mf.GetType(), strings.Join(labels, ","))
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				line += fmt.Sprintf(" %g", m.GetCounter().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				line += fmt.Sprintf(" count %d", h.GetSampleCount())
				for _, b := range h.GetBucket() {
					line += fmt.Sprintf(" le%g", b.GetUpperBound()) // not the counts: the two time a call apart
				}
			}
			out = append(out, line)
		}
	}
	slices.Sort(out)
	return out
}

// nopStream is a server stream whose messages go nowhere.
type nopStream struct{ grpc.ServerStream }

func (nopStream) Context() context.Context { return context.Background() }
func (nopStream) SendMsg(any) error        { return nil }
func (nopStream) RecvMsg(any) error        { return nil }

// BenchmarkStreamMessage measures what the metrics add to one stream message sent and
// one received: the stream interceptor of go-grpc-middleware's providers/prometheus
// against this package's, around a stream that costs nothing.
func BenchmarkStreamMessage(b *testing.B) {
	buckets := []float64{0.001, 0.01, 0.1, 1}
	for _, side := range []struct {
		name string
		icpt grpc.StreamServerInterceptor
	}{
		{"library", grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(buckets))).StreamServerInterceptor()},
		{"grpcmetrics", NewServer(buckets).StreamServerInterceptor()},
	} {
		b.Run(side.name, func(b *testing.B) {
			info := &grpc.StreamServerInfo{FullMethod: "/fanout.v1.PeerService/ReplicateStream", IsClientStream: true, IsServerStream: true}
			b.ReportAllocs()
			err := side.icpt(nil, nopStream{}, info, func(_ any, s grpc.ServerStream) error {
				b.ResetTimer()
				for range b.N {
					if err := s.RecvMsg(nil); err != nil {
						return err
					}
					if err := s.SendMsg(nil); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}
