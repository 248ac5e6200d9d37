package sidecar

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
	"github.com/fanout/fanout/pkg/configerr"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/jetstream"
	"github.com/fanout/fanout/pkg/mesh"
	"github.com/fanout/fanout/pkg/peertls"
	"github.com/fanout/fanout/pkg/store"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// The named health services (grpc.health.v1), served on the app, peer and admin
// listeners alike. The empty name is liveness: SERVING once the process listens.
const (
	// ReadinessService is what a readiness probe checks: NOT_SERVING until the
	// bootstrap sync ends, and again while draining.
	ReadinessService = "fanout.v1.FanoutService"
	// PeerService: SERVING while the node takes peer traffic (until shutdown).
	PeerService = "fanout.v1.PeerService"
)

// Sidecar is one running sidecar: the node, its two gRPC servers, the admin and pprof
// servers, the data dir, the peer TLS and app token files, and DNS discovery. Start
// makes it; Shutdown (or Run) stops it.
type Sidecar struct {
	cfg  Config // as started: Node.NodeID may come from the data dir
	log  *slog.Logger
	node *fanout.Node
	mesh *mesh.Mesh // the node's transport with TransportMesh: its peers, SetPeers from DNS discovery; else nil
	// js is the node's transport with TransportJetStream, on the connection nc
	// (closed after the node); both nil with the mesh.
	js  *jetstream.Transport
	nc  *nats.Conn
	app *grpc.Server
	// peer serves the PeerService with the mesh; nil with JetStream (no peer
	// listener: peerLis nil too).
	peer *grpc.Server
	// health answers grpc.health.v1 on every listener (app, peer, admin): one
	// state, however a probe reaches the node.
	health    *health.Server
	adminGRPC *grpc.Server // the admin address's gRPC side: health only
	admin     *http.Server
	pprof     *http.Server
	appLis    net.Listener    // owned by app once it serves
	peerLis   net.Listener    // owned by peer once it serves
	store     *store.Store    // Config.DataDir; nil without one
	peerTLS   *peertls.Source // Config.PeerTLS; nil: plaintext peers
	token     *apptoken.Token // Config.AppTokenFile; nil: apps need none
	disc      *discoverer     // Config.Discovery; nil without PeersDNS. Stopped first.
	appAddr   string
	peerAddr  string
	wg        sync.WaitGroup // the serve goroutines and publishReadiness

	shutdownOnce sync.Once
	shutdownErr  error // what the first Shutdown returned; set once, inside shutdownOnce
}

// Run blocks until ctx is done, then shuts the sidecar down, draining for at most
// Config.ShutdownTimeout. A drain cut short by that timeout is not an error: Shutdown
// has logged what it left.
func (s *Sidecar) Run(ctx context.Context) error {
	<-ctx.Done()
	s.log.Info("signal received; draining", "shutdown_timeout", s.cfg.ShutdownTimeout.String())
	dctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := s.Shutdown(dctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// Node is the sidecar's node.
func (s *Sidecar) Node() *fanout.Node { return s.node }

// Mesh is the node's transport with TransportMesh: the links to its peers and
// anti-entropy. nil with TransportJetStream.
func (s *Sidecar) Mesh() *mesh.Mesh { return s.mesh }

// AppAddr is the app listener's address: host:port, or unix:///path.
func (s *Sidecar) AppAddr() string { return s.appAddr }

// PeerAddr is the peer listener's address (host:port); empty with
// TransportJetStream, which opens none.
func (s *Sidecar) PeerAddr() string { return s.peerAddr }

// panicRecovery turns a panic in a gRPC handler into INTERNAL and an ERROR line, on
// every server of the sidecar.
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
func (s *Sidecar) listeners() (net.Listener, net.Listener, error) {
	appLis, err := listenOr(s.cfg.AppListener, s.cfg.AppAddr, "sidecar.Config.AppAddr")
	if err != nil {
		return nil, nil, err
	}
	if path, ok := strings.CutPrefix(listenerAddr(appLis), "unix://"); ok {
		if err := os.Chmod(path, s.cfg.AppSocketMode); err != nil {
			appLis.Close()
			return nil, nil, configerr.Wrap("sidecar.Config.AppSocketMode", err, "")
		}
	}
	if s.cfg.Transport == TransportJetStream { // no peers: no peer listener
		if s.cfg.PeerListener != nil {
			s.cfg.PeerListener.Close()
		}
		return appLis, nil, nil
	}
	peerLis, err := listenOr(s.cfg.PeerListener, s.cfg.PeerAddr, "sidecar.Config.PeerAddr")
	if err != nil {
		appLis.Close()
		return nil, nil, err
	}
	return appLis, peerLis, nil
}

// listenOr returns l if it is set, else a new listener on addr (host:port, or
// unix:///path, whose stale socket file it removes first). Its errors name field.
func listenOr(l net.Listener, addr, field string) (net.Listener, error) {
	if l != nil {
		return l, nil
	}
	network := "tcp"
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		network, addr = "unix", path
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, configerr.Wrap(field, err, "remove stale socket")
		}
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil, configerr.Wrap(field, err, "%s", addr)
	}
	return l, nil
}

func listenerAddr(l net.Listener) string {
	if l.Addr().Network() == "unix" {
		return "unix://" + l.Addr().String()
	}
	return l.Addr().String()
}

func (s *Sidecar) serve(srv *grpc.Server, l net.Listener) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(l); err != nil {
			s.log.Error("gRPC server stopped", "addr", l.Addr().String(), "err", err)
		}
	}()
}

// startAdmin serves the address probes and Prometheus reach (all interfaces by
// default, like the pod's other ports): HTTP /metrics, /healthz (liveness) and
// /readyz (readiness), and, on the same port, gRPC health (grpc.health.v1 over
// cleartext HTTP/2, as Kubernetes' gRPC probes speak it) with the same services as
// the other listeners, and reflection that knows the health service alone (so that
// grpcurl can call it without a .proto file). Nothing else: no pprof, no API, and no
// descriptor of the API over reflection.
func (s *Sidecar) startAdmin(addr string, reg *prometheus.Registry, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if s.node.Draining() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ready, reason := s.node.Readiness()
		if !ready {
			http.Error(w, reason, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, reason)
	})
	recov := panicRecovery(log)
	s.adminGRPC = grpc.NewServer(grpc.MaxRecvMsgSize(adminGRPCBytes), grpc.ChainUnaryInterceptor(recovery.UnaryServerInterceptor(recov)),
		grpc.ChainStreamInterceptor(recovery.StreamServerInterceptor(recov)))
	healthpb.RegisterHealthServer(s.adminGRPC, s.health)
	if err := registerHealthReflection(s.adminGRPC); err != nil {
		return err
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			s.adminGRPC.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return configerr.Wrap("sidecar.Config.AdminAddr", err, "%s", addr)
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // gRPC probes: HTTP/2 with prior knowledge, no TLS
	s.admin = &http.Server{Handler: handler, Protocols: protocols, ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes: adminHeaderBytes}
	s.serveHTTP(s.admin, l, "admin")
	return nil
}

// Bounds of the admin listener: a health check is a few bytes, a scrape request a
// few hundred.
const (
	adminGRPCBytes   = 4 << 10
	adminHeaderBytes = 16 << 10
)

// startPprof serves Go's profiles (/debug/pprof/) on Config.PprofAddr.
func (s *Sidecar) startPprof(addr string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return configerr.Wrap("sidecar.Config.PprofAddr", err, "%s", addr)
	}
	s.pprof = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.serveHTTP(s.pprof, l, "pprof")
	return nil
}

func (s *Sidecar) serveHTTP(srv *http.Server, l net.Listener, name string) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error(name+" server stopped", "addr", l.Addr().String(), "err", err)
		}
	}()
}

// Shutdown is the graceful stop (what SIGTERM does): DNS discovery stops first, so
// the peer set stops changing; then the node refuses new submissions and peer
// traffic (health NOT_SERVING on every listener; the senders keep their events),
// keeps sending until the queues are empty or ctx is done, and closes (ending
// Subscribe streams; with a data dir, committing the state's last changes); then the
// servers stop (in-flight calls get a second), their goroutines are waited for, and
// the files and the data dir close. It returns the drain's error, if any: a deadline
// means events were left unsent (logged: kept in the data dir, or dropped). Only the
// first call stops anything; later ones wait for it and return its result.
func (s *Sidecar) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() {
		if s.disc != nil {
			s.disc.stop()
		}
		s.shutdownErr = s.shutdown(ctx)
	})
	return s.shutdownErr
}

func (s *Sidecar) shutdown(ctx context.Context) error {
	s.health.Shutdown() // every service NOT_SERVING, on every listener
	rep, err := s.node.Drain(ctx)
	s.logDrain(rep, err)
	s.node.Close() // ends Subscribe streams; commits the last changes to the data dir
	if s.nc != nil {
		s.nc.Close() // after the node: its transport has stopped using it
	}
	stopGracefully(s.app, time.Second)
	if s.peer != nil {
		stopGracefully(s.peer, time.Second)
	}
	if s.admin != nil {
		s.admin.Close()
		s.adminGRPC.Stop()
	}
	if s.pprof != nil {
		s.pprof.Close()
	}
	s.wg.Wait()
	if s.peerTLS != nil {
		s.peerTLS.Close()
	}
	if s.token != nil {
		s.token.Close()
	}
	if s.store != nil {
		if cerr := s.store.Close(); cerr != nil {
			s.log.Error("closing the data dir", "err", cerr)
		}
	}
	s.log.Info("sidecar stopped")
	return err
}

// logDrain says exactly what the drain did with the queued events: sent, kept (in
// the data dir, for anti-entropy after the restart) and dropped.
func (s *Sidecar) logDrain(r fanout.DrainReport, err error) {
	kept, dropped := uint64(0), r.Unsent
	if r.Durable {
		kept, dropped = r.Unsent, 0
	}
	attrs := []any{"sent", r.Sent, "kept", kept, "dropped", dropped, "peers", r.Peers, "keys", r.Keys, "data_dir", r.Durable}
	switch {
	case r.Unsent == 0 && err == nil:
		s.log.Info("drained: every queued event was sent", attrs...)
	case r.Durable:
		s.log.Info("drain ended with events unsent: they are kept in the data dir, and anti-entropy sends them after the restart",
			append(attrs, "err", err)...)
	default:
		s.log.Warn("drain ended with events unsent: they are dropped (no --data-dir); a peer gets them only from a node that has them",
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

// healthOnly is reflection's view of the admin server: the health service alone.
type healthOnly struct{ srv *grpc.Server }

func (h healthOnly) GetServiceInfo() map[string]grpc.ServiceInfo {
	info := h.srv.GetServiceInfo()
	return map[string]grpc.ServiceInfo{healthpb.Health_ServiceDesc.ServiceName: info[healthpb.Health_ServiceDesc.ServiceName]}
}

// registerHealthReflection serves gRPC reflection (v1 and v1alpha, which older
// grpcurls ask) on srv, answering for grpc.health.v1 only: its resolver holds the
// health .proto's descriptor and nothing else, so the API's are not shown here.
func registerHealthReflection(srv *grpc.Server) error {
	files := new(protoregistry.Files)
	if err := files.RegisterFile(healthpb.File_grpc_health_v1_health_proto); err != nil {
		return fmt.Errorf("admin reflection: %w", err)
	}
	opts := reflection.ServerOptions{Services: healthOnly{srv}, DescriptorResolver: files, ExtensionResolver: new(protoregistry.Types)}
	reflectionv1.RegisterServerReflectionServer(srv, reflection.NewServerV1(opts))
	reflectionv1alpha.RegisterServerReflectionServer(srv, reflection.NewServer(opts))
	return nil
}
