package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// Reading a node's state table with Get, and comparing it with what the
// origins accepted.

// getIDsChunk is how many task_ids one Get asks for (the API takes up to 10000); small
// enough that a page of large payloads stays under a client's 4 MiB receive limit.
const getIDsChunk = 1000

// stateEntry is one task of a node's state table, as Get returns it.
type stateEntry struct {
	Stamp    stamp
	Payload  []byte
	Revision uint64
}

func entryOf(e *fanoutv1.Entry) stateEntry {
	return stateEntry{
		Stamp:    stamp{Version: e.GetEvent().GetVersion(), Origin: e.GetOriginNode()},
		Payload:  e.GetEvent().GetPayload(),
		Revision: e.GetRevision(),
	}
}

// getIDs reads ids from node n with Get. Missing and deleted tasks are not in the
// result.
func getIDs(n *node, ids []string) (map[string]stateEntry, error) {
	out := make(map[string]stateEntry, len(ids))
	for chunk := range slices.Chunk(ids, getIDsChunk) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := n.client().Get(ctx, &fanoutv1.GetRequest{TaskIds: chunk})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("Get of %d task_ids on node %s: %w", len(chunk), n.spec.ID, err)
		}
		for _, e := range resp.GetEntries() {
			if err := putEntry(out, e); err != nil {
				return nil, fmt.Errorf("Get on node %s: %w", n.spec.ID, err)
			}
		}
	}
	return out, nil
}

// getPrefix lists every task under prefix on node n, page by page. A task changed
// while paging may come twice; the newer entry is kept.
func getPrefix(n *node, prefix string) (map[string]stateEntry, error) {
	out := make(map[string]stateEntry)
	token := ""
	for page := 0; ; page++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := n.client().Get(ctx, &fanoutv1.GetRequest{Prefix: prefix, PageToken: token})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("Get prefix %q page %d on node %s: %w", prefix, page, n.spec.ID, err)
		}
		for _, e := range resp.GetEntries() {
			if err := putEntry(out, e); err != nil {
				return nil, fmt.Errorf("Get prefix %q on node %s: %w", prefix, n.spec.ID, err)
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
}

// putEntry adds e to m, keeping the newer entry of a task that is already there.
func putEntry(m map[string]stateEntry, e *fanoutv1.Entry) error {
	if e.GetEvent() == nil {
		return fmt.Errorf("an entry without an event: %v", e)
	}
	if e.GetEvent().GetDeleted() {
		return fmt.Errorf("entry %q at %d is a tombstone; Get omits deleted keys", e.GetEvent().GetTaskId(), e.GetEvent().GetVersion())
	}
	id, got := e.GetEvent().GetTaskId(), entryOf(e)
	if cur, ok := m[id]; !ok || got.Stamp.newerThan(cur.Stamp) {
		m[id] = got
	}
	return nil
}

// diffState compares the state table of the node named node (got) with the winners
// (want) and returns an error naming the first task, in sorted order, that differs,
// and how many do; nil if none. A task whose winner is a deletion must be absent; a
// task in got that want does not know is an error. With partial (a node that lost its
// memory in a restart), a task may be missing, but whatever the node holds must be
// the winner.
func diffState(node string, got map[string]stateEntry, want map[string]expected, partial bool) error {
	var problems []string
	for _, id := range slices.Sorted(maps.Keys(want)) {
		w := want[id]
		g, ok := got[id]
		switch {
		case ok && w.Deleted:
			problems = append(problems, fmt.Sprintf("task %q holds %s, want deleted at %s", id, g.Stamp, w.Stamp))
		case !ok && !w.Deleted && !partial:
			problems = append(problems, fmt.Sprintf("task %q missing, want %s", id, w.Stamp))
		case ok && g.Stamp != w.Stamp:
			problems = append(problems, fmt.Sprintf("task %q holds %s, want %s", id, g.Stamp, w.Stamp))
		case ok && w.Payload != nil && !bytes.Equal(g.Payload, w.Payload):
			problems = append(problems, fmt.Sprintf("task %q at %s holds payload %.40q, want %.40q", id, g.Stamp, g.Payload, w.Payload))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[id]; !ok {
			problems = append(problems, fmt.Sprintf("task %q (at %s) was never accepted by any origin", id, got[id].Stamp))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("node %s: Get differs from the winners in %d tasks of %d; first: %s", node, len(problems), len(want), problems[0])
	}
	return nil
}

// stateStatus returns n's GetStatus state (its state table).
func stateStatus(n *node) (*fanoutv1.StateStatus, error) {
	st, err := n.status()
	if err != nil {
		return nil, err
	}
	if st.GetState() == nil {
		return nil, fmt.Errorf("node %s: GetStatus has no state", n.spec.ID)
	}
	return st.GetState(), nil
}

// peerShare is the keys the writes of peers fill a table bounded at bound with:
// --state-max-keys less the 10 % kept for the node's own app (pkg/state, "Bounds").
func peerShare(bound int) int { return bound - bound/10 }

// waitAtBound waits until node n's state table, which only peers write to, is at
// their share of its key bound (keys = peerShare(bound), max_keys = bound) and counts
// refused peer writes, and until Get lists held tasks under prefix, each at its
// winner in l: a node at its bound refuses new keys but still takes updates of the
// keys it holds. It returns a description for the test's log.
func waitAtBound(t *testing.T, n *node, prefix string, bound, held int, l *ledger) string {
	t.Helper()
	var note string
	eventually(t, convergeTimeout, fmt.Sprintf("node %s at its peers' share of its bound of %d keys, holding %d tasks under %q at their winners", n.spec.ID, bound, held, prefix), func() error {
		st, err := stateStatus(n)
		if err != nil {
			return err
		}
		if st.GetKeys() != uint64(peerShare(bound)) || st.GetMaxKeys() != uint64(bound) || st.GetRefusedPeer() == 0 {
			return fmt.Errorf("state keys %d (want %d), max_keys %d, refused %d of peers' writes", st.GetKeys(), peerShare(bound), st.GetMaxKeys(), st.GetRefusedPeer())
		}
		got, err := getPrefix(n, prefix)
		if err != nil {
			return err
		}
		winner, _ := l.snapshot()
		if err := diffState(n.spec.ID, got, winner, true); err != nil {
			return err
		}
		if len(got) != held {
			return fmt.Errorf("Get lists %d tasks under %q, want %d", len(got), prefix, held)
		}
		note = fmt.Sprintf("%s at its bound: keys %d/%d, refused %d; it held %d of the %d new tasks, each at its winner",
			n.spec.ID, st.GetKeys(), st.GetMaxKeys(), st.GetRefused(), len(got), len(winner))
		return nil
	})
	return note
}

// waitStates waits until the state table of every node of c lists, under prefix,
// exactly the winners of l.
func waitStates(t *testing.T, c *cluster, prefix string, l *ledger) {
	t.Helper()
	winner, _ := l.snapshot()
	for _, n := range c.nodes {
		eventually(t, convergeTimeout, "node "+n.spec.ID+" holds every winner under "+prefix, func() error {
			got, err := getPrefix(n, prefix)
			if err != nil {
				return err
			}
			return diffState(n.spec.ID, got, winner, false)
		})
	}
}
