package batcher

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// t0 is the fake clock's epoch.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// tk builds a task whose Value tells the tests apart.
func tk(id string, val int) Task[int] { return Task[int]{ID: id, Value: val} }

// tkExp builds a task that expires at t0+exp.
func tkExp(id string, val int, exp time.Duration) Task[int] {
	return Task[int]{ID: id, Value: val, Expires: t0.Add(exp)}
}

// fateLog records OnFinal calls by task value.
type fateLog map[int][]Fate

func (f fateLog) record(t *Task[int], fate Fate) { f[t.Value] = append(f[t.Value], fate) }

// only returns the single fate of val, or -1 if it has none or several.
func (f fateLog) only(val int) Fate {
	if len(f[val]) != 1 {
		return -1
	}
	return f[val][0]
}

// testConfig is a small configuration for core tests; mod adjusts it.
func testConfig(mod func(*Config[int])) Config[int] {
	cfg := DefaultConfig[int]()
	cfg.MaxBuffer, cfg.MaxBatch, cfg.Workers = 10, 10, 1
	if mod != nil {
		mod(&cfg)
	}
	return cfg
}

// harness drives a core by hand with a fake clock, the way the acceptor does.
type harness struct {
	tb     testing.TB
	others *account // the other accounts' charge, with useBudget; set by setOthers
	c      *core[int]
	fates  fateLog
	calls  int // OnFinal calls
	now    time.Time
	out    []*batch[int] // batches handed out and not yet completed, oldest first
}

func newHarness(tb testing.TB, mod func(*Config[int])) *harness {
	cfg := testConfig(mod)
	if err := cfg.validate(); err != nil {
		tb.Fatal(err)
	}
	h := &harness{tb: tb, fates: fateLog{}, now: t0}
	cfg.OnFinal = func(t *Task[int], f Fate) {
		h.calls++
		h.fates.record(t, f)
	}
	h.c = newCore(&cfg)
	h.c.splitRecovery = testSplitRecovery
	return h
}

// testSplitRecovery shortens splitRecovery in the harness and the model, so that the
// batch limit doubles back within a test's few seconds of fake time.
const testSplitRecovery = 300 * time.Millisecond

// testSize is a Config.Size for the model and fuzz tests: 0 to 14 by the value, and
// now and then 20 more, so that some tasks are bigger than a whole buffer.
func testSize(v int) int {
	n := v * 7 % 15
	if v%23 == 0 {
		n += 20
	}
	return n
}

// offer runs one acceptor step for an Offer of tasks (retries first, then the
// offer) and checks the core's invariants.
func (h *harness) offer(tasks ...Task[int]) {
	h.c.drainReprocess(h.now)
	h.c.accept(tasks, h.now)
	h.c.shed(h.now)
	h.check()
}

// assign hands out every batch that is due and returns them as "id:val" lists.
func (h *harness) assign() [][]string {
	var got [][]string
	for {
		b, ok := h.c.assign(h.now)
		if !ok {
			break
		}
		h.out = append(h.out, b)
		got = append(got, taskStrings(b.tasks))
	}
	h.check()
	return got
}

// complete completes the i-th outstanding batch with r and drains the retries, as
// the acceptor does when a worker reports.
func (h *harness) complete(i int, r Result) {
	b := h.out[i]
	h.out = slices.Delete(h.out, i, i+1)
	b.result = r
	h.c.complete(b, h.now)
	h.c.drainReprocess(h.now)
	h.c.shed(h.now)
	h.check()
}

// completeThenOffer completes the i-th outstanding batch with r, accepts tasks and
// only then drains the retries: an order the acceptor never uses (it drains right
// after a completion), which lets a retry meet a task that came while its ID was
// neither pending nor in flight. The core must stay correct in any order.
func (h *harness) completeThenOffer(i int, r Result, tasks ...Task[int]) {
	b := h.out[i]
	h.out = slices.Delete(h.out, i, i+1)
	b.result = r
	h.c.complete(b, h.now)
	h.c.accept(tasks, h.now)
	h.c.drainReprocess(h.now)
	h.c.shed(h.now)
	h.check()
}

// byValue is a Config.Newer for tests whose Value is the version.
func byValue(a, b *Task[int]) bool { return a.Value > b.Value }

// versions: the model and fuzz tests number their tasks serial*versions+version, so
// that values stay unique while versions repeat and come out of order.
const versions = 10

// byVersion is a Config.Newer for tasks numbered serial*versions+version.
func byVersion(a, b *Task[int]) bool { return a.Value%versions > b.Value%versions }

// ok completes the i-th outstanding batch with every item OK.
func (h *harness) ok(i int) {
	h.complete(i, Result{Class: Success, Items: make([]ItemOutcome, len(h.out[i].tasks))})
}

func (h *harness) advance(d time.Duration) { h.now = h.now.Add(d) }

// pending lists pending as "id:val" in processing order.
func (h *harness) pending() []string {
	var got []string
	for x := h.c.order.head; x != nil; x = x.next {
		got = append(got, fmt.Sprintf("%s:%d", x.task.ID, x.task.Value))
	}
	return got
}

func (h *harness) check() {
	h.tb.Helper()
	if err := checkCore(h.c); err != nil {
		h.tb.Fatal(err)
	}
}

func taskStrings(tasks []Task[int]) []string {
	s := make([]string, len(tasks))
	for i, t := range tasks {
		s[i] = fmt.Sprintf("%s:%d", t.ID, t.Value)
	}
	return s
}

// checkCore verifies the core's invariants.
func checkCore[T any](c *core[T]) error {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	n, parked := 0, 0
	var prev *holder[T]
	for h := c.order.head; h != nil; prev, h = h, h.next {
		n++
		if h.prev != prev {
			fail("%q: prev link broken", h.task.ID)
		}
		if !h.waiting || c.ids.get(h.task.ID) != h {
			fail("%q: in order but waiting=%v, ids has %p", h.task.ID, h.waiting, c.ids.get(h.task.ID))
		}
		if h.flying {
			parked++
		}
	}
	if c.order.tail != prev {
		fail("tail is not the last holder")
	}
	checkBytes(c, fail)
	checkBudget(c, fail)
	if n != c.order.n || n > c.maxBuffer {
		fail("order has %d, order.n %d, MaxBuffer %d", n, c.order.n, c.maxBuffer)
	}
	if parked != c.parked {
		fail("parked: counted %d, core says %d", parked, c.parked)
	}
	waiting, flying := 0, 0
	if err := c.ids.check(); err != nil {
		fail("%v", err)
	}
	c.ids.all(func(h *holder[T]) {
		if c.ids.get(h.task.ID) != h || !h.waiting && !h.flying {
			fail("ids holds %q at %p, finds %p; waiting=%v flying=%v", h.task.ID, h, c.ids.get(h.task.ID), h.waiting, h.flying)
		}
		if h.waiting {
			waiting++
		}
		if h.flying {
			flying++
		}
		checkSent(c, h, fail)
	})
	if waiting != n || flying != c.flying {
		fail("ids: %d waiting, %d flying; order %d, core says %d flying", waiting, flying, n, c.flying)
	}
	if c.idle < 0 {
		fail("idle %d < 0", c.idle)
	}

	if len(errs) > 0 {
		return fmt.Errorf("core invariants: %s", strings.Join(errs, "; "))
	}
	return nil
}

// checkBytes verifies the byte counts: bytes and parkedBytes add up the sizes of the
// waiting and the parked holders, each of which is its task's size; pending is
// within MaxBufferBytes; the batch limit is within 1..MaxBatch.
func checkBytes[T any](c *core[T], fail func(string, ...any)) {
	bytes, parked := 0, 0
	for h := c.order.head; h != nil; h = h.next {
		if h.size != c.sizeOf(&h.task) {
			fail("%q: size %d, Size says %d", h.task.ID, h.size, c.sizeOf(&h.task))
		}
		bytes += h.size
		if h.flying {
			parked += h.size
		}
	}
	if bytes != c.bytes || parked != c.parkedBytes {
		fail("bytes: counted %d (%d parked), core says %d (%d parked)", bytes, parked, c.bytes, c.parkedBytes)
	}
	if c.bytes > c.maxBufferBytes {
		fail("pending holds %d bytes, MaxBufferBytes %d", c.bytes, c.maxBufferBytes)
	}
	c.ids.all(func(h *holder[T]) {
		if !h.waiting && h.size != 0 {
			fail("%q: only flying, size %d", h.task.ID, h.size)
		}
	})
	if c.batchLimit < 1 || c.batchLimit > c.maxBatch {
		fail("batch limit %d, MaxBatch %d", c.batchLimit, c.maxBatch)
	}
	if c.batchBytesLimit < 1 || c.batchBytesLimit > c.maxBatchBytes {
		fail("batch bytes limit %d, MaxBatchBytes %d", c.batchBytesLimit, c.maxBatchBytes)
	}
}

// checkSent verifies h.sent: set exactly while h flies with Newer set, pointing at a
// task of h's ID, and never superseding the task parked behind it.
func checkSent[T any](c *core[T], h *holder[T], fail func(string, ...any)) {
	if want := h.flying && c.newer != nil; (h.sent != nil) != want {
		fail("%q: sent set %v, flying=%v, Newer set %v", h.task.ID, h.sent != nil, h.flying, c.newer != nil)
		return
	}
	if h.sent == nil {
		return
	}
	if h.sent.ID != h.task.ID {
		fail("%q: sent points at %q", h.task.ID, h.sent.ID)
	}
	if h.waiting && c.newer(h.sent, &h.task) {
		fail("%q: the parked task is superseded by the one in flight", h.task.ID)
	}
}

// budgetSetup is a Budget for the model and fuzz tests: limit bytes shared by
// accounts accounts (the core's and accounts-1 others), overhead bytes per task.
type budgetSetup struct{ limit, accounts, overhead int }

// useBudget makes the core share a Budget as bs says, before any operation. The
// others' charge sits on one account, set by setOthers.
func (h *harness) useBudget(bs budgetSetup) {
	b, err := NewBudget(bs.limit)
	if err != nil {
		h.tb.Fatal(err)
	}
	h.c.budget, h.c.acct, h.c.overhead = b, b.open(), bs.overhead
	h.others = b.open()
	for range bs.accounts - 2 {
		b.open()
	}
}

// setOthers sets what the other accounts hold to n bytes and runs the step the
// budget's nudge would wake.
func (h *harness) setOthers(n int) {
	d := int64(n) - h.others.charged.Load()
	h.others.charged.Store(int64(n))
	h.c.budget.used.Add(d)
	h.c.shed(h.now)
	h.check()
}

// checkBudget verifies the budget's invariants: after each entry point the core has
// flushed what pending costs, and the budget's total is its accounts' charges.
func checkBudget[T any](c *core[T], fail func(string, ...any)) {
	if c.budget == nil {
		return
	}
	if c.charged != c.charge() || c.acct.charged.Load() != int64(c.charged) {
		fail("budget: charged %d (account %d), pending costs %d", c.charged, c.acct.charged.Load(), c.charge())
	}
	sum := int64(0)
	for a := range c.budget.accounts {
		sum += a.charged.Load()
	}
	if used := c.budget.used.Load(); used != sum {
		fail("budget: used %d, accounts hold %d", used, sum)
	}

}
