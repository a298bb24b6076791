package master

import (
	"reflect"
	"testing"
)

// TestTransportStatsAdd: Add sums every field of TransportStats — one set
// to 1 in each operand comes out 2 — so a counter added to the struct and
// not to Add fails here (ha.Client.Transports once dropped SpinHits and
// SpinMisses that way).
func TestTransportStatsAdd(t *testing.T) {
	typ := reflect.TypeFor[TransportStats]()
	for i := range typ.NumField() {
		var a TransportStats
		f := reflect.ValueOf(&a).Elem().Field(i)
		switch f.Kind() {
		case reflect.Uint64:
			f.SetUint(1)
		case reflect.Int:
			f.SetInt(1)
		default:
			t.Fatalf("field %s is a %v: teach Add and this test about it", typ.Field(i).Name, f.Kind())
		}
		sum := reflect.ValueOf(a.Add(a)).Field(i)
		var got int64
		if sum.Kind() == reflect.Uint64 {
			got = int64(sum.Uint())
		} else {
			got = sum.Int()
		}
		if got != 2 {
			t.Errorf("Add of two stats with %s = 1: %s = %d, want 2", typ.Field(i).Name, typ.Field(i).Name, got)
		}
	}
}
