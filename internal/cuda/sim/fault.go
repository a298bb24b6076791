package sim

import (
	"fmt"
	"slices"
	"sync"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

// Fault is one injected failure, in the spirit of pebble's errorfs: the
// Nth call (1-based, counted from the moment the fault is injected) of
// Method — or of any method when Method is "" — fails with Code before it
// does anything. With Sticky, that call and every later matching call fail.
//
// Method names are cuda.Driver method names ("MemCreate", "MemMap", …).
// Every Driver method that returns an error can be failed, Close included;
// a failed call changes no state and creates nothing.
type Fault struct {
	Method string
	Nth    int
	Sticky bool
	Code   cuda.Result
}

// Call is one entry of the call log.
type Call struct {
	// Method is the cuda.Driver method name.
	Method string
	// Ordinal is the 1-based index of this call among the calls of Method
	// since New or ResetCalls.
	Ordinal int
	// Args summarizes the arguments.
	Args string
	// Result is the call's CUresult (Success, the injected code, or the
	// simulated failure). Calls refused because the driver was closed log
	// CUDA_ERROR_DEINITIALIZED.
	Result cuda.Result
	// Injected is true when Result came from an injected Fault.
	Injected bool
}

func (c Call) String() string {
	inj := ""
	if c.Injected {
		inj = " (injected)"
	}
	return fmt.Sprintf("%s#%d(%s) = %v%s", c.Method, c.Ordinal, c.Args, c.Result, inj)
}

// maxCallLog is how many recent calls the log keeps; counts stay exact.
const maxCallLog = 1 << 16

// injector holds faults and the call log. It has its own lock so that the
// hot path takes it only briefly and never while holding Driver.mu.
type injector struct {
	mu struct {
		sync.Mutex
		// guards everything below
		faults []*armedFault
		counts map[string]int // calls per method since New/ResetCalls
		total  int            // calls of any method since New/ResetCalls
		log    []Call         // ring of the last maxCallLog calls
		next   int            // ring write position once full
	}
}

type armedFault struct {
	Fault
	seen int // matching calls since injection
}

func (in *injector) init() {
	in.mu.counts = make(map[string]int)
}

// enter records a call of method and returns its ordinal and the injected
// result (Success when none applies). Calls on a closed driver count but
// consume no faults.
func (in *injector) enter(method string, closed bool) (int, cuda.Result) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.mu.counts[method]++
	in.mu.total++
	ord := in.mu.counts[method]
	code := cuda.Success
	if closed {
		return ord, code
	}
	for _, f := range in.mu.faults {
		if f.Method != "" && f.Method != method {
			continue
		}
		f.seen++
		if code == cuda.Success && (f.seen == f.Nth || (f.Sticky && f.seen >= f.Nth)) {
			code = f.Code
		}
	}
	return ord, code
}

func (in *injector) record(c Call) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.mu.log) < maxCallLog {
		in.mu.log = append(in.mu.log, c)
		return
	}
	in.mu.log[in.mu.next] = c
	in.mu.next = (in.mu.next + 1) % maxCallLog
}

// Inject arms f. A Code of Success or a Nth below 1 is a programming error
// in the test and panics.
func (d *Driver) Inject(f Fault) {
	if f.Code == cuda.Success || f.Nth < 1 {
		panic(fmt.Sprintf("sim: Inject(%+v): need Nth >= 1 and a failure code", f))
	}
	d.inj.mu.Lock()
	defer d.inj.mu.Unlock()
	d.inj.mu.faults = append(d.inj.mu.faults, &armedFault{Fault: f})
}

// Fail makes the nth call (1-based, from now) of method fail with code.
func (d *Driver) Fail(method string, nth int, code cuda.Result) {
	d.Inject(Fault{Method: method, Nth: nth, Code: code})
}

// FailFrom makes the nth call of method (from now) and every later call of
// it fail with code (a sticky fault). Method "" matches every method.
func (d *Driver) FailFrom(method string, nth int, code cuda.Result) {
	d.Inject(Fault{Method: method, Nth: nth, Sticky: true, Code: code})
}

// FailAll makes every call of method from now on fail with code.
func (d *Driver) FailAll(method string, code cuda.Result) {
	d.Inject(Fault{Method: method, Nth: 1, Sticky: true, Code: code})
}

// FailAny makes the nth call (from now) of any method fail with code.
func (d *Driver) FailAny(nth int, code cuda.Result) {
	d.Inject(Fault{Nth: nth, Code: code})
}

// ClearFaults disarms every injected fault.
func (d *Driver) ClearFaults() {
	d.inj.mu.Lock()
	defer d.inj.mu.Unlock()
	d.inj.mu.faults = nil
}

// Calls returns the call log, oldest first (the most recent 65536 calls).
func (d *Driver) Calls() []Call {
	d.inj.mu.Lock()
	defer d.inj.mu.Unlock()
	l := d.inj.mu.log
	if len(l) < maxCallLog {
		return slices.Clone(l)
	}
	return append(slices.Clone(l[d.inj.mu.next:]), l[:d.inj.mu.next]...)
}

// ResetCalls empties the call log and zeroes the per-method counts
// (armed faults keep their own counts).
func (d *Driver) ResetCalls() {
	d.inj.mu.Lock()
	defer d.inj.mu.Unlock()
	d.inj.mu.log = nil
	d.inj.mu.next = 0
	d.inj.mu.total = 0
	clear(d.inj.mu.counts)
}

// CallCount is the number of calls of method since New or ResetCalls
// ("" counts every method).
func (d *Driver) CallCount(method string) int {
	d.inj.mu.Lock()
	defer d.inj.mu.Unlock()
	if method == "" {
		return d.inj.mu.total
	}
	return d.inj.mu.counts[method]
}
