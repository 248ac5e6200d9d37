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
	numLogKinds
)

// message is the log line of k.
func (k logKind) message() string {
	switch k {
	case logOverflow:
		return "batcher: pending full, dropped tasks"
	case logPermanent:
		return "batcher: permanent send failure, dropped tasks"
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

// logEvery is the pure part of rate limiting: it lets one line through per
// interval and counts what it held back meanwhile.
type logEvery struct {
	last time.Time // when the last line went out; zero: never
	held uint64    // tasks dropped since then
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

// rateLog logs drops at most once per interval per kind, with the count since the
// previous line. It is owned by the acceptor goroutine.
type rateLog struct {
	logger   *slog.Logger
	interval time.Duration
	kinds    [numLogKinds]logEvery
}

// note records n dropped tasks of kind k and logs if the interval allows. err may be
// nil.
func (r *rateLog) note(k logKind, n int, now time.Time, err error) {
	total, ok := r.kinds[k].add(n, now, r.interval)
	if !ok || !r.logger.Enabled(context.Background(), k.level()) {
		return
	}
	attrs := []any{slog.Uint64("tasks", total)}
	if err != nil {
		attrs = append(attrs, slog.Any("err", err))
	}
	r.logger.Log(context.Background(), k.level(), k.message(), attrs...)
}
