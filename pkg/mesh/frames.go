package mesh

import (
	"sync"

	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/wire"
)

// framePool recycles the frames the links build their Replicate requests in.
var framePool = sync.Pool{New: func() any { return new(frame.Frame) }}

// outItemBytes is what o adds to a ReplicateRequest: the batcher's Config.Size, so
// that a batch of MaxBatchBytes is a request of at most that plus
// wire.MessageOverhead(), and pending's bytes are what would be sent.
func outItemBytes(o wire.Outgoing) int { return wire.ReplicateItemBytes(len(o.Raw)) }
