package cuda

import (
	"errors"
	"testing"
)

func TestResultString(t *testing.T) {
	for _, tc := range []struct {
		r    Result
		want string
	}{
		{Success, "CUDA_SUCCESS"},
		{ErrorNotPermitted, "CUDA_ERROR_NOT_PERMITTED"},
		{Result(12345), "CUresult(12345)"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("%d: got %q want %q", tc.r, got, tc.want)
		}
	}
}

func TestErrorIs(t *testing.T) {
	err := Check("cuMemCreate", ErrorNotPermitted)
	if !errors.Is(err, ErrorNotPermitted) || errors.Is(err, ErrorOutOfMemory) {
		t.Fatalf("errors.Is on %v", err)
	}
	if ResultOf(err) != ErrorNotPermitted || ResultOf(nil) != Success {
		t.Fatal("ResultOf")
	}
	if Check("x", Success) != nil {
		t.Fatal("Check(Success) != nil")
	}
	if got := err.Error(); got != "cuda: cuMemCreate: CUDA_ERROR_NOT_PERMITTED (800)" {
		t.Fatalf("Error() = %q", got)
	}
}
