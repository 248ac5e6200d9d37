// Package freeport reserves loopback TCP ports for processes that a test or the bench
// starts later: the port must still be free when the child binds it, perhaps seconds
// after it was chosen, and again when the child is restarted on it.
//
// # Why listening on :0 is not enough
//
// The usual trick, listen on 127.0.0.1:0, read the port, close the listener and pass
// the port on, leaves a window between the close and the child's bind. In that window
// the port is back in the kernel's ephemeral range, and two kinds of neighbour take
// such ports:
//
//   - the kernel itself: every connect() without a bind autobinds its local end to an
//     ephemeral port, and so does every other listen on :0. A test machine running
//     gRPC clients makes thousands of such connections a minute.
//   - other test processes: `go test ./...` runs packages in parallel processes, each
//     choosing "free" ports on its own, and a CI machine runs several suites at once.
//
// # How a port is reserved
//
// Take hands out ports from a range outside the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range; 32768–60999 by default on Linux, so ports
// 10000–32767): neither autobinding nor :0 ever picks them, only an explicit bind to
// that very port does. Each port is reserved across processes by an exclusive, non-
// blocking flock(2) on Config.Dir/<port>.lock (os.TempDir()/fanout-ports by default),
// held on an open file until Set.Release or until the process exits, when the kernel
// drops the lock even after kill -9: no stale reservation survives its owner. The file
// is opened close-on-exec, so the children the ports are meant for do not inherit the
// lock. flock locks belong to an open file, not to a process, so two goroutines of one
// process exclude each other the same way. Finally Take binds each locked port once
// (and closes it): that skips a port some other program listens on.
//
// So a port from Take is free when Take returns and nobody that follows these rules
// takes it before Release. What remains possible is a program that binds a fixed port
// of its own inside the range after the bind check; nothing a test does makes such
// ports. Lock files are never deleted (unlinking a lock file races with a process that
// has just opened it); there is at most one empty file per port of the range.
//
// Platforms without flock (Windows) get the range and the bind check, not the lock.
package freeport
