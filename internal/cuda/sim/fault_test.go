package sim_test

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
)

const testPTX = `
.version 8.0
.target sm_90
.address_size 64
.visible .entry fill(.param .u64 p, .param .u64 n, .param .u32 v) { ret; }
.visible .entry unregistered() { ret; }
`

// fixture is one of every object, so that any Driver method has valid
// arguments.
type fixture struct {
	d         *sim.Driver
	ctx       cuda.Context
	h         cuda.AllocHandle // mapped at v
	v         vmm
	spare     cuda.AllocHandle // unmapped
	freeRes   cuda.DevicePtr   // reserved, unmapped, gran bytes
	fd        int              // exported from h
	fh        cuda.FabricHandle
	dm        cuda.DevicePtr
	host      []byte // registered
	host2     []byte // not registered
	s         cuda.Stream
	e1, e2    cuda.Event
	mod       cuda.Module
	fn        cuda.Function
	paramsPtr [][]byte
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	d := newDriver(t, sim.Config{GPUs: 2, FabricPermitted: true})
	f := &fixture{d: d}
	f.ctx = retain(t, d, 0)
	_ = retain(t, d, 0) // a second reference, so PrimaryCtxRelease keeps the context
	var err error
	types := cuda.HandlePosixFD | cuda.HandleFabric
	f.h, err = d.MemCreate(f.ctx, gran, hostNUMA(0, types))
	must(t, err)
	f.v = mapVMM(t, d, f.ctx, f.h, gran, 0, 1)
	f.spare, err = d.MemCreate(f.ctx, gran, device(0, types))
	must(t, err)
	f.freeRes, err = d.MemAddressReserve(f.ctx, gran, 0)
	must(t, err)
	f.fd, err = d.MemExportToFD(f.ctx, f.h)
	must(t, err)
	t.Cleanup(func() { unix.Close(f.fd) })
	f.fh, err = d.MemExportToFabric(f.ctx, f.h)
	must(t, err)
	f.dm, err = d.MemAlloc(f.ctx, 4096)
	must(t, err)
	f.host = mmapHost(t, 8192)
	f.host2 = mmapHost(t, 8192)
	must(t, d.MemHostRegister(f.ctx, addrOf(f.host), uint64(len(f.host)), 0))
	f.s, err = d.StreamCreate(f.ctx, 0)
	must(t, err)
	f.e1, err = d.EventCreate(f.ctx, 0)
	must(t, err)
	f.e2, err = d.EventCreate(f.ctx, 0)
	must(t, err)
	must(t, d.EventRecord(f.ctx, f.e1, f.s))
	must(t, d.EventRecord(f.ctx, f.e2, f.s))
	d.RegisterKernel("fill", fillKernel)
	f.mod, err = d.ModuleLoadData(f.ctx, []byte(testPTX))
	must(t, err)
	f.fn, err = d.ModuleGetFunction(f.ctx, f.mod, "fill")
	must(t, err)
	f.paramsPtr = fillParams(f.v.ptr, 64, 0xab)
	return f
}

// argsFor gives valid arguments for every error-returning Driver method.
var argsFor = map[string]func(f *fixture) []any{
	"Close":             func(f *fixture) []any { return nil },
	"DriverVersion":     func(f *fixture) []any { return nil },
	"DeviceCount":       func(f *fixture) []any { return nil },
	"DeviceName":        func(f *fixture) []any { return []any{0} },
	"DeviceAttribute":   func(f *fixture) []any { return []any{0, cuda.AttrHostNUMAID} },
	"CanAccessPeer":     func(f *fixture) []any { return []any{0, 1} },
	"PrimaryCtxRetain":  func(f *fixture) []any { return []any{1} },
	"PrimaryCtxRelease": func(f *fixture) []any { return []any{0} },
	"MemGetAllocationGranularity": func(f *fixture) []any {
		return []any{f.ctx, hostNUMA(0, cuda.HandlePosixFD), cuda.GranularityRecommended}
	},
	"MemCreate":         func(f *fixture) []any { return []any{f.ctx, gran, hostNUMA(0, cuda.HandlePosixFD)} },
	"MemRelease":        func(f *fixture) []any { return []any{f.ctx, f.spare} },
	"MemAddressReserve": func(f *fixture) []any { return []any{f.ctx, gran, 0} },
	"MemAddressFree":    func(f *fixture) []any { return []any{f.ctx, f.freeRes, gran} },
	"MemMap":            func(f *fixture) []any { return []any{f.ctx, f.freeRes, gran, 0, f.spare} },
	"MemUnmap":          func(f *fixture) []any { return []any{f.ctx, f.v.ptr, f.v.size} },
	"MemSetAccess": func(f *fixture) []any {
		return []any{f.ctx, f.v.ptr, f.v.size, []cuda.AccessDesc{{Location: cuda.Location{Type: cuda.LocationDevice, ID: 1}, Flags: cuda.AccessRead}}}
	},
	"MemExportToFD":       func(f *fixture) []any { return []any{f.ctx, f.h} },
	"MemExportToFabric":   func(f *fixture) []any { return []any{f.ctx, f.spare} },
	"MemImportFromFD":     func(f *fixture) []any { return []any{f.ctx, f.fd} },
	"MemImportFromFabric": func(f *fixture) []any { return []any{f.ctx, f.fh} },
	"MemAlloc":            func(f *fixture) []any { return []any{f.ctx, 1 << 20} },
	"MemFree":             func(f *fixture) []any { return []any{f.ctx, f.dm} },
	"MemHostRegister":     func(f *fixture) []any { return []any{f.ctx, addrOf(f.host2), len(f.host2), cuda.HostRegisterPortable} },
	"MemHostUnregister":   func(f *fixture) []any { return []any{f.ctx, addrOf(f.host)} },
	"MemcpyHtoD":          func(f *fixture) []any { return []any{f.ctx, f.v.ptr, []byte("hello")} },
	"MemcpyDtoH":          func(f *fixture) []any { return []any{f.ctx, make([]byte, 5), f.v.ptr} },
	"StreamCreate":        func(f *fixture) []any { return []any{f.ctx, cuda.StreamNonBlocking} },
	"StreamDestroy":       func(f *fixture) []any { return []any{f.ctx, f.s} },
	"StreamSynchronize":   func(f *fixture) []any { return []any{f.ctx, f.s} },
	"StreamWaitEvent":     func(f *fixture) []any { return []any{f.ctx, f.s, f.e1} },
	"EventCreate":         func(f *fixture) []any { return []any{f.ctx, cuda.EventDisableTiming} },
	"EventDestroy":        func(f *fixture) []any { return []any{f.ctx, f.e1} },
	"EventRecord":         func(f *fixture) []any { return []any{f.ctx, f.e1, f.s} },
	"EventSynchronize":    func(f *fixture) []any { return []any{f.ctx, f.e1} },
	"EventQuery":          func(f *fixture) []any { return []any{f.ctx, f.e1} },
	"EventElapsedTime":    func(f *fixture) []any { return []any{f.ctx, f.e1, f.e2} },
	"MemcpyAsync": func(f *fixture) []any {
		return []any{f.ctx, []cuda.Copy{{Dst: f.dm, Src: f.v.ptr, Len: 4096}}, f.s}
	},
	"MemcpyBatchAsync": func(f *fixture) []any {
		return []any{f.ctx, []cuda.Copy{{Dst: f.v.ptr, Src: f.dm, Len: 4096}}, f.s}
	},
	"ModuleLoadData":    func(f *fixture) []any { return []any{f.ctx, []byte(testPTX)} },
	"ModuleUnload":      func(f *fixture) []any { return []any{f.ctx, f.mod} },
	"ModuleGetFunction": func(f *fixture) []any { return []any{f.ctx, f.mod, "fill"} },
	"LaunchKernel": func(f *fixture) []any {
		return []any{f.ctx, f.fn, cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 64, Y: 1, Z: 1}, 0, f.s, f.paramsPtr}
	},
	"PointerMemoryTypes": func(f *fixture) []any {
		ptrs := []cuda.DevicePtr{f.dm, f.v.ptr, cuda.DevicePtr(addrOf(f.host)), cuda.DevicePtr(addrOf(f.host2))}
		return []any{f.ctx, ptrs, make([]cuda.MemoryType, len(ptrs))}
	},
	"PointerRanges": func(f *fixture) []any {
		ptrs := []cuda.DevicePtr{f.dm, f.v.ptr, cuda.DevicePtr(addrOf(f.host)), cuda.DevicePtr(addrOf(f.host2))}
		return []any{f.ctx, ptrs, make([]cuda.AddrRange, len(ptrs))}
	},
}

// invoke calls method on d through reflection, converting args to the
// parameter types, and returns the error result.
func invoke(t *testing.T, d *sim.Driver, method string, args []any) (results []reflect.Value, err error) {
	t.Helper()
	m := reflect.ValueOf(d).MethodByName(method)
	mt := m.Type()
	if mt.NumIn() != len(args) {
		t.Fatalf("%s takes %d args, table gives %d", method, mt.NumIn(), len(args))
	}
	in := make([]reflect.Value, len(args))
	for i, a := range args {
		in[i] = reflect.ValueOf(a).Convert(mt.In(i))
	}
	out := m.Call(in)
	if e := out[len(out)-1].Interface(); e != nil {
		err = e.(error)
	}
	return out, err
}

// driverErrorMethods lists the cuda.Driver methods that return an error.
func driverErrorMethods() []string {
	dt := reflect.TypeFor[cuda.Driver]()
	errT := reflect.TypeFor[error]()
	var names []string
	for i := range dt.NumMethod() {
		m := dt.Method(i)
		if n := m.Type.NumOut(); n > 0 && m.Type.Out(n-1) == errT {
			names = append(names, m.Name)
		}
	}
	return names
}

func TestFaultInjectionEveryMethod(t *testing.T) {
	methods := driverErrorMethods()
	if extra := slices.DeleteFunc(slices.Collect(maps.Keys(argsFor)), func(n string) bool { return slices.Contains(methods, n) }); len(extra) > 0 {
		t.Fatalf("argsFor names methods the Driver lacks: %v", extra)
	}
	codes := []cuda.Result{cuda.ErrorOutOfMemory, cuda.ErrorNotPermitted, cuda.ErrorInvalidValue, cuda.ErrorUnknown, cuda.ErrorLaunchFailed, cuda.Result(4242)}
	for i, method := range methods {
		t.Run(method, func(t *testing.T) {
			args, ok := argsFor[method]
			if !ok {
				t.Fatalf("no arguments for Driver.%s: add it to argsFor", method)
			}
			f := newFixture(t)
			code := codes[i%len(codes)]
			before := f.d.LiveObjects()
			f.d.Fail(method, 1, code)
			_, err := invoke(t, f.d, method, args(f))
			if !errors.Is(err, code) || cuda.ResultOf(err) != code {
				t.Fatalf("injected %v, got %v", code, err)
			}
			if after := f.d.LiveObjects(); !maps.Equal(before, after) {
				t.Fatalf("failed call changed live objects: %s -> %s", simtest.FormatObjects(before), simtest.FormatObjects(after))
			}
			calls := f.d.Calls()
			last := calls[len(calls)-1]
			if last.Method != method || !last.Injected || last.Result != code || last.Ordinal != f.d.CallCount(method) {
				t.Fatalf("last logged call %v", last)
			}
			// The fault was one-shot and the arguments are valid: the
			// same call now succeeds, so the failure was the injection.
			out, err := invoke(t, f.d, method, args(f))
			if err != nil {
				t.Fatalf("second call: %v", err)
			}
			if method == "MemExportToFD" {
				unix.Close(int(out[0].Int()))
			}
		})
	}
}

func TestFaultModes(t *testing.T) {
	d := newDriver(t, sim.Config{})
	ctx := retain(t, d, 0)
	create := func() error {
		h, err := d.MemCreate(ctx, gran, hostNUMA(0, 0))
		if err == nil {
			must(t, d.MemRelease(ctx, h))
		}
		return err
	}
	outcome := func(n int, op func() error) []cuda.Result {
		var rs []cuda.Result
		for range n {
			rs = append(rs, cuda.ResultOf(op()))
		}
		return rs
	}
	S, O := cuda.Success, cuda.ErrorOutOfMemory
	for _, tc := range []struct {
		name   string
		inject func()
		want   []cuda.Result
	}{
		{"nth", func() { d.Fail("MemCreate", 2, O) }, []cuda.Result{S, O, S, S}},
		{"all", func() { d.FailAll("MemCreate", O) }, []cuda.Result{O, O, O, O}},
		{"sticky-from-3", func() { d.FailFrom("MemCreate", 3, O) }, []cuda.Result{S, S, O, O}},
		// Each create() is MemCreate + MemRelease: the 3rd call of any
		// method is the second MemCreate.
		{"any-3rd", func() { d.FailAny(3, O) }, []cuda.Result{S, O, S, S}},
		{"other-method", func() { d.FailAll("MemMap", O) }, []cuda.Result{S, S, S, S}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.ClearFaults()
			tc.inject()
			if got := outcome(len(tc.want), create); !slices.Equal(got, tc.want) {
				t.Fatalf("results %v, want %v", got, tc.want)
			}
			d.ClearFaults()
		})
	}
	// A sticky fault on every method leaves the driver refusing
	// everything, including Close, until cleared.
	d.FailFrom("", 1, cuda.ErrorUnknown)
	if err := d.Close(); !errors.Is(err, cuda.ErrorUnknown) {
		t.Fatalf("Close = %v", err)
	}
	d.ClearFaults()
	d.ResetCalls()
	must(t, d.PrimaryCtxRelease(0))
	if d.CallCount("PrimaryCtxRelease") != 1 || d.CallCount("") != 1 || len(d.Calls()) != 1 {
		t.Fatalf("after ResetCalls: %v", d.Calls())
	}
	simtest.AssertNoLeaks(t, d)
	must(t, d.Close())
	if _, err := d.DeviceCount(); !errors.Is(err, cuda.ErrClosed) || !errors.Is(err, cuda.ErrorDeinitialized) {
		t.Fatalf("after Close: %v", err)
	}
	must(t, d.Close())
}
