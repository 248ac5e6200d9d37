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
		"the mesh's own flags are refused: --peer-addr, the peers', batching and failures flags, --anti-entropy-interval, --sync-timeout and the peer TLS flags)")
	fs.StringSliceVar(&c.NATS.URLs, "nats-url", c.NATS.URLs, "with --transport=jetstream: the NATS servers, comma-separated or repeated "+
		"(e.g. nats://nats:4222); one reachable is enough, the client learns the cluster's others from it and reconnects forever")
	fs.StringVar(&c.NATS.NKeyFile, "nats-nkey", c.NATS.NKeyFile, "with --transport=jetstream: file holding the NATS user's NKey seed (SU...), "+
		"for a server whose authorization lists that user's public key (empty: no NKey)")
	fs.StringVar(&c.NATS.CredsFile, "nats-creds", c.NATS.CredsFile, "with --transport=jetstream: NATS credentials file (the user's JWT and NKey seed, "+
		"as nsc generate creds writes it) for a server in operator (JWT) mode; read again at every reconnect, so a rotated file is picked up "+
		"(empty: none; not with --nats-nkey)")
	fs.StringVar(&c.NATS.TLS.CA, "nats-tls-ca", c.NATS.TLS.CA, "with --transport=jetstream: PEM CA bundle the NATS servers' certificates must chain to "+
		"(empty: the system's roots, for a tls:// URL or a server that requires TLS)")
	fs.StringVar(&c.NATS.TLS.Cert, "nats-tls-cert", c.NATS.TLS.Cert, "with --transport=jetstream: PEM client certificate for NATS servers that verify clients "+
		"(with --nats-tls-key; empty: none)")
	fs.StringVar(&c.NATS.TLS.Key, "nats-tls-key", c.NATS.TLS.Key, "with --transport=jetstream: PEM private key of --nats-tls-cert")
	fs.StringVar(&c.JetStream.Bucket, "nats-bucket", c.JetStream.Bucket, "with --transport=jetstream: the KV bucket (stream KV_<bucket>, "+
		"subjects $KV.<bucket>.<key>; the nats kv tools read it); sidecars that share a bucket share their state ([A-Za-z0-9_-], fanout: one state per cluster of sidecars)")
	fs.IntVar(&c.JetStream.Replicas, "nats-replicas", c.JetStream.Replicas, "with --transport=jetstream: the stream's replicas when this sidecar creates it "+
		"(1..5; 3: a Raft majority survives one NATS server's loss, so an acknowledged event outlives it; an existing stream keeps its own)")
}
