package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/fanout/fanout/pkg/antientropy"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/fanout/fanout/pkg/fanout"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestToStatus: each of the node's errors, wrapped as the node returns them, gets
// its code and keeps its message. The node's tests check which error a call returns;
// this checks what the app or the peer then sees.
func TestToStatus(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("context: %w", err) }
	for _, c := range []struct {
		name string
		err  error
		code codes.Code
	}{
		{"nil", nil, codes.OK},
		{"invalid", &fanout.InvalidError{Field: "events[3].task_id", Reason: "empty"}, codes.InvalidArgument},
		{"draining", fanout.ErrDraining, codes.Unavailable},
		{"shutting down", fanout.ErrShuttingDown, codes.Unavailable},
		{"closed", fanout.ErrClosed, codes.Unavailable},
		{"batcher stopped", wrap(batcher.ErrStopped), codes.Unavailable},
		{"not durable", wrap(fanout.ErrNotDurable), codes.Unavailable},
		{"anti-entropy invalid", wrap(antientropy.ErrInvalid), codes.InvalidArgument},
		{"anti-entropy busy", wrap(antientropy.ErrBusy), codes.ResourceExhausted},
		{"tree version", wrap(antientropy.ErrTreeVersion), codes.FailedPrecondition},
		{"unauthenticated", wrap(fanout.ErrUnauthenticated), codes.Unauthenticated},
		{"forbidden", wrap(fanout.ErrForbidden), codes.PermissionDenied},
		{"compacted", wrap(fanout.ErrCompacted), codes.OutOfRange},
		{"canceled", wrap(context.Canceled), codes.Canceled},
		{"deadline", wrap(context.DeadlineExceeded), codes.DeadlineExceeded},
		{"anything else", errors.New("disk on fire"), codes.Internal},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := toStatus(c.err)
			if status.Code(got) != c.code {
				t.Fatalf("toStatus(%v) = %v, want %s", c.err, got, c.code)
			}
			if c.err != nil && c.code != codes.Canceled && c.code != codes.DeadlineExceeded && status.Convert(got).Message() != c.err.Error() {
				t.Fatalf("toStatus(%v) says %q, want the error's message", c.err, status.Convert(got).Message())
			}
		})
	}
}
