/*
Package sidecar assembles one fanout sidecar from plain values: the node (pkg/fanout)
and its transport, the mesh (pkg/mesh) or a NATS JetStream stream (pkg/jetstream,
Config.Transport), its app and peer gRPC servers, the admin and pprof servers, the data dir (pkg/store)
and the node-id policy that goes with it, the peer TLS and app token files, the
metrics registry, readiness publishing, and DNS discovery's watcher. `sidecar serve`
is a page of flag parsing around one call:

	cfg := sidecar.DefaultConfig()
	// ... the flags fill cfg ...
	err := sidecar.Run(ctx, cfg) // returns once ctx is done and the sidecar has stopped

The demo and tests start nodes in-process the same way, with Start and Shutdown:

	cfg := sidecar.DefaultConfig()
	cfg.Node.NodeID, cfg.AppAddr, cfg.PeerAddr, cfg.AdminAddr = "a", "127.0.0.1:0", "127.0.0.1:0", ""
	s, err := sidecar.Start(ctx, cfg)
	...
	err = s.Shutdown(ctx) // drains until ctx is done; idempotent

# Start-up, in order

 1. Config.validate: the fields no library checks for itself.
 2. The "starting" log line, then Go's soft memory limit (Config.MemoryLimit; the zero
    value leaves the process's alone, since several in-process nodes share it), then
    the mesh's pending budget when Mesh.MaxPendingBytes is 0: a quarter of that limit,
    or 256 MiB without one.
 3. DNS discovery's first lookup (Config.Discovery), before the node exists, so that
    its bootstrap syncs with the peers DNS names; ctx cuts it short (a SIGTERM during
    start-up), and a failed lookup starts the node with the static peers.
 4. The app and peer listeners (or Config.AppListener and PeerListener), the unix
    socket's mode.
 5. The data dir, and the node-id policy: a new dir saves Node.NodeID; an old one
    gives the id it saved, unless Config.NodeIDGiven says the operator chose another,
    which is an error (its records' origin is the saved id).
 6. The peer TLS files, checked against that id, and the app token file.
 7. The node (fanout.New), with the store and the peer identity check, and its mesh,
    which fanout.New builds (Node.NewTransport): the peer dialer (client metrics,
    TLS, the replicate stream or unary calls), the node's limits and TLS readiness.
 8. The gRPC servers and their health service: liveness SERVING, readiness
    (ReadinessService) NOT_SERVING until the bootstrap ends; the serve goroutines
    and the readiness publisher (publishReadiness, which follows the node's
    Readiness and returns when the node closes).
 9. The admin listener (/metrics, /healthz, /readyz, gRPC health) and pprof.
 10. DNS discovery's refresh, applying each good lookup with the mesh's SetPeers.

# On the JetStream transport

With Config.Transport = TransportJetStream the events travel through a KV-format
stream on NATS instead of peer links, and the steps change:

  - step 1 refuses what only the mesh uses (Mesh.Peers, Discovery.PeersDNS, PeerTLS),
    naming the transport, and an empty NATS.URLs (the mesh refuses NATS settings
    in turn: they would be ignored); so step 3 finds no DNS to ask and
    step 10 has nothing to refresh;
  - step 4 opens no peer listener (a given PeerListener is closed): there are no
    peers to call in, so no PeerService and no peer port;
  - after step 6, the NATS connection (NATS.URLs, with the NKey seed and the TLS
    files read now, so that a bad file names its field) is opened without
    waiting for a server, reconnecting forever: an unreachable NATS at start makes
    a node that is not ready and says why, never a sidecar that fails;
  - step 7 builds jetstream.Transport on that connection (Config.JetStream with the
    node's limits); the node's readiness is the transport's (caught up with the
    stream as of its start), and its status shows the stream as the one "peer" row;
  - at shutdown the connection closes after the node (step 4 of Shutdown).

A step that fails closes what the steps before it opened, the given listeners
included, and stops what they started. Where a value is to blame, its error is a
configerr.Error naming the field ("sidecar.Config.AppAddr", or a library's
"fanout.Config.TaskTTL"), wrapping the failure; cmd/sidecar tells its user the flag
instead.

# Shutdown, in order (what SIGTERM does)

Run waits for its ctx, then calls Shutdown with Config.ShutdownTimeout:

 1. DNS discovery's refresh stops: the peer set stops changing.
 2. Every health service turns NOT_SERVING, on every listener: probes, load balancers
    and peers stop sending.
 3. The node drains: it keeps sending queued events until every peer has them or
    the deadline passes, and the drain's counts are logged (sent, kept in the data
    dir for anti-entropy after the restart, or dropped).
 4. The node closes: Subscribe streams end, and with a data dir the last changes
    are committed.
 5. The gRPC servers stop (in-flight calls get a second), then the admin and pprof
    servers; every goroutine the sidecar started is waited for.
 6. The peer TLS and token files stop being watched; the data dir closes.

Only the first Shutdown does this; a later call waits for it and returns its result.
A drain cut short by its deadline is Shutdown's error, and not Run's: the events it
left are accounted for in the log.
*/
package sidecar
