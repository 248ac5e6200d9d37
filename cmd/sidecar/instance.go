package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/grpcmetrics"
	"github.com/fanout/fanout/pkg/apptoken"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/grpcapi"
	"github.com/fanout/fanout/pkg/mesh"
	"github.com/fanout/fanout/pkg/peers"
	"github.com/fanout/fanout/pkg/peertls"
	"github.com/fanout/fanout/pkg/store"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// The named health services (grpc.health.v1), served on the app, peer and admin
// listeners alike. The empty name is liveness: SERVING once the process listens.
const (
	// readinessService is what a readiness probe checks: NOT_SERVING until the
	// bootstrap sync ends, and again while draining.
	readinessService = "fanout.v1.FanoutService"
	// peerService: SERVING while the node takes peer traffic (until shutdown).
	peerService = "fanout.v1.PeerService"
)

// instanceConfig is everything startInstance wires together. A listener given here is
// used instead of its address (the demo binds :0 ports first, to learn them).
type instanceConfig struct {
	appAddr, peerAddr, adminAddr string
	// pprofAddr serves /debug/pprof/ on a listener of its own ("": off): profiles
	// and the command line are not for whoever can reach the admin address.
	pprofAddr       string
	appLis, peerLis net.Listener
	node            fanout.Config
	mesh            mesh.Config // the node's transport; its limits come from node's
	log             *slog.Logger
	// dataDir is --data-dir ("": memory only). nodeIDGiven: node.NodeID was set by
	// the operator, so a data dir saved with another id is an error.
	dataDir     string
	nodeIDGiven bool
	security    securityOptions
	// dataDirMinFree is --data-dir-min-free-bytes (store.Config.MinFreeBytes).
	dataDirMinFree int64
	// collectors are registered on /metrics beside the node's (DNS discovery's).
	collectors []prometheus.Collector
	// unaryReplicate: --replicate-stream=false (peers.Options.Unary).
	unaryReplicate bool
}

// instance is one running sidecar: the node, its two gRPC servers and the admin server.
type instance struct {
	node      *fanout.Node
	mesh      *mesh.Mesh // the node's transport: the peer set changes here (SetPeers)
	app, peer *grpc.Server
	// health answers grpc.health.v1 on every listener (app, peer, admin): one
	// state, however a probe reaches the node.
	health    *health.Server
	adminGRPC *grpc.Server // the admin address's gRPC side: health only
	admin     *http.Server
	pprof     *http.Server
	store     *store.Store    // --data-dir; nil without one
	peerTLS   *peertls.Source // --peer-tls-*; nil: plaintext peers
	token     *apptoken.Token // --app-token-file; nil: apps need none
	log       *slog.Logger
	appAddr   string
	peerAddr  string
	wg        sync.WaitGroup // the serve goroutines
}

func startInstance(c instanceConfig) (*instance, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// go-grpc-middleware's gRPC metrics (internal/grpcmetrics: the same series, a
	// stream message without a label lookup). Handling-time histograms: every RPC's
	// latency by service and method, on the same buckets as the node's own latencies.
	srvMetrics := grpcmetrics.NewServer(fanout.LatencyBuckets())
	cliMetrics := grpcmetrics.NewClient(fanout.LatencyBuckets())
	reg.MustRegister(srvMetrics, cliMetrics, buildInfoGauge(buildInfo()))

	// Message bounds (gRPC refuses a bigger message with RESOURCE_EXHAUSTED before it
	// decodes any of it): the app listener receives requests of --max-request-bytes;
	// the peer listener and the peer connections carry a batch of --max-batch-bytes or
	// an anti-entropy message plus one event at the limits (fanout.Config).
	c.mesh.EventBytes, c.mesh.MaxEventBytes, c.mesh.MaxTaskIDBytes = c.node.Limits.EventBytes(), c.node.Limits.MaxEventBytes, c.node.Limits.MaxTaskIDBytes
	appSizes := msgSizes{recv: c.node.Limits.MaxRequestBytes, send: c.node.AppSendBytes()}
	peerMsg := c.mesh.PeerMessageBytes()
	c.node.Logger, c.mesh.Logger = c.log, c.log
	mode, err := c.security.socketMode()
	if err != nil {
		return nil, err
	}
	appLis, peerLis, err := c.listeners(mode)
	if err != nil {
		return nil, err
	}
	// undo releases what was opened so far when a later step fails.
	undo := []func(){func() { appLis.Close() }, func() { peerLis.Close() }}
	fail := func(err error) (*instance, error) {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		return nil, err
	}
	var st *store.Store
	if c.dataDir != "" {
		if st, err = openStore(c.dataDir, c.dataDirMinFree, &c.node, c.nodeIDGiven, c.log); err != nil {
			return fail(err)
		}
		undo = append(undo, func() { st.Close() })
		c.node.Store = st
	}
	// After the store: the node id may come from the data dir.
	peerTLS, err := c.security.openPeerTLS(c.node.NodeID, c.log)
	if err != nil {
		return fail(err)
	}
	token, err := c.security.openAppToken(c.log)
	if err != nil {
		return fail(err)
	}
	var appAuth auth.AuthFunc
	if token != nil {
		undo = append(undo, token.Close)
		appAuth = token.Check
	}
	peerCreds := insecure.NewCredentials()
	if peerTLS != nil {
		undo = append(undo, peerTLS.Close)
		peerCreds = peerTLS.ServerCredentials()
		reg.MustRegister(peerTLSMetrics(peerTLS)...)
		c.node.AuthenticatePeers = true   // the peer listener reads each caller's identities (grpcapi)
		c.mesh.ReadyCheck = peerTLS.Valid // an expired certificate: every peer refuses this node
	}
	c.mesh.Dial = func(addr string) (mesh.Conn, error) {
		opts := peers.Options{
			MaxMessageBytes: peerMsg,
			DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(cliMetrics.UnaryClientInterceptor()),
				grpc.WithStreamInterceptor(cliMetrics.StreamClientInterceptor())},
			Unary: c.unaryReplicate,
		}
		if peerTLS != nil {
			opts.Creds = peerTLS.ClientCredentials()
		}
		return peers.Dial(addr, opts)
	}
	meshOf := withMesh(&c.node, c.mesh)
	node, err := fanout.New(c.node)
	if err != nil {
		return fail(err)
	}
	reg.MustRegister(fanout.NewCollector(node))
	reg.MustRegister(c.collectors...)

	inst := &instance{node: node, mesh: meshOf(), store: st, peerTLS: peerTLS, token: token, log: c.log, appAddr: listenerAddr(appLis), peerAddr: listenerAddr(peerLis)}
	inst.health = health.NewServer()
	inst.app = newGRPCServer(c.log, srvMetrics, appSizes, insecure.NewCredentials(), appAuth, inst.health)
	grpcapi.RegisterFanoutServer(inst.app, grpcapi.NewFanoutServer(node))
	inst.peer = newGRPCServer(c.log, srvMetrics, msgSizes{recv: peerMsg, send: peerMsg}, peerCreds, nil, inst.health)
	grpcapi.RegisterPeerServer(inst.peer, grpcapi.NewPeerServer(node, inst.mesh))
	reflection.Register(inst.app) // for grpcurl on the local app port; peers need none
	srvMetrics.InitializeMetrics(inst.app)
	srvMetrics.InitializeMetrics(inst.peer)

	// The named service is readiness: NOT_SERVING until the bootstrap sync ends; the
	// empty name is liveness, SERVING from here on (SPEC §14).
	inst.health.SetServingStatus(readinessService, healthpb.HealthCheckResponse_NOT_SERVING)
	inst.health.SetServingStatus(peerService, healthpb.HealthCheckResponse_SERVING)
	inst.serve(inst.app, appLis)
	inst.serve(inst.peer, peerLis)
	inst.wg.Add(1)
	go func() {
		defer inst.wg.Done()
		publishReadiness(node, inst.health, readinessPoll, c.log)
	}()
	if c.adminAddr != "" {
		if err := inst.startAdmin(c.adminAddr, reg, c.log); err != nil {
			inst.shutdown(context.Background())
			return nil, err
		}
	}
	if c.pprofAddr != "" {
		if err := inst.startPprof(c.pprofAddr); err != nil {
			inst.shutdown(context.Background())
			return nil, err
		}
	}
	c.log.Info("sidecar started", "node_id", node.ID(), "app_addr", inst.appAddr, "peer_addr", inst.peerAddr,
		"admin_addr", c.adminAddr, "pprof_addr", c.pprofAddr, "peers", c.mesh.Peers)
	if token == nil && exposed(inst.appAddr) {
		c.log.Warn("app listener is reachable from other hosts and takes no token: anyone who can reach it can submit; "+
			"set --app-token-file, or listen on loopback or a unix socket", "app_addr", inst.appAddr)
	}
	if peerTLS == nil {
		c.log.Warn("peer listener is plaintext: peers are not authenticated and traffic is not encrypted; "+
			"set --peer-tls-cert, --peer-tls-key and --peer-tls-ca for mutual TLS", "peer_addr", inst.peerAddr)
	} else {
		c.log.Info("peer listener and connections use mutual TLS", "peer_addr", inst.peerAddr,
			"identities", peerTLS.Identities(), "cert_not_after", peerTLS.NotAfter())
	}
	return inst, nil
}

// openStore opens --data-dir and reconciles the node id with the one saved there:
// a new data dir saves cfg.NodeID; an old one gives its id unless the operator set
// another, which is an error (the saved records' origin is the saved id).
func openStore(dir string, minFree int64, cfg *fanout.Config, given bool, log *slog.Logger) (*store.Store, error) {
	st, err := store.Open(dir, store.Config{Logger: log.With("component", "store"), MinFreeBytes: minFree})
	if err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	switch saved := st.NodeID(); {
	case saved == "":
		err = st.SetNodeID(cfg.NodeID)
	case saved == cfg.NodeID:
	case given:
		err = fmt.Errorf("--data-dir %s belongs to node %q, not --node-id %q: give each node its own data dir, or start this one with --node-id %q",
			dir, saved, cfg.NodeID, saved)
	default:
		log.Info("node id from the data dir", "node_id", saved, "hostname", cfg.NodeID, "data_dir", dir)
		cfg.NodeID = saved
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// panicRecovery turns a panic in a gRPC handler into INTERNAL and an ERROR line, on
// every server of the instance.
func panicRecovery(log *slog.Logger) recovery.Option {
	return recovery.WithRecoveryHandler(func(p any) error {
		log.Error("panic in gRPC handler", "panic", fmt.Sprint(p))
		return status.Errorf(codes.Internal, "internal error")
	})
}

// msgSizes are a gRPC server's message bounds, in bytes.
type msgSizes struct{ recv, send int }

// maxStreamsPerConn bounds the calls open at once on one client connection of the app
// and peer servers (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS; gRPC's own default is
// unbounded). An app opens a SubmitStream and some watches, a peer its replicate
// stream and an anti-entropy round or two; each open call holds a goroutine and the
// stream's state (an idle watch: under 20 KiB of heap and stack, client and server
// sides together, measured in process), so 1,000 is at most 10–20 MiB per connection,
// with room for an app that watches hundreds of prefixes. A client past it is not
// refused: its gRPC waits for one of its calls to end (or for its deadline).
const maxStreamsPerConn = 1000

// newGRPCServer makes a listener's gRPC server with its metrics, panic recovery and,
// if authFn is set, that check on every call but the health service's (Kubernetes'
// gRPC probes send no metadata).
func newGRPCServer(log *slog.Logger, m *grpcmetrics.Metrics, sizes msgSizes, creds credentials.TransportCredentials,
	authFn auth.AuthFunc, h *health.Server) *grpc.Server {
	recov := panicRecovery(log)
	unary := []grpc.UnaryServerInterceptor{m.UnaryServerInterceptor(), recovery.UnaryServerInterceptor(recov)}
	stream := []grpc.StreamServerInterceptor{m.StreamServerInterceptor(), recovery.StreamServerInterceptor(recov)}
	if authFn != nil {
		notHealth := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
			return c.Service != healthpb.Health_ServiceDesc.ServiceName
		})
		unary = append(unary, selector.UnaryServerInterceptor(auth.UnaryServerInterceptor(authFn), notHealth))
		stream = append(stream, selector.StreamServerInterceptor(auth.StreamServerInterceptor(authFn), notHealth))
	}
	s := grpc.NewServer(append([]grpc.ServerOption{
		grpc.Creds(creds),
		grpc.MaxRecvMsgSize(sizes.recv),
		grpc.MaxSendMsgSize(sizes.send),
		grpc.MaxConcurrentStreams(maxStreamsPerConn),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	}, frame.ServerOptions()...)...)
	healthpb.RegisterHealthServer(s, h)
	return s
}

// listeners opens the app and peer listeners (or takes the given ones).
func (c instanceConfig) listeners(socketMode os.FileMode) (net.Listener, net.Listener, error) {
	appLis, err := listenOr(c.appLis, c.appAddr, "--app-addr")
	if err != nil {
		return nil, nil, err
	}
	if path, ok := strings.CutPrefix(listenerAddr(appLis), "unix://"); ok {
		if err := os.Chmod(path, socketMode); err != nil {
			appLis.Close()
			return nil, nil, fmt.Errorf("--app-socket-mode: %w", err)
		}
	}
	peerLis, err := listenOr(c.peerLis, c.peerAddr, "--peer-addr")
	if err != nil {
		appLis.Close()
		return nil, nil, err
	}
	return appLis, peerLis, nil
}

func listenOr(l net.Listener, addr, flag string) (net.Listener, error) {
	if l != nil {
		return l, nil
	}
	network := "tcp"
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		network, addr = "unix", path
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s: remove stale socket: %w", flag, err)
		}
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	return l, nil
}

func listenerAddr(l net.Listener) string {
	if l.Addr().Network() == "unix" {
		return "unix://" + l.Addr().String()
	}
	return l.Addr().String()
}

func (inst *instance) serve(s *grpc.Server, l net.Listener) {
	inst.wg.Add(1)
	go func() {
		defer inst.wg.Done()
		if err := s.Serve(l); err != nil {
			inst.log.Error("gRPC server stopped", "addr", l.Addr().String(), "err", err)
		}
	}()
}

// startAdmin serves the address probes and Prometheus reach (all interfaces by
// default, like the pod's other ports): HTTP /metrics, /healthz (liveness) and
// /readyz (readiness), and, on the same port, gRPC health (grpc.health.v1 over
// cleartext HTTP/2, as Kubernetes' gRPC probes speak it) with the same services as
// the other listeners. Nothing else: no pprof, no reflection, no API.
func (inst *instance) startAdmin(addr string, reg *prometheus.Registry, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if inst.node.Draining() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ready, reason := inst.node.Readiness()
		if !ready {
			http.Error(w, reason, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, reason)
	})
	recov := panicRecovery(log)
	inst.adminGRPC = grpc.NewServer(grpc.MaxRecvMsgSize(adminGRPCBytes), grpc.ChainUnaryInterceptor(recovery.UnaryServerInterceptor(recov)),
		grpc.ChainStreamInterceptor(recovery.StreamServerInterceptor(recov)))
	healthpb.RegisterHealthServer(inst.adminGRPC, inst.health)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			inst.adminGRPC.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--admin-addr %s: %w", addr, err)
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // gRPC probes: HTTP/2 with prior knowledge, no TLS
	inst.admin = &http.Server{Handler: handler, Protocols: protocols, ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes: adminHeaderBytes}
	inst.serveHTTP(inst.admin, l, "admin")
	return nil
}

// Bounds of the admin listener: a health check is a few bytes, a scrape request a
// few hundred.
const (
	adminGRPCBytes   = 4 << 10
	adminHeaderBytes = 16 << 10
)

// startPprof serves Go's profiles (/debug/pprof/) on --pprof-addr.
func (inst *instance) startPprof(addr string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--pprof-addr %s: %w", addr, err)
	}
	inst.pprof = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	inst.serveHTTP(inst.pprof, l, "pprof")
	return nil
}

func (inst *instance) serveHTTP(s *http.Server, l net.Listener, name string) {
	inst.wg.Add(1)
	go func() {
		defer inst.wg.Done()
		if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			inst.log.Error(name+" server stopped", "addr", l.Addr().String(), "err", err)
		}
	}()
}

// shutdown is SPEC §9's and §14's graceful stop: refuse new submissions and peer
// traffic (health NOT_SERVING; the senders keep their events), keep sending until the
// queues are empty or ctx is done, then stop everything; with --data-dir the state's
// last changes are committed before the store closes. It returns the drain error, if
// any (a deadline means events were left unsent).
func (inst *instance) shutdown(ctx context.Context) error {
	inst.health.Shutdown() // every service NOT_SERVING, on every listener
	rep, err := inst.node.Drain(ctx)
	inst.logDrain(rep, err)
	inst.node.Close() // ends Subscribe streams; commits the last changes to the data dir
	stopGracefully(inst.app, time.Second)
	stopGracefully(inst.peer, time.Second)
	if inst.admin != nil {
		inst.admin.Close()
		inst.adminGRPC.Stop()
	}
	if inst.pprof != nil {
		inst.pprof.Close()
	}
	inst.wg.Wait()
	if inst.peerTLS != nil {
		inst.peerTLS.Close()
	}
	if inst.token != nil {
		inst.token.Close()
	}
	if inst.store != nil {
		if cerr := inst.store.Close(); cerr != nil {
			inst.log.Error("closing the data dir", "err", cerr)
		}
	}
	inst.log.Info("sidecar stopped")
	return err
}

// logDrain says exactly what the drain did with the queued events: sent, kept (in
// the data dir, for anti-entropy after the restart) and dropped.
func (inst *instance) logDrain(r fanout.DrainReport, err error) {
	kept, dropped := uint64(0), r.Unsent
	if r.Durable {
		kept, dropped = r.Unsent, 0
	}
	attrs := []any{"sent", r.Sent, "kept", kept, "dropped", dropped, "peers", r.Peers, "keys", r.Keys, "data_dir", r.Durable}
	switch {
	case r.Unsent == 0 && err == nil:
		inst.log.Info("drained: every queued event was sent", attrs...)
	case r.Durable:
		inst.log.Info("drain ended with events unsent: they are kept in the data dir, and anti-entropy sends them after the restart",
			append(attrs, "err", err)...)
	default:
		inst.log.Warn("drain ended with events unsent: they are dropped (no --data-dir); a peer gets them only from a node that has them",
			append(attrs, "err", err)...)
	}
}

// stopGracefully lets in-flight RPCs finish for up to grace, then cuts them.
func stopGracefully(s *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() { s.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		s.Stop()
		<-done
	}
}

// withMesh makes the mesh (pkg/mesh) of mc cfg's transport: the node builds it in
// fanout.New (NewTransport), and a Replicate from a peer outside the set is noted
// there (OnReplicate). The function returned gives the mesh once fanout.New has
// returned (nil if it failed).
func withMesh(cfg *fanout.Config, mc mesh.Config) func() *mesh.Mesh {
	var m *mesh.Mesh
	cfg.NewTransport = func(n *fanout.Node) (fanout.Transport, error) {
		var err error
		if m, err = mesh.New(mc, n); err != nil {
			return nil, err
		}
		return m, nil
	}
	cfg.OnReplicate = func(origin string) { m.NoteCaller(origin) }
	return func() *mesh.Mesh { return m }
}
