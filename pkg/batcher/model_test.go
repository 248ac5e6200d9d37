package batcher

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// refModel is a naive, slice-based reading of the batcher's rules (acceptor, pending, workers, outcomes), written without
// looking at core: linear scans everywhere, no recycling, no cleverness. The model
// test runs both on the same random operations and compares them after each one.
type refModel struct {
	cfg       Config[int]
	pending   []Task[int]  // processing order, oldest first
	arrived   []time.Time  // arrived[i] belongs to pending[i]
	inflight  []Task[int]  // tasks handed out and not completed
	reprocess []Task[int]  // handed back, in the order they came back
	reArrived []time.Time  // arrived of reprocess[i]
	idle      int          // workers without a batch
	lastCong  time.Time    // zero: never
	lastNet   time.Time    // zero: never
	lastOffer time.Time    // when the last non-empty offer was accepted; zero: never
	st        Stats        // counters
	fates     map[int]Fate // by task value
	calls     int          // fates given
	touched   []int        // values given a fate since the last compare
	out       []refBatch   // batches handed out, in the order they were handed out
	limit     int          // the most tasks a batch may take: MaxBatch, lowered by splits
	byteLimit int          // the most bytes a batch of several tasks may take: MaxBatchBytes, lowered by splits
	splitAt   time.Time    // when the limits last changed; zero: never
	recovery  time.Duration
	budget    budgetSetup // limit 0: no budget
	others    int         // what the budget's other accounts hold
	failing   bool        // the last batch completed did not reach the peer (network or congestion)
}

type refBatch struct {
	tasks   []Task[int]
	arrived []time.Time
}

func newRefModel(cfg Config[int]) *refModel {
	return &refModel{cfg: cfg, idle: cfg.Workers, fates: map[int]Fate{}, limit: cfg.MaxBatch, byteLimit: cfg.MaxBatchBytes,
		recovery: testSplitRecovery}
}

// size is t's size by Config.Size: 0 without one, never negative.
func (m *refModel) size(t Task[int]) int {
	if m.cfg.Size == nil {
		return 0
	}
	return max(0, m.cfg.Size(t.Value))
}

// bytes adds up the sizes of tasks.
func (m *refModel) bytes(tasks []Task[int]) int {
	n := 0
	for _, t := range tasks {
		n += m.size(t)
	}
	return n
}

// cost is what pending costs the budget, extra bytes more.
func (m *refModel) cost(extra int) int {
	return m.bytes(m.pending) + m.budget.overhead*len(m.pending) + extra
}

// overBudget: with a budget, the accounts together over its limit with pending
// extra bytes more, and pending over its share, the limit over the accounts; a
// paused batcher sees half the limit.
func (m *refModel) overBudget(extra int, now time.Time) bool {
	if m.budget.limit == 0 {
		return false
	}
	mine, limit := m.cost(extra), m.budget.limit
	if m.paused(now) || m.failing {
		limit /= 2
	}
	return m.others+mine > limit && mine > limit/m.budget.accounts
}

// evictFor drops pending[i] as overflow, for the budget if forBudget.
func (m *refModel) evictFor(i int, forBudget bool) {
	if forBudget {
		m.st.BudgetEvicted++
	}
	m.evict(i)
}

// shed is the budget's rule: while over budget, the oldest go.
func (m *refModel) shed(now time.Time) {
	for len(m.pending) > 0 && m.overBudget(0, now) {
		m.evictFor(0, true)
	}
}

// setOthers changes what the other accounts hold, and sheds.
func (m *refModel) setOthers(n int, now time.Time) {
	m.others = n
	m.shed(now)
}

// evict drops pending[i] as overflow.
func (m *refModel) evict(i int) {
	m.st.Overflow++
	m.fate(m.pending[i], FateOverflow)
	m.pending, m.arrived = slices.Delete(m.pending, i, i+1), slices.Delete(m.arrived, i, i+1)
}

func (m *refModel) fate(t Task[int], f Fate) {
	m.fates[t.Value] = f
	m.calls++
	m.touched = append(m.touched, t.Value)
}

func (m *refModel) index(id string) int {
	return slices.IndexFunc(m.pending, func(t Task[int]) bool { return t.ID == id })
}

func (m *refModel) flying(id string) bool {
	_, ok := m.flight(id)
	return ok
}

// flight returns the task in flight with this ID.
func (m *refModel) flight(id string) (Task[int], bool) {
	i := slices.IndexFunc(m.inflight, func(t Task[int]) bool { return t.ID == id })
	if i < 0 {
		return Task[int]{}, false
	}
	return m.inflight[i], true
}

// keeps reports whether earlier, a task that came first, survives later, one with
// its ID that came after it: only if Newer says earlier supersedes later.
func (m *refModel) keeps(earlier, later Task[int]) bool {
	return m.cfg.Newer != nil && m.cfg.Newer(&earlier, &later)
}

// override records that t lost to another task with its ID.
func (m *refModel) override(t Task[int]) {
	m.st.Overridden++
	m.fate(t, FateOverridden)
}

func (m *refModel) isExpired(t Task[int], now time.Time) bool {
	return !t.Expires.IsZero() && !now.Before(t.Expires)
}

func (m *refModel) accept(tasks []Task[int], now time.Time) {
	if len(tasks) > 0 {
		m.lastOffer = now
	}
	for _, t := range tasks {
		m.st.Accepted++
		if m.size(t) > m.cfg.MaxBufferBytes { // bigger than the whole buffer
			m.st.Overflow++
			m.fate(t, FateOverflow)
			continue
		}
		if m.budget.limit > 0 && m.size(t)+m.budget.overhead > m.budget.limit { // bigger than the whole budget
			m.st.Overflow++
			m.st.BudgetEvicted++
			m.fate(t, FateOverflow)
			continue
		}
		if i := m.index(t.ID); i >= 0 {
			if m.keeps(m.pending[i], t) {
				m.override(t)
				continue
			}
			m.override(m.pending[i])
			m.pending[i] = t
			for len(m.pending) > 1 { // the oldest other than t
				full := m.bytes(m.pending) > m.cfg.MaxBufferBytes
				if !full && !m.overBudget(0, now) {
					break
				}
				if m.pending[0].ID != t.ID {
					m.evictFor(0, !full)
				} else {
					m.evictFor(1, !full)
				}
			}
			continue
		}
		if f, ok := m.flight(t.ID); ok && m.keeps(f, t) {
			m.override(t)
			continue
		}
		for len(m.pending) > 0 {
			full := len(m.pending) == m.cfg.MaxBuffer || m.bytes(m.pending)+m.size(t) > m.cfg.MaxBufferBytes
			if !full && !m.overBudget(m.size(t)+m.budget.overhead, now) {
				break
			}
			m.evictFor(0, !full)
		}
		m.pending = append(m.pending, t)
		m.arrived = append(m.arrived, now)
	}
}

func (m *refModel) drainReprocess(now time.Time) {
	forBudget := false
	for len(m.reprocess) > 0 {
		last := len(m.reprocess) - 1
		t, at := m.reprocess[last], m.reArrived[last]
		// Room for the retry, whatever becomes of it.
		if len(m.pending) >= m.cfg.MaxBuffer || m.bytes(m.pending)+m.size(t) > m.cfg.MaxBufferBytes {
			break
		}
		if m.overBudget(m.size(t)+m.budget.overhead, now) {
			forBudget = true
			break
		}
		m.reprocess, m.reArrived = m.reprocess[:last], m.reArrived[:last]
		switch {
		case m.isExpired(t, now):
			m.st.Expired++
			m.fate(t, FateExpired)
		case m.index(t.ID) >= 0 && !m.keeps(t, m.pending[m.index(t.ID)]):
			m.override(t)
		default:
			if j := m.index(t.ID); j >= 0 { // the pending task came later, and t supersedes it
				m.override(m.pending[j])
				m.pending, m.arrived = slices.Delete(m.pending, j, j+1), slices.Delete(m.arrived, j, j+1)
			}
			m.pending = append([]Task[int]{t}, m.pending...)
			m.arrived = append([]time.Time{at}, m.arrived...)
		}
	}
	for _, t := range m.reprocess {
		m.st.Overflow++
		if forBudget {
			m.st.BudgetEvicted++
		}
		m.fate(t, FateOverflow)
	}
	m.reprocess, m.reArrived = nil, nil
}

func (m *refModel) paused(now time.Time) bool {
	c := !m.lastCong.IsZero() && now.Before(m.lastCong.Add(m.cfg.CongestionRetryDelay))
	n := !m.lastNet.IsZero() && now.Before(m.lastNet.Add(m.cfg.NetworkFailureRetryDelay))
	return c || n
}

func (m *refModel) due(now time.Time) bool {
	var ready []time.Time
	readyBytes := 0
	for i, t := range m.pending {
		if !m.flying(t.ID) {
			ready = append(ready, m.arrived[i])
			readyBytes += m.size(t)
		}
	}
	if len(ready) == 0 {
		return false
	}
	// The idle flush: with a window, the offers have been quiet for IdleFlush.
	quiet := m.cfg.MaxBatchingDelay > 0 && m.cfg.IdleFlush > 0 && now.Sub(m.lastOffer) >= m.cfg.IdleFlush
	full := len(ready) >= m.limit || readyBytes >= m.byteLimit
	return full || now.Sub(ready[0]) >= m.cfg.MaxBatchingDelay || quiet
}

// hasReady reports whether some pending task is not in flight.
func (m *refModel) hasReady() bool {
	return slices.ContainsFunc(m.pending, func(t Task[int]) bool { return !m.flying(t.ID) })
}

// assign returns the next batch, or nil.
func (m *refModel) assign(now time.Time) *refBatch {
	for m.idle > 0 && !m.paused(now) && m.due(now) {
		var b refBatch
		var keepT []Task[int]
		var keepA []time.Time
		full := false // stop taking: the batch is full in tasks or in bytes
		for i, t := range m.pending {
			if len(b.tasks) == m.limit {
				full = true
			}
			switch {
			case full || m.flying(t.ID):
				keepT, keepA = append(keepT, t), append(keepA, m.arrived[i])
			case m.isExpired(t, now):
				m.st.Expired++
				m.fate(t, FateExpired)
			case len(b.tasks) > 0 && m.bytes(b.tasks)+m.size(t) > m.byteLimit:
				full = true
				keepT, keepA = append(keepT, t), append(keepA, m.arrived[i])
			default:
				b.tasks, b.arrived = append(b.tasks, t), append(b.arrived, m.arrived[i])
			}
		}
		m.pending, m.arrived = keepT, keepA
		if len(b.tasks) > 0 {
			m.idle--
			m.inflight = append(m.inflight, b.tasks...)
			m.out = append(m.out, b)
			return &m.out[len(m.out)-1]
		}
	}
	return nil
}

func (m *refModel) complete(i int, r Result, now time.Time) {
	b := m.out[i]
	m.out = slices.Delete(m.out, i, i+1)
	m.idle++
	for _, t := range b.tasks {
		m.inflight = slices.DeleteFunc(m.inflight, func(f Task[int]) bool { return f.ID == t.ID })
	}
	retry := func(j int) {
		m.st.Replayed++
		m.reprocess = append(m.reprocess, b.tasks[j])
		m.reArrived = append(m.reArrived, b.arrived[j])
	}
	switch {
	case r.Class == TooLarge && len(b.tasks) == 1:
		m.st.TooLarge++
		m.fate(b.tasks[0], FateTooLarge)
	case r.Class == TooLarge: // split: half the batch's bytes at most (or tasks, if it measured < 2), and retry
		if n := m.bytes(b.tasks); n >= 2 {
			m.byteLimit = min(m.byteLimit, n/2)
		} else {
			m.limit = min(m.limit, len(b.tasks)/2)
		}
		m.splitAt = now
		for j := range b.tasks {
			retry(j)
		}
	case r.Class == Success && len(r.Items) == len(b.tasks):
		m.failing = false
		if (m.limit < m.cfg.MaxBatch || m.byteLimit < m.cfg.MaxBatchBytes) && now.Sub(m.splitAt) >= m.recovery {
			m.limit = min(m.cfg.MaxBatch, 2*m.limit)
			m.byteLimit = min(m.cfg.MaxBatchBytes, 2*m.byteLimit)
			m.splitAt = now
		}
		for j, o := range r.Items {
			switch o {
			case ItemOK:
				m.st.Succeeded++
				m.fate(b.tasks[j], FateSucceeded)
			case ItemStale:
				m.st.Stale++
				m.fate(b.tasks[j], FateStale)
			case ItemBusy:
				m.st.Congestion++
				m.lastCong = now
				retry(j)
			default:
				m.st.Permanent++
				m.fate(b.tasks[j], FatePermanent)
			}
		}
	case r.Class == Congestion:
		m.failing = true
		m.st.Congestion += uint64(len(b.tasks))
		m.lastCong = now
		for j := range b.tasks {
			retry(j)
		}
	case r.Class == NetworkFailure:
		m.failing = true
		m.st.Transient += uint64(len(b.tasks))
		m.lastNet = now
		for j := range b.tasks {
			retry(j)
		}
	default:
		for _, t := range b.tasks {
			m.st.Permanent++
			m.fate(t, FatePermanent)
		}
	}
}

func (m *refModel) stats() Stats {
	s := m.st
	s.Pending = uint64(len(m.pending))
	s.PendingBytes = uint64(m.bytes(m.pending))
	s.InFlight = uint64(len(m.inflight))
	s.ReprocessQueue = uint64(len(m.reprocess))
	s.IdleWorkers = uint64(m.idle)
	return s
}

func (m *refModel) pendingStrings() []string {
	if len(m.pending) == 0 {
		return nil
	}
	return taskStrings(m.pending)
}

// randomResult draws a result for a batch of n tasks.
func randomResult(rng *rand.Rand, n int) Result {
	switch rng.IntN(7) {
	case 6:
		return Result{Class: TooLarge}
	case 0:
		return Result{Class: Congestion}
	case 1:
		return Result{Class: NetworkFailure}
	case 2:
		return Result{Class: Permanent}
	case 3:
		return Result{Class: Success, Items: make([]ItemOutcome, n+1)} // wrong length
	default:
		items := make([]ItemOutcome, n)
		for i := range items {
			items[i] = ItemOutcome(rng.IntN(5)) // 4 is not an outcome: permanent
		}
		return Result{Class: Success, Items: items}
	}
}

func TestCoreMatchesModel(t *testing.T) {
	for _, mc := range []struct {
		buffer, batch, workers int
		delay, idle            time.Duration
		newer                  bool
		bufBytes, batchBytes   int // with Size (testSize) when bufBytes > 0
		budget                 budgetSetup
	}{
		{4, 1, 1, 0, 0, false, 0, 0, budgetSetup{}},
		{5, 2, 2, 0, 0, false, 0, 0, budgetSetup{}},
		{8, 3, 3, 0, 0, false, 0, 0, budgetSetup{}},
		{6, 4, 2, 30 * time.Millisecond, 0, false, 0, 0, budgetSetup{}},
		{3, 3, 4, 10 * time.Millisecond, 0, false, 0, 0, budgetSetup{}},
		{5, 2, 2, 0, 50 * time.Millisecond, false, 0, 0, budgetSetup{}}, // IdleFlush without a window: no effect
		{6, 4, 2, 300 * time.Millisecond, 40 * time.Millisecond, false, 0, 0, budgetSetup{}},
		{8, 5, 3, 150 * time.Millisecond, 100 * time.Millisecond, false, 0, 0, budgetSetup{}},
		{3, 3, 4, 10 * time.Millisecond, 50 * time.Millisecond, false, 0, 0, budgetSetup{}}, // the window first
		{4, 1, 1, 0, 0, true, 0, 0, budgetSetup{}},
		{5, 2, 2, 0, 0, true, 0, 0, budgetSetup{}},
		{8, 3, 3, 0, 0, true, 0, 0, budgetSetup{}},
		{6, 4, 2, 30 * time.Millisecond, 0, true, 0, 0, budgetSetup{}},
		{3, 3, 4, 10 * time.Millisecond, 0, true, 0, 0, budgetSetup{}},
		{8, 5, 3, 150 * time.Millisecond, 100 * time.Millisecond, true, 0, 0, budgetSetup{}},
		// Bytes: buffers and batches that fill in bytes before they fill in tasks,
		// tasks bigger than a batch, and some bigger than the buffer (testSize).
		{8, 5, 2, 0, 0, false, 20, 8, budgetSetup{}},
		{8, 8, 3, 0, 0, true, 30, 30, budgetSetup{}},
		{6, 4, 2, 30 * time.Millisecond, 0, false, 16, 5, budgetSetup{}},
		{8, 5, 3, 150 * time.Millisecond, 100 * time.Millisecond, true, 25, 12, budgetSetup{}},
		{10, 10, 1, 0, 0, true, 12, 1, budgetSetup{}},
		// A node budget shared with other batchers whose charge moves at random:
		// evictions by the budget beside the buffer's, retries refused by it, a task
		// bigger than the whole budget, a share smaller than one task.
		{8, 5, 2, 0, 0, false, 30, 8, budgetSetup{limit: 40, accounts: 2, overhead: 3}},
		{8, 8, 3, 0, 0, true, 30, 30, budgetSetup{limit: 60, accounts: 4, overhead: 1}},
		{10, 10, 1, 0, 0, true, 35, 10, budgetSetup{limit: 25, accounts: 3, overhead: 2}},
		{6, 4, 2, 30 * time.Millisecond, 0, false, 16, 5, budgetSetup{limit: 50, accounts: 5, overhead: 0}},
		{8, 3, 3, 0, 0, false, 0, 0, budgetSetup{limit: 12, accounts: 2, overhead: 2}}, // no Size: overhead alone
	} {
		name := fmt.Sprintf("buffer=%d/batch=%d/workers=%d/delay=%v/idle=%v/newer=%v",
			mc.buffer, mc.batch, mc.workers, mc.delay, mc.idle, mc.newer)
		if mc.bufBytes > 0 {
			name += fmt.Sprintf("/bufbytes=%d/batchbytes=%d", mc.bufBytes, mc.batchBytes)
		}
		if mc.budget.limit > 0 {
			name += fmt.Sprintf("/budget=%d/accounts=%d/overhead=%d", mc.budget.limit, mc.budget.accounts, mc.budget.overhead)
		}
		t.Run(name, func(t *testing.T) {
			mod := func(c *Config[int]) {
				c.MaxBuffer, c.MaxBatch, c.Workers = mc.buffer, mc.batch, mc.workers
				c.MaxBatchingDelay, c.IdleFlush = mc.delay, mc.idle
				if mc.newer {
					c.Newer = byVersion
				}
				if mc.bufBytes > 0 {
					c.MaxBufferBytes, c.MaxBatchBytes, c.Size = mc.bufBytes, mc.batchBytes, testSize
				}
			}
			h := newHarness(t, mod)
			m := newRefModel(testConfig(mod))
			if mc.budget.limit > 0 {
				h.useBudget(mc.budget)
				m.budget = mc.budget
			}
			runModel(t, h, m, rand.New(rand.NewPCG(1, 2)), 20000)
		})
	}
}

// runModel plays steps random operations on the core and the model and compares
// them after each one. Tasks are numbered serial*versions+version, with random
// versions, so that a Newer sees them out of order.
func runModel(t *testing.T, h *harness, m *refModel, rng *rand.Rand, steps int) {
	serial := 0
	randomTasks := func() []Task[int] {
		tasks := make([]Task[int], 1+rng.IntN(4))
		for i := range tasks {
			serial++
			tasks[i] = Task[int]{ID: fmt.Sprintf("t%d", rng.IntN(10)), Value: serial*versions + rng.IntN(versions)}
			if rng.IntN(5) == 0 {
				tasks[i].Expires = h.now.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
			}
		}
		return tasks
	}
	for step := range steps {
		var op string
		switch r := rng.IntN(100); {
		case r < 40:
			tasks := randomTasks()
			op = fmt.Sprintf("offer %q", taskStrings(tasks))
			m.drainReprocess(h.now)
			m.accept(tasks, h.now)
			m.shed(h.now)
			h.offer(tasks...)
		case r < 65:
			op = "assign"
			got := h.assign()
			var want [][]string
			for b := m.assign(h.now); b != nil; b = m.assign(h.now) {
				want = append(want, taskStrings(b.tasks))
			}
			if !equalBatches(got, want) {
				t.Fatalf("step %d %s: core batches %q, model %q", step, op, got, want)
			}
			checkWake(t, step, h, m)
		case r < 85:
			if len(h.out) == 0 {
				continue
			}
			i := rng.IntN(len(h.out))
			res := randomResult(rng, len(h.out[i].tasks))
			if r < 80 {
				op = fmt.Sprintf("complete %d with %+v", i, res)
				m.complete(i, res, h.now)
				m.drainReprocess(h.now)
				m.shed(h.now)
				h.complete(i, res)
				break
			}
			// The order the acceptor never uses: an offer before the retries are
			// drained, so that a retry can meet a task that came after it.
			tasks := randomTasks()
			op = fmt.Sprintf("complete %d with %+v, then offer %q", i, res, taskStrings(tasks))
			m.complete(i, res, h.now)
			m.accept(tasks, h.now)
			m.drainReprocess(h.now)
			m.shed(h.now)
			h.completeThenOffer(i, res, tasks...)
		case m.budget.limit > 0 && rng.IntN(2) == 0: // the other batchers' charge moves
			n := rng.IntN(m.budget.limit * 3 / 2)
			op = fmt.Sprintf("others hold %d", n)
			m.setOthers(n, h.now)
			h.setOthers(n)
		default:
			d := time.Duration(rng.IntN(200)) * time.Millisecond
			op = fmt.Sprintf("advance %v", d)
			h.advance(d)
		}
		compareModel(t, step, op, h, m)
	}
}

// checkWake holds the core's nextWake, right after an assign, to the model: no
// wake-up while the model says only a completion can help, and otherwise one
// exactly when the model first has work again (the pause ends, or a batch becomes
// due by MaxBatch, MaxBatchingDelay or the idle flush), so the acceptor neither
// misses a batch nor spins.
func checkWake(t *testing.T, step int, h *harness, m *refModel) {
	t.Helper()
	d, ok := h.c.nextWake(h.now)
	if want := m.idle > 0 && m.hasReady(); ok != want {
		t.Fatalf("step %d: nextWake ok = %v, model: idle %d, ready %v", step, ok, m.idle, m.hasReady())
	}
	if !ok {
		return
	}
	if d <= 0 {
		t.Fatalf("step %d: nextWake = %v right after assign, want > 0", step, d)
	}
	at, before := h.now.Add(d), h.now.Add(d-1)
	if m.paused(h.now) {
		if !m.paused(before) || m.paused(at) {
			t.Fatalf("step %d: nextWake = %v, not the end of the pause", step, d)
		}
		return
	}
	if m.due(before) || !m.due(at) {
		t.Fatalf("step %d: nextWake = %v, but the model is due %v 1ns before and %v at it",
			step, d, m.due(before), m.due(at))
	}
}

func compareModel(t *testing.T, step int, op string, h *harness, m *refModel) {
	t.Helper()
	if got, want := h.pending(), m.pendingStrings(); !slices.Equal(got, want) {
		t.Fatalf("step %d %s: core pending %q, model %q", step, op, got, want)
	}
	if got, want := h.c.stats(), m.stats(); got != want {
		t.Fatalf("step %d %s:\ncore  %+v\nmodel %+v", step, op, got, want)
	}
	for _, val := range m.touched {
		if f := m.fates[val]; h.fates.only(val) != f {
			t.Fatalf("step %d %s: fate of %d: core %v, model %v", step, op, val, h.fates[val], f)
		}
	}
	m.touched = m.touched[:0]
	if h.calls != m.calls {
		t.Fatalf("step %d %s: core gave %d fates, model %d", step, op, h.calls, m.calls)
	}
}
