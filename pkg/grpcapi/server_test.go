package grpcapi

import (
	"bytes"
	"context"
	"reflect"
	"slices"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/fanout"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// TestReplicateMalformedEventIsAnInvalidItem: the peer handler reads the request from
// its bytes, so one undecodable event costs its own item, not the whole call; a request
// that is not a message at all is INVALID_ARGUMENT. Sent over gRPC with raw bodies.
func TestReplicateMalformedEventIsAnInvalidItem(t *testing.T) {
	tn := startTestNode(t, testConfig("r"), nil)
	good, _ := proto.Marshal(&fanoutv1.Event{TaskId: "good", Version: 1})
	body := protowire.AppendString(protowire.AppendTag(nil, wire.ReplicateRequestOriginNode, protowire.BytesType), "x")
	body = protowire.AppendBytes(protowire.AppendTag(body, wire.ReplicateRequestEvents, protowire.BytesType), []byte{0x0a, 0x05, 'a'})
	body = protowire.AppendBytes(protowire.AppendTag(body, wire.ReplicateRequestEvents, protowire.BytesType), good)
	var resp fanoutv1.ReplicateResponse
	if err := tn.cc.Invoke(context.Background(), fanoutv1.PeerService_Replicate_FullMethodName, &frame.Frame{B: body}, &resp); err != nil {
		t.Fatal(err)
	}
	want := []fanoutv1.ItemStatus{fanoutv1.ItemStatus_ITEM_STATUS_INVALID, fanoutv1.ItemStatus_ITEM_STATUS_OK}
	if !slices.Equal(resp.Statuses, want) {
		t.Fatalf("statuses %v, want %v", resp.Statuses, want)
	}
	err := tn.cc.Invoke(context.Background(), fanoutv1.PeerService_Replicate_FullMethodName, &frame.Frame{B: []byte{0xff, 0xff}}, &resp)
	wantInvalid(t, err, "request")
}

// TestRegisterPeerServerLeavesTheGeneratedService: RegisterPeerServer registers a
// copy of PeerService's generated description with its own Replicate handler; the
// generated description, which any other server may register, stays as generated.
func TestRegisterPeerServerLeavesTheGeneratedService(t *testing.T) {
	handlers := func() map[string]uintptr {
		m := map[string]uintptr{}
		for _, md := range fanoutv1.PeerService_ServiceDesc.Methods {
			m[md.MethodName] = reflect.ValueOf(md.Handler).Pointer()
		}
		return m
	}
	before := handlers()
	srv := grpc.NewServer(frame.ServerOption())
	defer srv.Stop()
	n, err := fanout.New(testConfig("g"))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	RegisterPeerServer(srv, NewPeerServer(n))
	if after := handlers(); !reflect.DeepEqual(after, before) {
		t.Fatalf("generated PeerService handlers changed: %v, were %v", after, before)
	}
	for name, h := range before {
		if h == reflect.ValueOf(replicateHandler).Pointer() {
			t.Fatalf("the generated description's %s is the frame handler", name)
		}
	}
}

// TestSubmitFromBytes: the app listener reads a Submit from its bytes. The event is
// stored, replicated and delivered as the app sent it, with the version the node appends (an
// explicit version 0 on the wire and unknown fields included); a request that is not
// a message, or has an event protobuf refuses, is INVALID_ARGUMENT naming it, and
// nothing of it is applied; SubmitStream reads the same way. Sent over gRPC with raw
// bodies.
func TestSubmitFromBytes(t *testing.T) {
	nodes := cluster(t, []string{"s", "peer"})
	tn := nodes["s"]
	sub := subscribe(t, nodes["peer"], "") // the event as the peer received it
	unknown := protowire.AppendString(protowire.AppendTag(nil, 99, protowire.BytesType), "from a newer client")
	event := protowire.AppendString(protowire.AppendTag(nil, wire.EventTaskID, protowire.BytesType), "k")
	event = protowire.AppendVarint(protowire.AppendTag(event, wire.EventVersion, protowire.VarintType), 0)
	event = append(event, unknown...)
	body := protowire.AppendBytes(protowire.AppendTag(nil, wire.SubmitRequestEvents, protowire.BytesType), event)
	body = protowire.AppendVarint(protowire.AppendTag(body, wire.SubmitRequestRequestID, protowire.VarintType), 42)
	var resp fanoutv1.SubmitResponse
	if err := tn.cc.Invoke(context.Background(), fanoutv1.FanoutService_Submit_FullMethodName, &frame.Frame{B: body}, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.RequestId != 42 || len(resp.Versions) != 1 || resp.Versions[0] == 0 || !resp.Satisfied ||
		resp.Results[0].GetOutcome() != fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED || resp.Results[0].GetRevision() == 0 {
		t.Fatalf("response %v", &resp)
	}
	got := recv(t, sub)
	for got.GetEvent() == nil {
		got = recv(t, sub) // past the snapshot's end
	}
	if got.Event.Version != resp.Versions[0] || !bytes.Equal(got.Event.ProtoReflect().GetUnknown(), unknown) {
		t.Fatalf("delivered %v (unknown fields %q), want version %d and the app's unknown field", got.Event, got.Event.ProtoReflect().GetUnknown(), resp.Versions[0])
	}

	keys := tn.node.Status().GetState().GetKeys()
	err := tn.cc.Invoke(context.Background(), fanoutv1.FanoutService_Submit_FullMethodName, &frame.Frame{B: []byte{0xff, 0xff}}, &resp)
	wantInvalid(t, err, "request: not a valid fanout.v1.SubmitRequest")
	good, _ := proto.Marshal(&fanoutv1.Event{TaskId: "good"})
	body = protowire.AppendBytes(protowire.AppendTag(nil, wire.SubmitRequestEvents, protowire.BytesType), good)
	body = protowire.AppendBytes(protowire.AppendTag(body, wire.SubmitRequestEvents, protowire.BytesType), []byte{0x0a, 0x01, 0xff}) // task_id not UTF-8
	err = tn.cc.Invoke(context.Background(), fanoutv1.FanoutService_Submit_FullMethodName, &frame.Frame{B: body}, &resp)
	wantInvalid(t, err, "events[1]: not a valid fanout.v1.Event")
	if k := tn.node.Status().GetState().GetKeys(); k != keys {
		t.Fatalf("%d keys after refused requests, were %d", k, keys)
	}

	desc := &grpc.StreamDesc{StreamName: "SubmitStream", ServerStreams: true, ClientStreams: true}
	stream, err := tn.cc.NewStream(context.Background(), desc, fanoutv1.FanoutService_SubmitStream_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(&frame.Frame{B: body}); err != nil {
		t.Fatal(err)
	}
	wantInvalid(t, stream.RecvMsg(&resp), "events[1]: not a valid fanout.v1.Event")
}

// TestRegisterFanoutServerLeavesTheGeneratedService: as for RegisterPeerServer, the
// generated FanoutService description stays as generated.
func TestRegisterFanoutServerLeavesTheGeneratedService(t *testing.T) {
	before := fanoutv1.FanoutService_ServiceDesc.Methods[0].Handler
	srv := grpc.NewServer(frame.ServerOption())
	defer srv.Stop()
	n, err := fanout.New(testConfig("g"))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	RegisterFanoutServer(srv, NewFanoutServer(n))
	for _, md := range fanoutv1.FanoutService_ServiceDesc.Methods {
		if reflect.ValueOf(md.Handler).Pointer() == reflect.ValueOf(submitHandler).Pointer() {
			t.Fatalf("the generated description's %s is the frame handler", md.MethodName)
		}
	}
	if reflect.ValueOf(fanoutv1.FanoutService_ServiceDesc.Methods[0].Handler).Pointer() != reflect.ValueOf(before).Pointer() {
		t.Fatal("the generated description changed")
	}
}
