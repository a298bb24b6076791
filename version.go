// Package kvfabric holds what the whole module shares: its version.
//
// The version's one source is the VERSION file beside this one. It is
// embedded, not stamped with -ldflags -X, so every build path — go build,
// go test, the Makefile, `pip install ./python`, `make wheel` — carries the
// same version without having to remember a flag: the kvfabric binary
// (`kvfabric --version`), the C library (kvfabric_version()) and the Python
// package and wheels (python/setup.py reads the same file).
package kvfabric

import (
	_ "embed"
	"strings"
)

//go:embed VERSION
var versionFile string

// Version is the release of this build, e.g. "0.1.0" (semantic versioning;
// CHANGELOG.md lists the releases).
var Version = strings.TrimSpace(versionFile)
