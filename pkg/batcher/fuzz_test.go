package batcher

import (
	"fmt"
	"testing"
	"time"
)

// fuzzReader hands out the fuzz bytes one at a time, then zeros.
type fuzzReader struct{ data []byte }

func (r *fuzzReader) next() int {
	if len(r.data) == 0 {
		return 0
	}
	b := r.data[0]
	r.data = r.data[1:]
	return int(b)
}

func (r *fuzzReader) done() bool { return len(r.data) == 0 }

// FuzzBatcher decodes the input into a configuration and a sequence of operations
// on the core, plays them on the reference model too, and checks after each one
// that both agree (pending, counters, batches, fates) and the invariants hold:
// pending within MaxBuffer, no ID pending twice, no in-flight ID handed out again,
// no parked task superseded by its flight, and in the end exactly one fate for
// every task. After each assign, nextWake must name exactly the moment the core
// next has work (the end of a hold, or a batch becoming due by MaxBatchingDelay or
// the idle flush). Both coalescing rules are fuzzed: without Config.Newer and with
// one that compares versions, which the input gives out of order. So are the byte
// bounds (Config.Size with MaxBufferBytes and MaxBatchBytes: pending within its bytes,
// a batch within its bytes unless it carries one task) and TooLarge results (a batch
// split, a task refused alone dropped, the batch limit doubling back).
func FuzzBatcher(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 2, 1, 0, 0, 3, 1, 2, 3, 1, 2, 0, 2, 0, 0, 2, 1, 1})
	f.Add([]byte{1, 0, 2, 1, 0, 4, 0, 0, 0, 0, 0, 1, 0, 2, 2, 1, 3, 9, 1, 0, 3})
	f.Add([]byte{7, 3, 3, 0, 8, 0, 1, 2, 3, 4, 5, 6, 7, 1, 2, 5, 3, 40, 0, 2, 2, 2, 1, 2, 0, 4})
	// IdleFlush 15ms under a 40ms window: offers, short advances, assigns, retries.
	f.Add([]byte{5, 3, 2, 5, 0, 2, 1, 2, 3, 1, 3, 2, 1, 3, 2, 1, 0, 1, 4, 1, 3, 4, 1, 2, 0, 1, 3, 9, 1})
	// Newer: t0 v5 in flight, then v3 (dropped) and v7 (parks); the flight fails and
	// yields to v7; v7 flies, fails, and its retry beats v2, offered before the drain.
	f.Add([]byte{4, 1, 2, 9, 0, 0, 0, 5, 1, 0, 1, 0, 3, 0, 7, 2, 0, 2, 3, 200, 1, 130, 0, 1, 0, 0, 2, 3, 20, 1, 2, 0, 4, 0})
	// Bytes (timing 18: Size on; 12 bytes of buffer, 5 of batch): offers of
	// several sizes, one bigger than the buffer (value 230), assigns, a split
	// (result byte 250), a task refused alone (251), a success after the split.
	f.Add([]byte{7, 4, 2, 18, 2, 5, 4, 1, 2, 3, 4, 5, 1, 2, 250, 0, 4, 6, 7, 8, 9, 1, 2, 0, 251, 1, 2, 0, 4, 1, 1, 3, 80, 1, 2, 0, 4, 0, 0, 0})
	// Newer and bytes (timing 27): coalescing that changes a waiting task's size.
	f.Add([]byte{7, 6, 3, 27, 20, 9, 0, 3, 1, 5, 1, 6, 1, 7, 0, 2, 1, 8, 1, 9, 1, 2, 0, 250, 0, 1, 2, 0, 4, 0, 0, 0})
	// A node budget (timing 36: Size on, 25 bytes of buffer, 6 of batch; a budget of
	// 41 bytes over 4 accounts, 2 of overhead a task): offers, the others' charge
	// raised past the limit (op 131), an offer that sheds, the others' charge
	// lowered, a failed batch retried into the room.
	f.Add([]byte{7, 4, 2, 36, 20, 5, 40, 3, 2, 0, 4, 1, 2, 3, 4, 0, 3, 5, 6, 7, 1, 131, 200, 0, 2, 8, 9, 1, 2, 0, 2, 131, 10, 2, 0, 2, 0, 3, 11, 12, 13, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &fuzzReader{data: data}
		buffer := 1 + r.next()%8
		batchSize := 1 + r.next()%buffer
		workers := 1 + r.next()%4
		// One byte for all three, so that older inputs (byte < 9) keep Newer nil and
		// (byte < 3) IdleFlush 0.
		timing := r.next()
		delay := time.Duration(timing%3) * 20 * time.Millisecond
		idle := time.Duration(timing/3%3) * 15 * time.Millisecond
		newer := timing/9%2 == 1
		// timing >= 18 turns Size on, with two more bytes for the bounds, so that
		// older inputs keep their meaning.
		var bufBytes, batchBytes int
		if timing >= 18 {
			bufBytes = 5 + r.next()%30
			batchBytes = 1 + r.next()%bufBytes
		}
		// timing >= 36 (with Size) shares a node budget with other batchers, with
		// three more bytes: its limit, its accounts and the overhead per task.
		var bs budgetSetup
		if timing >= 36 {
			bs = budgetSetup{limit: 1 + r.next()%60, accounts: 1 + r.next()%6, overhead: r.next() % 5}
			bs.accounts = max(bs.accounts, 2)
		}
		mod := func(c *Config[int]) {
			c.MaxBuffer, c.MaxBatch, c.Workers = buffer, batchSize, workers
			c.MaxBatchingDelay, c.IdleFlush = delay, idle
			if newer {
				c.Newer = byVersion
			}
			if bufBytes > 0 {
				c.MaxBufferBytes, c.MaxBatchBytes, c.Size = bufBytes, batchBytes, testSize
			}
		}
		fz := &fuzzRun{t: t, h: newHarness(t, mod), m: newRefModel(testConfig(mod)), r: r, outIDs: map[string]bool{}}
		if bs.limit > 0 {
			fz.h.useBudget(bs)
			fz.m.budget = bs
		}
		for step := 0; !r.done() && step < 10000; step++ {
			op := fz.step()
			compareModel(t, step, op, fz.h, fz.m)
		}
		fz.finish()
	})
}

// fuzzRun is one fuzz input being played against a harness and the model.
type fuzzRun struct {
	t      *testing.T
	h      *harness
	m      *refModel
	r      *fuzzReader
	values []int           // values handed out so far, each serial*versions+version
	outIDs map[string]bool // IDs of the outstanding batches
}

// step plays one operation and describes it. A complete op byte >= 128 offers
// before the drain; older seeds use small bytes, so they keep their meaning.
func (fz *fuzzRun) step() string {
	switch op := fz.r.next(); op % 4 {
	case 0:
		return fz.offer()
	case 1:
		return fz.assign()
	case 2:
		return fz.complete(op >= 128)
	default:
		if fz.m.budget.limit > 0 && op >= 128 { // only with a budget, so older inputs keep their meaning
			n := fz.r.next() * fz.m.budget.limit / 128
			fz.m.setOthers(n, fz.h.now)
			fz.h.setOthers(n)
			return fmt.Sprintf("others hold %d", n)
		}
		d := time.Duration(fz.r.next()) * 5 * time.Millisecond
		fz.h.advance(d)
		return fmt.Sprintf("advance %v", d)
	}
}

// tasks decodes the tasks of one offer. With Newer, each task takes one more byte
// for its version, so that inputs without Newer keep their meaning.
func (fz *fuzzRun) tasks() []Task[int] {
	tasks := make([]Task[int], 1+fz.r.next()%5)
	for i := range tasks {
		b, version := fz.r.next(), 0
		if fz.h.c.newer != nil {
			version = fz.r.next() % versions
		}
		val := (len(fz.values)+1)*versions + version
		fz.values = append(fz.values, val)
		tasks[i] = Task[int]{ID: fmt.Sprintf("t%d", b%12), Value: val}
		if b >= 200 {
			tasks[i].Expires = fz.h.now.Add(time.Duration(b-200) * 5 * time.Millisecond)
		}
	}
	return tasks
}

func (fz *fuzzRun) offer() string {
	tasks := fz.tasks()
	fz.m.drainReprocess(fz.h.now)
	fz.m.accept(tasks, fz.h.now)
	fz.m.shed(fz.h.now)
	fz.h.offer(tasks...)
	return fmt.Sprintf("offer %q", taskStrings(tasks))
}

func (fz *fuzzRun) assign() string {
	before := len(fz.h.out)
	got := fz.h.assign()
	var want [][]string
	for b := fz.m.assign(fz.h.now); b != nil; b = fz.m.assign(fz.h.now) {
		want = append(want, taskStrings(b.tasks))
	}
	if !equalBatches(got, want) {
		fz.t.Fatalf("assign: core batches %q, model %q", got, want)
	}
	for _, b := range fz.h.out[before:] {
		if len(b.tasks) == 0 || len(b.tasks) > fz.h.c.batchLimit {
			fz.h.tb.Fatalf("batch of %d tasks, batch limit %d (MaxBatch %d)", len(b.tasks), fz.h.c.batchLimit, fz.h.c.maxBatch)
		}
		if bytes := fz.m.bytes(b.tasks); len(b.tasks) > 1 && bytes > fz.h.c.batchBytesLimit {
			fz.h.tb.Fatalf("batch of %d tasks and %d bytes, batch bytes limit %d (MaxBatchBytes %d)",
				len(b.tasks), bytes, fz.h.c.batchBytesLimit, fz.h.c.maxBatchBytes)
		}
		for _, t := range b.tasks {
			if fz.outIDs[t.ID] {
				fz.h.tb.Fatalf("%q handed out while already in flight", t.ID)
			}
			fz.outIDs[t.ID] = true
		}
	}
	fz.checkWake()
	return "assign"
}

// checkWake checks nextWake right after an assign: with an idle worker and a ready
// task it names a moment > 0 away, the end of the hold if dispatch is held, else the
// first moment a batch is due; otherwise it reports false.
func (fz *fuzzRun) checkWake() {
	c, now := fz.h.c, fz.h.now
	d, ok := c.nextWake(now)
	if want := c.idle > 0 && c.order.n > c.parked; ok != want {
		fz.h.tb.Fatalf("nextWake ok = %v with %d idle, %d pending, %d parked", ok, c.idle, c.order.n, c.parked)
	}
	if !ok {
		return
	}
	if d <= 0 {
		fz.h.tb.Fatalf("nextWake = %v right after assign, want > 0", d)
	}
	if hold := c.hold(now); hold > 0 {
		if d != hold {
			fz.h.tb.Fatalf("nextWake = %v, want the end of the hold %v", d, hold)
		}
		return
	}
	if c.due(now.Add(d-1)) || !c.due(now.Add(d)) {
		fz.h.tb.Fatalf("nextWake = %v: due 1ns before %v, due at it %v (delay %v, idle flush %v)",
			d, c.due(now.Add(d-1)), c.due(now.Add(d)), c.delay, c.idleFlush)
	}
}

// complete completes an outstanding batch with a decoded result and drains its
// retries, or, if thenOffer, first accepts an offer (an order the acceptor never
// uses, see harness.completeThenOffer).
func (fz *fuzzRun) complete(thenOffer bool) string {
	if len(fz.h.out) == 0 {
		return "complete: nothing outstanding"
	}
	i := fz.r.next() % len(fz.h.out)
	b := fz.h.out[i]
	for _, t := range b.tasks {
		delete(fz.outIDs, t.ID)
	}
	var res Result
	switch k := fz.r.next(); {
	case k >= 250: // the highest bytes, so that older inputs keep their meaning
		res.Class = TooLarge
	case k%5 == 0, k%5 == 1:
		res.Class = Class(k % 5)
	case k%5 == 2:
		res.Class = NetworkFailure
	case k%5 == 3:
		res.Class = Permanent
	default:
		res.Items = make([]ItemOutcome, len(b.tasks))
		for j := range res.Items {
			res.Items[j] = ItemOutcome(fz.r.next() % 4)
		}
	}
	fz.m.complete(i, res, fz.h.now)
	if !thenOffer {
		fz.m.drainReprocess(fz.h.now)
		fz.m.shed(fz.h.now)
		fz.h.complete(i, res)
		return fmt.Sprintf("complete %d with %+v", i, res)
	}
	tasks := fz.tasks()
	fz.m.accept(tasks, fz.h.now)
	fz.m.drainReprocess(fz.h.now)
	fz.m.shed(fz.h.now)
	fz.h.completeThenOffer(i, res, tasks...)
	return fmt.Sprintf("complete %d with %+v, then offer %q", i, res, taskStrings(tasks))
}

// finish stops everything as Close does and checks that every task has exactly one
// fate and the counters add up.
func (fz *fuzzRun) finish() {
	h := fz.h
	for _, b := range h.out {
		h.c.abort(b)
	}
	h.out = nil
	h.c.stopAll()
	h.check()
	for _, v := range fz.values {
		if len(h.fates[v]) != 1 {
			h.tb.Fatalf("task %d has fates %v, want exactly one", v, h.fates[v])
		}
	}
	if len(h.fates) != len(fz.values) {
		h.tb.Fatalf("%d tasks have fates, %d were offered", len(h.fates), len(fz.values))
	}
	s := h.c.stats()
	if s.Accepted != uint64(len(fz.values)) || s.Pending != 0 || s.InFlight != 0 || s.ReprocessQueue != 0 {
		h.tb.Fatalf("stats after stop: %+v", s)
	}
	stopped := 0
	for _, f := range h.fates {
		if f[0] == FateStopped {
			stopped++
		}
	}
	ended := s.Overridden + s.Overflow + s.Expired + s.Succeeded + s.Stale + s.Permanent + s.TooLarge + uint64(stopped)
	if ended != s.Accepted {
		h.tb.Fatalf("fates add up to %d, accepted %d: %+v", ended, s.Accepted, s)
	}
}
