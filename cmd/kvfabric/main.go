// Command kvfabric is the kvfabric binary: master, demo, doctor, bench, …
//
// Each subcommand lives in its own file and registers itself on rootCmd in
// an init function. Flags and files are parsed only in this package.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/kvfabric/kvfabric"
)

var rootCmd = &cobra.Command{
	Use:           "kvfabric",
	Short:         "kvfabric: a KV-cache store over EGM DRAM and GPU HBM",
	SilenceUsage:  true,
	SilenceErrors: true,
	Version:       kvfabric.Version,
}

func init() {
	// `kvfabric --version`: the one version of the binary, libkvfabric.so
	// and the wheels (VERSION at the repository root).
	rootCmd.SetVersionTemplate("kvfabric {{.Version}}\n")
}

func main() {
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "kvfabric:", err)
		os.Exit(1)
	}
}
