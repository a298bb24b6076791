package cuda

import (
	"sync"
	"sync/atomic"
)

// objKind indexes tracker counts; names are the Obj* constants.
type objKind uint8

const (
	kContext objKind = iota
	kAlloc
	kImport
	kReservation
	kMapping
	kExport
	kRegistration
	kDevMem
	kStream
	kEvent
	kModule
	nKinds
)

var kindNames = [nKinds]string{
	kContext:      ObjContext,
	kAlloc:        ObjAllocation,
	kImport:       ObjImport,
	kReservation:  ObjReservation,
	kMapping:      ObjMapping,
	kExport:       ObjExport,
	kRegistration: ObjRegistration,
	kDevMem:       ObjDeviceMem,
	kStream:       ObjStream,
	kEvent:        ObjEvent,
	kModule:       ObjModule,
}

type objKey struct {
	kind objKind
	id   uint64 // handle, address or device ordinal
}

// tracker counts objects created through a Driver and not yet destroyed
// through it. Only destroys of objects it saw created are counted, so
// objects created elsewhere in the process (another library, another
// Driver) never drive a count negative. Safe for concurrent use.
type tracker struct {
	mu struct {
		sync.Mutex
		live map[objKey]int // creations not yet matched by a destroy
	}
	counts [nKinds]atomic.Int64 // per-kind sums of mu.live
}

func (t *tracker) init() {
	t.mu.live = make(map[objKey]int)
}

func (t *tracker) add(k objKind, id uint64) {
	t.mu.Lock()
	if t.mu.live == nil {
		t.mu.live = make(map[objKey]int)
	}
	t.mu.live[objKey{k, id}]++
	t.mu.Unlock()
	t.counts[k].Add(1)
}

// remove matches one earlier add of (k, id) and reports whether there was one.
func (t *tracker) remove(k objKind, id uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := objKey{k, id}
	n := t.mu.live[key]
	if n == 0 {
		return false
	}
	if n == 1 {
		delete(t.mu.live, key)
	} else {
		t.mu.live[key] = n - 1
	}
	t.counts[k].Add(-1)
	return true
}

// removeRange removes every object of kind k whose id lies in
// [start, start+size): one cuMemUnmap may cover several cuMemMap calls.
func (t *tracker) removeRange(k objKind, start, size uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, n := range t.mu.live {
		if key.kind == k && key.id >= start && key.id-start < size {
			delete(t.mu.live, key)
			t.counts[k].Add(-int64(n))
		}
	}
}

func (t *tracker) snapshot() Objects {
	o := make(Objects, nKinds)
	for k := range nKinds {
		o[kindNames[k]] = int(t.counts[k].Load())
	}
	return o
}
