package natstest

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// echoServer answers every line with itself until closed.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { io.Copy(c, c) }) //nolint:errcheck // ends when c closes
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// roundTrip sends a line through c and reads it back.
func roundTrip(c net.Conn) error {
	c.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck // a failure shows as a timeout
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err == nil && line != "ping\n" {
		err = errors.New("echoed " + line)
	}
	return err
}

func dialLink(t *testing.T, l *link) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLink: a link carries a connection both ways; cut closes it and every new one;
// heal carries new ones again; close waits for its goroutines (goleak in TestMain).
func TestLink(t *testing.T) {
	l, err := listenLink(0, 1, "127.0.0.21:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()

	before := dialLink(t, l)
	if err := roundTrip(before); err != nil {
		t.Fatalf("through the link: %v", err)
	}
	l.setCut(true)
	if err := roundTrip(before); err == nil {
		t.Fatal("a connection survived the cut")
	}
	if err := roundTrip(dialLink(t, l)); err == nil {
		t.Fatal("a new connection went through the cut link")
	}
	l.setCut(false)
	if err := roundTrip(dialLink(t, l)); err != nil {
		t.Fatalf("after heal: %v", err)
	}
	open := dialLink(t, l)
	if err := roundTrip(open); err != nil {
		t.Fatal(err)
	}
	l.close()
	l.close()
	if err := roundTrip(open); err == nil {
		t.Fatal("a connection survived close")
	}
}

// TestLinkUpstreamDown: a link whose server is down closes what it accepts.
func TestLinkUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	l, err := listenLink(0, 1, "127.0.0.21:0", dead)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if err := roundTrip(dialLink(t, l)); err == nil {
		t.Fatal("a connection to a dead server went through")
	}
}
