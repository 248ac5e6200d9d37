package natstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	// pollInterval is the wait between two probes of the servers: they are other
	// processes, with no event for the helper to wait on.
	pollInterval = 100 * time.Millisecond
	// probeTimeout bounds one probe: an HTTP request, a connect, a JetStream request.
	probeTimeout = 2 * time.Second
)

// waitReady waits, within ReadyTimeout, until every server of idx answers (probe).
// It returns the deadline.
func (c *Cluster) waitReady(idx ...int) time.Time {
	c.t.Helper()
	deadline := time.Now().Add(c.cfg.ReadyTimeout)
	for _, i := range idx {
		c.poll(deadline, c.servers[i].name+" to answer", func() error { return c.probe(i) })
	}
	return deadline
}

// probeStream names the stream waitPlacement creates and deletes.
const probeStream = "natstest_probe"

// waitPlacement waits until the meta leader places a stream on min(Servers, 5) servers
// (5 is JetStream's largest replica count): it does so only once it has heard every
// peer's statistics, which comes after the election; until then it refuses with "no
// suitable peers for placement". The probe stream is deleted again.
func (c *Cluster) waitPlacement(deadline time.Time) {
	c.t.Helper()
	replicas := min(len(c.servers), 5)
	c.poll(deadline, fmt.Sprintf("the meta leader to place an R%d stream", replicas), func() error {
		return c.withJetStream(0, func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{
				Name: probeStream, Subjects: []string{"natstest.probe"}, Storage: jetstream.MemoryStorage, Replicas: replicas,
			})
			if err != nil {
				return err
			}
			return js.DeleteStream(ctx, probeStream)
		})
	})
}

// Leader returns the index of the server that leads stream, as a server that runs
// and is not partitioned reports it. It waits within ReadyTimeout for a leader that
// is itself up and not partitioned: after Kill or Partition of the leader, that is
// the next one, once elected.
func (c *Cluster) Leader(stream string) int {
	c.t.Helper()
	leader := -1
	c.poll(time.Now().Add(c.cfg.ReadyTimeout), "stream "+stream+" to have a leader", func() error {
		var err error
		leader, err = c.leader(stream)
		return err
	})
	return leader
}

// WaitCurrent waits within ReadyTimeout until stream's leader reports every replica
// current (online, caught up, no lag) and every server that runs, is not partitioned
// and holds the stream reports the same leader and last sequence. A server that
// Start or Heal brought back answers before its leader has heard that it caught up;
// call this before a fault that needs its replica (another Kill, say), or before
// reading through it what was written while it was away.
func (c *Cluster) WaitCurrent(stream string) {
	c.t.Helper()
	c.poll(time.Now().Add(c.cfg.ReadyTimeout), "every replica of stream "+stream+" to be current", func() error {
		info, err := c.streamInfo(stream)
		if err != nil {
			return err
		}
		if err := replicasBehind(info); err != nil {
			return err
		}
		views, err := c.streamViews()
		if err != nil {
			return err
		}
		for _, v := range views {
			if v.stream == stream && info.Cluster != nil && (v.leader != info.Cluster.Leader || v.lastSeq != info.State.LastSeq) {
				return fmt.Errorf("%s sees leader %q and last sequence %d, the leader %s sees %d",
					v.server, v.leader, v.lastSeq, info.Cluster.Leader, info.State.LastSeq)
			}
		}
		return nil
	})
}

// streamView is one server's view of one stream it holds, from its /jsz.
type streamView struct {
	server, account, stream, leader string
	lastSeq                         uint64
}

// streamViews returns the views of every stream held by every server that runs and
// is not partitioned.
func (c *Cluster) streamViews() ([]streamView, error) {
	var views []streamView
	for i, s := range c.servers {
		if !s.running() || c.partitioned[i] {
			continue
		}
		var jsz struct {
			Accounts []struct {
				Name    string `json:"name"`
				Streams []struct {
					Name    string `json:"name"`
					Cluster *struct {
						Leader string `json:"leader"`
					} `json:"cluster"`
					State struct {
						LastSeq uint64 `json:"last_seq"`
					} `json:"state"`
				} `json:"stream_detail"`
			} `json:"account_details"`
		}
		if err := c.getJSON(i, "/jsz?accounts=true&streams=true", &jsz); err != nil {
			return nil, err
		}
		for _, a := range jsz.Accounts {
			for _, st := range a.Streams {
				v := streamView{server: s.name, account: a.Name, stream: st.Name, lastSeq: st.State.LastSeq}
				if st.Cluster != nil {
					v.leader = st.Cluster.Leader
				}
				views = append(views, v)
			}
		}
	}
	return views, nil
}

// probeLeaders checks that server i agrees with the others on the leader of every
// stream it holds: a server cut off while it led a stream goes on believing it leads
// (and answering reads with what it has) until it hears of the next term, and a
// restarted one knows no leader at first.
func (c *Cluster) probeLeaders(i int) error {
	if len(c.servers) == 1 {
		return nil
	}
	views, err := c.streamViews()
	if err != nil {
		return err
	}
	name := c.servers[i].name
	for _, mine := range views {
		if mine.server != name {
			continue
		}
		if mine.leader == "" {
			return fmt.Errorf("%s knows no leader of stream %s", name, mine.stream)
		}
		for _, v := range views {
			if v.account == mine.account && v.stream == mine.stream && v.leader != mine.leader {
				return fmt.Errorf("%s sees %q lead stream %s, %s sees %q", name, mine.leader, mine.stream, v.server, v.leader)
			}
		}
	}
	return nil
}

// replicasBehind describes the replicas of a stream that are not current, nil if
// all are.
func replicasBehind(info *jetstream.StreamInfo) error {
	ci := info.Cluster
	if ci == nil || info.Config.Replicas <= 1 {
		return nil
	}
	var behind []string
	for _, r := range ci.Replicas {
		if !r.Current || r.Offline || r.Lag > 0 {
			behind = append(behind, fmt.Sprintf("%s (current %v, offline %v, lag %d)", r.Name, r.Current, r.Offline, r.Lag))
		}
	}
	if len(ci.Replicas) != info.Config.Replicas-1 {
		behind = append(behind, fmt.Sprintf("leader %s reports %d other replicas, want %d", ci.Leader, len(ci.Replicas), info.Config.Replicas-1))
	}
	if len(behind) > 0 {
		return fmt.Errorf("replicas behind: %s", strings.Join(behind, "; "))
	}
	return nil
}

// streamInfo asks the servers that run and are not partitioned, in turn, for
// stream's info (which its leader answers), and returns the first answer.
func (c *Cluster) streamInfo(stream string) (*jetstream.StreamInfo, error) {
	var errs []error
	for i, s := range c.servers {
		if !s.running() || c.partitioned[i] {
			continue
		}
		var info *jetstream.StreamInfo
		err := c.withJetStream(i, func(ctx context.Context, js jetstream.JetStream) error {
			st, err := js.Stream(ctx, stream)
			if err == nil {
				info = st.CachedInfo()
			}
			return err
		})
		if err == nil {
			return info, nil
		}
		errs = append(errs, err) // names the server
	}
	if len(errs) == 0 {
		return nil, errors.New("no server runs unpartitioned")
	}
	return nil, errors.Join(errs...)
}

// poll calls check every pollInterval until it returns nil. It fails the test, with
// what it waited for and check's last error, at deadline or as soon as a server dies
// that nobody killed or stopped.
func (c *Cluster) poll(deadline time.Time, what string, check func() error) {
	c.t.Helper()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return
		}
		for _, s := range c.servers {
			if s.exited == nil {
				continue
			}
			select {
			case <-s.exited:
				c.t.Fatalf("natstest: waiting for %s: %s exited (%v); its log ends:\n%s", what, s.name, s.cmd.ProcessState, tail(s.log(), logTailLines))
			default:
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("natstest: waited %v for %s: %v", c.cfg.ReadyTimeout, what, err)
		}
		<-tick.C
	}
}

// probe reports why server i does not answer yet, or nil once it does: it has a route
// to every other server that runs and is not cut off from it, its /healthz says
// JetStream is current, it sees the same leader of every stream it holds as the
// others do, and a client of it gets the account's JetStream info (which takes an
// elected meta leader). A partitioned server answers once a client reaches
// it: nothing else can be had from it.
func (c *Cluster) probe(i int) error {
	if c.partitioned[i] {
		nc, err := c.dial(i)
		if err != nil {
			return err
		}
		nc.Close()
		return nil
	}
	if err := c.probeRoutes(i); err != nil {
		return err
	}
	if err := c.probeHealthz(i); err != nil {
		return err
	}
	if err := c.probeLeaders(i); err != nil {
		return err
	}
	return c.withJetStream(i, func(ctx context.Context, js jetstream.JetStream) error {
		_, err := js.AccountInfo(ctx)
		return err
	})
}

// probeRoutes checks that server i has a route to every server it should.
func (c *Cluster) probeRoutes(i int) error {
	have, err := c.routes(i)
	if err != nil {
		return err
	}
	var missing []string
	for j, s := range c.servers {
		if j != i && s.running() && c.connected(i, j) && !slices.Contains(have, s.name) {
			missing = append(missing, s.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s has no route to %s yet (it has %v)", c.servers[i].name, strings.Join(missing, ", "), have)
	}
	return nil
}

// routes returns the names of the servers that server i has routes to, sorted and
// without repeats (a pair of servers keeps a pool of route connections), from its
// monitoring endpoint /routez. Routes name their remote by server ID (2.9 has no
// remote_name), which is mapped to a name through every running server's /varz: an
// ID changes at every restart.
func (c *Cluster) routes(i int) ([]string, error) {
	var rz struct {
		Routes []struct {
			RemoteID string `json:"remote_id"`
		} `json:"routes"`
	}
	if err := c.getJSON(i, "/routez", &rz); err != nil {
		return nil, err
	}
	names := make(map[string]string) // server ID → name
	for j, s := range c.servers {
		var vz struct {
			ID string `json:"server_id"`
		}
		if !s.running() {
			continue
		}
		if err := c.getJSON(j, "/varz", &vz); err != nil {
			return nil, err
		}
		names[vz.ID] = s.name
	}
	var out []string
	for _, r := range rz.Routes {
		name, ok := names[r.RemoteID]
		if !ok {
			name = "unknown server " + r.RemoteID
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// getJSON decodes the JSON that server i's monitoring endpoint serves at path.
func (c *Cluster) getJSON(i int, path string, v any) error {
	body, err := c.get(i, path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s %s: %w", c.servers[i].name, path, err)
	}
	return nil
}

// probeHealthz checks that server i's /healthz answers 200: it runs, and JetStream is
// current with its meta leader and every stream and consumer it holds.
func (c *Cluster) probeHealthz(i int) error {
	_, err := c.get(i, "/healthz")
	return err
}

// get fetches path from server i's monitoring endpoint; a status other than 200 is
// an error that quotes the body.
func (c *Cluster) get(i int, path string) ([]byte, error) {
	s := c.servers[i]
	resp, err := c.http.Get(s.httpURL() + path)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", s.name, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", s.name, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s: %s", s.name, path, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// leader returns stream's leader, if it is itself up and not partitioned.
func (c *Cluster) leader(stream string) (int, error) {
	info, err := c.streamInfo(stream)
	if err != nil {
		return -1, err
	}
	var name string
	if info.Cluster != nil {
		name = info.Cluster.Leader
	}
	switch j := c.Index(name); {
	case name == "" && len(c.servers) == 1:
		return 0, nil // a standalone server leads what it holds
	case name == "":
		return -1, fmt.Errorf("stream %s has no leader", stream)
	case j < 0 || !c.servers[j].running() || c.partitioned[j]:
		return -1, fmt.Errorf("stream %s is led by %q, which is down or partitioned", stream, name)
	default:
		return j, nil
	}
}

// dial connects to server i alone: no reconnect, so a probe learns about i itself.
func (c *Cluster) dial(i int) (*nats.Conn, error) {
	s := c.servers[i]
	nc, err := nats.Connect(s.clientURL(), append([]nats.Option{nats.Name("natstest-probe"), nats.Timeout(probeTimeout), nats.NoReconnect()}, c.clientAuth()...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", s.name, err)
	}
	return nc, nil
}

// withJetStream runs f with a JetStream context on a fresh connection to server i
// and a probeTimeout deadline.
func (c *Cluster) withJetStream(i int, f func(context.Context, jetstream.JetStream) error) error {
	nc, err := c.dial(i)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	if err := f(ctx, js); err != nil {
		return fmt.Errorf("%s: %w", c.servers[i].name, err)
	}
	return nil
}
