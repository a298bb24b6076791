//go:build cgo && linux

package cuda

import (
	"errors"
	"strings"
	"testing"
)

func TestOpenNoLibrary(t *testing.T) {
	_, err := Open(Options{LibPath: "/nonexistent/libcuda.so.1"})
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Open: got %v, want ErrNoDriver", err)
	}
	if !strings.Contains(err.Error(), "/nonexistent/libcuda.so.1") {
		t.Errorf("error lacks the dlerror text: %v", err)
	}
}

func TestOpenNotADriver(t *testing.T) {
	// libc loads but has no cuGetProcAddress: Open must say so, not crash.
	_, err := Open(Options{LibPath: "libc.so.6"})
	if !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), "cuGetProcAddress") {
		t.Fatalf("Open(libc.so.6): got %v", err)
	}
}

func TestOpenEnvOverride(t *testing.T) {
	t.Setenv(LibPathEnv, "/nonexistent/from-env.so")
	_, err := Open(Options{})
	if !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), "from-env.so") {
		t.Fatalf("Open with %s set: got %v", LibPathEnv, err)
	}
}
