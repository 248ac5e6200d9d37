package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/spf13/cobra"
)

// maxPage is the most entries a sidecar puts in one Get page (GetRequest.limit).
const maxPage = 10000

// getOptions are the flags of `sidecar get`. Only --addr is also read from the environment (FANOUT_ADDR).
type getOptions struct {
	app    appOptions
	prefix string
	limit  int // page size; 0: the sidecar's default
	max    int // entries in all; 0: every one
	format entryFormat
}

func newGetCmd() *cobra.Command {
	o := getOptions{app: defaultAppOptions(10 * time.Second)}
	cmd := &cobra.Command{
		Use:   "get [TASK_ID...] | get --prefix PREFIX",
		Short: "Read entries from a sidecar's state table (like `etcdctl get`, `nats kv get`)",
		Long: `get reads the latest state the sidecar at --addr holds: the entries of the given
task_ids (each argument is an exact key), or every entry under --prefix (every entry
when neither is given), page by page until the end or --max. Deleted keys are not
shown.

-o table (the default) has one row per entry: TASK_ID, VERSION (the key's version,
rising per key: an HLC time stamp unless the writer chose one), ORIGIN (the node the
event was submitted to), REVISION (this node's change counter, see 'watch
--from-revision'; each node counts its own, so it differs between nodes), SUBMITTED
and PAYLOAD: as text when it is printable UTF-8, else base64:…, cut to 60 characters
unless --full. A legend line under the table repeats what VERSION and REVISION are.
-o json (or --json) prints one protojson Entry per line instead, for jq. -o raw prints
the payloads alone, byte for byte, each followed by --separator (a newline unless
set; like 'etcdctl get --print-value-only' and 'nats kv get --raw').

A task_id that is not found is reported on stderr ("not found: ID") and makes the exit
status 1; the ones found still print.

--addr also reads FANOUT_ADDR, e.g. FANOUT_ADDR=unix:///run/fanout.sock; the other flags
read no environment variable (a pod's FANOUT_* variables are meant for serve).`,
		Example: `  sidecar get 'register#ORDERS/i-17' 'register#ORDERS/i-18'
  sidecar get --prefix 'register#ORDERS/' --max 100
  sidecar get --prefix 'heartbeat#' -o json | jq -r .event.taskId
  sidecar get 'blob#1' -o raw --separator '' > blob.bin`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.format.resolve(); err != nil {
				return err
			}
			if err := o.validate(args); err != nil {
				return err
			}
			if len(args) > 0 {
				return o.byIDs(cmd.Context(), args, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			return o.list(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	o.app.addFlags(fs, "give up after this long, all pages included (0: never)")
	fs.StringVar(&o.prefix, "prefix", "", "list the entries whose task_id starts with this, oldest change first (instead of TASK_IDs)")
	fs.IntVar(&o.limit, "limit", 0, fmt.Sprintf("with --prefix: entries per page, up to %d (0: the sidecar's default, 1000)", maxPage))
	fs.IntVar(&o.max, "max", 0, "with --prefix: stop after this many entries (0: list them all)")
	o.format.addFlags(fs, "table (one row per entry, and a legend), json (one protojson Entry per line) or raw (the payloads alone, each followed by --separator)")
	envOnly(cmd.Flags(), "addr", "token-file")
	return cmd
}

func (o getOptions) validate(args []string) error {
	switch {
	case len(args) > 0 && o.prefix != "":
		return fmt.Errorf("give TASK_IDs or --prefix %q, not both", o.prefix)
	case o.limit < 0 || o.limit > maxPage:
		return fmt.Errorf("--limit %d: want 0 (the sidecar's default) to %d entries per page", o.limit, maxPage)
	case o.max < 0:
		return fmt.Errorf("--max %d: want 0 (every entry) or more", o.max)
	}
	return nil
}

// byIDs gets the entries of ids and prints them in the order asked, each once. The
// missing ones are named on stderr and make the result an error.
func (o getOptions) byIDs(ctx context.Context, ids []string, out, errOut io.Writer) error {
	var resp *fanoutv1.GetResponse
	err := o.app.call(ctx, "Get", func(ctx context.Context, c fanoutv1.FanoutServiceClient) (err error) {
		resp, err = c.Get(ctx, &fanoutv1.GetRequest{TaskIds: ids})
		return err
	})
	if err != nil {
		return err
	}
	found := make(map[string]*fanoutv1.Entry, len(resp.GetEntries()))
	for _, e := range resp.GetEntries() {
		found[e.GetEvent().GetTaskId()] = e
	}
	t := o.newTable(out)
	var missing []string
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		if e, ok := found[id]; ok {
			t.add(e)
		} else {
			missing = append(missing, id)
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, id := range missing {
		fmt.Fprintf(errOut, "not found: %s\n", id)
	}
	if len(missing) > 0 {
		return fmt.Errorf("%d of %d task_ids not found", len(missing), len(seen))
	}
	return nil
}

// list pages through the entries under --prefix until the end or --max.
func (o getOptions) list(ctx context.Context, out, errOut io.Writer) error {
	t := o.newTable(out)
	err := o.app.call(ctx, "Get", func(ctx context.Context, c fanoutv1.FanoutServiceClient) error {
		token := ""
		for {
			resp, err := c.Get(ctx, &fanoutv1.GetRequest{Prefix: o.prefix, Limit: pageLimit(o.limit, o.max, t.rows), PageToken: token})
			if err != nil {
				return err
			}
			for _, e := range resp.GetEntries() {
				if o.max > 0 && t.rows >= o.max {
					return nil
				}
				t.add(e)
			}
			token = resp.GetNextPageToken()
			if token == "" || (o.max > 0 && t.rows >= o.max) {
				return nil
			}
		}
	})
	if ferr := t.flush(); err == nil {
		err = ferr
	}
	if err == nil && t.rows == 0 && o.format.mode == outTable {
		fmt.Fprintf(errOut, "no entries under prefix %q\n", o.prefix)
	}
	return err
}

// pageLimit is the limit of the next page: --limit, cut to what --max still allows
// after got entries.
func pageLimit(limit, max, got int) uint32 {
	if max <= 0 {
		return uint32(limit)
	}
	n := max - got
	if limit > 0 && limit < n {
		n = limit
	}
	return uint32(min(n, maxPage))
}

// entryTable prints get's entries: a table, protojson lines, or raw payloads.
type entryTable struct {
	out  io.Writer
	f    entryFormat
	tw   *tabwriter.Writer // -o table only
	rows int
	err  error // the first write error
}

func (o getOptions) newTable(out io.Writer) *entryTable {
	t := &entryTable{out: out, f: o.format}
	if o.format.mode == outTable {
		t.tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	}
	return t
}

func (t *entryTable) add(e *fanoutv1.Entry) {
	t.rows++
	if t.err != nil {
		return
	}
	ev := e.GetEvent()
	switch t.f.mode {
	case outJSON:
		t.err = writeJSONLine(t.out, e)
		return
	case outRaw:
		if !ev.GetDeleted() {
			t.err = writeRaw(t.out, ev.GetPayload(), t.f.sep)
		}
		return
	}
	if t.rows == 1 {
		fmt.Fprintln(t.tw, "TASK_ID\tVERSION\tORIGIN\tREVISION\tSUBMITTED\tPAYLOAD")
	}
	payload := payloadText(ev.GetPayload(), t.f.full)
	if ev.GetDeleted() {
		payload = "(deleted)"
	}
	fmt.Fprintf(t.tw, "%s\t%d\t%s\t%d\t%s\t%s\n", ev.GetTaskId(), ev.GetVersion(), e.GetOriginNode(), e.GetRevision(),
		timeText(e.GetSubmittedAt()), payload)
}

func (t *entryTable) flush() error {
	if t.tw != nil && t.err == nil {
		t.err = t.tw.Flush()
		if t.err == nil && t.rows > 0 {
			_, t.err = fmt.Fprintln(t.out, legend)
		}
	}
	if t.err != nil {
		return fmt.Errorf("write output: %w", t.err)
	}
	return nil
}
