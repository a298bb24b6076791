package main

import (
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/spf13/cobra"
)

// --cpuprofile FILE writes a CPU profile of any subcommand (for finding
// where a demo or bench spends its CPU time on a machine without Go tools:
// the profile is symbolized when written, read it with `go tool pprof`).
func init() {
	var path string
	var f *os.File
	rootCmd.PersistentFlags().StringVar(&path, "cpuprofile", "", "write a CPU profile of the command to this file")
	rootCmd.PersistentPreRunE = func(*cobra.Command, []string) error {
		if path == "" {
			return nil
		}
		var err error
		if f, err = os.Create(path); err != nil {
			return fmt.Errorf("--cpuprofile=%s: %w", path, err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("--cpuprofile=%s: %w", path, err)
		}
		return nil
	}
	rootCmd.PersistentPostRunE = func(*cobra.Command, []string) error {
		if f == nil {
			return nil
		}
		pprof.StopCPUProfile()
		return f.Close()
	}
}
