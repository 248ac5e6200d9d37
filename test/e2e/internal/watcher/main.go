// Command watcher is a Subscribe client in a process of its own, for the end-to-end
// tests that freeze an app with SIGSTOP: the test freezes this process, not itself.
// It subscribes to one sidecar and prints one line per entry on stdout, flushed after
// every response:
//
//	E <revision> <version> <origin> <deleted 0|1> <task_id>   an entry
//	S                                                        snapshot_complete
//	X <error>                                                the stream ended (exit 1)
//
// Its HTTP/2 flow-control windows stay at 64 KiB, the protocol's default and what
// most non-Go clients use, instead of grpc-go's windows that grow with the measured
// bandwidth up to 16 MiB: a frozen watcher then stops taking data after about
// 64 KiB, so the node has to hold, not buffer, what it owes it.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// window is the fixed HTTP/2 window of the stream and of the connection. grpc-go
// turns off its bandwidth-driven window growth when either is set.
const window = 64 << 10

func main() {
	addr := flag.String("addr", "", "the sidecar's app address")
	prefix := flag.String("prefix", "", "task_id_prefix")
	snapshot := flag.Bool("snapshot", false, "list the current state first")
	maxBatch := flag.Uint("max-batch", 0, "max_batch")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	out := bufio.NewWriter(os.Stdout)
	if err := run(ctx, out, *addr, &fanoutv1.SubscribeRequest{TaskIdPrefix: *prefix, Snapshot: *snapshot, MaxBatch: uint32(*maxBatch)}); err != nil {
		fmt.Fprintf(out, "X\t%v\n", err)
		out.Flush()
		os.Exit(1)
	}
}

func run(ctx context.Context, out *bufio.Writer, addr string, req *fanoutv1.SubscribeRequest) error {
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(window),
		grpc.WithInitialConnWindowSize(window))
	if err != nil {
		return err
	}
	defer cc.Close()
	stream, err := fanoutv1.NewFanoutServiceClient(cc).Subscribe(ctx, req)
	if err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil // told to stop
			}
			return err
		}
		if resp.GetSnapshotComplete() {
			fmt.Fprintln(out, "S")
		}
		if resp.GetEvent() != nil {
			printEntry(out, resp.GetRevision(), resp.GetEvent(), resp.GetOriginNode())
		}
		for _, e := range resp.GetBatch() {
			printEntry(out, e.GetRevision(), e.GetEvent(), e.GetOriginNode())
		}
		if err := out.Flush(); err != nil {
			return err
		}
	}
}

func printEntry(out *bufio.Writer, revision uint64, ev *fanoutv1.Event, origin string) {
	deleted := 0
	if ev.GetDeleted() {
		deleted = 1
	}
	fmt.Fprintf(out, "E\t%d\t%d\t%s\t%d\t%s\n", revision, ev.GetVersion(), origin, deleted, ev.GetTaskId())
}
