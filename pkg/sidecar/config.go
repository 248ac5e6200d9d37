package sidecar

import (
	"errors"
	"log/slog"
	"math"
	"net"
	"os"
	"time"

	"github.com/fanout/fanout/pkg/configerr"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/jetstream"
	"github.com/fanout/fanout/pkg/mesh"
	"github.com/fanout/fanout/pkg/peertls"
	"github.com/fanout/fanout/pkg/store"
)

// Config is everything Start assembles into one sidecar. Start copies it; change
// nothing after. Plain values: cmd/sidecar fills it from its flags, the demo and tests
// from DefaultConfig.
type Config struct {
	// Node configures the node. Start sets Logger, Store, AuthenticatePeers,
	// NewTransport (the mesh or JetStream) and OnReplicate.
	Node fanout.Config
	// Transport is the node's transport: TransportMesh (the default: no broker, every
	// sidecar sends to every peer) or TransportJetStream (a NATS JetStream stream
	// carries the events: no peers, no peer listener; Mesh, PeerAddr, PeerTLS and
	// Discovery are then not used, and setting peers is an error).
	Transport string
	// NATS is the connection of TransportJetStream.
	NATS NATSConfig
	// JetStream configures TransportJetStream (pkg/jetstream). Start sets Limits (the
	// node's) and Logger.
	JetStream jetstream.Config
	// Mesh configures the node's transport (pkg/mesh). Mesh.Peers are the static
	// peers (DNS discovery adds to them). Start sets Logger, Dial, ReadyCheck, the
	// node's limits (EventBytes, MaxEventBytes, MaxTaskIDBytes), and with DNS
	// discovery OnUnknownPeer and ReturnMemory. Mesh.MaxPendingBytes 0: a quarter of
	// Go's memory limit, or 256 MiB without one (pendingBudget).
	Mesh mesh.Config
	// NodeIDGiven says the operator chose Node.NodeID: a data dir saved under another
	// id is then an error. false: Node.NodeID is a default (the hostname), and a data
	// dir's saved id wins over it.
	NodeIDGiven bool

	// AppAddr is the FanoutService listener for the local app: host:port or
	// unix:///path. 127.0.0.1:7070: loopback, so that only the local app may submit.
	AppAddr string
	// PeerAddr is the PeerService listener for the other sidecars. 0.0.0.0:7071: all
	// interfaces, since peers are on other hosts.
	PeerAddr string
	// AppListener and PeerListener, if set, are used instead of AppAddr and PeerAddr
	// (the demo binds :0 ports first, to learn every node's address before any
	// starts). Start owns them from then on: it closes them, even when it fails.
	AppListener, PeerListener net.Listener
	// AdminAddr serves HTTP /metrics, /healthz, /readyz and gRPC health. 0.0.0.0:9090:
	// probes and scrapes come from outside the pod. Empty: no admin listener.
	AdminAddr string
	// PprofAddr serves Go's profiles (/debug/pprof/) on a listener of its own. Empty:
	// off; profiles and the command line are not for whoever reaches AdminAddr.
	PprofAddr string
	// AppSocketMode is the file mode of a unix:// AppAddr socket. 0600: only this
	// user may connect (0660 lets an app of the same group in).
	AppSocketMode os.FileMode
	// AppTokenFile holds the bearer token apps must send on the app listener,
	// re-read every second. Empty: no token (fine on loopback or a unix socket).
	AppTokenFile string
	// PeerTLS are the files of mutual TLS between peers. Zero: plaintext peers.
	PeerTLS peertls.Files
	// ReplicateStream sends every peer's batches on one long-lived ReplicateStream.
	// true: no per-call headers and stream setup; false: one unary Replicate call per
	// batch, as sidecars before API v1.1 do.
	ReplicateStream bool
	// AnswerHold is how long a peer may hold the answer to a batch no Submit waits
	// for (ack LOCAL or QUEUED) on the replicate stream, to send it with later ones:
	// one message each way fewer per batch, a quarter of the origin's CPU per peer at
	// a few thousand events/s. Delivery is not delayed (the peer applies a batch when
	// it arrives); only the origin's bookkeeping of that batch is. 0: every batch is
	// answered at once, as before API v1.3. At most 100 ms (the peer's cap).
	AnswerHold time.Duration

	// DataDir keeps the state table, the clock and the node id (pebble). Empty:
	// memory only.
	DataDir string
	// DataDirMinFreeBytes is store.Config.MinFreeBytes: below this much free space
	// commits are refused. store.DefaultMinFreeBytes gives its reason.
	DataDirMinFreeBytes int64

	// Discovery finds peers in DNS. Zero PeersDNS: static peers only.
	Discovery DiscoveryConfig
	// MemoryLimit is Go's soft memory limit, which Start sets first. The zero value
	// leaves the process's limit alone: several nodes in one process (the demo,
	// tests) share it.
	MemoryLimit MemoryLimit
	// ShutdownTimeout bounds Run's drain once its context is done (0 or less: the
	// drain ends at once). 10s fits in Kubernetes' default 30s termination grace
	// period.
	ShutdownTimeout time.Duration

	// Build names what runs, in the start-up log line and fanout_build_info.
	Build Build
	// Logger gets the sidecar's and the node's logs. nil: JSON on stderr.
	Logger *slog.Logger
}

// DiscoveryConfig configures DNS discovery of peers.
type DiscoveryConfig struct {
	// PeersDNS is name:port for the A/AAAA records of a headless Service, or an SRV
	// name starting with _. Empty: no DNS discovery.
	PeersDNS string
	// Refresh is how often PeersDNS is looked up again. 30s: a Kubernetes rollout
	// replaces a pod in tens of seconds, and the DNS server sees one query per node
	// per 30s (refresh.DefaultConfig).
	Refresh time.Duration
	// DNSServer asks this server (ip:port, or an ip for port 53) instead of the
	// system's resolver. Empty: /etc/resolv.conf.
	DNSServer string
	// MaxPeers caps the peers taken from DNS (the static peers are not counted).
	// defaultMaxPeers gives the reason of its default.
	MaxPeers int
}

// The transports Config.Transport names.
const (
	TransportMesh      = "mesh"
	TransportJetStream = "jetstream"
)

// NATSConfig is the NATS connection of TransportJetStream.
type NATSConfig struct {
	// URLs are the NATS servers (nats://host:4222); the client connects to one and
	// learns the cluster's others from it. Required with TransportJetStream.
	URLs []string
	// NKeyFile holds the user's NKey seed (an "SU..." line, as `nsc` or `nk -gen user`
	// writes it): the server checks the client's signature of its nonce. Empty: no
	// NKey.
	NKeyFile string
	// CredsFile is a NATS credentials file (a user JWT and its NKey seed, as `nsc`
	// writes it), for a server in operator mode; it is read again at every
	// (re)connect, so a rotated file is picked up. Empty: none. Not with NKeyFile.
	CredsFile string
	// TLS are the files of TLS to NATS: CA alone verifies the servers; Cert and Key
	// (both or neither) are the client's certificate, for a server that requires one.
	// Zero: the URL's scheme decides (tls:// verifies against the system's roots).
	TLS peertls.Files
}

// Build names the running build.
type Build struct {
	Version  string // "v1.2.3", or "dev"
	Revision string // the VCS commit, "+dirty" if the tree had changes; "unknown" if not recorded
}

// defaultMaxPeers caps the peers DNS may name: every peer costs its batcher's
// goroutines (1 + workers), a connection and its share of the pending bytes, so a
// name that answers thousands of addresses must not become thousands of peers. 256
// is more replicas than a full mesh of sidecars is meant for.
const defaultMaxPeers = 256

// defaultSocketMode: only the sidecar's own user may connect to a unix app socket.
const defaultSocketMode os.FileMode = 0o600

// DefaultConfig returns the defaults of `sidecar serve`; each field's comment gives
// its reason.
func DefaultConfig() Config {
	mc := mesh.DefaultConfig()
	mc.MaxPendingBytes = 0 // from the memory limit, at Start
	return Config{
		Node:                fanout.DefaultConfig(),
		Transport:           TransportMesh,
		JetStream:           jetstream.DefaultConfig(),
		Mesh:                mc,
		AppAddr:             "127.0.0.1:7070",
		PeerAddr:            "0.0.0.0:7071",
		AdminAddr:           "0.0.0.0:9090",
		AppSocketMode:       defaultSocketMode,
		ReplicateStream:     true,
		AnswerHold:          defaultAnswerHold,
		DataDirMinFreeBytes: store.DefaultMinFreeBytes,
		Discovery:           DiscoveryConfig{Refresh: 30 * time.Second, MaxPeers: defaultMaxPeers},
		ShutdownTimeout:     10 * time.Second,
	}
}

// defaultAnswerHold: long enough that a peer sent a batch every few milliseconds
// answers several at once, short enough that a batch's outcome (pending memory,
// in-flight counts, a retry after a lost answer) is known within a scrape.
const defaultAnswerHold = 10 * time.Millisecond

// maxAnswerHold is the most a receiver holds an answer (pkg/fanout caps it so).
const maxAnswerHold = 100 * time.Millisecond

// validate checks what Start does not hand to a library that checks it itself
// (fanout.Config, store.Config, refresh.Config, discovery.Config do).
func (c *Config) validate() error {
	var errs []error
	check := func(ok bool, field, format string, args ...any) {
		if !ok {
			errs = append(errs, configerr.New(field, format, args...))
		}
	}
	switch c.Transport {
	case TransportMesh:
		check(len(c.NATS.URLs) == 0 && c.NATS.NKeyFile == "" && c.NATS.CredsFile == "" && c.NATS.TLS == (peertls.Files{}), "sidecar.Config.NATS",
			"set with sidecar.Config.Transport=mesh, which does not use NATS: add sidecar.Config.Transport=jetstream, or remove it")
	case TransportJetStream:
		errs = append(errs, c.validateJetStream()...)
	default:
		check(false, "sidecar.Config.Transport", "%q: want %s or %s", c.Transport, TransportMesh, TransportJetStream)
	}
	check(c.AppSocketMode&^os.ModePerm == 0, "sidecar.Config.AppSocketMode", "must be a permission mode (at most 0777), got %#o", c.AppSocketMode)
	if c.Discovery.PeersDNS == "" {
		check(c.Discovery.DNSServer == "", "sidecar.Config.Discovery.DNSServer",
			"set without sidecar.Config.Discovery.PeersDNS, so nothing would ask it; add sidecar.Config.Discovery.PeersDNS or drop sidecar.Config.Discovery.DNSServer")
	} else {
		check(c.Discovery.MaxPeers > 0, "sidecar.Config.Discovery.MaxPeers", "must be > 0, got %d", c.Discovery.MaxPeers)
	}
	return errors.Join(append(errs, c.validateParts()...)...)
}

// validateParts checks the node's and the mesh's configurations as fanout.New and
// mesh.New will, with what Start fills in, so that a bad value is refused before the
// first log line (the memory limit's, say), not after it.
func (c *Config) validateParts() []error {
	node := c.Node
	if c.DataDir != "" {
		// Start opens the store (and may read the node id from it): what the node
		// checks with one, it checks here with a stand-in it never uses.
		node.Store = new(store.Store)
		if node.NodeID == "" {
			node.NodeID = "from-the-data-dir"
		}
	}
	errs := []error{node.Validate()}
	if c.AnswerHold < 0 || c.AnswerHold > maxAnswerHold {
		errs = append(errs, configerr.New("sidecar.Config.AnswerHold",
			"is %s: give 0 (answer every batch at once) up to %s (a peer holds no answer longer)", c.AnswerHold, maxAnswerHold))
	}
	if c.Transport == TransportMesh {
		mc, l := c.Mesh, c.Node.Limits
		mc.EventBytes, mc.MaxEventBytes, mc.MaxTaskIDBytes = l.EventBytes(), l.MaxEventBytes, l.MaxTaskIDBytes
		mc.Dial = func(string) (mesh.Conn, error) { return nil, errors.New("validation only") }
		if mc.MaxPendingBytes == 0 {
			mc.MaxPendingBytes = math.MaxInt64 // from the memory limit at Start, and checked then
		}
		errs = append(errs, mc.Validate())
	}
	return errs
}

// validateJetStream refuses, with TransportJetStream, what only the mesh uses: the
// stream carries the events, so peers named would silently receive nothing.
func (c *Config) validateJetStream() []error {
	var errs []error
	unused := func(set bool, field string) {
		if set {
			errs = append(errs, configerr.New(field,
				"not used with sidecar.Config.Transport=jetstream (the stream carries the events): remove it"))
		}
	}
	unused(len(c.Mesh.Peers) > 0, "sidecar.Config.Mesh.Peers")
	unused(c.Discovery.PeersDNS != "", "sidecar.Config.Discovery.PeersDNS")
	unused(c.PeerTLS != (peertls.Files{}), "sidecar.Config.PeerTLS")
	if (c.NATS.TLS.Cert == "") != (c.NATS.TLS.Key == "") {
		errs = append(errs, configerr.New("sidecar.Config.NATS.TLS",
			"a client certificate needs both sidecar.Config.NATS.TLS.Cert and sidecar.Config.NATS.TLS.Key: give both, or neither"))
	}
	if c.NATS.NKeyFile != "" && c.NATS.CredsFile != "" {
		errs = append(errs, configerr.New("sidecar.Config.NATS.CredsFile",
			"set with sidecar.Config.NATS.NKeyFile: a NATS user is a bare NKey or a credentials file (user JWT and seed), not both; keep the one the server's authorization expects"))
	}
	if len(c.NATS.URLs) == 0 {
		errs = append(errs, configerr.New("sidecar.Config.NATS.URLs",
			"empty with sidecar.Config.Transport=jetstream: give the NATS servers, e.g. nats://nats:4222"))
	}
	return errs
}
