package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/fanout/fanout/pkg/sidecar"
	"github.com/spf13/cobra"
)

// version is set at link time: -ldflags "-X main.version=v1.2.3". Without it, the
// module version Go recorded is used (v1.2.3 after `go install …@v1.2.3`), else "dev".
var version = "dev"

// build is what this binary knows about how it was built.
type build struct {
	version, revision string // revision: the VCS commit, "+dirty" if the tree had changes; "unknown" if not recorded
	time              string // the commit's time, "" if not recorded
}

// buildInfo reads the version and the VCS stamp Go embeds in the binary (go build in a
// git checkout records them; go run, go test and -buildvcs=false do not).
func buildInfo() build {
	b := build{version: version, revision: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if b.version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		b.version = bi.Main.Version
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.revision = s.Value
		case "vcs.time":
			b.time = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && b.revision != "unknown" {
		b.revision += "+dirty"
	}
	return b
}

// sidecarBuild is buildInfo for the assembly (its start-up log line and
// fanout_build_info).
func sidecarBuild() sidecar.Build {
	b := buildInfo()
	return sidecar.Build{Version: b.version, Revision: b.revision}
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := buildInfo()
			when := ""
			if b.time != "" {
				when = ", committed " + b.time
			}
			fmt.Fprintf(cmd.OutOrStdout(), "sidecar %s (commit %s%s, %s %s/%s)\n", b.version, b.revision, when, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
