package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagGroup is a heading of `serve --help` and the flags under it.
type flagGroup struct {
	title string
	flags []string
}

// serveFlagGroups orders serve's flags for its help. Every flag is in exactly one
// group (a test checks).
func serveFlagGroups() []flagGroup {
	return []flagGroup{
		{"Identity and listeners", []string{"node-id", "app-addr", "peer-addr", "admin-addr"}},
		{"Transport: mesh or NATS JetStream", []string{"transport", "nats-url", "nats-creds", "nats-nkey", "nats-tls-ca", "nats-tls-cert", "nats-tls-key", "nats-bucket", "nats-replicas"}},
		{"Peers: who they are", []string{"peers", "peers-dns", "peers-refresh", "dns-server", "max-peers", "peer-removal-grace"}},
		{"Batching", []string{"max-buffer", "max-buffer-bytes", "max-pending-bytes", "max-batch", "max-batch-bytes", "max-batching-delay", "batch-idle-flush", "workers", "task-ttl", "replicate-stream", "answer-hold"}},
		{"Failures: timeouts, pauses and breakers", []string{"replicate-timeout", "congestion-retry-delay", "network-failure-retry-delay",
			"breaker-failures", "breaker-open", "breaker-probes"}},
		{"State table and limits", []string{"state-max-keys", "state-max-bytes", "state-max-tombstones", "state-max-tombstone-bytes", "tombstone-ttl", "max-event-bytes", "max-request-bytes"}},
		{"Start-up, catch-up and shutdown", []string{"data-dir", "data-dir-min-free-bytes", "anti-entropy-interval", "sync-timeout", "shutdown-timeout"}},
		{"Security (docs/SECURITY.md)", []string{"peer-tls-cert", "peer-tls-key", "peer-tls-ca", "app-token-file", "app-socket-mode"}},
		{"Runtime", []string{"log-level", "log-format", "gomaxprocs", "memory-limit", "pprof-addr"}},
	}
}

// groupedUsage prints cmd's usage with its flags under the groups' headings; flags
// in no group (help) come last.
func groupedUsage(groups []flagGroup) func(*cobra.Command) error {
	return func(cmd *cobra.Command) error {
		w := cmd.OutOrStderr()
		fmt.Fprintf(w, "Usage:\n  %s\n", cmd.UseLine())
		done := map[string]bool{}
		for _, g := range groups {
			fs := pflag.NewFlagSet(g.title, pflag.ContinueOnError)
			fs.SortFlags = false // the group's own order
			for _, name := range g.flags {
				if f := cmd.Flags().Lookup(name); f != nil {
					fs.AddFlag(f)
					done[name] = true
				}
			}
			fmt.Fprintf(w, "\n%s:\n%s", g.title, fs.FlagUsagesWrapped(100))
		}
		rest := pflag.NewFlagSet("other", pflag.ContinueOnError)
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if !done[f.Name] {
				rest.AddFlag(f)
			}
		})
		if rest.HasFlags() {
			fmt.Fprintf(w, "\nOther:\n%s", rest.FlagUsagesWrapped(100))
		}
		fmt.Fprintln(w, "\nEvery flag can also be set by the environment variable in brackets; a flag on the command line wins.")
		return nil
	}
}

// annotateEnv appends its environment variable to the usage of every flag that reads
// one, in every command under root.
func annotateEnv(root *cobra.Command) {
	for _, c := range allCommands(root) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if _, off := f.Annotations[noEnv]; !off {
				f.Usage += " [$" + envName(f.Name) + "]"
			}
		})
	}
}

func allCommands(root *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{root}
	for _, c := range root.Commands() {
		out = append(out, allCommands(c)...)
	}
	return out
}

// knownEnv is every FANOUT_* variable some command reads.
func knownEnv(root *cobra.Command) map[string]bool {
	known := map[string]bool{}
	for _, c := range allCommands(root) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if _, off := f.Annotations[noEnv]; !off {
				known[envName(f.Name)] = true
			}
		})
	}
	return known
}

// warnUnknownEnv warns about each FANOUT_* variable in environ that no command reads:
// a misspelt one would otherwise be ignored without a word.
func warnUnknownEnv(w io.Writer, known map[string]bool, environ []string) {
	names := make([]string, 0, len(known))
	for k := range known {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "FANOUT_") || known[name] {
			continue
		}
		hint := ""
		if best, d := closest(name, names); d <= max(2, len(name)/4) {
			hint = fmt.Sprintf("; did you mean %s?", best)
		}
		fmt.Fprintf(w, "warning: %s is set but no sidecar command reads it, so it is ignored%s\n", name, hint)
	}
}

// closest is the name of names nearest to s by edit distance, and the distance.
func closest(s string, names []string) (string, int) {
	best, bestD := "", int(^uint(0)>>1)
	for _, n := range names {
		if d := editDistance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best, bestD
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
