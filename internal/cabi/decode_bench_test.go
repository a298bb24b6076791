package cabi

import (
	"strconv"
	"testing"
	"unsafe"
)

// BenchmarkDecodeBatch measures what the C ABI does per key before a batch
// reaches the Store: the C key pointers and lengths (keys=arrays) or the
// NUL-separated keys of kvfabric_batch_put_packed (keys=packed) into Go
// strings, the buffer pointers and lengths into regions (4096 keys, one
// region each).
func BenchmarkDecodeBatch(b *testing.B) {
	const n = 4096
	keys := make([][]byte, n)
	kp := make([]unsafe.Pointer, n)
	kl := make([]uint64, n)
	ptrs := make([]uint64, n)
	lens := make([]uint64, n)
	var packed []byte
	for i := range keys {
		keys[i] = []byte("bench/gpu0/r3/" + strconv.Itoa(100000000+i))
		kp[i], kl[i] = unsafe.Pointer(&keys[i][0]), uint64(len(keys[i]))
		ptrs[i], lens[i] = 0x7f0000000000+uint64(i)<<16, 1<<16
		if i > 0 {
			packed = append(packed, 0)
		}
		packed = append(packed, keys[i]...)
	}
	decode := map[string]func() ([]string, error){
		"arrays": func() ([]string, error) { return decodeKeys(n, unsafe.Pointer(&kp[0]), unsafe.Pointer(&kl[0])) },
		"packed": func() ([]string, error) { return decodePackedKeys(n, unsafe.Pointer(&packed[0]), uint64(len(packed))) },
	}
	for _, name := range []string{"arrays", "packed"} {
		b.Run("keys="+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ks, err := decode[name]()
				if err != nil {
					b.Fatal(err)
				}
				bt, err := withRegions(ks, unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&lens[0]), nil)
				if err != nil || len(bt.keys) != n {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
		})
	}
}
