package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/testbin"
)

// scrape returns n's /metrics page.
func (n *node) scrape(t *testing.T) []byte {
	t.Helper()
	resp, err := http.Get("http://" + n.adminAddr + "/metrics")
	if err != nil {
		t.Fatalf("node %s /metrics: %v", n.spec.ID, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("node %s /metrics: %s, %v", n.spec.ID, resp.Status, err)
	}
	return b
}

// mustMetric is node.metric that fails the test.
func mustMetric(t *testing.T, n *node, name string, labels ...string) float64 {
	t.Helper()
	v, err := n.metric(name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// metricsAckTimeout is the ack_timeout of TestMetrics' writes with ack ALL: a
// Replicate round trip to two live peers, generous for a loaded machine.
const metricsAckTimeout = 15 * time.Second

// TestMetrics checks /metrics on a live 3-node cluster: promtool's lint passes on
// every node's page, and the latency histograms and the submitted and received
// counts move by what a known load did. Then a real Prometheus scrapes the nodes and
// every query of the Grafana dashboard in deploy/ is run against it.
func TestMetrics(t *testing.T) {
	promtool := testbin.Find(t, "promtool", "Debian's prometheus package")
	c := startCluster(t, specs(3)...)
	warmUp(t, c, 1, 2) // the warm-up event is one accepted Submit of A

	a, b := c.node(0), c.node(1)
	allSatisfied := func() float64 {
		return mustMetric(t, a, "fanout_ack_wait_seconds_count", `policy="all"`, `satisfied="true"`)
	}
	rttToB := func() float64 {
		return mustMetric(t, a, "fanout_peer_replicate_duration_seconds_count", `peer_id="B"`)
	}
	submits := func() float64 {
		return mustMetric(t, a, "grpc_server_handling_seconds_count", `grpc_method="Submit"`)
	}
	ackedBefore, rttBefore, submitsBefore := allSatisfied(), rttToB(), submits()

	// The load: 20 Submits of 10 new keys each with ack ALL, then one stale event.
	const calls, per = 20, 10
	for i := range calls {
		ids := make([]string, per)
		for k := range ids {
			ids[k] = fmt.Sprintf("metrics/%d/%d", i, k)
		}
		if resp, _ := ackSubmit(t, c, 0, fanoutv1.AckPolicy_ACK_POLICY_ALL, metricsAckTimeout, ids...); !resp.GetSatisfied() {
			t.Fatalf("Submit %d with ack ALL unsatisfied: %v", i, resp)
		}
	}
	stale := &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "metrics/0/0", Version: 1}}}
	if resp := submitResp(t, c, 0, stale, nil); resp.GetResults()[0].GetOutcome() != fanoutv1.EventOutcome_EVENT_OUTCOME_STALE {
		t.Fatalf("an old version of metrics/0/0: %v, want STALE", resp)
	}

	const accepted = 1 + calls*per // with the warm-up
	for _, check := range []struct {
		n      *node
		name   string
		labels []string
		want   float64
	}{
		{a, "fanout_submitted_events_total", []string{`outcome="accepted"`}, accepted},
		{a, "fanout_submitted_events_total", []string{`outcome="stale"`}, 1},
		{a, "fanout_submitted_events_total", []string{`outcome="refused"`}, 0},
		{a, "fanout_ack_wait_seconds_count", []string{`policy="all"`, `satisfied="true"`}, ackedBefore + calls},
		{a, "fanout_ack_wait_seconds_count", []string{`policy="all"`, `satisfied="false"`}, 0},
		{a, "grpc_server_handling_seconds_count", []string{`grpc_method="Submit"`}, submitsBefore + calls + 1},
	} {
		if got := mustMetric(t, check.n, check.name, check.labels...); got != check.want {
			t.Errorf("node %s: %s%v = %v, want %v", check.n.spec.ID, check.name, check.labels, got, check.want)
		}
	}
	// A Submit with ack ALL returned after both peers took its events, so B has
	// received all of them by now.
	for _, check := range []struct {
		name   string
		labels []string
	}{
		{"fanout_received_events_total", []string{`origin="A"`, `outcome="ok"`}},
		{"fanout_receive_lag_seconds_count", []string{`origin="A"`}},
		{"fanout_receive_lag_seconds_bucket", []string{`origin="A"`, `le="+Inf"`}},
	} {
		if got := mustMetric(t, b, check.name, check.labels...); got != accepted {
			t.Errorf("node B: %s%v = %v, want %d (every event A accepted)", check.name, check.labels, got, accepted)
		}
	}
	if got := rttToB(); got <= rttBefore {
		t.Errorf("A's Replicate calls to B: histogram count %v after the load, %v before", got, rttBefore)
	}
	// The batches go on a ReplicateStream, which lives as long as the connection:
	// its messages are counted, its handling time only once it ends.
	if got := mustMetric(t, b, "grpc_server_msg_received_total", `grpc_method="ReplicateStream"`); got < 1 {
		t.Errorf("B received %v ReplicateStream batches", got)
	}
	if got := mustMetric(t, a, "grpc_client_msg_sent_total", `grpc_method="ReplicateStream"`); got < 1 {
		t.Errorf("A's client sent %v ReplicateStream batches", got)
	}
	if got := mustMetric(t, a, "fanout_peers", `peer_id="B"`); got != 1 {
		t.Errorf("fanout_peers{peer_id=B} at A = %v, want 1", got)
	}

	for i := range 3 {
		n := c.node(i)
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(n.scrape(t))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics on node %s's /metrics: %v\n%s", n.spec.ID, err, out)
		}
	}

	t.Run("the Grafana dashboard's queries on a real Prometheus", func(t *testing.T) {
		testDashboard(t, c)
	})
}

// dashboard is the part of a Grafana dashboard this test reads.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// Deadlines of testDashboard. Each bounds a wait for an event and is generous for a
// loaded 2-core machine; a healthy run ends its waits far sooner.
const (
	// promUpTimeout: from exec to Prometheus having scraped all three nodes once
	// (its start, a TSDB to create, then one scrape_interval).
	promUpTimeout = 30 * time.Second
	// panelTimeout: for one panel's query to return series: two scrapes (rate()
	// needs two samples) of 500ms each, late on a slow machine.
	panelTimeout = 20 * time.Second
	// promQueryTimeout bounds one query to Prometheus; a failed one is retried until
	// promUpTimeout or panelTimeout.
	promQueryTimeout = 5 * time.Second
	// receiveTimeout: from a Submit (ack NONE) at one node to the others exporting
	// its origin's series: one Replicate, late on a slow machine.
	receiveTimeout = 15 * time.Second
)

// quietPanels may have no series on a healthy cluster under light load: they show
// trouble (or --data-dir), which this cluster does not have.
var quietPanels = map[string]bool{
	"gRPC errors/s by method and code": true,
	"Events not delivered/s per peer":  true,
	"Failed calls per peer (events/s)": true,
	"Breakers not closed":              true,
	"Overridden events/s per peer":     true,
	"Data dir lag (revisions)":         true,
}

// testDashboard starts Prometheus scraping c's nodes every 500ms, keeps a light
// load going, and runs every query of deploy/grafana/fanout.json (with Grafana's
// variables filled in): each must be valid, and each panel not in quietPanels must
// return series.
func testDashboard(t *testing.T, c *cluster) {
	prom := testbin.Find(t, "prometheus", "Debian's prometheus package")
	receiveFromEveryOrigin(t, c)
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "fanout.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash dashboard
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("deploy/grafana/fanout.json: %v", err)
	}

	dir := t.TempDir()
	var targets []string
	for i := range 3 {
		targets = append(targets, fmt.Sprintf("%q", c.node(i).adminAddr))
	}
	config := fmt.Sprintf("global: {scrape_interval: 500ms, evaluation_interval: 500ms}\n"+
		"scrape_configs:\n  - job_name: fanout\n    static_configs: [{targets: [%s]}]\n", strings.Join(targets, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddrs(t, 1)[0]
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(prom, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	}()

	query := func(expr string) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), promQueryTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet,
			"http://"+addr+"/api/v1/query?query="+url.QueryEscape(expr), nil)
		if err != nil {
			return 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var r struct {
			Status, Error string
			Data          struct{ Result []json.RawMessage }
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return 0, err
		}
		if r.Status != "success" {
			return 0, fmt.Errorf("%s: %s", r.Status, r.Error)
		}
		return len(r.Data.Result), nil
	}
	eventually(t, promUpTimeout, "Prometheus to scrape all three nodes", func() error {
		n, err := query(`up{job="fanout"} == 1`)
		if err == nil && n != 3 {
			err = fmt.Errorf("%d of 3 targets up", n)
		}
		return err
	})

	// A light load while Prometheus takes a few samples: rate() needs two.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			req := &fanoutv1.SubmitRequest{Ack: fanoutv1.AckPolicy_ACK_POLICY_ALL,
				Events: []*fanoutv1.Event{{TaskId: fmt.Sprintf("dashboard/%d", i%20)}}}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _ = c.client(i%3).Submit(ctx, req) // checked through the panels below
			cancel()
		}
	}()
	defer func() { close(stop); <-done }()

	vars := strings.NewReplacer("$__rate_interval", "5s", "$instance", ".*")
	metricName := regexp.MustCompile(`\b((?:fanout|grpc)_[a-z_]+)\{`)
	seen := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			expr := vars.Replace(tg.Expr)
			for _, m := range metricName.FindAllStringSubmatch(expr, -1) {
				seen[m[1]] = true
			}
			eventually(t, panelTimeout, fmt.Sprintf("panel %q: %s", p.Title, expr), func() error {
				n, err := query(expr)
				if err == nil && n == 0 && !quietPanels[p.Title] {
					err = fmt.Errorf("no series")
				}
				return err
			})
		}
	}
	// Every metric the dashboard names is one the node exports (a renamed metric
	// fails here even on a quiet panel); the data dir's exist only with --data-dir.
	page := string(c.node(0).scrape(t))
	for m := range seen {
		if strings.HasPrefix(m, "fanout_data_dir_") {
			continue
		}
		if !strings.Contains(page, "\n"+m+"{") && !strings.Contains(page, "\n"+m+" ") {
			t.Errorf("the dashboard queries %s, which node A does not export", m)
		}
	}
}

// receiveFromEveryOrigin makes every node of c receive an event from every other. A
// node exports the series of an origin (fanout_received_events_total,
// fanout_receive_lag_seconds) from the first event it receives from it: without
// this, node A has them only once the dashboard's light load has sent from B or C,
// which on a slow machine came after the last panel's query.
func receiveFromEveryOrigin(t *testing.T, c *cluster) {
	t.Helper()
	for i, from := range c.nodes {
		req := &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "dashboard/from-" + from.spec.ID}}}
		submitResp(t, c, i, req, nil)
	}
	for _, n := range c.nodes {
		for _, from := range c.nodes {
			if from == n {
				continue
			}
			eventually(t, receiveTimeout, fmt.Sprintf("node %s to receive from %s", n.spec.ID, from.spec.ID), func() error {
				_, err := n.metric("fanout_received_events_total", `origin="`+from.spec.ID+`"`)
				return err
			})
		}
	}
}
