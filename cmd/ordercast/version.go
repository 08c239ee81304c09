package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// buildInfo reads this binary's build information (runtime/debug.ReadBuildInfo):
// the main module's version ("(devel)" for a build from a checkout, v1.2.3
// for `go install ...@v1.2.3`), the VCS revision and time and whether the
// work tree had local changes (vcs.* settings, stamped by `go build` in a
// git checkout), and the Go version that built it.
func buildInfo() (version, commit, goVersion string) {
	version, commit, goVersion = "unknown", "unknown", "unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	goVersion = bi.GoVersion
	if bi.Main.Version != "" {
		version = bi.Main.Version
	}
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = " (modified)"
			}
		}
	}
	if rev != "" {
		commit = rev + dirty
		if at != "" {
			commit += " " + at
		}
	}
	return
}

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module version, the VCS commit and the Go version of this binary",
		Long: `Prints the main module's version (v1.2.3 for 'go install ...@v1.2.3', (devel) for a
build from a checkout), the VCS commit the binary was built from (with its time, and
"(modified)" if the work tree had local changes; "unknown" for a build outside git, or
with -buildvcs=false) and the Go version, all from the build information Go stamps into
the binary (runtime/debug.ReadBuildInfo).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, c, g := buildInfo()
			var b strings.Builder
			fmt.Fprintf(&b, "ordercast %s\ncommit %s\ngo %s\n", v, c, g)
			_, err := fmt.Fprint(cmd.OutOrStdout(), b.String())
			return err
		},
	}
}
