package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// cliReferencePath is where `make docs` writes the reference, relative to the
// repository's root; docs_test.go fails when the file is not what writeReference
// prints.
const cliReferencePath = "docs/CLI.md"

// newDocsCmd is `sidecar docs`: the command and flag reference, generated from the
// cobra tree itself so that it cannot drift from the flags.
func newDocsCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "docs",
		Short:  "print the command and flag reference as Markdown (" + cliReferencePath + ")",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeReference(cmd.OutOrStdout(), cmd.Root())
		},
	}
}

// writeReference prints every visible command under root with its flags, serve's under
// the headings of its --help.
func writeReference(w io.Writer, root *cobra.Command) error {
	host, _ := os.Hostname()
	var b strings.Builder
	b.WriteString("# Command-line reference\n\n")
	b.WriteString("Generated from the commands by `make docs` (`sidecar docs`); a test fails when this\n")
	b.WriteString("file is stale. Every flag marked with a variable can also be set by it; a flag on the\n")
	b.WriteString("command line wins. A `FANOUT_*` variable no command reads gets a warning naming the\n")
	b.WriteString("closest real one.\n")
	for _, c := range allCommands(root) {
		// completion is added by cobra when the binary runs, not by newRootCmd.
		if c == root || c.Hidden || !c.IsAvailableCommand() || c.Name() == "completion" || c.HasParent() && c.Parent().Name() == "completion" {
			continue
		}
		fmt.Fprintf(&b, "\n## `%s`\n\n%s.\n\n```\n%s\n```\n", c.CommandPath(), c.Short, c.UseLine())
		if c.Long != "" {
			fmt.Fprintf(&b, "\n%s\n", strings.TrimSpace(c.Long))
		}
		groups := []flagGroup{{title: "", flags: flagNames(c.LocalFlags())}}
		if c.Name() == "serve" {
			groups = serveFlagGroups()
		}
		for _, g := range groups {
			if len(g.flags) == 0 {
				continue
			}
			if g.title != "" {
				fmt.Fprintf(&b, "\n### %s\n", g.title)
			}
			b.WriteString("\n| flag | default | variable | what it does |\n|---|---|---|---|\n")
			for _, name := range g.flags {
				f := c.Flags().Lookup(name)
				if f == nil {
					return fmt.Errorf("docs: %s has no flag --%s in its help groups", c.CommandPath(), name)
				}
				b.WriteString(flagRow(f, host))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// flagNames lists fs's flags but help, in their sorted order.
func flagNames(fs *pflag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" {
			names = append(names, f.Name)
		}
	})
	return names
}

// flagRow is one table row. The default that depends on the machine (the hostname) is
// named, not printed, so that the file is the same everywhere.
func flagRow(f *pflag.Flag, host string) string {
	def := f.DefValue
	switch {
	case host != "" && def == host:
		def = "the hostname"
	case def == "" || def == "[]":
		def = "(none)"
	}
	env := "—"
	usage := f.Usage
	if _, off := f.Annotations[noEnv]; !off {
		env = "`" + envName(f.Name) + "`"
		usage = strings.TrimSuffix(usage, " [$"+envName(f.Name)+"]")
	}
	name := "`--" + f.Name + "`"
	if f.Shorthand != "" {
		name = "`-" + f.Shorthand + "`, " + name
	}
	return fmt.Sprintf("| %s %s | `%s` | %s | %s |\n", name, f.Value.Type(), def, env, escapeCell(usage))
}

// escapeCell keeps a usage text inside its table cell.
func escapeCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
