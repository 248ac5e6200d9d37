// Package persist keeps the durable copy of a node's state table: with --data-dir,
// every change the table (package state) accepts is committed to a Store
// (package store, over pebble), and an acknowledgement of QUEUED waits for it.
//
// It is a package of its own, not part of package store, because it follows the state
// table: store is a thin layer over pebble that decides nothing and knows no table,
// and this package is what joins the two. Its Store is an interface declared here, so
// the tests (and the node's) give it a store that fails or fills up on demand.
//
// # Life of a change
//
// At start the node builds a Persister (New), gives its Forgotten to the table as
// state.Config.Collected, builds the table, and calls Load: every record of the
// store is put into the table as the node's own write, a tombstone past its ttl is
// forgotten on disk too, and Loaded.Clock is the store's clock, which the node's
// clock continues above. Start then runs one goroutine that follows the table's
// revision log (state.Scan, Table.Changed) and commits everything new since its last
// commit in one batch with one fsync, in steps of at most 16 Ki entries or 8 MiB.
// Writers that arrive while a commit syncs share the next one (group commit): a
// Submit calls Wait with the revision its events got and returns when Durable
// reaches it.
//
// A commit that fails (a full disk: store.ErrDiskFull; an I/O error:
// store.ErrFailed) is tried again every Config.Retry with the same changes; its
// waiters get a *CommitError meanwhile, and Fault reports the node not ready ("disk
// full: …", "data dir failing: …") until a commit succeeds again. FaultChanged wakes
// whoever reports readiness. Close, after every writer of the table has stopped,
// commits what is left and stops the goroutine; a Wait still short of its revision
// then returns ErrStopped.
package persist
