package loadgen

import (
	"bytes"
	"math"
	"strconv"
)

// publisherRate splits the offered rate evenly over the publishers.
func publisherRate(rate, publishers int) float64 {
	if rate <= 0 || publishers <= 0 {
		return 0
	}
	return float64(rate) / float64(publishers)
}

// keyIndex is the hot key of a publisher's seq-th event: publishers interleave, so
// together they cycle over every key in turn.
func keyIndex(seq int64, publisher, publishers, keys int) int {
	return int((seq*int64(publishers) + int64(publisher)) % int64(keys))
}

// uniqueWindow bounds the distinct task_ids of a run without hot keys, over all
// publishers: a publisher's seq-th event is "p<publisher>-<seq mod its share>". A key
// comes back only after ~500,000 others, far more than any batcher holds (10,000 per
// peer), so nothing coalesces; and the nodes' state tables (1,000,000 keys by default)
// never fill, however long the run.
const uniqueWindow = 500_000

// taskID names an event. Hot keys are prefix+"k<index>"; unique events are
// prefix+"p<publisher>-<seq mod uniqueWindow/publishers>".
func taskID(prefix string, keys int, seq int64, publisher, publishers int) string {
	return string(appendTaskID(nil, prefix, keys, seq, publisher, publishers))
}

// appendTaskID appends taskID's name to b.
func appendTaskID(b []byte, prefix string, keys int, seq int64, publisher, publishers int) []byte {
	b = append(b, prefix...)
	if keys > 0 {
		b = append(b, 'k')
		return strconv.AppendInt(b, int64(keyIndex(seq, publisher, publishers, keys)), 10)
	}
	share := int64(max(1, uniqueWindow/publishers))
	b = append(b, 'p')
	b = strconv.AppendInt(b, int64(publisher), 10)
	b = append(b, '-')
	return strconv.AppendInt(b, seq%share, 10)
}

// parseKey returns the hot-key index of a task_id made by taskID, or false.
func parseKey(prefix string, id []byte) (int, bool) {
	rest, ok := bytes.CutPrefix(id, []byte(prefix))
	if !ok {
		return 0, false
	}
	rest, ok = bytes.CutPrefix(rest, []byte("k"))
	if !ok || len(rest) == 0 {
		return 0, false
	}
	k := 0
	for _, c := range rest { // decimal digits only, as keyID writes them
		if c < '0' || c > '9' || k > (math.MaxInt-9)/10 {
			return 0, false
		}
		k = k*10 + int(c-'0')
	}
	return k, true
}
