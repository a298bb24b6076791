package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"

	"github.com/spf13/cobra"
)

// --cpuprofile FILE writes a CPU profile of any subcommand (for finding
// where a demo or bench spends its CPU time on a machine without Go tools:
// the profile is symbolized when written, read it with `go tool pprof`).
// --trace FILE writes an execution trace (`go tool trace`): which
// goroutine ran when, for seeing whether a pipeline's stages overlap.
func init() {
	var cpuPath, tracePath string
	var cpuFile, traceFile *os.File
	rootCmd.PersistentFlags().StringVar(&cpuPath, "cpuprofile", "", "write a CPU profile of the command to this file")
	rootCmd.PersistentFlags().StringVar(&tracePath, "trace", "", "write an execution trace of the command to this file (go tool trace)")
	stop := func() error {
		var errs []error
		if cpuFile != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpuFile.Close())
			cpuFile = nil
		}
		if traceFile != nil {
			trace.Stop()
			errs = append(errs, traceFile.Close())
			traceFile = nil
		}
		return errors.Join(errs...)
	}
	rootCmd.PersistentPreRunE = func(*cobra.Command, []string) error {
		if cpuPath != "" {
			f, err := os.Create(cpuPath)
			if err != nil {
				return fmt.Errorf("--cpuprofile=%s: %w", cpuPath, err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				f.Close()
				return fmt.Errorf("--cpuprofile=%s: %w", cpuPath, err)
			}
			cpuFile = f
		}
		if tracePath != "" {
			f, err := os.Create(tracePath)
			if err != nil {
				_ = stop()
				return fmt.Errorf("--trace=%s: %w", tracePath, err)
			}
			if err := trace.Start(f); err != nil {
				f.Close()
				_ = stop()
				return fmt.Errorf("--trace=%s: %w", tracePath, err)
			}
			traceFile = f
		}
		return nil
	}
	rootCmd.PersistentPostRunE = func(*cobra.Command, []string) error { return stop() }
}
