package teardown_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kvfabric/kvfabric/internal/teardown"
)

var errBoom = errors.New("boom")

// spec is a step of a test list: it fails its first fails calls.
type spec struct {
	name  string
	needs []string
	fails int
}

// attempt is one Run and what it must do.
type attempt struct {
	calls  []string // steps called, in order
	failed []string // steps whose failure the error names
	done   bool     // Done afterwards
}

func TestRecord(t *testing.T) {
	for _, tc := range []struct {
		name     string
		steps    []spec
		attempts []attempt
	}{
		{
			name:  "order",
			steps: []spec{{name: "a"}, {name: "b"}, {name: "c", needs: []string{"a", "b"}}},
			attempts: []attempt{
				{calls: []string{"a", "b", "c"}, done: true},
			},
		},
		{
			name:  "idempotent",
			steps: []spec{{name: "a"}, {name: "b", needs: []string{"a"}}},
			attempts: []attempt{
				{calls: []string{"a", "b"}, done: true},
				{done: true},
				{done: true},
			},
		},
		{
			name: "failure skips dependents only",
			steps: []spec{
				{name: "a", fails: 1},
				{name: "b", needs: []string{"a"}},
				{name: "c"},
				{name: "d", needs: []string{"b"}},
				{name: "e", needs: []string{"c"}},
			},
			attempts: []attempt{
				{calls: []string{"a", "c", "e"}, failed: []string{"a"}},
				{calls: []string{"a", "b", "d"}, done: true},
				{done: true},
			},
		},
		{
			name: "retry does only the remainder",
			steps: []spec{
				{name: "a"},
				{name: "b", fails: 2},
				{name: "c", fails: 1},
				{name: "d", needs: []string{"b", "c"}},
			},
			attempts: []attempt{
				{calls: []string{"a", "b", "c"}, failed: []string{"b", "c"}},
				{calls: []string{"b", "c"}, failed: []string{"b"}},
				{calls: []string{"b", "d"}, done: true},
				{done: true},
			},
		},
		{
			name:  "failed dependent is retried after its need",
			steps: []spec{{name: "a", fails: 1}, {name: "b", needs: []string{"a"}, fails: 1}},
			attempts: []attempt{
				{calls: []string{"a"}, failed: []string{"a"}},
				{calls: []string{"a", "b"}, failed: []string{"b"}},
				{calls: []string{"b"}, done: true},
			},
		},
		{
			name:  "need of a later step is a bug",
			steps: []spec{{name: "a", needs: []string{"b"}}, {name: "b"}},
			attempts: []attempt{
				{calls: []string{"b"}, failed: []string{"a"}},
				{failed: []string{"a"}},
			},
		},
		{
			name:  "unknown need is a bug",
			steps: []spec{{name: "a", needs: []string{"x"}}},
			attempts: []attempt{
				{failed: []string{"a"}},
			},
		},
		{
			name:  "duplicate name is a bug",
			steps: []spec{{name: "a"}, {name: "a"}},
			attempts: []attempt{
				{calls: []string{"a"}, failed: []string{"a"}},
				{failed: []string{"a"}},
			},
		},
		{
			name:     "empty list",
			attempts: []attempt{{done: true}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r teardown.Record
			if r.Done() {
				t.Fatal("Done before the first Run")
			}
			var calls []string
			left := map[string]int{}
			steps := make([]teardown.Step, len(tc.steps))
			for i, s := range tc.steps {
				left[s.name] = s.fails
				steps[i] = teardown.Step{Name: s.name, Needs: s.needs, Do: func() error {
					calls = append(calls, s.name)
					if left[s.name] > 0 {
						left[s.name]--
						return errBoom
					}
					return nil
				}}
			}
			for i, want := range tc.attempts {
				calls = nil
				err := r.Run(steps...)
				if !slices.Equal(calls, want.calls) {
					t.Errorf("Run #%d called %q, want %q", i+1, calls, want.calls)
				}
				if (err == nil) != (len(want.failed) == 0) {
					t.Errorf("Run #%d = %v, want failures of %q", i+1, err, want.failed)
				}
				if err != nil {
					if lines := strings.Split(err.Error(), "\n"); len(lines) != len(want.failed) {
						t.Errorf("Run #%d = %q, want %d failures", i+1, err, len(want.failed))
					}
					for _, name := range want.failed {
						if !strings.Contains(err.Error(), name+": ") {
							t.Errorf("Run #%d = %q does not name step %q", i+1, err, name)
						}
					}
				}
				if r.Done() != want.done {
					t.Errorf("Done after Run #%d = %v, want %v", i+1, r.Done(), want.done)
				}
			}
		})
	}
}

func TestRunWrapsStepError(t *testing.T) {
	var r teardown.Record
	err := r.Run(
		teardown.Step{Name: "close listener", Do: func() error { return errBoom }},
		teardown.Step{Name: "remove socket", Do: func() error { return nil }},
	)
	if !errors.Is(err, errBoom) {
		t.Fatalf("Run = %v, want errors.Is errBoom", err)
	}
	if got, want := err.Error(), "close listener: boom"; got != want {
		t.Errorf("Run = %q, want %q", got, want)
	}
}
