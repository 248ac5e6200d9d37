package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/fanout/fanout/internal/earlysignal"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newRootCmd builds the cobra tree. No package-level flag variables: each command owns
// its options struct.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "sidecar",
		Short:         "fanout: replicate the latest state per task_id to every peer sidecar",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	serve := newServeCmd()
	root.AddCommand(serve, newStatusCmd(), newVersionCmd(), newDemoCmd(), newBenchCmd(),
		newSubmitCmd(), newGetCmd(), newDelCmd(), newWatchCmd(), newHealthCmd(), newDocsCmd())
	annotateEnv(root)
	known := knownEnv(root)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if cmd != serve { // serve takes the early-caught signals over itself
			earlysignal.Release()
		}
		warnUnknownEnv(cmd.ErrOrStderr(), known, os.Environ())
		return bindEnv(cmd.Flags())
	}
	return root
}

// envName is the environment variable that sets a flag: FANOUT_<FLAG>, upper case,
// '-' → '_'.
func envName(flag string) string {
	return "FANOUT_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// noEnv is the flag annotation that keeps bindEnv off a flag (see envOnly).
const noEnv = "fanout-no-env"

// envOnly makes only the named flags of fs read the environment. The client commands
// use it: a pod's FANOUT_MAX_BATCH is meant for serve, not for a watch run in the pod.
func envOnly(fs *pflag.FlagSet, names ...string) {
	fs.VisitAll(func(f *pflag.Flag) {
		for _, n := range names {
			if f.Name == n {
				return
			}
		}
		_ = fs.SetAnnotation(f.Name, noEnv, []string{"true"})
	})
}

// bindEnv sets every flag that was not given on the command line from its FANOUT_*
// variable. A command-line flag wins over the environment.
func bindEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if _, off := f.Annotations[noEnv]; err != nil || f.Changed || off {
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", envName(f.Name), v, e)
			}
		}
	})
	return err
}
