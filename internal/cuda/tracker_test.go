package cuda

import "testing"

func TestTracker(t *testing.T) {
	var tr tracker
	tr.init()
	tr.add(kAlloc, 7)
	tr.add(kImport, 7) // the same handle value imported again
	tr.add(kMapping, 0x1000)
	tr.add(kMapping, 0x3000)
	tr.add(kMapping, 0x9000)
	tr.add(kContext, 0)
	tr.add(kContext, 0)

	if got := tr.snapshot(); got.Total() != 7 || got[ObjMapping] != 3 || got[ObjContext] != 2 {
		t.Fatalf("after adds: %v", got)
	}
	if tr.remove(kStream, 1) {
		t.Fatal("remove of an object never added reported true")
	}
	if !tr.remove(kAlloc, 7) || tr.remove(kAlloc, 7) {
		t.Fatal("alloc remove not matched exactly once")
	}
	tr.removeRange(kMapping, 0x1000, 0x4000) // covers 0x1000 and 0x3000, not 0x9000
	got := tr.snapshot()
	if got[ObjMapping] != 1 || got[ObjAllocation] != 0 || got[ObjImport] != 1 {
		t.Fatalf("after removes: %v", got)
	}
	tr.remove(kImport, 7)
	tr.remove(kContext, 0)
	tr.remove(kContext, 0)
	tr.removeRange(kMapping, 0x9000, 1)
	if got := tr.snapshot(); got.Total() != 0 {
		t.Fatalf("leftover: %v", got)
	}
	for k, name := range kindNames {
		if name == "" {
			t.Errorf("kind %d has no name", k)
		}
	}
}
