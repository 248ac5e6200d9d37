package acks

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// The node-level tests (policies over real batchers, breakers, overflow, a call's
// deadline and cancellation, SubmitStream's order) are in pkg/fanout's acks_test.go.

func newTestOp(peers []string, need, keys int) *Op {
	op := NewOp(peers, need, keys)
	op.Init(op, time.Now().Add(time.Hour))
	return op
}

// register registers op's waiters for keys, all at version v.
func register(l *Ledger[string, uint64], op *Op, v uint64, keys ...string) []Key[string] {
	return l.Register(op, len(keys), func(i int) (string, uint64) { return keys[i], v })
}

func states(op *Op) string {
	peers, _, _ := op.Result()
	s := ""
	for _, p := range peers {
		s += fmt.Sprintf("%s=%s ", p.Name, p.State)
	}
	return s
}

func TestPolicies(t *testing.T) {
	ok := Fate{State: Acked}
	perm := Fate{State: Failed, Detail: "permanent"}
	drop := Fate{State: Dropped, Detail: "overflow"}
	cases := []struct {
		name      string
		need      int
		fates     map[string]Fate // per peer; absent: no answer
		complete  bool
		satisfied bool
		want      map[string]State
	}{
		{"ALL, every peer acks", 3, map[string]Fate{"p1": ok, "p2": ok, "p3": ok}, true, true,
			map[string]State{"p1": Acked, "p2": Acked, "p3": Acked}},
		{"ALL, one silent", 3, map[string]Fate{"p1": ok, "p2": ok}, false, false,
			map[string]State{"p1": Acked, "p2": Acked, "p3": Pending}},
		{"ALL, one failed ends it early", 3, map[string]Fate{"p2": perm}, true, false,
			map[string]State{"p1": Pending, "p2": Failed, "p3": Pending}},
		{"ONE, one acks", 1, map[string]Fate{"p2": ok}, true, true,
			map[string]State{"p1": Pending, "p2": Acked, "p3": Pending}},
		{"QUORUM, two of three", 2, map[string]Fate{"p1": ok, "p3": ok}, true, true,
			map[string]State{"p1": Acked, "p2": Pending, "p3": Acked}},
		{"QUORUM, two dropped", 2, map[string]Fate{"p1": drop, "p3": drop}, true, false,
			map[string]State{"p1": Dropped, "p2": Pending, "p3": Dropped}},
		{"no peers need none", 0, nil, true, true, map[string]State{"p1": Pending, "p2": Pending, "p3": Pending}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := NewLedger[string, uint64]()
			op := newTestOp([]string{"p1", "p2", "p3"}, c.need, 2)
			keys := register(l, op, 5, "a", "b")
			if len(keys) != 6 || l.Waiting() != 6 {
				t.Fatalf("%d keys, %d waiting; want 6 each", len(keys), l.Waiting())
			}
			for _, peer := range []string{"p1", "p2", "p3"} {
				if f, ok := c.fates[peer]; ok {
					for _, k := range []string{"a", "b"} {
						l.Settle(Key[string]{Peer: peer, Key: k}, 5, f)
					}
				}
			}
			if got := op.TryComplete(); got != c.complete {
				t.Fatalf("TryComplete = %v, want %v (%s)", got, c.complete, states(op))
			}
			peers, satisfied, expired := op.Result()
			if satisfied != c.satisfied || expired {
				t.Fatalf("satisfied %v expired %v, want %v false", satisfied, expired, c.satisfied)
			}
			for _, p := range peers {
				if p.State != c.want[p.Name] {
					t.Errorf("%s: %s (%q), want %s", p.Name, p.State, p.Detail, c.want[p.Name])
				}
				if f, ok := c.fates[p.Name]; ok && p.State != Acked && p.Detail != f.Detail {
					t.Errorf("%s: detail %q, want %q", p.Name, p.Detail, f.Detail)
				}
			}
			if c.complete {
				select {
				case <-op.Done():
				default:
					t.Fatal("completed, but Done is open")
				}
			}
			l.Unregister(op, keys)
			if l.Waiting() != 0 {
				t.Fatalf("%d keys waiting after Unregister", l.Waiting())
			}
		})
	}
}

// TestSettleCoversOlderVersions: a fate of version v settles the waiters needing v or
// older (a replaced version is acknowledged by its replacement), not newer ones.
func TestSettleCoversOlderVersions(t *testing.T) {
	l := NewLedger[string, uint64]()
	old, newer := newTestOp([]string{"p"}, 1, 1), newTestOp([]string{"p"}, 1, 1)
	register(l, old, 5, "k")
	register(l, newer, 9, "k")
	k := Key[string]{Peer: "p", Key: "k"}
	if !l.Settle(k, 7, Fate{State: Acked}) {
		t.Fatal("version 7 settled nothing; want the waiter of 5")
	}
	if !old.TryComplete() || newer.TryComplete() {
		t.Fatalf("after 7: old %s, newer %s; want old acked, newer pending", states(old), states(newer))
	}
	if l.Settle(k, 8, Fate{State: Acked}) {
		t.Fatal("version 8 settled the waiter of 9")
	}
	if !l.Settle(k, 9, Fate{State: Acked}) || !newer.TryComplete() || l.Waiting() != 0 {
		t.Fatalf("version 9: %s, %d waiting", states(newer), l.Waiting())
	}
}

// TestFailedPeerHasNoWaiters: a peer failed before Register gets no waiters.
func TestFailedPeerHasNoWaiters(t *testing.T) {
	l := NewLedger[string, uint64]()
	op := newTestOp([]string{"p1", "p2"}, 2, 1)
	op.Fail(0, "circuit breaker open")
	keys := register(l, op, 1, "k")
	if len(keys) != 1 || keys[0].Peer != "p2" {
		t.Fatalf("keys %v; want only p2's", keys)
	}
	if !op.TryComplete() {
		t.Fatal("ALL of two with one failed: want it complete at once")
	}
	if peers, satisfied, _ := op.Result(); satisfied || peers[0].State != Failed || peers[0].Detail != "circuit breaker open" {
		t.Fatalf("result %+v %v", peers, satisfied)
	}
}

// TestExpired: OnExpiration is reported by Result.
func TestExpired(t *testing.T) {
	op := newTestOp([]string{"p"}, 1, 1)
	op.OnExpiration()
	if _, satisfied, expired := op.Result(); satisfied || !expired {
		t.Fatalf("satisfied %v expired %v; want false true", satisfied, expired)
	}
}

// modelWaiter is a waiter in the reference model.
type modelWaiter struct {
	peer, key string
	version   uint64
}

// modelOp is the reference model of an op: its waiters, and per peer the state and
// the keys left, decided by the rules written out plainly.
type modelOp struct {
	op         *Op
	keys       []Key[string]
	need       int
	waiters    []modelWaiter
	state      map[string]State
	remaining  map[string]int
	registered bool
}

func (m *modelOp) decide(peer string, s State) {
	if m.state[peer] == Pending {
		m.state[peer] = s
	}
}

// TestLedgerModel drives a ledger and its ops with random registrations, fates and
// unregistrations, and checks each step against a reference model: which waiters a
// fate settles, every peer's state, whether the op can complete, and Waiting.
func TestLedgerModel(t *testing.T) {
	peers := []string{"p1", "p2", "p3"}
	keys := []string{"a", "b", "c"}
	fates := []Fate{{State: Acked}, {State: Acked}, {State: Acked}, {State: Failed, Detail: "f"}, {State: Dropped, Detail: "d"}}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 26))
		l := NewLedger[string, uint64]()
		var ops []*modelOp
		for step := range 400 {
			switch r := rng.IntN(10); {
			case r < 3: // a new op over 1..3 items, maybe with a peer failed first
				n := 1 + rng.IntN(3)
				items := make([]modelWaiter, n)
				for i := range items {
					items[i] = modelWaiter{key: keys[rng.IntN(len(keys))], version: 1 + rng.Uint64N(8)}
				}
				m := &modelOp{op: newTestOp(peers, 1+rng.IntN(3), n), need: 0, state: map[string]State{}, remaining: map[string]int{}}
				m.need = m.op.need
				for _, p := range peers {
					m.state[p], m.remaining[p] = Pending, n
				}
				if rng.IntN(4) == 0 {
					m.op.Fail(0, "breaker")
					m.state[peers[0]] = Failed
				}
				m.keys = l.Register(m.op, n, func(i int) (string, uint64) { return items[i].key, items[i].version })
				for _, p := range peers {
					if m.state[p] != Pending {
						continue
					}
					for _, it := range items {
						m.waiters = append(m.waiters, modelWaiter{peer: p, key: it.key, version: it.version})
					}
				}
				m.registered = true
				ops = append(ops, m)
			case r < 9: // a fate
				peer, key, v := peers[rng.IntN(len(peers))], keys[rng.IntN(len(keys))], 1+rng.Uint64N(8)
				f := fates[rng.IntN(len(fates))]
				wantResolved := false
				for _, m := range ops {
					kept := m.waiters[:0]
					for _, w := range m.waiters {
						if !m.registered || w.peer != peer || w.key != key || w.version > v {
							kept = append(kept, w)
							continue
						}
						wantResolved = true
						if f.State == Acked {
							if m.remaining[peer]--; m.remaining[peer] == 0 {
								m.decide(peer, Acked)
							}
						} else {
							m.decide(peer, f.State)
						}
					}
					m.waiters = kept
				}
				if got := l.Settle(Key[string]{Peer: peer, Key: key}, v, f); got != wantResolved {
					t.Fatalf("seed %d step %d: Settle(%s %s v%d) = %v, model %v", seed, step, peer, key, v, got, wantResolved)
				}
			default: // an op goes away
				if len(ops) == 0 {
					continue
				}
				m := ops[rng.IntN(len(ops))]
				l.Unregister(m.op, m.keys)
				m.registered, m.waiters = false, nil
			}
			waiting := map[Key[string]]bool{}
			for _, m := range ops {
				for _, w := range m.waiters {
					waiting[Key[string]{Peer: w.peer, Key: w.key}] = true
				}
				got, satisfied, _ := m.op.Result()
				acked, undecided := 0, 0
				for _, p := range got {
					if p.State != m.state[p.Name] {
						t.Fatalf("seed %d step %d: %s is %s, model %s", seed, step, p.Name, p.State, m.state[p.Name])
					}
					switch p.State {
					case Acked:
						acked++
					case Pending:
						undecided++
					}
				}
				if satisfied != (acked >= m.need) {
					t.Fatalf("seed %d step %d: satisfied %v with %d of %d acked", seed, step, satisfied, acked, m.need)
				}
				if decided := acked >= m.need || acked+undecided < m.need; decided && !m.op.IsCompleted() {
					if !m.op.TryComplete() {
						t.Fatalf("seed %d step %d: the model says decided (%s), TryComplete refuses", seed, step, states(m.op))
					}
				} else if !decided && m.op.TryComplete() {
					t.Fatalf("seed %d step %d: TryComplete completed an undecided op (%s)", seed, step, states(m.op))
				}
			}
			if l.Waiting() != len(waiting) {
				t.Fatalf("seed %d step %d: Waiting %d, model %d", seed, step, l.Waiting(), len(waiting))
			}
		}
	}
}
