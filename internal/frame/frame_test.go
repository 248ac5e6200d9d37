package frame

import (
	"bytes"
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/test/bufconn"
)

func TestFrameCodecIsNotProcessWide(t *testing.T) {
	if c := encoding.GetCodecV2(grpcproto.Name); isFrameCodec(c) {
		t.Fatalf("the registered proto codec is the frame codec (%T): it must be an option", c)
	}
}

func isFrameCodec(c encoding.CodecV2) bool {
	_, ok := c.(frameCodec)
	return ok
}

// TestFrameOptions sends a frame to a server and back: it passes through where both
// ends have the option, and gRPC's own codec refuses it where the server has not.
func TestFrameOptions(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server []grpc.ServerOption
		ok     bool
	}{
		{"both ends", []grpc.ServerOption{ServerOption()}, true},
		{"ServerOptions", ServerOptions(), true},
		{"server without", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			echo := func(_ any, stream grpc.ServerStream) error {
				var f Frame
				if err := stream.RecvMsg(&f); err != nil {
					return err
				}
				return stream.SendMsg(&Frame{B: append(f.B, 4)})
			}
			lis := bufconn.Listen(1 << 16)
			srv := grpc.NewServer(append(tc.server, grpc.UnknownServiceHandler(echo))...)
			served := make(chan struct{})
			go func() { defer close(served); srv.Serve(lis) }()
			defer func() { srv.Stop(); <-served }()
			cc, err := grpc.NewClient("passthrough:///bufnet",
				grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
				grpc.WithTransportCredentials(insecure.NewCredentials()), DialOption())
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			var out Frame
			err = cc.Invoke(context.Background(), "/test.Echo/Echo", &Frame{B: []byte{1, 2, 3}}, &out)
			if tc.ok && (err != nil || !bytes.Equal(out.B, []byte{1, 2, 3, 4})) {
				t.Fatalf("echo: %v, %v; want [1 2 3 4]", out.B, err)
			}
			if !tc.ok && err == nil {
				t.Fatalf("a server without the frame codec answered %v", out.B)
			}
		})
	}
}

func TestFrameCodecCopiesTheFrame(t *testing.T) {
	buf := []byte{1, 2, 3}
	var f Frame
	if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(buf)}, &f); err != nil {
		t.Fatal(err)
	}
	buf[0] = 9 // gRPC reuses its buffer once Unmarshal returns
	if !bytes.Equal(f.B, []byte{1, 2, 3}) {
		t.Fatalf("frame %v aliases gRPC's buffer", f.B)
	}
	out, err := codec.Marshal(&f)
	if err != nil {
		t.Fatal(err)
	}
	f.B[0] = 7 // the caller may reuse its buffer once SendMsg returns
	if got := out.Materialize(); !bytes.Equal(got, []byte{1, 2, 3}) {
		t.Fatalf("marshalled frame %v aliases the caller's buffer", got)
	}
	if _, err := codec.Marshal(struct{}{}); err == nil {
		t.Fatal("marshalling something neither a frame nor a protobuf message was accepted")
	}
}

// appended is an Appender: a one-byte head, then its bytes.
type appended struct{ b []byte }

func (a *appended) EncodedSize() int              { return 1 + len(a.b) }
func (a *appended) AppendEncoded(b []byte) []byte { return append(append(b, 0x2a), a.b...) }

func TestFrameCodecWritesAnAppender(t *testing.T) {
	a := &appended{b: []byte{1, 2, 3}}
	out, err := codec.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	a.b[0] = 9 // the caller may reuse its buffer once SendMsg returns
	if got := out.Materialize(); !bytes.Equal(got, []byte{0x2a, 1, 2, 3}) {
		t.Fatalf("marshalled appender %v, want [42 1 2 3]", got)
	}
}
