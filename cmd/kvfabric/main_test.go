package main

import (
	"os"
	"testing"
)

// envAsKvfabric makes the test binary play the kvfabric command itself:
// `bench --store` starts `<its own executable> master` for the remote-master
// path, which in a test is this binary.
const envAsKvfabric = "KVFABRIC_TEST_AS_KVFABRIC"

func TestMain(m *testing.M) {
	if os.Getenv(envAsKvfabric) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}
