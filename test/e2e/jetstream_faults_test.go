package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/natstest"
)

// The JetStream transport's issue-27 list, end to end: real sidecars on
// --transport=jetstream against a real 3-server NATS cluster (internal/natstest).

const (
	jsStream  = "KV_fanout"   // the stream of the default --nats-bucket
	jsSubject = "$KV.fanout." // its subjects: this and the task_id's key
)

// startJetStream is n started (ready) sidecars on a 3-server NATS cluster.
func startJetStream(t *testing.T, n int) (*natstest.Cluster, *cluster) {
	t.Helper()
	nc := startNATS(t, 3)
	c := jetStreamCluster(t, nc, n)
	c.start()
	return nc, c
}

// writeOwn makes each node of nodes write perNode keys of its own under prefix and,
// in every request, the shared key prefix+"shared", with QUORUM, recording each
// response in l; it fails the test on any error.
func writeOwn(t *testing.T, c *cluster, nodes []int, prefix string, perNode int, l *ledger) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(c.nodes))
	for _, i := range nodes {
		wg.Go(func() {
			id := c.node(i).spec.ID
			for b := 0; b < perNode; b += 10 {
				events := []*fanoutv1.Event{{TaskId: prefix + "shared", Payload: fmt.Appendf(nil, "shared@%s/%d", id, b)}}
				for k := b; k < b+10 && k < perNode; k++ {
					events = append(events, &fanoutv1.Event{TaskId: fmt.Sprintf("%s%s/%03d", prefix, id, k), Payload: fmt.Appendf(nil, "%s/%d", id, k)})
				}
				resp, err := sendSubmit(c.client(i), &fanoutv1.SubmitRequest{Events: events, Ack: fanoutv1.AckPolicy_ACK_POLICY_QUORUM})
				if err == nil {
					err = l.observe(id, events, resp)
				}
				if err != nil {
					errs[i] = fmt.Errorf("node %s: %w", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	must(t, errors.Join(errs...))
}

func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestJetStreamNineConverge: nine sidecars on one stream, each writing its own keys
// and one shared key, converge on every winner (the convergence checker).
func TestJetStreamNineConverge(t *testing.T) {
	_, c := startJetStream(t, 9)
	cv := watch(t, c)
	l := newLedger()
	writeOwn(t, c, indexes(9), "nine/", 30, l)
	cv.wait(60*time.Second, l, indexes(9)...)
	if _, tasks := l.count(); tasks != 9*30+1 {
		t.Fatalf("the ledger has %d tasks, want %d", tasks, 9*30+1)
	}
}

// The mesh's Subscribe and Get scenarios (watch_test.go), run as they are on the
// JetStream transport: Get by prefix with paging, snapshots, deletes (Get omits
// them, watchers see them), resume from_revision, narrow prefix watches. Get by ids
// is the convergence checker's (checkState).

func TestJetStreamSnapshot(t *testing.T) {
	_, c := startJetStream(t, 3)
	snapshotScenario(t, c)
}

func TestJetStreamResume(t *testing.T) {
	_, c := startJetStream(t, 3)
	resumeScenario(t, c)
}

func TestJetStreamNarrowPrefix(t *testing.T) {
	_, c := startJetStream(t, 2)
	narrowPrefixScenario(t, c)
}

// streamReader reads the stream's last message of a key through the stream's leader
// (the API's message get, not a direct get a replica may answer).
type streamReader struct {
	nc *natstest.Cluster
}

// stamp returns the (version, origin) of task's message in the stream, from its
// Fanout-Version and Fanout-Origin headers.
func (r streamReader) stamp(task string) (stamp, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var errs []error
	for i := range 3 {
		if !r.nc.Running(i) {
			continue
		}
		s, err := readStamp(ctx, r.nc, i, task)
		if err == nil {
			return s, nil
		}
		errs = append(errs, fmt.Errorf("through server %s: %w", r.nc.Name(i), err))
	}
	return stamp{}, errors.Join(errs...)
}

func readStamp(ctx context.Context, nc *natstest.Cluster, i int, task string) (stamp, error) {
	conn, err := nats.Connect(nc.URL(i), nats.Timeout(callTimeout), nats.NoReconnect())
	if err != nil {
		return stamp{}, err
	}
	defer conn.Close()
	js, err := jetstream.New(conn)
	if err != nil {
		return stamp{}, err
	}
	st, err := js.Stream(ctx, jsStream)
	if err != nil {
		return stamp{}, err
	}
	subject := jsSubject + strings.ReplaceAll(task, "/", ".") // task ids of [a-z0-9/] only
	msg, err := st.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return stamp{}, fmt.Errorf("last message of %s: %w", subject, err)
	}
	v, err := strconv.ParseUint(msg.Header.Get("Fanout-Version"), 10, 64)
	if err != nil {
		return stamp{}, fmt.Errorf("%s at sequence %d: header Fanout-Version: %w", subject, msg.Sequence, err)
	}
	return stamp{Version: v, Origin: msg.Header.Get("Fanout-Origin")}, nil
}

// oneKeyRounds is how many rounds TestJetStreamOneKeyRace runs: 20, or 200 with
// FANOUT_E2E_STRESS set (make test-stress).
func oneKeyRounds() int {
	if os.Getenv("FANOUT_E2E_STRESS") != "" {
		return 200
	}
	return 20
}

// TestJetStreamOneKeyRace: in each round, eight sidecars write the same key at the
// same time, each with its own app-chosen version (all distinct, in a shuffled
// order); afterwards every sidecar's Get and the stream's message of the key hold the
// highest (version, origin). A round where any of them does not within
// convergeTimeout is a disagreement; there must be none.
func TestJetStreamOneKeyRace(t *testing.T) {
	nc, c := startJetStream(t, 8)
	rd := streamReader{nc}
	rounds := oneKeyRounds()
	const task = "race/key"
	disagreements := 0
	var stale atomic.Int64
	for round := range rounds {
		base := uint64(time.Now().UnixNano())
		order := rand.Perm(8)
		want := stamp{}
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, 8)
		for i := range 8 {
			v := base + uint64(order[i]+1)*1000
			if s := (stamp{Version: v, Origin: c.node(i).spec.ID}); s.newerThan(want) {
				want = s
			}
			wg.Go(func() {
				<-start
				ev := &fanoutv1.Event{TaskId: task, Version: v, Payload: fmt.Appendf(nil, "%d@%d", round, v)}
				resp, err := sendSubmit(c.client(i), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev}, Ack: fanoutv1.AckPolicy_ACK_POLICY_QUORUM})
				if err != nil {
					errs[i] = fmt.Errorf("round %d, node %s, version %d: %w", round, c.node(i).spec.ID, v, err)
					return
				}
				switch r := resp.GetResults()[0]; {
				case r.GetOutcome() == fanoutv1.EventOutcome_EVENT_OUTCOME_STALE:
					stale.Add(1)
				case r.GetOutcome() != fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED || !resp.GetSatisfied():
					errs[i] = fmt.Errorf("round %d, node %s, version %d: %v", round, c.node(i).spec.ID, v, resp)
				}
			})
		}
		close(start)
		wg.Wait()
		must(t, errors.Join(errs...))
		deadline := time.Now().Add(convergeTimeout)
		for {
			err := oneKeyAgrees(c, rd, task, want)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				disagreements++
				t.Errorf("round %d: %v", round, err)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("%d rounds of 8 concurrent writers of one key: %d writes answered STALE, %d disagreements", rounds, stale.Load(), disagreements)
	if disagreements != 0 {
		t.Fatalf("%d of %d rounds ended with a sidecar or the stream off the highest (version, origin)", disagreements, rounds)
	}
}

// oneKeyAgrees checks that every node of c and the stream hold task at want.
func oneKeyAgrees(c *cluster, rd streamReader, task string, want stamp) error {
	var errs []error
	for _, n := range c.nodes {
		got, err := getIDs(n, []string{task})
		if err != nil {
			errs = append(errs, err)
		} else if e, ok := got[task]; !ok || e.Stamp != want {
			errs = append(errs, fmt.Errorf("node %s holds %v (present %t), want %s", n.spec.ID, e.Stamp, ok, want))
		}
	}
	if s, err := rd.stamp(task); err != nil {
		errs = append(errs, err)
	} else if s != want {
		errs = append(errs, fmt.Errorf("the stream holds %s, want %s", s, want))
	}
	return errors.Join(errs...)
}

// quorumLoad makes each node of origins write batches of 10 new keys under prefix
// with QUORUM and a 10 s ack_timeout, one request after another, until stop is
// called. Every response is recorded in l (what the node accepted must reach every
// node); acknowledged counts the events whose request was satisfied, failed the
// requests that timed out or failed (their events are new keys no one checks).
type quorumLoad struct {
	acked, unsatisfied, failed atomic.Int64
	done                       chan struct{}
	wg                         sync.WaitGroup
	errs                       chan error
	mu                         sync.Mutex
	ackedIDs                   []string // guarded by mu; the task_ids of acknowledged events
}

func startQuorumLoad(c *cluster, origins []int, prefix string, l *ledger) *quorumLoad {
	q := &quorumLoad{done: make(chan struct{}), errs: make(chan error, len(origins))}
	for _, o := range origins {
		id, cli := c.node(o).spec.ID, c.client(o)
		q.wg.Go(func() {
			for b := 0; ; b++ {
				select {
				case <-q.done:
					return
				case <-time.After(10 * time.Millisecond):
				}
				var events []*fanoutv1.Event
				for k := range 10 {
					events = append(events, &fanoutv1.Event{TaskId: fmt.Sprintf("%s%s/%05d", prefix, id, b*10+k), Payload: fmt.Appendf(nil, "%s/%d", id, b)})
				}
				resp, err := sendSubmit(cli, &fanoutv1.SubmitRequest{Events: events, Ack: fanoutv1.AckPolicy_ACK_POLICY_QUORUM, AckTimeout: durationpb.New(10 * time.Second)})
				if err != nil {
					q.failed.Add(1)
					continue
				}
				if err := l.observe(id, events, resp); err != nil {
					q.errs <- err
					return
				}
				if resp.GetSatisfied() {
					q.acked.Add(int64(len(events)))
					q.mu.Lock()
					for _, ev := range events {
						q.ackedIDs = append(q.ackedIDs, ev.GetTaskId())
					}
					q.mu.Unlock()
				} else {
					q.unsatisfied.Add(1)
				}
			}
		})
	}
	return q
}

// checkStream checks that the stream holds a message of every acknowledged event's
// key (each request writes new keys): the acknowledgement promised it is in the
// stream, whatever any sidecar holds.
func (q *quorumLoad) checkStream(t *testing.T, nc *natstest.Cluster, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var info *jetstream.StreamInfo
	for i := range 3 {
		if !nc.Running(i) {
			continue
		}
		conn := nc.Connect(i)
		js, err := jetstream.New(conn)
		must(t, err)
		st, err := js.Stream(ctx, jsStream)
		if err == nil {
			info, err = st.Info(ctx, jetstream.WithSubjectFilter(jsSubject+strings.TrimSuffix(prefix, "/")+".>"))
		}
		conn.Close()
		if err == nil {
			break
		}
		t.Logf("stream info through %s: %v", nc.Name(i), err)
	}
	if info == nil {
		t.Fatal("no server answered the stream's info")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	missing := 0
	for _, id := range q.ackedIDs {
		if info.State.Subjects[jsSubject+strings.ReplaceAll(id, "/", ".")] == 0 {
			if missing == 0 {
				t.Errorf("acknowledged event %q is not in the stream", id)
			}
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged events are not in the stream", missing, len(q.ackedIDs))
	}
}

func (q *quorumLoad) stop(t *testing.T) {
	t.Helper()
	close(q.done)
	q.wg.Wait()
	close(q.errs)
	for err := range q.errs {
		t.Fatalf("load: %v", err)
	}
}

// waitQuorumWrite waits until a new QUORUM write through every node is acknowledged.
func waitQuorumWrite(t *testing.T, c *cluster, prefix string, l *ledger) time.Duration {
	t.Helper()
	start := time.Now()
	for i, n := range c.nodes {
		eventually(t, 60*time.Second, "a QUORUM write through node "+n.spec.ID+" is acknowledged", func() error {
			events := []*fanoutv1.Event{{TaskId: fmt.Sprintf("%s%s/%d", prefix, n.spec.ID, time.Now().UnixNano()), Payload: []byte("after")}}
			resp, err := sendSubmit(c.client(i), &fanoutv1.SubmitRequest{Events: events, Ack: fanoutv1.AckPolicy_ACK_POLICY_QUORUM, AckTimeout: durationpb.New(5 * time.Second)})
			if err != nil {
				return err
			}
			if err := l.observe(n.spec.ID, events, resp); err != nil {
				return err
			}
			if !resp.GetSatisfied() {
				return fmt.Errorf("not satisfied: %v", resp)
			}
			return nil
		})
	}
	return time.Since(start)
}

// TestJetStreamLeaderKilled: under QUORUM load from three sidecars, the stream
// leader's server is killed (kill -9). Writes resume once a new leader is elected (a
// new QUORUM write through every sidecar is acknowledged); after the killed server
// restarts, every sidecar holds every event any of them accepted, acknowledged ones
// included (the convergence checker, with the ledger of every response).
func TestJetStreamLeaderKilled(t *testing.T) {
	nc, c := startJetStream(t, 3)
	cv := watch(t, c)
	l := newLedger()
	q := startQuorumLoad(c, indexes(3), "kill/", l)
	time.Sleep(time.Second)
	leader := nc.Leader(jsStream)
	killed := time.Now()
	nc.Kill(leader)
	time.Sleep(time.Second)
	waitQuorumWrite(t, c, "kill/after/", l)
	t.Logf("killed %s (the leader of %s); QUORUM writes acknowledged through all 3 sidecars %v after the kill", nc.Name(leader), jsStream, time.Since(killed).Round(time.Millisecond))
	time.Sleep(time.Second)
	q.stop(t)
	nc.Start(leader)
	nc.WaitCurrent(jsStream)
	cv.wait(60*time.Second, l, 0, 1, 2)
	q.checkStream(t, nc, "kill/")
	events, tasks := l.count()
	t.Logf("%d events acknowledged (QUORUM satisfied), %d requests not satisfied, %d failed; %d events accepted over %d tasks, all on every sidecar",
		q.acked.Load(), q.unsatisfied.Load(), q.failed.Load(), events, tasks)
	if q.acked.Load() == 0 {
		t.Fatal("no event was acknowledged under the load")
	}
}

// TestJetStreamPartition: under QUORUM load from three sidecars, the stream leader's
// server is cut off from the other two (its routes; the sidecars still reach it),
// then healed. Writes resume through every sidecar during the partition (those on the
// cut-off server's clients after their publishes reach the majority's new leader, or
// after the heal); after the heal every sidecar holds every event any of them
// accepted (the convergence checker).
func TestJetStreamPartition(t *testing.T) {
	nc, c := startJetStream(t, 3)
	cv := watch(t, c)
	l := newLedger()
	q := startQuorumLoad(c, indexes(3), "part/", l)
	time.Sleep(time.Second)
	cut := nc.Leader(jsStream)
	nc.Partition(cut)
	t.Logf("partitioned %s (the leader of %s)", nc.Name(cut), jsStream)
	newLeader := nc.Leader(jsStream)
	t.Logf("new leader %s", nc.Name(newLeader))
	time.Sleep(3 * time.Second)
	nc.Heal(cut)
	healed := time.Now()
	waitQuorumWrite(t, c, "part/after/", l)
	t.Logf("QUORUM writes acknowledged through all 3 sidecars %v after the heal", time.Since(healed).Round(time.Millisecond))
	time.Sleep(time.Second)
	q.stop(t)
	nc.WaitCurrent(jsStream)
	cv.wait(60*time.Second, l, 0, 1, 2)
	q.checkStream(t, nc, "part/")
	events, tasks := l.count()
	t.Logf("%d events acknowledged (QUORUM satisfied), %d requests not satisfied, %d failed; %d events accepted over %d tasks, all on every sidecar",
		q.acked.Load(), q.unsatisfied.Load(), q.failed.Load(), events, tasks)
}

// TestJetStreamJoinTenThousand: a sidecar started on a stream of 10,000 keys turns
// ready holding all of them: at once, its Get lists each at its winner and its state
// table counts 10,000 keys; its Subscribe snapshot holds them all.
func TestJetStreamJoinTenThousand(t *testing.T) {
	nc := startNATS(t, 3)
	c := jetStreamCluster(t, nc, 2)
	c.node(0).launch()
	c.node(0).waitReady()
	const keys, batch = 10000, 1000
	l := newLedger()
	var reqs [][]*fanoutv1.Event
	for b := 0; b < keys; b += batch {
		var events []*fanoutv1.Event
		for k := b; k < b+batch; k++ {
			events = append(events, &fanoutv1.Event{TaskId: fmt.Sprintf("join/%05d", k), Payload: fmt.Appendf(nil, "value %d", k)})
		}
		reqs = append(reqs, events)
	}
	for _, events := range reqs {
		resp := submitResp(t, c, 0, &fanoutv1.SubmitRequest{Events: events, Ack: fanoutv1.AckPolicy_ACK_POLICY_QUORUM}, l)
		if !resp.GetSatisfied() {
			t.Fatalf("QUORUM not satisfied: %v", resp.GetPeerAcks())
		}
	}
	start := time.Now()
	late := c.node(1)
	late.launch()
	late.waitReady()
	took := time.Since(start)
	winner, _ := l.snapshot()
	got, err := getPrefix(late, "join/")
	must(t, err)
	must(t, diffState(late.spec.ID, got, winner, false))
	st, err := stateStatus(late)
	must(t, err)
	if st.GetKeys() != keys {
		t.Fatalf("node %s ready with %d keys in its state table, want %d", late.spec.ID, st.GetKeys(), keys)
	}
	r := subscribeWith(t, c, 1, subOpts{prefix: "join/", snapshot: true})
	checkSnapshot(t, r.name, r.waitSnapshot(t, convergeTimeout), winner)
	t.Logf("node %s ready %v after its start, holding the %d keys", late.spec.ID, took.Round(time.Millisecond), keys)
}

// TestJetStreamRefusals: ack ALL and an event over the NATS servers' max_payload are
// refused with INVALID_ARGUMENT naming the field, the limits and the fix, and
// neither is stored.
func TestJetStreamRefusals(t *testing.T) {
	_, c := startJetStream(t, 1)
	cli := c.client(0)
	_, err := sendSubmit(cli, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "refused/all", Payload: []byte("x")}}, Ack: ackAll})
	checkInvalid(t, "ack ALL", err, "ack", "ACK_POLICY_ALL is not available on the JetStream transport", "ACK_POLICY_QUORUM")
	// The node takes an event of up to --max-event-bytes (1 MiB by default); the
	// servers' max_payload (1 MiB) must also hold the message's headers.
	big := &fanoutv1.Event{TaskId: "refused/big", Payload: make([]byte, 1<<20-16)}
	_, err = sendSubmit(cli, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{big}, Ack: fanoutv1.AckPolicy_ACK_POLICY_QUORUM})
	checkInvalid(t, "an event over max_payload", err, "events[0]", "max_payload of 1048576 bytes", "--max-event-bytes", "send a smaller event", "raise max_payload")
	got, err := getIDs(c.node(0), []string{"refused/all", "refused/big"})
	must(t, err)
	if len(got) != 0 {
		t.Fatalf("refused Submits stored %v", got)
	}
}

func checkInvalid(t *testing.T, what string, err error, words ...string) {
	t.Helper()
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("%s: %v, want INVALID_ARGUMENT", what, err)
	}
	for _, w := range words {
		if !strings.Contains(status.Convert(err).Message(), w) {
			t.Errorf("%s: the message does not say %q: %v", what, w, err)
		}
	}
}
