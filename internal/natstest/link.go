package natstest

import (
	"io"
	"net"
	"sync"
	"time"
)

// linkDialTimeout bounds the link's connect to its server: on loopback a live server
// accepts at once and a dead one refuses at once, so this only matters on a machine
// that stalls.
const linkDialTimeout = 2 * time.Second

// link is the TCP proxy that carries every route connection server from dials to
// server to: it listens on from's address and forwards to to's route port. Cutting it
// closes every connection it carries and every new one as soon as it is accepted, so
// the two servers see their routes reset (not black-holed) and keep redialing, about
// once a second, until the link is healed.
type link struct {
	from, to int
	ln       net.Listener
	upstream string         // to's route listener, host:port
	wg       sync.WaitGroup // the accept loop and both goroutines of every pipe

	mu     sync.Mutex
	cut    bool                  // guarded by mu
	closed bool                  // guarded by mu; once true, never false
	conns  map[net.Conn]struct{} // guarded by mu: both ends of every open pipe; empty while cut or closed
}

// listenLink starts a link on addr forwarding to upstream; close stops it.
func listenLink(from, to int, addr, upstream string) (*link, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &link{from: from, to: to, ln: ln, upstream: upstream, conns: make(map[net.Conn]struct{})}
	l.wg.Add(1)
	go l.serve()
	return l, nil
}

// addr is where the link listens: the route address from's configuration names.
func (l *link) addr() string { return l.ln.Addr().String() }

// serve accepts until the listener is closed.
func (l *link) serve() {
	defer l.wg.Done()
	for {
		down, err := l.ln.Accept()
		if err != nil {
			return // closed by close; a TCP listener fails for nothing else here
		}
		if !l.track(down) {
			down.Close()
			continue
		}
		l.wg.Add(1)
		go l.pipe(down)
	}
}

// pipe connects down to the upstream server and copies both ways until either side
// closes, or cut or close closes both.
func (l *link) pipe(down net.Conn) {
	defer l.wg.Done()
	up, err := net.DialTimeout("tcp", l.upstream, linkDialTimeout)
	if err != nil {
		l.drop(down) // the server is down: the dialer sees its route close and retries
		return
	}
	if !l.track(up) {
		up.Close()
		l.drop(down)
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		io.Copy(up, down) //nolint:errcheck // either side closing ends the pipe
		l.drop(up)
		l.drop(down)
	}()
	io.Copy(down, up) //nolint:errcheck // as above
	l.drop(down)
	l.drop(up)
}

// track records c as open; it reports false if the link is cut or closed, and then
// the caller closes c.
func (l *link) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut || l.closed {
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

// drop closes c and forgets it.
func (l *link) drop(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	c.Close()
}

// setCut cuts the link (closing every connection it carries) or heals it.
func (l *link) setCut(cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = cut
	if cut {
		l.closeAllLocked()
	}
}

func (l *link) closeAllLocked() {
	for c := range l.conns {
		c.Close()
		delete(l.conns, c)
	}
}

// close stops the link and waits for its goroutines. It is idempotent.
func (l *link) close() {
	l.mu.Lock()
	l.closed = true
	l.closeAllLocked()
	l.mu.Unlock()
	l.ln.Close()
	l.wg.Wait()
}
