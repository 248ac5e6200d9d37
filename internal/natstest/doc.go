// Package natstest runs a real NATS JetStream cluster for tests: N nats-server
// processes on loopback, each its own "host", routed to each other through in-process
// TCP links that a test can cut. The JetStream transport's tests (pkg/jetstream and
// the end-to-end tests of test/e2e) run on it.
//
// # The server
//
// The server is the nats-server release that tools/go.mod pins as a Go tool
// (github.com/nats-io/nats-server/v2, as grpcurl and buf are pinned), built with the
// module proxy alone: Build runs `go build -modfile=tools/go.mod` in the product's
// checkout (internal/testbin.BuildTool). A test binary builds it once, in TestMain,
// into a directory it removes at the end; Go's build cache turns every build after
// the first into a link of a second or two:
//
//	var serverBin string // the pinned nats-server, built by TestMain
//
//	func TestMain(m *testing.M) { os.Exit(run(m)) }
//
//	func run(m *testing.M) int {
//		dir, err := os.MkdirTemp("", "mytest-")
//		if err != nil { ...; return 1 }
//		defer os.RemoveAll(dir)
//		if serverBin, err = natstest.Build(dir); err != nil { ...; return 1 }
//		return m.Run()
//	}
//
// Config.Binary may name another build: TestCASOnDebianServer runs Debian's
// /usr/sbin/nats-server 2.9.10 (installed for `make bench-compare`) to show what the
// pinned release fixes: on an R3 stream, two concurrent publishes with the same
// Nats-Expected-Last-Subject-Sequence both win on 2.9.10 in most rounds, and exactly
// one wins on the pinned release (the loser gets error 10071, or 10164, which
// replicated streams answer since 2.12: check both).
//
// # A test's cluster
//
//	cfg := natstest.DefaultConfig() // 3 servers, 30 s ReadyTimeout
//	cfg.Binary = serverBin
//	c := natstest.Start(t, cfg)
//	nc := c.Connect(0)              // or nats.Connect(strings.Join(c.URLs(), ","))
//	...
//	c.Kill(c.Leader("KV_x"))        // SIGKILL the stream's leader
//	c.Leader("KV_x")                // waits for the next one
//
// Server i is named "n<i>" (its server_name, as JetStream names leaders and replicas)
// and listens on its own loopback address, 127.0.0.(21+i) (Linux routes all of
// 127.0.0.0/8 to the loopback interface), so that logs and peer lists tell the servers
// apart as hosts. Its client, route and monitoring (HTTP) ports, one more port for its
// advertised route address, and one port per link are reserved with internal/freeport,
// so they stay the same across a restart. Each server has a directory from
// t.TempDir() with its configuration file (nats.conf), its JetStream store (store/)
// and its log (nats.log, appended to across restarts). JetStream is bounded to 256 MB
// of memory and 2 GB of files per server. With one server there is no cluster block:
// JetStream runs standalone.
//
// Start returns once every server answers, which means: it has a route to every other
// server that runs and is not cut off from it; its /healthz says JetStream is current
// with its meta leader and every stream it holds; it sees the same leader of each of
// its streams as the other servers do; and a client connected to it alone gets the
// account's JetStream info (nats.go's jetstream AccountInfo, which needs an elected
// meta leader). Start then waits until the meta leader places a stream on
// min(Servers, 5) servers (it creates and deletes the stream natstest_probe): a fresh
// meta leader refuses placement ("no suitable peers") until it has heard every peer's
// statistics, which comes shortly after the election. The servers are other
// processes with no event to wait on, so the helper polls them every 100 ms, up to
// Config.ReadyTimeout; a wait that runs out fails the test naming what it waited for
// and the last reason, and a server that dies meanwhile fails it at once with the end
// of its log.
//
// # Faults
//
//   - Kill(i): SIGKILL, and wait for the exit.
//   - Stop(i): SIGTERM (a clean shutdown; JetStream hands over its leaderships), and
//     wait for the exit.
//   - Start(i): the same server again (same name, ports, store and configuration),
//     waited for as above. Its leaders may not yet know it caught up: WaitCurrent(s)
//     waits until stream s's leader reports every replica current and every server
//     holding s agrees on its leader and last sequence.
//   - Leader(s): the index of stream s's leader, as a server that runs and is not
//     partitioned reports it; it waits (a Raft election takes 4–9 s) for a leader that
//     is itself up and not partitioned.
//   - Partition(i) and Heal(i): see below.
//
// # Links and partitions
//
// Server i never dials another server directly. For every ordered pair (i, j) there
// is a link, a TCP proxy in the test process that listens on i's address and forwards
// to j's route port, and i's configuration lists its links as its routes. (A link
// only needs to carry, cut and heal; toxiproxy, which test/e2e uses for slow links,
// is not a dependency of the product's module, where this package lives.) Gossip
// could still make a route around the links: a server that hears of another before
// its own route to it is up dials the address the other advertises. So each server
// advertises a route address where nothing listens; such a dial is refused once and
// not retried (NATS retries only configured routes), and every route that exists goes
// through a link.
//
// Partition(i) cuts every link from or to i: their connections are closed, and every
// new one is closed as soon as it is accepted, so the servers see their routes reset
// (not black-holed) and redial about once a second. i is then alone: an R3 stream it
// led elects another leader among the others, and i acknowledges no write. Its
// clients stay connected to it (its client port is untouched); a client that must
// stay on i passes nats.NoReconnect. Heal(i) puts back the links between i and every
// server that is not itself partitioned, and waits until i answers as above; a
// server that led a stream while cut off keeps believing it leads until it hears the
// next term, which that wait covers.
//
// # Cleanup
//
// The test's cleanup kills every server, closes every link (waiting for its
// goroutines: the package's tests check for leaks with goleak) and releases the ports;
// if the test failed it prints the last 80 lines of each server's log. On Linux a
// server also dies with the test process (testbin.ProcAttr). Every method must be
// called from the test's goroutine: a failure ends the test.
package natstest
