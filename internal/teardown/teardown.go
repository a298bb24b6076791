// Package teardown runs an ordered list of named, retryable teardown steps
// and remembers which of them succeeded, so that a Close can be retried
// after a partial failure and do only what is left.
//
// A Close states its teardown order as one list:
//
//	return e.closed.Run(
//		teardown.Step{Name: "drain ring", Do: e.drain},
//		teardown.Step{Name: "free ring", Needs: []string{"drain ring"}, Do: e.free},
//	)
package teardown

import (
	"errors"
	"fmt"
)

// Step is one teardown step.
type Step struct {
	// Name identifies the step in the Record and in errors; unique within
	// a list.
	Name string
	// Needs names earlier steps of the same list that must have succeeded
	// (in this Run or an earlier one) before this step may run.
	Needs []string
	// Do performs the step. An error leaves the step to a later Run; Do is
	// then called again, so it must itself keep whatever part of its work
	// already succeeded.
	Do func() error
}

// Record remembers which steps of a teardown have succeeded. The zero value
// is a Record in which nothing has run yet.
//
// A Record is not safe for concurrent use: callers serialize Run and Done
// with their own lock (the one that serializes their Close), and Run calls
// every Do with that lock held.
type Record struct {
	done map[string]bool // steps that succeeded
	ran  bool            // Run has been called
	left int             // steps of the last Run not yet succeeded
}

// Run runs, in list order, every step that has not succeeded before and
// whose Needs have all succeeded; a step whose Needs have not is skipped
// (the failure that blocks it is reported by the step that failed). A step
// that succeeded is never run again.
//
// Run returns the errors.Join of this Run's failures, each as "name: err",
// and nil once every step has succeeded. A step that names itself twice in
// the list or needs a step that is not earlier in it is a bug in the
// caller: it is reported as a failure and never run.
func (r *Record) Run(steps ...Step) error {
	if r.done == nil {
		r.done = make(map[string]bool, len(steps))
	}
	r.ran, r.left = true, 0
	var errs []error
	fail := func(s Step, err error) {
		errs = append(errs, fmt.Errorf("%s: %w", s.Name, err))
		r.left++
	}
	seen := make(map[string]bool, len(steps)) // the steps before s
	for _, s := range steps {
		if err := check(s, seen); err != nil {
			fail(s, err)
			continue
		}
		seen[s.Name] = true
		switch {
		case r.done[s.Name]:
		case !r.ready(s):
			r.left++
		default:
			if err := s.Do(); err != nil {
				fail(s, err)
				continue
			}
			r.done[s.Name] = true
		}
	}
	return errors.Join(errs...)
}

// check reports a step that is not valid after the steps in seen.
func check(s Step, seen map[string]bool) error {
	if s.Name == "" || seen[s.Name] {
		return fmt.Errorf("teardown: step name %q is empty or not unique", s.Name)
	}
	for _, n := range s.Needs {
		if !seen[n] {
			return fmt.Errorf("teardown: needs %q, which is not an earlier step", n)
		}
	}
	return nil
}

// ready reports whether every step s needs has succeeded.
func (r *Record) ready(s Step) bool {
	for _, n := range s.Needs {
		if !r.done[n] {
			return false
		}
	}
	return true
}

// Done reports whether every step of the last Run has succeeded; it is
// false before the first Run.
func (r *Record) Done() bool { return r.ran && r.left == 0 }
