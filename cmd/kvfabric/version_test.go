package main

import (
	"bytes"
	"testing"

	"github.com/kvfabric/kvfabric"
)

// TestVersionFlag: `kvfabric --version` prints the module's one version,
// which the wheel test compares with the Python package's and the library's.
func TestVersionFlag(t *testing.T) {
	var out bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetArgs([]string{"--version"})
	t.Cleanup(func() { rootCmd.SetOut(nil); rootCmd.SetArgs(nil) })
	if err := rootCmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "kvfabric "+kvfabric.Version+"\n"; got != want {
		t.Fatalf("kvfabric --version printed %q, want %q", got, want)
	}
}
