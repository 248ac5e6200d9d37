/*
Package refresh runs a function on a supervised, self-adjusting schedule: seed 001's
TimedSupervisorTask (SOFARegistry, after Eureka's class of the same name), which
fanout uses to re-resolve --peers-dns.

# The rule

An attempt runs the Func with a context that is cancelled at Config.Timeout. When it
has returned, the Task waits an interval and runs the next one. The interval starts
at Config.Interval, the base, and changes only with the outcome of an attempt:

  - Success (nil): the interval goes back to the base.
  - Timeout (the attempt was still running at Config.Timeout, or returned an error
    that Config.IsTimeout calls a timeout, such as a *net.DNSError with IsTimeout):
    the interval doubles, up to Config.Interval × Config.MaxFactor.
  - Failure (any other error): the interval stays as it is, and the error is
    logged and kept in Stats.LastError.

With the defaults, a DNS server that stops answering is asked after 30s, then 60s,
120s, 240s, and from then on every 300s; the first answer brings it back to 30s.

Why only timeouts back off: a timeout says the server is slow or overloaded, and
every sidecar of a large deployment asking it again at full rate is what keeps it
so; backing off spreads the load and costs only freshness, which a success restores
at once. A quick error (NXDOMAIN, a refused connection, SERVFAIL) costs the server
nothing, and the next attempt at the usual pace is the fastest way to see it fixed.
This is Eureka's choice; SOFARegistry kept it.

# Differences from TimedSupervisorTask

  - One goroutine, not a scheduler and an executor pool. The Java class submits the
    task to a pool, waits on the Future with a timeout, then cancels the Future
    (an interrupt the task may ignore) and schedules itself again, so an attempt
    that ignores the interrupt can still be running when the next one starts. Here
    the next attempt starts only after the previous Func has returned: never two at
    once. A Func must therefore honour its context.
  - An attempt that returns after its timeout is a timeout whatever it returns: its
    answer came late.
  - The first attempt runs at once on Start (a sidecar wants its peers now, not in
    30s); Eureka waits an initial delay.
  - Trigger asks for an attempt now, bypassing the wait (and any backoff).
  - Time is injected (Config.Clock), so tests move a fake clock instead of sleeping.

# Life of a Task

	task, err := refresh.Start(ctx, cfg, fn) // first attempt at once
	st := task.Stats()                       // from any goroutine: interval, counters, last error
	task.Trigger()                           // optional: attempt now
	task.Stop()                              // cancel a running attempt, wait for it and the goroutine

The goroutine owns the schedule (schedule, a pure state machine with its invariant
on its fields) and is the only writer of the Stats; Stats copies them under a
mutex. Stop, or the end of the context given to Start, cancels the running attempt,
waits for the Func to return and for the goroutine to exit; an attempt cut short
this way has no outcome.
*/
package refresh
