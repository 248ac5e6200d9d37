package main

import (
	"errors"
	"fmt"

	"github.com/fanout/fanout/pkg/sidecar"
	"github.com/spf13/pflag"
)

// meshOnlyFlags are the serve flags that configure only the mesh transport: its peer
// listener, who the peers are, the per-peer batchers and breakers, the replicate
// calls and anti-entropy. With --transport=jetstream nothing reads them (the stream
// carries the events), so one given there is a mistake to report, not to ignore.
// TestMeshOnlyFlags checks each is a serve flag, and that every flag of the peers',
// batching and failures help groups is here or in meshAndJetStream.
func meshOnlyFlags() []string {
	return []string{
		"peer-addr",
		"peers", "peers-dns", "peers-refresh", "dns-server", "max-peers", "peer-removal-grace",
		"max-buffer", "max-buffer-bytes", "max-pending-bytes", "max-batch", "max-batch-bytes", "max-batching-delay",
		"batch-idle-flush", "workers", "replicate-stream", "answer-hold",
		"replicate-timeout", "congestion-retry-delay", "network-failure-retry-delay",
		"breaker-failures", "breaker-open", "breaker-probes",
		"anti-entropy-interval", "sync-timeout",
		"peer-tls-cert", "peer-tls-key", "peer-tls-ca",
	}
}

// refuseMeshFlags returns, with --transport=jetstream, an error naming every
// mesh-only flag that was set (on the command line or by its FANOUT_* variable:
// bindEnv sets the flag, so both count as Changed). With the mesh it returns nil.
func refuseMeshFlags(fs *pflag.FlagSet, transport string) error {
	if transport != sidecar.TransportJetStream {
		return nil
	}
	var errs []error
	for _, name := range meshOnlyFlags() {
		if fs.Changed(name) {
			errs = append(errs, fmt.Errorf("--%s: not used with --transport=jetstream (the stream carries the events): remove it "+
				"(or its %s; only the mesh uses it)", name, envName(name)))
		}
	}
	return errors.Join(errs...)
}
