package peers

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

func TestFrameCodecCopiesTheFrame(t *testing.T) {
	codec := encoding.GetCodecV2(grpcproto.Name)
	if _, ok := codec.(frameCodec); !ok {
		t.Fatalf("the registered proto codec is %T, not the frame codec", codec)
	}
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

func TestConsumeTagRefusesFieldNumbersProtobufRefuses(t *testing.T) {
	ok := protowire.AppendTag(nil, protowire.MaxValidNumber, protowire.VarintType)
	if _, _, n := ConsumeTag(ok); n != len(ok) {
		t.Fatalf("largest valid field number refused: n = %d", n)
	}
	bad := protowire.AppendVarint(nil, uint64(protowire.MaxValidNumber+1)<<3)
	if _, _, n := ConsumeTag(bad); n >= 0 {
		t.Fatal("field number above MaxValidNumber accepted")
	}
}
