package main

import (
	"github.com/fanout/fanout/pkg/sidecar"
	"github.com/spf13/pflag"
)

// addTransportFlags registers the flags that pick the node's transport and connect
// the JetStream one (pkg/sidecar assembles it).
func addTransportFlags(fs *pflag.FlagSet, c *sidecar.Config) {
	fs.StringVar(&c.Transport, "transport", c.Transport, "how events reach the other sidecars: mesh (every sidecar sends to every peer, no broker: "+
		"the default, right for up to a few tens of pods) or jetstream (a NATS JetStream stream carries them: no peers, no peer listener; "+
		"--peers, --peers-dns and the peer TLS flags are refused)")
	fs.StringSliceVar(&c.NATS.URLs, "nats-url", c.NATS.URLs, "with --transport=jetstream: the NATS servers, comma-separated or repeated "+
		"(e.g. nats://nats:4222); one reachable is enough, the client learns the cluster's others from it and reconnects forever")
	fs.StringVar(&c.JetStream.Bucket, "nats-bucket", c.JetStream.Bucket, "with --transport=jetstream: the KV bucket (stream KV_<bucket>, "+
		"subjects $KV.<bucket>.<key>; the nats kv tools read it); sidecars that share a bucket share their state ([A-Za-z0-9_-], fanout: one state per cluster of sidecars)")
	fs.IntVar(&c.JetStream.Replicas, "nats-replicas", c.JetStream.Replicas, "with --transport=jetstream: the stream's replicas when this sidecar creates it "+
		"(1..5; 3: a Raft majority survives one NATS server's loss, so an acknowledged event outlives it; an existing stream keeps its own)")
}
