package main

import (
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/mesh"
	"github.com/spf13/pflag"
)

// addLimitFlags registers serve's byte bounds (issue 12, item 4: every byte bounded).
// The defaults are the libraries' (fanout.DefaultLimits, batcher.DefaultConfig), which
// give their reasons; docs/SECURITY.md ("Bytes") says what each bounds and how a
// message over a bound is refused.
func addLimitFlags(fs *pflag.FlagSet, c *fanout.Config, m *mesh.Config) {
	fs.IntVar(&c.Limits.MaxRequestBytes, "max-request-bytes", c.Limits.MaxRequestBytes,
		"largest request on the app listener, encoded (a Submit of 10,000 events of 1.6 KiB, or 15 at --max-event-bytes); "+
			"gRPC refuses a bigger one with RESOURCE_EXHAUSTED before decoding it. At least one event at --max-event-bytes")
	fs.IntVar(&m.Batcher.MaxBatchBytes, "max-batch-bytes", m.Batcher.MaxBatchBytes,
		"bytes of events per Replicate call (250 events of up to 16 KiB fit; bigger events batch by bytes, and one bigger than this goes alone); "+
			"the peer listener takes this plus one event at --max-event-bytes, and refuses more before decoding it")
	fs.IntVar(&m.Batcher.MaxBufferBytes, "max-buffer-bytes", m.Batcher.MaxBufferBytes,
		"bytes of events pending per peer before the oldest is evicted, beside --max-buffer's count (10,000 events of 6.5 KiB; "+
			"a dead peer costs at most this)")
	fs.IntVar(&m.MaxPendingBytes, "max-pending-bytes", 0,
		"bytes of events pending for all peers together, each event counted once per peer plus ~200 bytes of bookkeeping; at the bound "+
			"the peers over their share lose their oldest events (anti-entropy repairs them), and peers that are down keep to half of it "+
			"(0: a quarter of the memory limit (--memory-limit, GOMEMLIMIT or the container's), or 256 MiB without one)")
}
