package main

import (
	"cmp"
	"errors"
	"slices"
	"strings"

	"github.com/fanout/fanout/pkg/configerr"
)

// configFlags names the serve flag (or flags) that set each Config field a library's
// validate can refuse, or pkg/sidecar names when what the field names fails (a listen
// address, a file). The libraries name their fields (configerr.Error); the user set a flag.
// TestEveryRefusableFieldHasAFlag checks that every field path in the libraries' sources
// is here or is one the sidecar sets itself.
var configFlags = map[string]string{
	"fanout.Config.NodeID":                    "--node-id",
	"fanout.Config.Store":                     "--data-dir",
	"mesh.Config.ReplicateTimeout":            "--replicate-timeout",
	"mesh.Config.AntiEntropyInterval":         "--anti-entropy-interval",
	"mesh.Config.SyncTimeout":                 "--sync-timeout",
	"mesh.Config.PeerRemovalGrace":            "--peer-removal-grace",
	"mesh.Config.MaxPendingBytes":             "--max-pending-bytes",
	"refresh.Config.Interval":                 "--peers-refresh",
	"discovery.Config.Server":                 "--dns-server",
	"fanout.Config.TaskTTL":                   "--task-ttl",
	"fanout.Config.State.MaxKeys":             "--state-max-keys",
	"fanout.Config.State.MaxBytes":            "--state-max-bytes",
	"fanout.Config.State.TombstoneTTL":        "--tombstone-ttl",
	"fanout.Config.Limits.MaxEventBytes":      "--max-event-bytes",
	"fanout.Config.Limits.MaxRequestBytes":    "--max-request-bytes",
	"state.Config.MaxKeys":                    "--state-max-keys",
	"state.Config.MaxBytes":                   "--state-max-bytes",
	"state.Config.TombstoneTTL":               "--tombstone-ttl",
	"state.Config.MaxTombstones":              "--state-max-tombstones",
	"state.Config.MaxTombstoneBytes":          "--state-max-tombstone-bytes",
	"batcher.Config.MaxBuffer":                "--max-buffer",
	"batcher.Config.MaxBatch":                 "--max-batch",
	"batcher.Config.MaxBufferBytes":           "--max-buffer-bytes",
	"batcher.Config.MaxBatchBytes":            "--max-batch-bytes",
	"batcher.Config.Workers":                  "--workers",
	"batcher.Config.MaxBatchingDelay":         "--max-batching-delay",
	"batcher.Config.IdleFlush":                "--batch-idle-flush",
	"batcher.Config.CongestionRetryDelay":     "--congestion-retry-delay",
	"batcher.Config.NetworkFailureRetryDelay": "--network-failure-retry-delay",
	"breaker.Config.Failures":                 "--breaker-failures",
	"breaker.Config.OpenFor":                  "--breaker-open",
	"breaker.Config.Probes":                   "--breaker-probes",
	"sidecar.Config.Node.NodeID":              "--node-id",
	"sidecar.Config.AppAddr":                  "--app-addr",
	"sidecar.Config.PeerAddr":                 "--peer-addr",
	"sidecar.Config.AdminAddr":                "--admin-addr",
	"sidecar.Config.PprofAddr":                "--pprof-addr",
	"sidecar.Config.AnswerHold":               "--answer-hold",
	"sidecar.Config.AppSocketMode":            "--app-socket-mode",
	"sidecar.Config.AppTokenFile":             "--app-token-file",
	"sidecar.Config.PeerTLS":                  "--peer-tls-cert, --peer-tls-key, --peer-tls-ca",
	"sidecar.Config.PeerTLS.Cert":             "--peer-tls-cert",
	"sidecar.Config.DataDir":                  "--data-dir",
	"sidecar.Config.Discovery.PeersDNS":       "--peers-dns",
	"sidecar.Config.Discovery.DNSServer":      "--dns-server",
	"sidecar.Config.Discovery.MaxPeers":       "--max-peers",
	"sidecar.Config.Transport":                "--transport",
	"sidecar.Config.Mesh.Peers":               "--peers",
	"sidecar.Config.NATS":                     "--nats-url, --nats-creds, --nats-nkey, --nats-tls-ca, --nats-tls-cert, --nats-tls-key",
	"sidecar.Config.NATS.CredsFile":           "--nats-creds",
	"sidecar.Config.NATS.URLs":                "--nats-url",
	"sidecar.Config.NATS.NKeyFile":            "--nats-nkey",
	"sidecar.Config.NATS.TLS":                 "--nats-tls-cert, --nats-tls-key",
	"sidecar.Config.NATS.TLS.CA":              "--nats-tls-ca",
	"sidecar.Config.NATS.TLS.Cert":            "--nats-tls-cert",
	"sidecar.Config.NATS.TLS.Key":             "--nats-tls-key",
	"jetstream.Config.Bucket":                 "--nats-bucket",
	"jetstream.Config.Replicas":               "--nats-replicas",
	"jetstream.Config.TombstoneTTL":           "--tombstone-ttl",
}

// fieldsToFlags replaces the field paths a Problem mentions. The longest paths go first,
// so that no path is replaced inside a longer one.
var fieldsToFlags = func() *strings.Replacer {
	fields := make([]string, 0, len(configFlags))
	for f := range configFlags {
		fields = append(fields, f)
	}
	slices.SortFunc(fields, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	pairs := make([]string, 0, 2*len(fields))
	for _, f := range fields {
		pairs = append(pairs, f, configFlags[f])
	}
	return strings.NewReplacer(pairs...)
}()

// flagError is a refused Config field told as the flag that set it.
type flagError struct {
	flag string
	err  *configerr.Error
}

func (e *flagError) Error() string { return e.flag + ": " + fieldsToFlags.Replace(e.err.Problem) }

func (e *flagError) Unwrap() error { return e.err }

// forFlags rewrites every refused Config field in err that a flag sets as that flag
// ("--max-buffer: must be > 0, got 0"). The words a library wrapped around such an error
// ("peer x:1 breaker: ...") go with it: they describe the library's inside, and the
// user's fix is the flag. Everything else in err is kept as it is.
func forFlags(err error) error {
	out, _ := rewrite(err)
	return out
}

// rewrite is forFlags, and whether anything changed.
func rewrite(err error) (error, bool) {
	switch e := err.(type) {
	case *configerr.Error:
		if flag, ok := configFlags[e.Field]; ok {
			return &flagError{flag: flag, err: e}, true
		}
	case interface{ Unwrap() []error }: // errors.Join
		parts := e.Unwrap()
		out, changed := make([]error, len(parts)), false
		for i, p := range parts {
			var c bool
			out[i], c = rewrite(p)
			changed = changed || c
		}
		if changed {
			return errors.Join(out...), true
		}
	case interface{ Unwrap() error }: // fmt.Errorf("...: %w")
		if inner, changed := rewrite(e.Unwrap()); changed {
			return inner, true
		}
	}
	return err, false
}
