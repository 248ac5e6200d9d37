package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fanout/fanout/pkg/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// minServer is the oldest nats-server whose clustered streams check a publish's
// expected last subject sequence when the stream applies it (2.9.21): below it two
// concurrent writers of a key on an R3 stream can both win (measured on 2.9.10), and
// last-writer-wins would not hold.
var minServer = [3]int{2, 9, 21}

// ttlServer is the first nats-server with per-message TTLs (a Nats-TTL header on a
// stream that allows them): delete markers expire on the server from it on.
var ttlServer = [3]int{2, 11, 0}

// ErrTooLarge is the class of an event the NATS server cannot carry (its max_payload).
var ErrTooLarge = errors.New("jetstream: event too large for the NATS server")

// stream is the bucket's stream as this transport uses it: opened (created or checked)
// once, then shared by every publisher goroutine (its fields are set by openStream and
// read-only after; the counters are atomic).
type stream struct {
	cfg    Config
	js     jetstream.JetStream
	s      jetstream.Stream
	nc     *nats.Conn
	limits event.Limits
	prefix string // "$KV.<bucket>."
	// created: this transport created the stream (else it found it).
	created bool
	// msgTTL: the stream takes per-message TTLs, so a delete marker carries one
	// (Config.TombstoneTTL); else the sidecars purge markers (purger).
	msgTTL bool
	// replicas is the stream's, as the server reported it at open.
	replicas int

	// conflicts counts publishes that met a wrong last subject sequence (another
	// writer of the key landed first); retries the publishes that followed one.
	conflicts, retries atomic.Uint64
	// gaveUp counts events that spent Config.MaxAttempts; reads the direct gets of a
	// key before a publish.
	gaveUp, reads atomic.Uint64
}

// openStream checks the server and opens the bucket's stream: it creates it as the KV
// format wants it (history 1, direct get, rollup, Config.Replicas) if it is absent,
// else checks that the one there is in that format.
func openStream(ctx context.Context, nc *nats.Conn, cfg Config, l event.Limits) (*stream, error) {
	if err := checkServer(nc.ConnectedServerVersion()); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	st := &stream{cfg: cfg, js: js, nc: nc, limits: l, prefix: cfg.subjectPrefix()}
	ttls, _ := serverAtLeast(nc.ConnectedServerVersion(), ttlServer)
	ttls = ttls && !cfg.noMsgTTL
	st.s, err = js.Stream(ctx, cfg.stream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st.s, err = js.CreateStream(ctx, cfg.streamConfig(ttls))
		st.created = err == nil
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // another node created it first
			st.s, err = js.Stream(ctx, cfg.stream())
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %s: %w", cfg.stream(), err)
	}
	sc := &st.s.CachedInfo().Config
	st.replicas = sc.Replicas
	if err := cfg.checkStream(sc); err != nil {
		return nil, err
	}
	st.msgTTL = ttls && sc.AllowMsgTTL
	if ttls && !sc.AllowMsgTTL {
		st.msgTTL = st.allowMsgTTL(ctx)
	}
	if !st.msgTTL {
		cfg.Logger.Warn("jetstream: the stream has no per-message TTLs (nats-server 2.11 on has them): "+
			"the sidecars purge delete markers after --tombstone-ttl themselves", "server", nc.ConnectedServerVersion(), "stream", sc.Name)
	}
	if sc.Replicas != cfg.Replicas {
		cfg.Logger.Warn("jetstream: the stream exists with another replica count; it keeps its own",
			"stream", sc.Name, "replicas", sc.Replicas, "configured", cfg.Replicas)
	}
	return st, nil
}

// allowMsgTTL turns per-message TTLs on for a stream made without them (by an
// older sidecar or server), and reports whether it could.
func (s *stream) allowMsgTTL(ctx context.Context) bool {
	sc := s.s.CachedInfo().Config
	sc.AllowMsgTTL = true
	ns, err := s.js.UpdateStream(ctx, sc)
	if err != nil {
		s.cfg.Logger.Warn("jetstream: could not allow per-message TTLs on the stream", "stream", sc.Name, "err", err)
		return false
	}
	s.s = ns
	s.cfg.Logger.Info("jetstream: allowed per-message TTLs on the stream, for delete markers", "stream", sc.Name)
	return true
}

// streamConfig is the stream as this transport creates it: the KV format's (as
// nats.go's CreateKeyValue writes it), history 1, with per-message TTLs if the
// server has them (ttls).
func (c Config) streamConfig(ttls bool) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		AllowMsgTTL:       ttls,
		Name:              c.stream(),
		Description:       "fanout: the latest event per task_id",
		Subjects:          []string{c.subjectPrefix() + ">"},
		MaxMsgsPerSubject: 1,
		MaxBytes:          -1,
		MaxMsgs:           -1,
		MaxMsgSize:        -1,
		MaxConsumers:      -1,
		Storage:           jetstream.FileStorage,
		Replicas:          c.Replicas,
		AllowRollup:       true,
		AllowDirect:       true,
		DenyDelete:        true,
		Discard:           jetstream.DiscardNew,
		Duplicates:        2 * time.Minute,
	}
}

// checkStream refuses a stream this transport cannot keep last-writer-wins on,
// naming the setting and what to do.
func (c Config) checkStream(sc *jetstream.StreamConfig) error {
	fix := fmt.Sprintf("delete it (nats stream rm %s) and let the sidecar create it, or use another bucket", sc.Name)
	want := c.subjectPrefix() + ">"
	switch {
	case len(sc.Subjects) != 1 || sc.Subjects[0] != want:
		return fmt.Errorf("jetstream: stream %s has subjects %q, want [%q]; %s", sc.Name, sc.Subjects, want, fix)
	case sc.MaxMsgsPerSubject != 1:
		return fmt.Errorf("jetstream: stream %s keeps %d messages per subject (history), want 1: a key's last message must be its winner; %s",
			sc.Name, sc.MaxMsgsPerSubject, fix)
	case !sc.AllowRollup:
		return fmt.Errorf("jetstream: stream %s does not allow rollups, which the KV format's purge needs; %s", sc.Name, fix)
	case !sc.AllowDirect:
		return fmt.Errorf("jetstream: stream %s does not allow direct get, which a write conflict reads the key with; %s", sc.Name, fix)
	case sc.MaxAge != 0:
		return fmt.Errorf("jetstream: stream %s expires messages after %s (a bucket TTL): the stream must keep every key's winner; %s",
			sc.Name, sc.MaxAge, fix)
	}
	return nil
}

// checkServer refuses a server version below minServer.
func checkServer(version string) error {
	ok, err := serverAtLeast(version, minServer)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("jetstream: NATS server %s: clustered streams check a write's expected sequence only from %d.%d.%d on; "+
			"upgrade the servers (below it two writers of one key can both win)", version, minServer[0], minServer[1], minServer[2])
	}
	return nil
}

// serverAtLeast reports whether a server's version is want or later.
func serverAtLeast(version string, want [3]int) (bool, error) {
	var v [3]int
	parts := strings.SplitN(strings.SplitN(version, "-", 2)[0], ".", 3)
	if len(parts) != 3 {
		return false, fmt.Errorf("jetstream: NATS server version %q: want major.minor.patch (is the connection up?)", version)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return false, fmt.Errorf("jetstream: NATS server version %q: want major.minor.patch", version)
		}
		v[i] = n
	}
	for i := range v {
		if v[i] != want[i] {
			return v[i] > want[i], nil
		}
	}
	return true, nil
}

// outcome is how an event's way into the stream ended.
type outcome struct {
	verdict verdict // publish (it landed), stored, stale or gaveUp
	seq     uint64  // the key's sequence: the event's if it landed or was stored
}

// put publishes m with last-writer-wins (cas.go): expecting hint's sequence first
// (nil: the one a direct get reads), then, after each conflict, the sequence a
// direct get reads, until the event lands, is found stored or stale, or the attempts
// are spent. An error is the stream's or
// the connection's (the event may or may not have landed: a retry of put finds out).
func (s *stream) put(ctx context.Context, m *message, hint *current) (outcome, error) {
	subject := s.prefix + encodeKey(m.TaskID)
	msg := &nats.Msg{Subject: subject, Header: encodeHeader(m), Data: m.Raw}
	msg.Header.Set(jetstream.ExpectedStreamHeader, s.cfg.stream())
	if m.Deleted && s.msgTTL {
		msg.Header.Set(jetstream.MsgTTLHeader, s.cfg.TombstoneTTL.String())
	}
	err := s.fits(m)
	if err != nil {
		return outcome{}, err
	}
	c := newCAS(m.Stamp, s.cfg.MaxAttempts)
	var cur current
	if hint != nil {
		cur = *hint
	} else if cur, err = s.current(ctx, subject); err != nil {
		return outcome{}, err
	}
	for {
		d := c.decide(cur)
		switch d.verdict {
		case stored, stale:
			return outcome{verdict: d.verdict, seq: cur.seq}, nil
		case gaveUp:
			s.gaveUp.Add(1)
			return outcome{verdict: gaveUp}, nil
		}
		if c.attempts > 1 {
			s.retries.Add(1)
		}
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(d.seq, 10))
		ack, err := s.js.PublishMsg(ctx, msg)
		if err == nil {
			return outcome{verdict: publish, seq: ack.Sequence}, nil
		}
		if !wrongSequence(err) {
			return outcome{}, fmt.Errorf("jetstream: publish %s: %w", subject, err)
		}
		c.conflict()
		s.conflicts.Add(1)
		if cur, err = s.leaderCurrent(ctx, subject); err != nil {
			return outcome{}, err
		}
	}
}

// wrongSequence reports whether err is the stream's answer to a publish whose
// expected last subject sequence is not the key's.
func wrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// current reads the key's message with a direct get of the subject's last message,
// which any replica may answer (cheap, and maybe behind the leader): its stamp if it
// is this transport's, the zero stamp if not (foreign: any event replaces it).
func (s *stream) current(ctx context.Context, subject string) (current, error) {
	s.reads.Add(1)
	raw, err := s.s.GetLastMsgForSubject(ctx, subject)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return current{}, nil
	case err != nil:
		return current{}, fmt.Errorf("jetstream: read %s: %w", subject, err)
	}
	return s.currentOf(subject, raw.Header, raw.Data, raw.Sequence), nil
}

// leaderCurrent is current as the stream's leader answers it (the API's message
// get, not a direct get): after a conflict, a read that a replica behind the leader
// (one cut off from the others keeps answering its last state) cannot answer, so
// that the next publish expects what the leader holds.
func (s *stream) leaderCurrent(ctx context.Context, subject string) (current, error) {
	s.reads.Add(1)
	m, err := s.leaderGet(ctx, map[string]any{"last_by_subj": subject})
	switch {
	case err != nil:
		return current{}, fmt.Errorf("jetstream: read %s from the leader: %w", subject, err)
	case m == nil:
		return current{}, nil
	}
	var h nats.Header
	if len(m.Header) > 0 {
		if h, err = nats.DecodeHeadersMsg(m.Header); err != nil {
			h = nil // a message this transport did not write: currentOf says so
		}
	}
	return s.currentOf(subject, h, m.Data, m.Sequence), nil
}

// nextAfter is the sequence of the stream's first message of the bucket after seq,
// as the stream's leader answers (found false: there is none).
func (s *stream) nextAfter(ctx context.Context, seq uint64) (uint64, bool, error) {
	m, err := s.leaderGet(ctx, map[string]any{"seq": seq + 1, "next_by_subj": s.prefix + ">"})
	if err != nil || m == nil {
		return 0, false, err
	}
	return m.Sequence, true, nil
}

// leaderMsg is a message as the stream's message get API returns it.
type leaderMsg struct {
	Sequence uint64 `json:"seq"`
	Header   []byte `json:"hdrs"`
	Data     []byte `json:"data"`
}

// leaderGet asks the stream's leader for a message (the API's message get, req its
// request); nil, nil if there is none.
func (s *stream) leaderGet(ctx context.Context, req map[string]any) (*leaderMsg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	reply, err := s.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+s.cfg.stream(), body)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *leaderMsg          `json:"message"`
	}
	switch err := json.Unmarshal(reply.Data, &resp); {
	case err != nil:
		return nil, err
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, nil
	case resp.Error != nil:
		return nil, resp.Error
	case resp.Message == nil:
		return nil, errors.New("an answer without a message")
	}
	return resp.Message, nil
}

// currentOf is the current of the subject's message of sequence seq.
func (s *stream) currentOf(subject string, h nats.Header, data []byte, seq uint64) current {
	m, err := decodeMessage(strings.TrimPrefix(subject, s.prefix), h, data)
	if err != nil {
		s.cfg.Logger.Warn("jetstream: a key holds a message this transport did not write; an event replaces it",
			"subject", subject, "seq", seq, "err", err)
		return current{present: true, seq: seq}
	}
	return current{present: true, stamp: m.Stamp, seq: seq}
}

// fits refuses a message the server's max_payload does not take, naming both limits:
// the event and its headers at their longest (headerBound), as Transport.Admit
// counts them.
func (s *stream) fits(m *message) error {
	max := s.nc.MaxPayload()
	if size := int64(len(m.Raw) + headerBound(m.Stamp.Origin)); size > max {
		return fmt.Errorf("%w: %d bytes with its headers (the event: %d), over the server's max_payload of %d bytes; "+
			"this node takes events of up to %d bytes (--max-event-bytes %d): lower it, or raise max_payload on the NATS servers",
			ErrTooLarge, size, len(m.Raw), max, s.limits.EventBytes(), s.limits.MaxEventBytes)
	}
	return nil
}
