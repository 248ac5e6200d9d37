package main

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout/internal/testpki"
	"github.com/fanout/fanout/pkg/configerr"
	"github.com/spf13/pflag"
)

// sidecarSets are the Config fields a library can refuse that no flag sets: the
// sidecar sets them itself, so a user never sees them refused.
var sidecarSets = map[string]string{
	"mesh.Config.Dial":                    "pkg/sidecar dials with peers.Dial",
	"mesh.Config.EventBytes":              "pkg/sidecar sets it from fanout.Config.Limits",
	"mesh.Config.MaxTaskIDBytes":          "pkg/sidecar sets it from fanout.Config.Limits",
	"fanout.Config.Limits.MaxEvents":      "a fixed input limit, not configurable",
	"fanout.Config.Limits.MaxTaskIDBytes": "a fixed input limit, not configurable",
	"batcher.Config.AcceptorQueue":        "the default, not configurable",
	"state.Config.OwnReservePercent":      "the default (10 %), not configurable",
	"timingwheel.Config.Tick":             "the node builds its wheel",
	"jetstream.Config.FeedCheck":          "the default (5s), not configurable",
	"timingwheel.Config.Slots":            "the node builds its wheel",
	"timingwheel.Config.Start":            "the node builds its wheel",
	"purgatory.Config.Wheel":              "the node builds its purgatory",
	"purgatory.Config.PurgeInterval":      "the node builds its purgatory",
	"persist.Config.Store":                "the node builds its persister on fanout.Config.Store (--data-dir)",
	"persist.Config.Logger":               "the node builds its persister",
	"persist.Config.Retry":                "the node builds its persister (the default, 1s)",
	"refresh.Config.MaxFactor":            "seed 001's 10x, not configurable",
	"refresh.Config.Timeout":              "the default, min(--peers-refresh, 10s)",
	"discovery.Config.Timeout":            "the default, 10s, at most --peers-refresh",
}

// fieldPath is how a library names a Config field in a configerr.Error, in its Field or
// its Problem.
var fieldPath = regexp.MustCompile(`\b[a-z]+\.Config(\.[A-Z][A-Za-z0-9]*)+`)

// refusableFields returns every field path in the string literals of the libraries'
// non-test sources (../../pkg), with where it was found.
func refusableFields(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("../../pkg/*/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no library sources: %v", err)
	}
	found := map[string]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				s, _ := strconv.Unquote(lit.Value)
				for _, m := range fieldPath.FindAllString(s, -1) {
					found[m] = fset.Position(lit.Pos()).String()
				}
			}
			return true
		})
	}
	return found
}

// TestEveryRefusableFieldHasAFlag: every Config field a library's validate can name
// maps to a serve flag, unless the sidecar sets it itself; every flag of the table
// exists.
func TestEveryRefusableFieldHasAFlag(t *testing.T) {
	found := refusableFields(t)
	if len(found) < 20 {
		t.Fatalf("only %d field paths in the libraries' sources: %v", len(found), found)
	}
	for field, where := range found {
		_, flag := configFlags[field]
		_, own := sidecarSets[field]
		if !flag && !own {
			t.Errorf("%s (%s) maps to no flag: add it to configFlags, or to sidecarSets if no flag sets it", field, where)
		}
	}
	for field := range sidecarSets {
		if _, ok := found[field]; !ok {
			t.Errorf("sidecarSets lists %s, which no library names", field)
		}
	}
	o := defaultServeOptions()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	o.addFlags(fs)
	for field, flags := range configFlags {
		for flag := range strings.SplitSeq(flags, ", ") {
			if fs.Lookup(strings.TrimPrefix(flag, "--")) == nil {
				t.Errorf("configFlags maps %s to %s, which serve does not have", field, flag)
			}
		}
		if _, ok := found[field]; !ok {
			t.Errorf("configFlags lists %s, which no library names", field)
		}
	}
}

// TestServeNamesTheFlag: a bad value of each flag that a library validates comes back
// from runServe as that flag, not as a library's field.
func TestServeNamesTheFlag(t *testing.T) {
	dataDir := t.TempDir()
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := testpki.Must(testpki.NewCA("ca"))
	other := testpki.Must(ca.Write(t.TempDir(), testpki.Leaf{DNSNames: []string{"someone-else.fanout.test"}}, ca))
	cases := []struct {
		args []string
		want string // the start of one line of the error
	}{
		{[]string{"--node-id="}, "--node-id: must not be empty"},
		{[]string{"--node-id=" + strings.Repeat("n", 2000)}, "--node-id: is 2000 bytes"},
		{[]string{"--data-dir=" + dataDir, "--max-event-bytes=2000000000"}, "--max-event-bytes: 2000000000 is too big with --data-dir set"},
		{[]string{"--replicate-timeout=0"}, "--replicate-timeout: must be > 0"},
		{[]string{"--anti-entropy-interval=-1s"}, "--anti-entropy-interval: must be >= 0"},
		{[]string{"--sync-timeout=-1s"}, "--sync-timeout: must be >= 0"},
		{[]string{"--task-ttl=-1s"}, "--task-ttl: must be >= 0"},
		{[]string{"--state-max-keys=0"}, "--state-max-keys: must be > 0"},
		{[]string{"--state-max-keys=4294967296"}, "--state-max-keys: must be 1..2147483647"},
		{[]string{"--state-max-bytes=0"}, "--state-max-bytes: must be > 0"},
		{[]string{"--tombstone-ttl=0"}, "--tombstone-ttl: must be > 0"},
		{[]string{"--state-max-tombstones=-1"}, "--state-max-tombstones: must be 0.."},
		{[]string{"--state-max-tombstone-bytes=-1"}, "--state-max-tombstone-bytes: must be >= 0"},
		{[]string{"--max-event-bytes=0"}, "--max-event-bytes: must be > 0"},
		{[]string{"--max-event-bytes=2000000000"}, "--max-event-bytes: 2000000000 is too big: an event encodes to at most 1073741824 bytes"},
		{[]string{"--max-request-bytes=65536"}, "--max-request-bytes: must hold one event of --max-event-bytes (1048576)"},
		{[]string{"--max-buffer-bytes=65536"}, "--max-buffer-bytes: must hold one event of --max-event-bytes (1048576)"},
		{[]string{"--max-batch-bytes=0"}, "--max-batch-bytes: must be > 0"},
		{[]string{"--max-batch-bytes=100000000"}, "--max-batch-bytes: must be <= --max-buffer-bytes (67108864), got 100000000"},
		{[]string{"--max-buffer=0"}, "--max-buffer: must be > 0"},
		{[]string{"--max-batch=0"}, "--max-batch: must be > 0"},
		{[]string{"--max-batch=20000"}, "--max-batch: must be <= --max-buffer (10000), got 20000"},
		{[]string{"--workers=0"}, "--workers: must be > 0"},
		{[]string{"--answer-hold=1s"}, "--answer-hold: is 1s: give 0 (answer every batch at once) up to 100ms"},
		{[]string{"--max-batching-delay=-1s"}, "--max-batching-delay: must be >= 0"},
		{[]string{"--batch-idle-flush=-1s"}, "--batch-idle-flush: must be >= 0"},
		{[]string{"--congestion-retry-delay=-1s"}, "--congestion-retry-delay: must be >= 0"},
		{[]string{"--network-failure-retry-delay=-1s"}, "--network-failure-retry-delay: must be >= 0"},
		{[]string{"--breaker-failures=0"}, "--breaker-failures: must be > 0"},
		{[]string{"--breaker-open=0"}, "--breaker-open: must be > 0"},
		{[]string{"--breaker-probes=0"}, "--breaker-probes: must be > 0"},
		{[]string{"--peer-removal-grace=-1s"}, "--peer-removal-grace: must be >= 0"},
		{[]string{"--max-pending-bytes=1000"}, "--max-pending-bytes: must hold one event of --max-event-bytes"},
		{[]string{"--peers-dns=peers.test:7071", "--peers-refresh=0"}, "--peers-refresh: must be > 0"},
		{[]string{"--peers-dns=peers.test:7071", "--dns-server=dns.test"}, `--dns-server: "dns.test" is not an IP address`},
		{[]string{"--dns-server=10.0.0.1"}, "--dns-server: set without --peers-dns, so nothing would ask it; add --peers-dns or drop --dns-server"},
		{[]string{"--peers-dns=peers.test:7071", "--max-peers=0"}, "--max-peers: must be > 0, got 0"},
		{[]string{"--app-addr=127.0.0.1:99999"}, "--app-addr: 127.0.0.1:99999: listen tcp: address 99999: invalid port"},
		{[]string{"--peer-addr=127.0.0.1:99999"}, "--peer-addr: 127.0.0.1:99999: listen tcp: address 99999: invalid port"},
		{[]string{"--admin-addr=127.0.0.1:99999"}, "--admin-addr: 127.0.0.1:99999: listen tcp: address 99999: invalid port"},
		{[]string{"--pprof-addr=127.0.0.1:99999"}, "--pprof-addr: 127.0.0.1:99999: listen tcp: address 99999: invalid port"},
		{[]string{"--data-dir=" + notADir}, "--data-dir: "},
		{[]string{"--app-token-file=" + filepath.Join(dataDir, "no-token")}, "--app-token-file: open "},
		{[]string{"--peer-tls-cert=" + other.Cert}, "--peer-tls-cert, --peer-tls-key, --peer-tls-ca: peer TLS needs a certificate, its key and a CA bundle; key, ca not given"},
		{[]string{"--node-id=A", "--peer-tls-cert=" + other.Cert, "--peer-tls-key=" + other.Key, "--peer-tls-ca=" + other.CA},
			"--peer-tls-cert: certificate " + other.Cert + ` names node someone-else (the first label of its DNS names), not this node's id "A": ` +
				"peers would refuse its events; issue the certificate for A.<your domain>, or start with --node-id someone-else"},
		{[]string{"--transport=udp"}, `--transport: "udp": want mesh or jetstream`},
		{[]string{"--nats-url=" + unreachableNATS}, "--nats-url, --nats-creds, --nats-nkey, --nats-tls-ca, --nats-tls-cert, --nats-tls-key: set with --transport=mesh, which does not use NATS"},
		{[]string{"--transport=jetstream", "--peers=", "--nats-url=" + unreachableNATS, "--nats-nkey=" + filepath.Join(dataDir, "no-seed")}, "--nats-nkey: nats: open "},
		{[]string{"--transport=jetstream", "--peers=", "--nats-url=" + unreachableNATS, "--nats-tls-ca=" + filepath.Join(dataDir, "no-ca")}, "--nats-tls-ca: open "},
		{[]string{"--transport=jetstream", "--peers=", "--nats-url=" + unreachableNATS, "--nats-creds=" + filepath.Join(dataDir, "no-creds")}, "--nats-creds: open "},
		{[]string{"--transport=jetstream", "--peers=", "--nats-url=" + unreachableNATS, "--nats-creds=" + other.CA}, "--nats-creds: " + other.CA + " holds no user JWT block"},
		{[]string{"--transport=jetstream", "--peers=", "--nats-url=" + unreachableNATS, "--nats-creds=" + other.CA, "--nats-nkey=" + other.CA},
			"--nats-creds: set with --nats-nkey: a NATS user is a bare NKey or a credentials file"},
		{[]string{"--transport=jetstream", "--peers=", "--nats-url=" + unreachableNATS, "--nats-tls-cert=" + other.Cert},
			"--nats-tls-cert, --nats-tls-key: a client certificate needs both --nats-tls-cert and --nats-tls-key"},
		{[]string{"--transport=jetstream", "--peers=", "--nats-url=" + unreachableNATS, "--nats-tls-cert=" + other.Cert, "--nats-tls-key=" + other.CA},
			"--nats-tls-cert: with key " + other.CA + ": tls: "},
		{[]string{"--transport=jetstream", "--peers=", "--nats-url=" + unreachableNATS, "--nats-tls-cert=" + other.Cert, "--nats-tls-key=" + filepath.Join(dataDir, "no-key")},
			"--nats-tls-key: open "},
		{[]string{"--transport=jetstream", "--nats-url=" + unreachableNATS}, "--peers: not used with --transport=jetstream (the stream carries the events): remove it"},
		{[]string{"--transport=jetstream", "--peers=", "--nats-url=" + unreachableNATS, "--peers-dns=peers.test:7071"},
			"--peers-dns: not used with --transport=jetstream (the stream carries the events): remove it"},
		{[]string{"--transport=jetstream", "--peers=", "--nats-url=" + unreachableNATS, "--peer-tls-ca=" + other.CA},
			"--peer-tls-cert, --peer-tls-key, --peer-tls-ca: not used with --transport=jetstream (the stream carries the events): remove it"},
		{[]string{"--transport=jetstream", "--peers="}, "--nats-url: empty with --transport=jetstream"},
		{[]string{"--transport=jetstream", "--peers=", "--nats-url=" + unreachableNATS, "--nats-bucket=a.b"}, `--nats-bucket: "a.b": byte '.' at 1`},
		{[]string{"--transport=jetstream", "--peers=", "--nats-url=" + unreachableNATS, "--nats-replicas=0"}, "--nats-replicas: 0, want 1..5"},
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			o := defaultServeOptions()
			o.cfg.AppAddr, o.cfg.PeerAddr, o.cfg.AdminAddr, o.logLevel = "127.0.0.1:0", "127.0.0.1:0", "", "error" // the flags' defaults here
			o.peers = "127.0.0.1:1"                                                                                // a peer, so that its batcher and breaker are made
			fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			o.addFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a node that starts stops here
			defer cancel()
			err := runServe(ctx, o)
			if err == nil {
				t.Fatal("runServe accepted the flags")
			}
			lines := strings.Split(err.Error(), "\n")
			if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, tc.want) }) {
				t.Errorf("runServe = %q, want a line starting %q", err, tc.want)
			}
			if m := fieldPath.FindString(err.Error()); m != "" {
				t.Errorf("runServe = %q names the field %s", err, m)
			}
			var ce *configerr.Error
			if !errors.As(err, &ce) {
				t.Errorf("runServe = %q does not wrap the library's configerr.Error", err)
			}
		})
		covered[strings.SplitN(tc.want, ":", 2)[0]] = true
	}
	onlyMentioned := map[string]string{
		"--peers-dns": "a bad one is refused by discovery.Parse, which names the flag itself",
		"--app-socket-mode": "serve refuses a bad mode before the assembly sees it, which names the field only when the chmod of the " +
			"socket fails",
	}
	for _, flag := range configFlags {
		if _, ok := onlyMentioned[flag]; !covered[flag] && !ok {
			t.Errorf("no case gives %s a bad value", flag)
		}
	}
}

// unreachableNATS is a NATS URL nothing answers: the sidecar dials it without
// waiting (an unreachable NATS makes a node that is not ready), so a bad flag is
// refused all the same.
const unreachableNATS = "nats://127.0.0.1:1"

func TestForFlags(t *testing.T) {
	buffer := configerr.New("batcher.Config.MaxBuffer", "must be > 0, got %d", 0)
	batch := configerr.New("batcher.Config.MaxBatch", "must be <= batcher.Config.MaxBuffer (%d), got %d", 10, 11)
	own := configerr.New("fanout.Config.Dial", "must be set when there are peers")
	other := errors.New("listen tcp: address in use")
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"a field", buffer, "--max-buffer: must be > 0, got 0"},
		{"a field it mentions", batch, "--max-batch: must be <= --max-buffer (10), got 11"},
		{"wrapped: the wrapper's words go", fmt.Errorf("peer x:1 breaker: %w", buffer), "--max-buffer: must be > 0, got 0"},
		{"joined under a wrapper", fmt.Errorf("peer x:1: %w", errors.Join(buffer, batch)),
			"--max-buffer: must be > 0, got 0\n--max-batch: must be <= --max-buffer (10), got 11"},
		{"joined with another error", errors.Join(other, buffer), "listen tcp: address in use\n--max-buffer: must be > 0, got 0"},
		{"a field no flag sets", fmt.Errorf("x: %w", own), "x: fanout.Config.Dial: must be set when there are peers"},
		{"no field", other, "listen tcp: address in use"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := forFlags(tc.err).Error(); got != tc.want {
				t.Errorf("forFlags = %q, want %q", got, tc.want)
			}
		})
	}
	if forFlags(nil) != nil {
		t.Error("forFlags(nil) != nil")
	}
}
