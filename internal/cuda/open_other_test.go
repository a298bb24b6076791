//go:build !cgo || !linux

package cuda

import (
	"errors"
	"testing"
)

func TestOpenWithoutCgo(t *testing.T) {
	if _, err := Open(Options{}); !errors.Is(err, ErrNoCUDASupport) {
		t.Fatalf("Open: got %v, want ErrNoCUDASupport", err)
	}
}
