package check

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
)

// serveFlags are the flags `sidecar serve --help` lists.
func serveFlags(t testing.TB, bin string) map[string]bool {
	t.Helper()
	out, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("sidecar serve --help: %v\n%s", err, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)\b`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["node-id"] || !flags["peer-addr"] {
		t.Fatalf("could not read the flags from sidecar serve --help:\n%s", out)
	}
	return flags
}

// sidecarSettings lists the serve flags a container sets: by FANOUT_* variable or by
// --flag argument. A variable that is not FANOUT_* is reported by the rules.
func sidecarSettings(c *corev1.Container) map[string]string {
	set := map[string]string{} // flag → how it is set
	for _, e := range c.Env {
		if f, ok := strings.CutPrefix(e.Name, "FANOUT_"); ok {
			set[strings.ToLower(strings.ReplaceAll(f, "_", "-"))] = "env " + e.Name
		}
	}
	for _, a := range c.Args {
		if f, ok := strings.CutPrefix(a, "--"); ok {
			f, _, _ = strings.Cut(f, "=")
			set[f] = "arg " + a
		}
	}
	return set
}

// TestSidecarKnowsEveryVariable runs the binary the Dockerfile builds, and checks that
// each FANOUT_* variable (and --flag) the manifests give the sidecar is one of its
// serve flags: the sidecar ignores an unknown one with a warning.
func TestSidecarKnowsEveryVariable(t *testing.T) {
	known := serveFlags(t, dockerSidecar(t))
	for name, b := range renderedBundles(t) {
		for _, d := range b.deployments {
			c, msg := sidecarOf(&d.Spec.Template.Spec)
			if c == nil {
				t.Errorf("%s: %s", name, msg)
				continue
			}
			set := sidecarSettings(c)
			flags := make([]string, 0, len(set))
			for f := range set {
				flags = append(flags, f)
			}
			sort.Strings(flags)
			for _, f := range flags {
				if !known[f] {
					t.Errorf("%s: %s: sidecar serve has no --%s (see sidecar serve --help)", name, set[f], f)
				}
			}
			t.Logf("%s: the sidecar gets %v", name, flags)
		}
	}
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestSidecarServesTheProbes starts the binary the Dockerfile builds with the base
// manifests' settings (the listeners moved to free loopback ports, no peers), and
// calls what the kubelet and Prometheus will: gRPC health on the admin port for the
// probes' services, and /metrics. Then it stops it as the kubelet does, by SIGTERM.
func TestSidecarServesTheProbes(t *testing.T) {
	bin := dockerSidecar(t)
	known := serveFlags(t, bin)
	b := renderedBundles(t)["."]
	c, msg := sidecarOf(&b.deployments[0].Spec.Template.Spec)
	if c == nil {
		t.Fatal(msg)
	}
	admin := freePort(t)
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { // the caller's own settings
		return strings.HasPrefix(kv, "FANOUT_") || strings.HasPrefix(kv, "GOMEMLIMIT=") || strings.HasPrefix(kv, "GOMAXPROCS=")
	})
	env = append(env,
		"FANOUT_NODE_ID=manifests-check",
		"FANOUT_APP_ADDR="+freePort(t),
		"FANOUT_PEER_ADDR="+freePort(t),
		"FANOUT_ADMIN_ADDR="+admin)
	replaced := []string{"FANOUT_NODE_ID", "FANOUT_APP_ADDR", "FANOUT_PEER_ADDR", "FANOUT_ADMIN_ADDR", "FANOUT_PEERS_DNS"}
	for _, e := range c.Env {
		flag := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(e.Name, "FANOUT_"), "_", "-"))
		if e.ValueFrom != nil || slices.Contains(replaced, e.Name) || !known[flag] {
			continue // set above, needs a cluster (DNS), or unknown (TestSidecarKnowsEveryVariable)
		}
		env = append(env, e.Name+"="+e.Value)
	}
	cmd := exec.Command(bin, append([]string{"serve"}, c.Args...)...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	defer func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("sidecar's stderr:\n%s", stderr.String())
		}
	}()

	// /metrics: up within 20 s.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	metrics, err := poll(ctx, exited, func() (string, error) { return httpGet("http://" + admin + "/metrics") })
	if err != nil {
		t.Fatalf("GET /metrics on the admin port: %v", err)
	}
	if !strings.Contains(metrics, "fanout_build_info{") || !strings.Contains(metrics, `version="`+checkVersion+`"`) {
		t.Errorf("/metrics has no fanout_build_info of version %s", checkVersion)
	}
	if _, err := httpGet("http://" + admin + "/healthz"); err != nil {
		t.Errorf("GET /healthz: %v", err)
	}

	// gRPC health, as the kubelet's grpc probes call it: plaintext HTTP/2, no metadata.
	conn, err := grpc.NewClient(admin, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	var missing []string
	hctx, hcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer hcancel()
	for _, svc := range []string{livenessService, readinessService} {
		_, err := poll(hctx, exited, func() (string, error) {
			cctx, ccancel := context.WithTimeout(hctx, time.Second)
			defer ccancel()
			r, err := health.Check(cctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil {
				return "", err
			}
			if r.Status != healthpb.HealthCheckResponse_SERVING {
				return "", fmt.Errorf("status %v", r.Status)
			}
			return "", nil
		})
		if err != nil {
			missing = append(missing, fmt.Sprintf("grpc.health.v1 Check(service %q): %v", svc, err))
			break // the next service would wait as long for the same reason
		}
	}
	if _, err := httpGet("http://" + admin + "/readyz"); err != nil {
		missing = append(missing, "GET /readyz: "+err.Error())
	}
	if len(missing) > 0 {
		t.Errorf("the admin port (%s) does not answer what the probes ask:\n  %s", admin, strings.Join(missing, "\n  "))
	}

	// The sidecar read every variable it was given.
	if strings.Contains(stderr.String(), "no sidecar command reads it") {
		t.Errorf("the sidecar ignored a variable the manifests set:\n%s", stderr.String())
	}

	// SIGTERM: it drains (nothing queued) and exits 0 within --shutdown-timeout.
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("after SIGTERM the sidecar exited with %v, want status 0", waitErr)
		}
	case <-time.After(defaultShutdown + 5*time.Second):
		t.Errorf("the sidecar did not exit within %v of SIGTERM", defaultShutdown+5*time.Second)
	}
}

// poll calls f every 100 ms until it succeeds, ctx ends or the process exits.
func poll(ctx context.Context, exited <-chan struct{}, f func() (string, error)) (string, error) {
	for {
		s, err := f()
		if err == nil {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-exited:
			return "", fmt.Errorf("the sidecar exited; last error: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func httpGet(url string) (string, error) {
	c := http.Client{Timeout: 2 * time.Second}
	r, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer r.Body.Close()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return "", err
	}
	if r.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s", r.Status)
	}
	return string(body), nil
}
