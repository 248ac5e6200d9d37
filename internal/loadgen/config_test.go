package loadgen

import (
	"strings"
	"testing"
	"time"
)

func TestDefaultConfigIsValid(t *testing.T) {
	c := DefaultConfig()
	c.Binary = "/bin/sidecar"
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
}

// Every rejection names the flag, so that the user knows what to fix.
func TestValidateNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"negative rate", func(c *Config) { c.Rate = -1 }, "--rate must be >= 0"},
		{"negative keys", func(c *Config) { c.Keys = -5 }, "--keys must be >= 0"},
		{"negative payload", func(c *Config) { c.Payload = -1 }, "--payload must be >= 0"},
		{"zero batch", func(c *Config) { c.Batch = 0 }, "--batch must be between 1 and 10000"},
		{"huge batch", func(c *Config) { c.Batch = 10001 }, "--batch must be between 1 and 10000"},
		{"zero duration", func(c *Config) { c.Duration = 0 }, "--duration must be > 0"},
		{"negative warmup", func(c *Config) { c.Warmup = -time.Second }, "--warmup must be >= 0"},
		{"no publishers", func(c *Config) { c.Publishers = 0 }, "--publishers must be >= 1"},
		{"unknown client", func(c *Config) { c.Client = "unary" }, `--client must be stream or publisher, got "unary"`},
		{"no pipeline", func(c *Config) { c.Pipeline = 0 }, "--pipeline must be >= 1"},
		{"negative window", func(c *Config) { c.Rate, c.Window = 0, -1 }, "--window must be >= 0"},
		{"window on a paced run", func(c *Config) { c.Window = 100 }, "--window is the flow control of --rate 0"},
		{"window with hot keys", func(c *Config) { c.Rate, c.Window, c.Keys = 0, 100, 10 }, "--window needs unique keys"},
		{"no drain", func(c *Config) { c.DrainTimeout = 0 }, "--drain-timeout must be > 0"},
		{"one node", func(c *Config) { c.Spawn = 1 }, "--spawn must be >= 2"},
		{"negative spawn", func(c *Config) { c.Spawn = -1 }, "--spawn must be >= 0"},
		{"both spawn and addrs", func(c *Config) { c.AppAddrs = []string{"a:1", "b:2"} }, "--spawn and --app-addrs"},
		{"one addr", func(c *Config) { c.Spawn, c.AppAddrs = 0, []string{"a:1"} }, "--app-addrs needs at least 2"},
		{"empty addr", func(c *Config) { c.Spawn, c.AppAddrs = 0, []string{"a:1", ""} }, "--app-addrs: empty address"},
		{"nothing to drive", func(c *Config) { c.Spawn = 0 }, "give --spawn N or --app-addrs"},
		{"reserved serve flag", func(c *Config) { c.ServeFlags = []string{"--peers=x:1"} }, `serve flag "--peers=x:1"`},
		{"reserved serve flag without value", func(c *Config) { c.ServeFlags = []string{"--node-id"} }, `serve flag "--node-id"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Binary = "/bin/sidecar"
			tc.change(&c)
			err := c.validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("validate() = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestServeFlagsPassThrough(t *testing.T) {
	c := DefaultConfig()
	c.Binary = "/bin/sidecar"
	c.ServeFlags = []string{"--workers=8", "--max-batch", "500", "--log-level=info", "--data-dir=/d/{id}"}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	args := spawnArgs(1, "bench-1", "127.0.0.1:1", []string{"127.0.0.1:10", "127.0.0.1:11", "127.0.0.1:12"}, c.ServeFlags)
	want := []string{"serve", "--node-id=bench-1", "--app-addr=127.0.0.1:1", "--peer-addr=127.0.0.1:11", "--admin-addr=",
		"--peers=127.0.0.1:10,127.0.0.1:12", "--log-level=warn", "--workers=8", "--max-batch", "500", "--log-level=info", "--data-dir=/d/bench-1"}
	if strings.Join(args, " ") != strings.Join(want, " ") {
		t.Fatalf("spawnArgs =\n%q\nwant\n%q", args, want)
	}
}

func TestFillDefaultsMakesAUniquePrefix(t *testing.T) {
	c := DefaultConfig()
	c.Now = func() time.Time { return time.Unix(0, 0xabc) }
	c.fillDefaults()
	if c.Prefix != "bench/abc/" {
		t.Fatalf("prefix %q, want bench/abc/", c.Prefix)
	}
}

// TestServeFlagsJetStream: a node of the JetStream transport gets no peers and no peer
// listener (serve refuses --peers there), whichever way the transport flag is written.
func TestServeFlagsJetStream(t *testing.T) {
	peers := []string{"127.0.0.1:10", "127.0.0.1:11"}
	for _, extra := range [][]string{
		{"--transport=jetstream", "--nats-url=nats://127.0.0.1:4222"},
		{"--transport", "jetstream"},
		{"--transport=mesh", "--transport=jetstream"},
	} {
		args := spawnArgs(0, "bench-0", "127.0.0.1:1", peers, extra)
		want := append([]string{"serve", "--node-id=bench-0", "--app-addr=127.0.0.1:1", "--admin-addr=", "--log-level=warn"}, extra...)
		if strings.Join(args, " ") != strings.Join(want, " ") {
			t.Errorf("spawnArgs(%q) =\n%q\nwant\n%q", extra, args, want)
		}
	}
	for _, extra := range [][]string{nil, {"--transport=mesh"}, {"--transport=jetstream", "--transport", "mesh"}} {
		if jetstreamTransport(extra) {
			t.Errorf("jetstreamTransport(%q) = true, want false", extra)
		}
	}
}
