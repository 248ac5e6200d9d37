package batcher

import "time"

// shaper is seed 000's TrafficShaper: after a failed send it holds all dispatch to
// the peer until the retry delay of that failure has passed since the last one.
// It is owned by the acceptor goroutine.
type shaper struct {
	congestionDelay time.Duration // Config.CongestionRetryDelay
	networkDelay    time.Duration // Config.NetworkFailureRetryDelay

	lastCongestion time.Time // latest congestion or ItemBusy; zero: none yet
	lastNetwork    time.Time // latest network failure; zero: none yet
}

// congestion records a congestion at now.
func (s *shaper) congestion(now time.Time) { s.lastCongestion = now }

// networkFailure records a network failure at now.
func (s *shaper) networkFailure(now time.Time) { s.lastNetwork = now }

// hold reports how much longer dispatch must wait; 0 means send now.
func (s *shaper) hold(now time.Time) time.Duration {
	return transmissionDelay(now, s.lastCongestion, s.congestionDelay, s.lastNetwork, s.networkDelay)
}

// transmissionDelay is the pure interval math of the shaper: the longer of what is
// left of the congestion pause and of the network pause. Unlike Eureka, which
// answers with the congestion pause alone while it runs, both pauses are honoured.
func transmissionDelay(now, lastCongestion time.Time, congestionDelay time.Duration,
	lastNetwork time.Time, networkDelay time.Duration) time.Duration {
	return max(remaining(now, lastCongestion, congestionDelay), remaining(now, lastNetwork, networkDelay))
}

// remaining is what is left at now of a pause of delay that began at last. A zero
// last means no pause. A clock that stepped back never stretches a pause beyond
// delay.
func remaining(now, last time.Time, delay time.Duration) time.Duration {
	if last.IsZero() {
		return 0
	}
	left := last.Add(delay).Sub(now)
	return min(max(left, 0), delay)
}
