package fanout

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"unicode/utf8"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/state"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Bounds of one Get page.
const (
	// defaultGetLimit is a page's entries when the request sets no limit.
	defaultGetLimit = 1000
	// getPageBytes caps a page's encoded entries (events, origins and stamps), well
	// under the 4 MiB gRPC clients accept by default; a single larger entry is
	// returned alone.
	getPageBytes = 1 << 20
)

// Get reads the state table: the entries of task_ids, or one page of the
// entries under prefix in revision order. Deleted keys are omitted.
func (n *Node) Get(req *fanoutv1.GetRequest) (*fanoutv1.GetResponse, error) {
	if err := n.validateGet(req); err != nil {
		return nil, err
	}
	resp := &fanoutv1.GetResponse{Revision: n.table.Revision()}
	if ids := req.GetTaskIds(); len(ids) > 0 {
		for _, id := range ids {
			if e, ok := n.table.Get([]byte(id)); ok && !e.Deleted {
				en, err := toEntry(&e)
				if err != nil {
					return nil, err
				}
				resp.Entries = append(resp.Entries, en)
			}
		}
		return resp, nil
	}
	return resp, n.list(req, resp)
}

// list fills resp with one page of the entries under req's prefix.
func (n *Node) list(req *fanoutv1.GetRequest, resp *fanoutv1.GetResponse) error {
	after, err := parsePageToken(req.GetPageToken())
	if err != nil {
		return err
	}
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = defaultGetLimit
	}
	prefix := []byte(req.GetPrefix())
	// Entries measured as encoded, origin and stamps included: 10,000 entries from
	// nodes with long ids are megabytes beyond their events.
	s := state.Scan{After: after, Keep: func(e *state.Entry) bool { return bytes.HasPrefix(e.Key, prefix) }, Cost: batchItemSize}
	var page []state.Entry
	size := 0
	for len(page) < limit && size < getPageBytes && !n.table.Done(&s) {
		s.MaxEntries, s.MaxBytes = limit-len(page), getPageBytes-size
		before, from := len(page), s.After
		if page, err = n.table.Next(&s, page); err != nil {
			return err
		}
		if len(page) == before && s.After == from {
			break // the next entry does not fit what is left of the page: it starts the next
		}
		for i := range page[before:] {
			size += batchItemSize(&page[before+i])
		}
	}
	for i := range page {
		en, err := toEntry(&page[i])
		if err != nil {
			return err
		}
		resp.Entries = append(resp.Entries, en)
	}
	if !n.table.Done(&s) {
		resp.NextPageToken = pageToken(s.After)
	}
	return nil
}

func (n *Node) validateGet(req *fanoutv1.GetRequest) error {
	l := n.cfg.Limits
	ids := req.GetTaskIds()
	if len(ids) > l.MaxEvents {
		return invalid("task_ids", "%d ids, at most %d per request", len(ids), l.MaxEvents)
	}
	if len(ids) > 0 && (req.GetPrefix() != "" || req.GetPageToken() != "" || req.GetLimit() != 0) {
		return invalid("task_ids", "set with prefix, limit or page_token: read by ids, or list a prefix, not both")
	}
	for i, id := range ids {
		if id == "" || len(id) > l.MaxTaskIDBytes || !utf8.ValidString(id) {
			return invalid(fmt.Sprintf("task_ids[%d]", i), "must be 1..%d bytes of UTF-8", l.MaxTaskIDBytes)
		}
	}
	if p := req.GetPrefix(); len(p) > l.MaxTaskIDBytes || !utf8.ValidString(p) {
		return invalid("prefix", "must be at most %d bytes of UTF-8", l.MaxTaskIDBytes)
	}
	if lim := req.GetLimit(); lim > uint32(l.MaxEvents) {
		return invalid("limit", "%d, at most %d", lim, l.MaxEvents)
	}
	return nil
}

// A page token is the revision the listing has read up to, opaque to clients.
func pageToken(after uint64) string {
	return base64.RawURLEncoding.EncodeToString(binary.AppendUvarint([]byte{'r'}, after))
}

func parsePageToken(tok string) (uint64, error) {
	if tok == "" {
		return 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err == nil && len(b) > 1 && b[0] == 'r' {
		if after, n := binary.Uvarint(b[1:]); n == len(b)-1 {
			return after, nil
		}
	}
	return 0, invalid("page_token", "not a token from a previous GetResponse.next_page_token; leave it empty to start over")
}

// toEntry decodes one table entry for a Get response. Get is not the hot path, so it
// decodes rather than passing the bytes through.
func toEntry(e *state.Entry) (*fanoutv1.Entry, error) {
	ev := &fanoutv1.Event{}
	if err := proto.Unmarshal(e.Raw, ev); err != nil {
		return nil, fmt.Errorf("state entry %q: %w", e.Key, err)
	}
	en := &fanoutv1.Entry{Event: ev, OriginNode: e.Stamp.Origin, Revision: e.Revision}
	if e.Submitted != 0 {
		secs, nanos := wire.SplitNanos(e.Submitted)
		en.SubmittedAt = &timestamppb.Timestamp{Seconds: secs, Nanos: int32(nanos)}
	}
	return en, nil
}
