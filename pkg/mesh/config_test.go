package mesh

import (
	"testing"

	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/fanout"
)

// defaultConfig is DefaultConfig with the node's default limits, as the sidecar
// sets them.
func defaultConfig() Config {
	c, l := DefaultConfig(), fanout.DefaultLimits()
	c.EventBytes, c.MaxEventBytes, c.MaxTaskIDBytes = l.EventBytes(), l.MaxEventBytes, l.MaxTaskIDBytes
	return c
}

// TestPeerMessageBytes: the peer listener takes a full batch plus one maximal event,
// and an anti-entropy message plus one.
func TestPeerMessageBytes(t *testing.T) {
	cfg := defaultConfig()
	item := wire.ReplicateItemBytes(cfg.EventBytes)
	if got, want := cfg.PeerMessageBytes(), cfg.Batcher.MaxBatchBytes+item+wire.MessageOverhead(); got != want {
		t.Errorf("PeerMessageBytes = %d, want %d", got, want)
	}
	cfg.SyncMessageBytes = 8 << 20
	if got, want := cfg.PeerMessageBytes(), 8<<20+item+wire.MessageOverhead(); got != want {
		t.Errorf("with an 8 MiB sync message: %d, want %d", got, want)
	}
	if def := defaultConfig(); def.PeerMessageBytes() > 6<<20 {
		t.Errorf("default PeerMessageBytes = %d, want about 5 MiB", def.PeerMessageBytes())
	}
}
