package batcher

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// holdGate holds dispatch for good: the peer of a batcher gated by it is dead.
type holdGate struct{}

func (holdGate) Hold(time.Time) time.Duration { return time.Hour }

// waitFor waits, checking every 10ms up to waitTimeout, until cond holds; what names it.
func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, waitTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// budgetTasks are n tasks of distinct IDs, each of size 100 by byValueSize.
func budgetTasks(from, n int) []Task[int] {
	tasks := make([]Task[int], n)
	for i := range tasks {
		tasks[i] = Task[int]{ID: fmt.Sprintf("k%d", from+i), Value: 100}
	}
	return tasks
}

// TestBudgetSharedByBatchers runs batchers over one budget as a node runs its peers:
// three dead peers (their gate holds) and a live one, every offer to all four. The
// dead ones fill the budget and then lose their oldest tasks, each kept to about its
// share; the live one loses nothing; closing the dead ones returns their charge.
func TestBudgetSharedByBatchers(t *testing.T) {
	const tasks, per = 2000, 50
	cost := 100 + taskOverhead[int]()
	budget, err := NewBudget(200 * cost) // 50 tasks a peer at the share
	if err != nil {
		t.Fatal(err)
	}
	mod := func(gate Gate) func(*Config[int]) {
		return func(c *Config[int]) {
			c.Size, c.Budget, c.Gate = byValueSize, budget, gate
		}
	}
	var dead []*Batcher[int]
	for range 3 {
		b, _ := newTestBatcher(t, ProcessorFunc[int](func(context.Context, []Task[int]) Result { panic("a dead peer is never sent to") }), mod(holdGate{}))
		dead = append(dead, b)
	}
	live, sink := newTestBatcher(t, okProcessor(250), mod(nil))
	for i := 0; i < tasks; i += per {
		batch := budgetTasks(i, per)
		for _, b := range append([]*Batcher[int]{live}, dead...) {
			offer(t, b, batch...)
		}
		drain(t, live) // a live peer sends as fast as it is offered
	}
	for _, b := range dead {
		waitFor(t, "the dead peers took every offer", func() error {
			if s := b.Stats(); s.Accepted != tasks || s.AcceptorQueue != 0 {
				return fmt.Errorf("stats %+v", s)
			}
			return nil
		})
	}
	if s := live.Stats(); s.Succeeded != tasks || s.BudgetEvicted != 0 {
		t.Errorf("the live peer: %+v, want all %d succeeded and none evicted", s, tasks)
	}
	succeeded := 0 // every task is valued 100
	for _, f := range sink.snapshot()[100] {
		if f == FateSucceeded {
			succeeded++
		}
	}
	if succeeded != tasks {
		t.Errorf("the live peer: %d tasks succeeded, want %d", succeeded, tasks)
	}
	held := 0 // the dead peers are held: half the budget between them
	for i, b := range dead {
		s := b.Stats()
		held += int(s.Pending) * cost
		if s.Overflow != s.BudgetEvicted {
			t.Errorf("dead peer %d: %+v, want every eviction for the budget", i, s)
		}
	}
	st := budget.Stats()
	if held > budget.limit/2 || st.Used != int64(held) || st.Accounts != 4 || st.Evicted != 3*tasks-uint64(held/cost) {
		t.Errorf("budget %+v: the dead peers hold %d bytes; want at most half the limit, all of it used, 4 accounts, "+
			"every other task evicted", st, held)
	}
	for _, b := range dead {
		b.Close()
	}
	if st := budget.Stats(); st.Used != 0 || st.Accounts != 1 {
		t.Errorf("budget after the dead peers closed: %+v, want nothing used, 1 account", st)
	}
}

// TestBudgetNudgesTheLargest: a batcher within its share that takes the budget over
// half its limit wakes the ones over their share, and a held one among them sheds
// without waiting for an offer of its own.
func TestBudgetNudgesTheLargest(t *testing.T) {
	cost := 100 + taskOverhead[int]()
	budget, err := NewBudget(100 * cost)
	if err != nil {
		t.Fatal(err)
	}
	dead, _ := newTestBatcher(t, okProcessor(250), func(c *Config[int]) {
		c.Size, c.Budget, c.Gate = byValueSize, budget, holdGate{}
	})
	// A live peer that waits to fill a batch: its tasks stay pending.
	live, _ := newTestBatcher(t, okProcessor(250), func(c *Config[int]) {
		c.Size, c.Budget, c.MaxBatchingDelay = byValueSize, budget, time.Hour
	})
	offer(t, dead, budgetTasks(0, 100)...) // held: it keeps half the budget, 50 tasks
	waitFor(t, "the dead peer to hold half the budget", func() error {
		if s := dead.Stats(); s.Accepted != 100 || budget.Stats().Used != int64(50*cost) {
			return fmt.Errorf("dead %+v, budget %+v", s, budget.Stats())
		}
		return nil
	})
	// Within its share: the dead one makes room, down to its share of half the
	// budget (25 tasks), the most a held peer keeps while the budget is over half.
	offer(t, live, budgetTasks(1000, 30)...)
	waitFor(t, "the dead peer to shed, offered nothing", func() error {
		if s := dead.Stats(); s.Pending != 25 {
			return fmt.Errorf("dead %+v, budget %+v", s, budget.Stats())
		}
		return nil
	})
	if s := dead.Stats(); s.BudgetEvicted != 75 {
		t.Errorf("the dead peer: %+v, want its 75 oldest evicted", s)
	}
	if s := live.Stats(); s.Pending != 30 || s.Overflow != 0 {
		t.Errorf("the live peer: %+v, want its 30 pending", s)
	}
	if st := budget.Stats(); st.Used != int64(55*cost) || st.Evicted != 75 {
		t.Errorf("budget %+v, want 55 tasks used, 75 evicted", st)
	}
}

func TestNewBudget(t *testing.T) {
	for _, limit := range []int{0, -1} {
		if _, err := NewBudget(limit); err == nil {
			t.Errorf("NewBudget(%d): no error", limit)
		}
	}
}
