package sidecar

import (
	"context"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/fanout/fanout/internal/grpcmetrics"
	"github.com/fanout/fanout/pkg/configerr"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/grpcapi"
	"github.com/fanout/fanout/pkg/mesh"
	"github.com/fanout/fanout/pkg/peers"
	"github.com/fanout/fanout/pkg/store"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// Run starts a sidecar (Start), serves until ctx is done, then shuts it down
// (Sidecar.Run). cmd/sidecar's serve is this call.
func Run(ctx context.Context, cfg Config) error {
	s, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// Start checks cfg and starts a sidecar, in this order: Go's memory limit and the
// pending budget; the first DNS lookup (ctx cuts it short: the static peers then);
// the listeners, the data dir (and the node id it holds), the peer TLS and app
// token files; the node; the gRPC servers, readiness publishing, the admin and pprof
// servers; DNS discovery's refresh. When a step fails, what the steps before opened
// is closed again, the given listeners included, and the error names the Config
// field to fix (configerr) where a value is to blame.
func Start(ctx context.Context, cfg Config) (*Sidecar, error) {
	closeGiven := func() {
		for _, l := range []net.Listener{cfg.AppListener, cfg.PeerListener} {
			if l != nil {
				l.Close()
			}
		}
	}
	if err := cfg.validate(); err != nil {
		closeGiven()
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	log := cfg.Logger
	log.Info("starting", "version", cfg.Build.Version, "pid", os.Getpid())
	if limit, note := memoryLimit(cfg.MemoryLimit, os.Getenv("GOMEMLIMIT"), os.ReadFile); note != "" {
		if limit >= 0 {
			debug.SetMemoryLimit(limit)
		}
		log.Info(note)
	}
	if cfg.Mesh.MaxPendingBytes == 0 { // not given: from the memory limit
		var note string
		cfg.Mesh.MaxPendingBytes, note = pendingBudget(debug.SetMemoryLimit(-1))
		log.Info(note)
	}
	disc, err := newDiscoverer(cfg.Discovery, cfg.Mesh.Peers, cfg.PeerAddr, log)
	if err != nil {
		closeGiven()
		return nil, err
	}
	if disc != nil {
		cfg.Mesh.Peers = disc.initial(ctx)
		cfg.Mesh.OnUnknownPeer = func(string) { disc.trigger() }
		// Peers DNS no longer names leave with their queues and goroutines; give
		// their memory back at once (issue 25: RSS stayed up after DNS shrank).
		cfg.Mesh.ReturnMemory = debug.FreeOSMemory
	}
	s := &Sidecar{cfg: cfg, log: log, disc: disc}
	if err := s.start(); err != nil {
		return nil, err
	}
	if disc != nil {
		if err := disc.start(s.mesh.SetPeers); err != nil {
			s.Shutdown(context.Background()) //nolint:errcheck // the start's error is the one to report
			return nil, err
		}
	}
	log.Info("scheduler", "gomaxprocs", runtime.GOMAXPROCS(0), "cpus", runtime.NumCPU())
	return s, nil
}

// start opens what the node needs, makes it, and serves it (Start's steps after
// discovery's first lookup). On failure it releases what it opened.
func (s *Sidecar) start() error {
	reg, srvMetrics, cliMetrics := newRegistry(s.cfg.Build)
	if err := s.open(reg); err != nil {
		s.release()
		return err
	}
	s.cfg.Node.Logger, s.cfg.Mesh.Logger = s.log, s.log
	if s.cfg.Transport == TransportJetStream {
		s.withJetStream()
	} else {
		s.cfg.Mesh.Dial = s.dialer(cliMetrics)
		s.withMesh()
	}
	node, err := fanout.New(s.cfg.Node)
	if err != nil {
		s.release()
		return err
	}
	s.node = node
	reg.MustRegister(fanout.NewCollector(node))
	if s.disc != nil {
		reg.MustRegister(newDiscoveryCollector(s.disc))
	}
	s.serveGRPC(srvMetrics)
	if s.cfg.AdminAddr != "" {
		if err := s.startAdmin(s.cfg.AdminAddr, reg, s.log); err != nil {
			s.Shutdown(context.Background()) //nolint:errcheck // the start's error is the one to report
			return err
		}
	}
	if s.cfg.PprofAddr != "" {
		if err := s.startPprof(s.cfg.PprofAddr); err != nil {
			s.Shutdown(context.Background()) //nolint:errcheck // the start's error is the one to report
			return err
		}
	}
	s.logStarted()
	return nil
}

// newRegistry is the sidecar's /metrics: Go's and the process's collectors,
// fanout_build_info, and go-grpc-middleware's gRPC metrics (internal/grpcmetrics: the
// same series, a stream message without a label lookup) with handling-time
// histograms: every RPC's latency by service and method, on the same buckets as the
// node's own latencies.
func newRegistry(b Build) (*prometheus.Registry, *grpcmetrics.Metrics, *grpcmetrics.Metrics) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srvMetrics := grpcmetrics.NewServer(fanout.LatencyBuckets())
	cliMetrics := grpcmetrics.NewClient(fanout.LatencyBuckets())
	reg.MustRegister(srvMetrics, cliMetrics, buildInfoGauge(b))
	return reg, srvMetrics, cliMetrics
}

// buildInfoGauge is fanout_build_info: always 1, its labels say what runs.
func buildInfoGauge(b Build) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "fanout_build_info",
		Help:        "Always 1; the labels name the running build: version, VCS revision, Go version.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}

// open opens the listeners, then the data dir (which may hold the node id), then
// the peer TLS files (checked against that id) and the app token file; it sets the
// node's Store, AuthenticatePeers and ReadyCheck from them. The caller releases
// them if it fails.
func (s *Sidecar) open(reg *prometheus.Registry) error {
	var err error
	if s.appLis, s.peerLis, err = s.listeners(); err != nil {
		return err
	}
	s.appAddr = listenerAddr(s.appLis)
	if s.peerLis != nil {
		s.peerAddr = listenerAddr(s.peerLis)
	}
	if s.cfg.DataDir != "" {
		if s.store, err = openStore(s.cfg.DataDir, s.cfg.DataDirMinFreeBytes, &s.cfg.Node, s.cfg.NodeIDGiven, s.log); err != nil {
			return err
		}
		s.cfg.Node.Store = s.store
	}
	// After the store: the node id may come from the data dir.
	if s.peerTLS, err = openPeerTLS(s.cfg.PeerTLS, s.cfg.Node.NodeID, s.log); err != nil {
		return err
	}
	if s.token, err = openAppToken(s.cfg.AppTokenFile, s.log); err != nil {
		return err
	}
	if s.cfg.Transport == TransportJetStream {
		if s.nc, err = dialNATS(s.cfg.NATS, s.cfg.Node.NodeID, s.log); err != nil {
			return err
		}
	}
	if s.peerTLS != nil {
		reg.MustRegister(peerTLSMetrics(s.peerTLS)...)
		s.cfg.Node.AuthenticatePeers = true     // the peer listener reads each caller's identities (grpcapi)
		s.cfg.Mesh.ReadyCheck = s.peerTLS.Valid // an expired certificate: every peer refuses this node
	}
	return nil
}

// release closes what open opened, in reverse, when the start fails before the
// servers own the listeners.
func (s *Sidecar) release() {
	if s.nc != nil {
		s.nc.Close()
	}
	if s.token != nil {
		s.token.Close()
	}
	if s.peerTLS != nil {
		s.peerTLS.Close()
	}
	if s.store != nil {
		s.store.Close()
	}
	for _, l := range [][2]net.Listener{{s.peerLis, s.cfg.PeerListener}, {s.appLis, s.cfg.AppListener}} {
		if opened, given := l[0], l[1]; opened != nil {
			opened.Close()
		} else if given != nil {
			given.Close()
		}
	}
}

// withMesh makes the mesh (pkg/mesh) the node's transport: fanout.New builds it
// (NewTransport) with the node's limits, and a Replicate from a peer outside the set is
// noted there (OnReplicate). s.mesh is set once fanout.New has built it.
func (s *Sidecar) withMesh() {
	l := s.cfg.Node.Limits
	mc := s.cfg.Mesh
	mc.EventBytes, mc.MaxEventBytes, mc.MaxTaskIDBytes = l.EventBytes(), l.MaxEventBytes, l.MaxTaskIDBytes
	s.cfg.Node.NewTransport = func(n *fanout.Node) (fanout.Transport, error) {
		m, err := mesh.New(mc, n)
		if err != nil {
			return nil, err
		}
		s.mesh = m
		return m, nil
	}
	s.cfg.Node.OnReplicate = func(origin string) { s.mesh.NoteCaller(origin) }
}

// peerMessageBytes is the peer listener's and the peer connections' message bound:
// mesh.Config.PeerMessageBytes with the node's limits.
func (s *Sidecar) peerMessageBytes() int {
	mc := s.cfg.Mesh
	mc.EventBytes = s.cfg.Node.Limits.EventBytes()
	return mc.PeerMessageBytes()
}

// dialer opens a connection to a peer: the peer listener's message bound, the gRPC
// client metrics, the peer TLS credentials, and the replicate stream or unary calls.
func (s *Sidecar) dialer(cliMetrics *grpcmetrics.Metrics) func(addr string) (mesh.Conn, error) {
	peerMsg := s.peerMessageBytes()
	return func(addr string) (mesh.Conn, error) {
		opts := peers.Options{
			MaxMessageBytes: peerMsg,
			DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(cliMetrics.UnaryClientInterceptor()),
				grpc.WithStreamInterceptor(cliMetrics.StreamClientInterceptor())},
			Unary:      !s.cfg.ReplicateStream,
			AnswerHold: s.cfg.AnswerHold,
			// A worker is always left to send a batch that brings the held answers back.
			MaxHeld: s.cfg.Mesh.Batcher.Workers - 1,
		}
		if s.peerTLS != nil {
			opts.Creds = s.peerTLS.ClientCredentials()
		}
		return peers.Dial(addr, opts)
	}
}

// serveGRPC makes the app and peer gRPC servers, sets the health services, and
// serves them and readiness publishing.
//
// Message bounds (gRPC refuses a bigger message with RESOURCE_EXHAUSTED before it
// decodes any of it): the app listener receives requests of Limits.MaxRequestBytes;
// the peer listener and the peer connections carry a batch of Batcher.MaxBatchBytes
// or an anti-entropy message plus one event at the limits (fanout.Config).
func (s *Sidecar) serveGRPC(srvMetrics *grpcmetrics.Metrics) {
	appSizes := msgSizes{recv: s.cfg.Node.Limits.MaxRequestBytes, send: s.cfg.Node.AppSendBytes()}
	peerMsg := s.peerMessageBytes()
	var appAuth auth.AuthFunc
	if s.token != nil {
		appAuth = s.token.Check
	}
	peerCreds := insecure.NewCredentials()
	if s.peerTLS != nil {
		peerCreds = s.peerTLS.ServerCredentials()
	}
	s.health = health.NewServer()
	s.app = newGRPCServer(s.log, srvMetrics, appSizes, insecure.NewCredentials(), appAuth, s.health)
	grpcapi.RegisterFanoutServer(s.app, grpcapi.NewFanoutServer(s.node))
	reflection.Register(s.app) // for grpcurl on the local app port; peers need none
	srvMetrics.InitializeMetrics(s.app)
	if s.peerLis != nil { // the mesh's
		s.peer = newGRPCServer(s.log, srvMetrics, msgSizes{recv: peerMsg, send: peerMsg}, peerCreds, nil, s.health)
		grpcapi.RegisterPeerServer(s.peer, grpcapi.NewPeerServer(s.node, s.mesh))
		srvMetrics.InitializeMetrics(s.peer)
	}

	// The named service is readiness: NOT_SERVING until the bootstrap sync ends; the
	// empty name is liveness, SERVING from here on.
	s.health.SetServingStatus(ReadinessService, healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(PeerService, healthpb.HealthCheckResponse_SERVING)
	s.serve(s.app, s.appLis)
	if s.peer != nil {
		s.serve(s.peer, s.peerLis)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		poll := time.NewTicker(readinessPoll)
		defer poll.Stop()
		publishReadiness(s.node, s.health, poll.C, s.log)
	}()
}

// logStarted says where the sidecar listens, and warns of what is open to others.
func (s *Sidecar) logStarted() {
	if s.js != nil {
		s.log.Info("sidecar started", "node_id", s.node.ID(), "app_addr", s.appAddr, "admin_addr", s.cfg.AdminAddr,
			"pprof_addr", s.cfg.PprofAddr, "transport", TransportJetStream, "nats_urls", s.cfg.NATS.URLs, "bucket", s.cfg.JetStream.Bucket)
		s.warnOpenApp()
		return
	}
	s.log.Info("sidecar started", "node_id", s.node.ID(), "app_addr", s.appAddr, "peer_addr", s.peerAddr,
		"admin_addr", s.cfg.AdminAddr, "pprof_addr", s.cfg.PprofAddr, "peers", s.cfg.Mesh.Peers)
	s.warnOpenApp()
	if s.peerTLS == nil {
		s.log.Warn("peer listener is plaintext: peers are not authenticated and traffic is not encrypted; "+
			"set --peer-tls-cert, --peer-tls-key and --peer-tls-ca for mutual TLS", "peer_addr", s.peerAddr)
	} else {
		s.log.Info("peer listener and connections use mutual TLS", "peer_addr", s.peerAddr,
			"identities", s.peerTLS.Identities(), "cert_not_after", s.peerTLS.NotAfter())
	}
}

// warnOpenApp warns of an app listener others can reach without a token.
func (s *Sidecar) warnOpenApp() {
	if s.token == nil && exposed(s.appAddr) {
		s.log.Warn("app listener is reachable from other hosts and takes no token: anyone who can reach it can submit; "+
			"set --app-token-file, or listen on loopback or a unix socket", "app_addr", s.appAddr)
	}
}

// openStore opens the data dir and applies the node-id policy (nodeIDFor) to
// cfg.NodeID, saving the id in a new dir.
func openStore(dir string, minFree int64, cfg *fanout.Config, given bool, log *slog.Logger) (*store.Store, error) {
	st, err := store.Open(dir, store.Config{Logger: log.With("component", "store"), MinFreeBytes: minFree})
	if err != nil {
		return nil, configerr.Wrap("sidecar.Config.DataDir", err, "")
	}
	saved := st.NodeID()
	id, err := nodeIDFor(dir, saved, cfg.NodeID, given)
	switch {
	case err != nil:
	case saved == "":
		err = st.SetNodeID(id)
	case id != cfg.NodeID:
		log.Info("node id from the data dir", "node_id", id, "hostname", cfg.NodeID, "data_dir", dir)
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	cfg.NodeID = id
	return st, nil
}

// nodeIDFor is the node-id policy of a data dir: a new dir (saved "") takes the
// configured id; an old one gives the id it saved, unless the operator chose another
// (given), which is an error: the saved records' origin is the saved id, and another
// node's dir must not be taken over by mistake. Without given, the configured id is
// only a default (the hostname), which a pod rescheduled under a new name changes.
func nodeIDFor(dir, saved, configured string, given bool) (string, error) {
	switch {
	case saved == "", saved == configured:
		return configured, nil
	case given:
		return "", configerr.New("sidecar.Config.DataDir",
			"%s belongs to node %q, not sidecar.Config.Node.NodeID %q: give each node its own data dir, or start this one with sidecar.Config.Node.NodeID %q",
			dir, saved, configured, saved)
	}
	return saved, nil
}
