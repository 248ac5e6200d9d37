package batcher

import (
	"context"
	"log/slog"
	"time"
)

// logKind names one kind of rate-limited log line.
type logKind int

const (
	logOverflow  logKind = iota // tasks evicted from a full pending
	logPermanent                // tasks dropped by a permanent error or ItemInvalid
	logPanic                    // Process panicked
	logTooLarge                 // tasks the peer refused alone as too large
	logSplit                    // batches the peer refused as too large, split
	numLogKinds
)

// message is the log line of k.
func (k logKind) message() string {
	switch k {
	case logOverflow:
		return "batcher: pending full, dropped tasks"
	case logPermanent:
		return "batcher: permanent send failure, dropped tasks"
	case logTooLarge:
		return "batcher: the peer refused a task as too large even alone; dropped it: no batch can carry it"
	case logSplit:
		return "batcher: the peer refused a batch as too large; split it and retrying in smaller batches"
	default:
		return "batcher: Process panicked, dropped batch"
	}
}

// level is the log level of k: a panic is a bug, the rest is weather.
func (k logKind) level() slog.Level {
	if k == logPanic {
		return slog.LevelError
	}
	return slog.LevelWarn
}

// maxLoggedIDs bounds the task ids one line names.
const maxLoggedIDs = 10

// logEvery is the pure part of rate limiting: it lets one line through per
// interval and counts what it held back meanwhile.
type logEvery struct {
	last time.Time // when the last line went out; zero: never
	held uint64    // tasks dropped since then
	ids  []string  // the first maxLoggedIDs task ids noted since then
}

// add notes n more dropped tasks at now. When a line may go out it returns the
// number of tasks it should report and resets.
func (e *logEvery) add(n int, now time.Time, interval time.Duration) (uint64, bool) {
	e.held += uint64(n)
	if !e.last.IsZero() && now.Sub(e.last) < interval && now.Sub(e.last) >= 0 {
		return 0, false
	}
	total := e.held
	e.last, e.held = now, 0
	return total, true
}

// addID notes the id of a dropped task, for the next line to name.
func (e *logEvery) addID(id string) {
	if len(e.ids) < maxLoggedIDs {
		e.ids = append(e.ids, id)
	}
}

// rateLog logs drops at most once per interval per kind, with the count since the
// previous line. It is owned by the acceptor goroutine.
type rateLog struct {
	logger   *slog.Logger
	interval time.Duration
	kinds    [numLogKinds]logEvery
}

// note records n dropped tasks of kind k and logs if the interval allows, with
// extra attributes. err may be nil.
func (r *rateLog) note(k logKind, n int, now time.Time, err error, extra ...slog.Attr) {
	e := &r.kinds[k]
	total, ok := e.add(n, now, r.interval)
	if !ok {
		return
	}
	ids := e.ids
	e.ids = nil
	if !r.logger.Enabled(context.Background(), k.level()) {
		return
	}
	attrs := []any{slog.Uint64("tasks", total)}
	if len(ids) > 0 {
		attrs = append(attrs, slog.Any("task_ids", ids))
	}
	if err != nil {
		attrs = append(attrs, slog.Any("err", err))
	}
	for _, a := range extra {
		attrs = append(attrs, a)
	}
	r.logger.Log(context.Background(), k.level(), k.message(), attrs...)
}

// noteTask is note for one dropped task, whose id the line names (the first
// maxLoggedIDs since the last line of its kind).
func (r *rateLog) noteTask(k logKind, id string, now time.Time, err error) {
	r.kinds[k].addID(id)
	r.note(k, 1, now, err)
}
