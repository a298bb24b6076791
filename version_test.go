package kvfabric

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// semver is MAJOR.MINOR.PATCH with an optional pre-release; PEP 440 accepts
// the same strings for releases, so the wheels carry it unchanged.
var semver = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(rc[0-9]+)?$`)

func TestVersion(t *testing.T) {
	if !semver.MatchString(Version) {
		t.Fatalf("Version = %q, want MAJOR.MINOR.PATCH[rcN] (a version both Go and PEP 440 read alike)", Version)
	}
}

// TestChangelogNamesVersion keeps CHANGELOG.md and VERSION together: a
// release is not cut without its entry.
func TestChangelogNamesVersion(t *testing.T) {
	b, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "## ["+Version+"]") {
		t.Fatalf("CHANGELOG.md has no \"## [%s]\" section", Version)
	}
}
