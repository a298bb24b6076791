package master

import (
	"context"
	"fmt"
	"iter"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// benchService returns a Service with four huge segments (the master never
// touches the memory, so their size costs nothing) and a client of kind
// "embedded" or "grpc" (real TCP loopback).
func benchService(b *testing.B, kind string) (*Service, Client) {
	b.Helper()
	svc := segmentedService(b, 4, 1<<48, 2)
	ctx := context.Background()
	if kind == "embedded" {
		return svc, NewEmbedded(svc)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := NewServer(svc, nil)
	go srv.Serve(lis, nil)
	c, err := Dial(ctx, lis.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = c.Close()
		_ = srv.Shutdown(context.Background())
	})
	return svc, c
}

// segmentedService returns a Service with the writer "bench" (benchWriter)
// and segs DRAM segments of segSize bytes on its node, spread round-robin
// over numas NUMA nodes.
func segmentedService(b *testing.B, segs int, segSize uint64, numas int) *Service {
	b.Helper()
	svc, err := New(Config{ReapInterval: time.Second, PutTimeout: time.Hour, LeaseTTL: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = svc.Close() })
	ctx := context.Background()
	reg, err := svc.RegisterClient(ctx, ClientInfo{ID: "bench", Node: "h", TTL: 5 * time.Minute, NUMANode: -1, Device: -1})
	if err != nil {
		b.Fatal(err)
	}
	for i := range segs {
		if err := svc.MountSegment(ctx, desc("seg"+strconv.Itoa(i), reg.ID, "h", segment.TierDRAM, int32(i%numas), segSize)); err != nil {
			b.Fatal(err)
		}
	}
	return svc
}

var batches = []int{1, 16, 128, 1024}

// batchesOf are the batch sizes run for a client kind: embedded also at
// 4096, the batch the lab host measures the Service's cost per key at.
func batchesOf(kind string) []int {
	if kind == "embedded" {
		return append(batches[:len(batches):len(batches)], 4096)
	}
	return batches
}

// BenchmarkPut measures PutStart+PutEnd of new keys (4 KiB objects). One
// op is one key; keys/s counts keys, and each key is two master operations.
func BenchmarkPut(b *testing.B) {
	for _, kind := range []string{"embedded", "grpc"} {
		for _, n := range batchesOf(kind) {
			b.Run(fmt.Sprintf("%s/batch=%d", kind, n), func(b *testing.B) {
				_, c := benchService(b, kind)
				var seq atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(parallelism(kind))
				b.ResetTimer() // not the setup (and fill: 100k objects)
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					ctx := context.Background()
					reqs := make([]PutStartReq, n)
					refs := make([]PutRef, n)
					for pb.Next() {
						base := seq.Add(int64(n)) - int64(n)
						for i := range reqs {
							reqs[i] = PutStartReq{Key: "key-" + strconv.FormatInt(base+int64(i), 10), Size: 4096, Placement: benchWriter}
						}
						refs = putBatch(b, ctx, c, reqs, refs)
					}
				})
				reportKeys(b, start, n)
			})
		}
	}
}

// BenchmarkGet measures GetReplicas of existing keys (100k objects).
func BenchmarkGet(b *testing.B) {
	const objects = 100_000
	for _, kind := range []string{"embedded", "grpc"} {
		for _, n := range batchesOf(kind) {
			b.Run(fmt.Sprintf("%s/batch=%d", kind, n), func(b *testing.B) {
				svc, c := benchService(b, kind)
				fill(b, svc, objects)
				var seq atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(parallelism(kind))
				b.ResetTimer() // not the setup (and fill: 100k objects)
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					ctx := context.Background()
					keys := make([]string, n)
					for pb.Next() {
						base := seq.Add(int64(n))
						for i := range keys {
							keys[i] = "key-" + strconv.Itoa(int((base+int64(i)*7919)%objects))
						}
						res, err := c.GetReplicas(ctx, keys)
						if err != nil {
							b.Fatal(err)
						}
						if res[0].Err != nil {
							b.Fatal(res[0].Err)
						}
					}
				})
				reportKeys(b, start, n)
			})
		}
	}
}

// BenchmarkReleaseLeases measures ReleaseLeases of the leases one
// GetReplicas of batch keys took (100k objects, embedded): a get's second
// master call. ns/key is ReleaseLeases time only; the gets are untimed.
func BenchmarkReleaseLeases(b *testing.B) {
	const objects = 100_000
	for _, n := range []int{1024, 4096} {
		b.Run(fmt.Sprintf("embedded/batch=%d", n), func(b *testing.B) {
			svc, c := benchService(b, "embedded")
			fill(b, svc, objects)
			ctx := context.Background()
			keys := make([]string, n)
			ids := make([]uint64, n)
			base := 0
			b.ReportAllocs()
			rounds := 0
			for b.Loop() {
				b.StopTimer()
				for i := range keys {
					keys[i] = "key-" + strconv.Itoa((base+i*7919)%objects)
				}
				base += n
				res, err := c.GetReplicas(ctx, keys)
				if err != nil {
					b.Fatal(err)
				}
				for i, r := range res {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
					ids[i] = r.LeaseID
				}
				b.StartTimer()
				if err := c.ReleaseLeases(ctx, ids); err != nil {
					b.Fatal(err)
				}
				rounds++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rounds*n), "ns/key")
		})
	}
}

// BenchmarkGetRelease measures what a Store's batch get asks of the master
// (100k objects, embedded): GetReplicas of batch keys, each beginning a
// new lease period, then ReleaseLeases of their leases. Goroutines
// (-cpu) run at once on disjoint key ranges — the parts of large batches,
// or several engines — with the lock shared (the read path, readpath.go).
// ns/op is per batch of all goroutines; keys/s counts gets.
func BenchmarkGetRelease(b *testing.B) {
	const objects = 100_000
	for _, n := range []int{1, 16, 512, 4096} {
		b.Run(fmt.Sprintf("embedded/batch=%d", n), func(b *testing.B) {
			svc, c := benchService(b, "embedded")
			fill(b, svc, objects)
			var worker atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				w := int(worker.Add(1) - 1)
				keys := make([]string, n)
				ids := make([]uint64, 0, n)
				base := (w * 16384) % objects
				for i := range keys {
					keys[i] = "key-" + strconv.Itoa((base+i)%objects)
				}
				for pb.Next() {
					res, err := c.GetReplicas(ctx, keys)
					if err != nil {
						b.Fatal(err)
					}
					ids = ids[:0]
					for _, r := range res {
						if r.Err != nil {
							b.Fatal(r.Err)
						}
						ids = append(ids, r.LeaseID)
					}
					if err := c.ReleaseLeases(ctx, ids); err != nil {
						b.Fatal(err)
					}
				}
			})
			reportKeys(b, start, n)
		})
	}
}

// parallelism: the embedded Service is one lock, so one goroutine per
// core; over gRPC several calls in flight per core hide the round trip.
func parallelism(kind string) int {
	if kind == "grpc" {
		return 4
	}
	return 1
}

func reportKeys(b *testing.B, start time.Time, batch int) {
	b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "keys/s")
	b.ReportMetric(float64(batch), "keys/op")
}

// benchWriter is the registered client benchmarks put as.
var benchWriter = Placement{Client: "bench", NUMANode: -1, Device: -1}

// fill puts n visible objects key-0 … key-(n-1) straight into svc.
func fill(b *testing.B, svc *Service, n int) {
	b.Helper()
	ctx := context.Background()
	const batch = 4096
	reqs := make([]PutStartReq, 0, batch)
	refs := make([]PutRef, 0, batch)
	for i := 0; i < n; i += batch {
		reqs = reqs[:0]
		for j := i; j < min(n, i+batch); j++ {
			reqs = append(reqs, PutStartReq{Key: "key-" + strconv.Itoa(j), Size: 4096, Placement: benchWriter})
		}
		refs = putBatch(b, ctx, NewEmbedded(svc), reqs, refs)
	}
}

// BenchmarkObjectMemory reports the heap bytes per visible object (keys
// "key-<n>", 4 KiB, one replica) in a table of 1M objects, and 10M with
// KVFABRIC_BENCH_10M=1. Run with -benchtime=1x.
func BenchmarkObjectMemory(b *testing.B) {
	sizes := []int{1_000_000}
	if os.Getenv("KVFABRIC_BENCH_10M") == "1" {
		sizes = append(sizes, 10_000_000)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("objects=%dM", n/1_000_000), func(b *testing.B) {
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				svc, _ := benchService(b, "embedded")
				fill(b, svc, n)
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "B/object")
				start := time.Now()
				runtime.GC()
				b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "ms/GC")
				runtime.KeepAlive(svc)
				_ = svc.Close()
			}
		})
	}
}

// BenchmarkPutStartSegments measures PutStart per key against the number of
// mounted segments (issue 13): an NVL72 rack's Grace DRAM in 1 GiB chunks
// is ~17,000 segments. The segments are spread over 18 nodes × 2 NUMA
// nodes; the writer sits on node n0, NUMA node 0 (so placement has a near
// bucket and far ones). Objects are 4 KiB, so nothing fills; each round's
// puts are revoked, untimed, so the state stays steady. ns/key is PutStart
// time only.
func BenchmarkPutStartSegments(b *testing.B) {
	const batch = 4096
	for _, nseg := range []int{192, 2048, 16384} {
		b.Run(fmt.Sprintf("segments=%d/batch=%d", nseg, batch), func(b *testing.B) {
			svc := segmentsService(b, nseg)
			ctx := context.Background()
			reqs := make([]PutStartReq, batch)
			refs := make([]PutRef, batch)
			for i := range reqs {
				reqs[i] = PutStartReq{Key: "key-" + strconv.Itoa(i), Size: 4096, Placement: benchWriter}
			}
			b.ReportAllocs()
			rounds := 0
			for b.Loop() {
				res, err := svc.PutStart(ctx, reqs)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				for i, r := range res {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
					refs[i] = PutRef{Key: reqs[i].Key, Token: r.Token}
				}
				for _, err := range svc.PutRevoke(ctx, refs) {
					if err != nil {
						b.Fatal(err)
					}
				}
				rounds++
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rounds*batch), "ns/key")
		})
	}
}

// segmentsService returns a Service with nseg 1 GiB DRAM segments (fabric
// handles, one provider per node) spread round-robin over 18 nodes × 2
// NUMA nodes, and the writer "bench" on n0, NUMA node 0.
func segmentsService(b *testing.B, nseg int) *Service {
	b.Helper()
	svc, err := New(Config{ReapInterval: -1, PutTimeout: time.Hour, LeaseTTL: time.Second,
		ClientTTL: time.Hour, MaxClientTTL: time.Hour, Quotas: Quotas{Segments: -1, PendingPuts: -1, ReservedBytes: -1}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = svc.Close() })
	ctx := context.Background()
	const nodes, numas = 18, 2
	for n := range nodes {
		if _, err := svc.RegisterClient(ctx, ClientInfo{ID: "prov-" + strconv.Itoa(n), Node: "n" + strconv.Itoa(n), NUMANode: -1, Device: -1}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := svc.RegisterClient(ctx, ClientInfo{ID: "bench", Node: "n0", NUMANode: 0, Device: 0}); err != nil {
		b.Fatal(err)
	}
	for i := range nseg {
		n, numa := i%nodes, int32(i/nodes%numas)
		d := desc("seg"+strconv.Itoa(i), "prov-"+strconv.Itoa(n), "n"+strconv.Itoa(n), segment.TierDRAM, numa, 1<<30)
		d.Generation = uint64(i + 1)
		if err := svc.MountSegment(ctx, d); err != nil {
			b.Fatal(err)
		}
	}
	return svc
}

// BenchmarkPutFull measures PutStart+PutEnd of 4096 new keys per call into
// a store that is full, as a cache's store is once it has run for a while:
// every put evicts (approximate LRU) to make room. The store holds 64
// batches, so a batch is a small part of it, as in production.
// (BenchmarkPut's segments never fill, and the Store bench removes its
// keys each round.) reads=1: before each put (untimed), a get of 4096
// random keys of the newest three quarters of the store, released at
// once, as a cache's hits are: the least recently used objects are then
// spread over the table rather than the oldest puts.
func BenchmarkPutFull(b *testing.B) {
	const n, batches, segs = 4096, 64, 8
	for _, reads := range []bool{false, true} {
		for _, size := range []uint64{4 * KiB, 64 * KiB} {
			b.Run(fmt.Sprintf("size=%d/reads=%d", size, boolInt(reads)), func(b *testing.B) {
				benchPutFull(b, n, batches, segs, size, reads)
			})
		}
	}
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

func benchPutFull(b *testing.B, n, batches, segs int, size uint64, reads bool) {
	svc := segmentedService(b, segs, uint64(batches*n)*size/uint64(segs), 2)
	ctx := context.Background()
	c := NewEmbedded(svc)
	reqs := make([]PutStartReq, n)
	refs := make([]PutRef, n)
	seq := 0
	put := func() {
		for i := range reqs {
			reqs[i] = PutStartReq{Key: "key-" + strconv.Itoa(seq), Size: size, Placement: benchWriter}
			seq++
		}
		refs = putBatch(b, ctx, c, reqs, refs)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]string, n)
	ids := make([]uint64, 0, n)
	get := func() {
		if !reads {
			return
		}
		for i := range keys {
			keys[i] = "key-" + strconv.Itoa(seq-1-rng.IntN(batches*n*3/4))
		}
		res, err := c.GetReplicas(ctx, keys)
		if err != nil {
			b.Fatal(err)
		}
		ids = ids[:0]
		for _, r := range res {
			if r.Err == nil {
				ids = append(ids, r.LeaseID)
			}
		}
		if err := c.ReleaseLeases(ctx, ids); err != nil {
			b.Fatal(err)
		}
	}
	evictions := func() uint64 {
		st, err := svc.Stats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return st.Evictions
	}
	for range batches + batches/2 { // full, and evicting
		get()
		put()
	}
	ev0 := evictions()
	b.ResetTimer()
	start := time.Now()
	var untimed time.Duration
	for range b.N {
		if reads {
			b.StopTimer()
			t0 := time.Now()
			get()
			untimed += time.Since(t0)
			b.StartTimer()
		}
		put()
	}
	b.StopTimer()
	reportKeys(b, start.Add(untimed), n)
	b.ReportMetric(float64(evictions()-ev0)/float64(b.N*n), "evictions/key")
}

// BenchmarkPutRounds measures the master's part of the Store's pipelined
// BatchPut as `kvfabric bench --store` runs it: 192 DRAM segments of
// 128 MiB (the bench's 24 GiB pool), a round of 4096 objects put in the
// chunks the Store's chunker cuts (64, 128, 256, then 512 keys), each
// chunk's PutStart and then its PutEnd, and the round's objects removed
// (untimed) before the next. live=0 starts from an empty table (it holds
// at most the round's objects, as the bench's store does); live=1000000
// from one holding a million other objects, as a cache in service does,
// whose records and index no longer fit in a core's caches. ns/key of PutStart and of PutEnd apart;
// PutStart as the Store makes it with an embedded master, prepared
// (PreparePutStart, prep-ns/key) and then started (PutStartPrepared,
// putstart-ns/key: the master's serial path). prep=inline prepares each
// chunk on the goroutine that starts it; prep=ahead on a goroutine of its
// own, one chunk ahead, as the Store's pipeline does — its requests and
// preparation then reach the master's goroutine from another core.
func BenchmarkPutRounds(b *testing.B) {
	for _, live := range []int{0, 1_000_000} {
		for _, size := range []uint64{4 * KiB, 64 * KiB} {
			for _, prep := range []string{"inline", "ahead", "uniform"} {
				b.Run(fmt.Sprintf("live=%d/size=%d/prep=%s", live, size, prep), func(b *testing.B) {
					benchPutRounds(b, live, size, prep)
				})
			}
		}
	}
}

func benchPutRounds(b *testing.B, live int, size uint64, prep string) {
	const round, segs, segSize = 4096, 192, 128 << 20
	svc := segmentedService(b, segs, segSize, 1)
	fill(b, svc, live)
	ctx := context.Background()
	keys := make([]string, round)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench/%d/%d", size, i)
	}
	var tPrep, tStart, tEnd time.Duration
	refs := make([]PutRef, 0, 512)
	for b.Loop() {
		for c := range putRoundChunks(svc, keys, size, prep) {
			if c.err != nil {
				b.Fatal(c.err)
			}
			t1 := time.Now()
			res, err := svc.PutStartPrepared(ctx, c.pre)
			t2 := time.Now()
			if err != nil {
				b.Fatal(err)
			}
			refs = refs[:0]
			for i := range res {
				if res[i].Err != nil {
					b.Fatal(res[i].Err)
				}
				refs = append(refs, res[i].Ref(c.keys[i]))
			}
			t3 := time.Now()
			endRefs(b, ctx, svc, refs)
			tPrep += c.prep
			tStart += t2.Sub(t1)
			tEnd += time.Since(t3)
		}
		b.StopTimer()
		for i, err := range svc.Remove(ctx, keys, true) {
			if err != nil {
				b.Fatalf("remove %s: %v", keys[i], err)
			}
		}
		b.StartTimer()
	}
	keysDone := float64(b.N * round)
	b.ReportMetric(float64(tPrep.Nanoseconds())/keysDone, "prep-ns/key")
	b.ReportMetric(float64(tStart.Nanoseconds())/keysDone, "putstart-ns/key")
	b.ReportMetric(float64(tEnd.Nanoseconds())/keysDone, "putend-ns/key")
}

// putRoundChunk is one chunk of BenchmarkPutRounds' round, prepared.
type putRoundChunk struct {
	keys []string
	pre  *PreparedPuts
	prep time.Duration
	err  error
}

// putRoundChunks yields a round's chunks of keys prepared, in the
// Store's chunk sizes: "inline" from requests, on the consumer's
// goroutine; "ahead" from requests on a goroutine of its own, one chunk
// ahead of the consumer; "uniform" the same as UniformPuts.
func putRoundChunks(svc *Service, keys []string, size uint64, prep string) iter.Seq[putRoundChunk] {
	make1 := func(lo, n int) putRoundChunk {
		ks := keys[lo:min(lo+n, len(keys))]
		var pre *PreparedPuts
		var err error
		var t0 time.Time
		if prep == "uniform" {
			sizes := make([]uint64, len(ks))
			for i := range sizes {
				sizes[i] = size
			}
			t0 = time.Now()
			pre, err = svc.PrepareUniformPutStart(UniformPuts{Keys: ks, Sizes: sizes, Req: PutStartReq{Placement: benchWriter}})
		} else {
			reqs := make([]PutStartReq, 0, n)
			for _, k := range ks {
				reqs = append(reqs, PutStartReq{Key: k, Size: size, Placement: benchWriter})
			}
			t0 = time.Now()
			pre, err = svc.PreparePutStart(reqs)
		}
		return putRoundChunk{keys: ks, pre: pre, prep: time.Since(t0), err: err}
	}
	return func(yield func(putRoundChunk) bool) {
		if prep == "inline" {
			for lo, n := 0, 64; lo < len(keys); lo, n = lo+n, min(2*n, 512) {
				if !yield(make1(lo, n)) {
					return
				}
			}
			return
		}
		ch := make(chan putRoundChunk, 1)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			defer close(ch)
			for lo, n := 0, 64; lo < len(keys); lo, n = lo+n, min(2*n, 512) {
				select {
				case ch <- make1(lo, n):
				case <-stop:
					return
				}
			}
		}()
		for c := range ch {
			if !yield(c) {
				return
			}
		}
	}
}

// BenchmarkGetDuringFullPuts: the latency of a one-key get (GetReplicas,
// its lease released after the timing) while another goroutine puts into
// a full store in the Store's chunks of 512 keys (4 KiB objects: every
// put evicts), as a reader of a cache in service waits for the writers'
// exclusive calls and the evictions inside them. Keys are drawn from the
// newest three quarters of the store; a key evicted meanwhile is a miss
// and is timed too. p50-us, p99-us and p999-us are of the gets.
func BenchmarkGetDuringFullPuts(b *testing.B) {
	const n, batches, segs, chunk = 4096, 64, 8, 512
	const size = 4 * KiB
	svc := segmentedService(b, segs, batches*n*size/segs, 2)
	ctx := context.Background()
	c := NewEmbedded(svc)
	var seq atomic.Int64
	put := func(keys int, reqs []PutStartReq, refs []PutRef) []PutRef {
		base := seq.Load()
		for i := range reqs[:keys] {
			reqs[i] = PutStartReq{Key: "key-" + strconv.FormatInt(base+int64(i), 10), Size: size, Placement: benchWriter}
		}
		refs = putBatch(b, ctx, c, reqs[:keys], refs)
		seq.Add(int64(keys))
		return refs
	}
	reqs, refs := make([]PutStartReq, n), make([]PutRef, n)
	for range batches + batches/2 { // full, and evicting
		refs = put(n, reqs, refs)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		reqs, refs := make([]PutStartReq, chunk), make([]PutRef, chunk)
		for {
			select {
			case <-stop:
				return
			default:
			}
			refs = put(chunk, reqs, refs)
		}
	})
	rng := rand.New(rand.NewPCG(3, 4))
	var lat latencies
	var ids []uint64
	keys := make([]string, 1)
	for b.Loop() {
		keys[0] = "key-" + strconv.FormatInt(seq.Load()-1-int64(rng.IntN(batches*n*3/4)), 10)
		t0 := time.Now()
		res, err := c.GetReplicas(ctx, keys)
		lat.add(t0)
		if err != nil {
			b.Fatal(err)
		}
		if res[0].Err == nil {
			ids = append(ids[:0], res[0].LeaseID)
			if err := c.ReleaseLeases(ctx, ids); err != nil {
				b.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	lat.report(b)
	slices.Sort(lat)
	b.ReportMetric(float64(lat[(len(lat)-1)*999/1000].Nanoseconds())/1e3, "p999-us")
}

// BenchmarkPutCallsFull: the time of each PutStart call of 512 new 4 KiB
// keys (the Store's chunk) into a full store, made one after another by
// one goroutine: how long each holds the lock exclusively, evictions
// included, and so how long a reader may wait for one (without the noise
// of a concurrent reader: BenchmarkGetDuringFullPuts). p50-us, p99-us and
// max-us are of the calls.
func BenchmarkPutCallsFull(b *testing.B) {
	const n, batches, segs, chunk = 4096, 64, 8, 512
	const size = 4 * KiB
	svc := segmentedService(b, segs, batches*n*size/segs, 2)
	ctx := context.Background()
	c := NewEmbedded(svc)
	seq := 0
	reqs, refs := make([]PutStartReq, n), make([]PutRef, n)
	next := func(k int) []PutStartReq {
		for i := range reqs[:k] {
			reqs[i] = PutStartReq{Key: "key-" + strconv.Itoa(seq), Size: size, Placement: benchWriter}
			seq++
		}
		return reqs[:k]
	}
	for range batches + batches/2 { // full, and evicting
		refs = putBatch(b, ctx, c, next(n), refs)
	}
	var lat latencies
	for b.Loop() {
		batch := next(chunk)
		t0 := time.Now()
		refs = startRefs(b, ctx, c, batch, refs)
		lat.add(t0)
		endRefs(b, ctx, c, refs)
	}
	lat.report(b)
	b.ReportMetric(float64(slices.Max(lat).Nanoseconds())/1e3, "max-us")
}

// BenchmarkPutShards asks what a master sharded by key would give the
// put path before one is built (issue 13 item 2: "split a large batch
// over cores (sharded key index)"): shards independent Services, each
// with its share of BenchmarkPutRounds' 192 segments of 128 MiB, each
// put into at once by a caller of its own in the Store's chunks (64, 128,
// 256, then 512 keys of 4 KiB objects, prepared as UniformPuts one chunk
// ahead on another goroutine, as an embedded Store's pipeline does), then
// each chunk's PutEnd. ns/key is the wall time per key of all shards
// together: the rate a master sharded this way would reach, before any
// cost of routing keys to shards or of what shards would still share.
// shards=1 is one Service, as the master is now. Each round's objects are
// removed, untimed, before the next.
func BenchmarkPutShards(b *testing.B) {
	const round, segs, segSize, size = 4096, 192, 128 << 20, 4 * KiB
	for _, shards := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			svcs := make([]*Service, shards)
			keys := make([][]string, shards)
			for i := range svcs {
				svcs[i] = segmentedService(b, segs/shards, segSize, 1)
				keys[i] = make([]string, round)
				for j := range keys[i] {
					keys[i][j] = fmt.Sprintf("bench/shard%d/%d", i, j)
				}
			}
			ctx := context.Background()
			errs := make([]error, shards)
			for b.Loop() {
				var wg sync.WaitGroup
				for i := range svcs {
					wg.Go(func() { errs[i] = putShardRound(ctx, svcs[i], keys[i], size) })
				}
				wg.Wait()
				b.StopTimer()
				for i, svc := range svcs {
					if errs[i] != nil {
						b.Fatal(errs[i])
					}
					for j, err := range svc.Remove(ctx, keys[i], true) {
						if err != nil {
							b.Fatalf("remove %s: %v", keys[i][j], err)
						}
					}
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*round*shards), "ns/key")
		})
	}
}

// putShardRound puts keys into svc as BenchmarkPutShards describes.
func putShardRound(ctx context.Context, svc *Service, keys []string, size uint64) error {
	refs := make([]PutRef, 0, 512)
	for c := range putRoundChunks(svc, keys, size, "uniform") {
		if c.err != nil {
			return c.err
		}
		res, err := svc.PutStartPrepared(ctx, c.pre)
		if err != nil {
			return err
		}
		refs = refs[:0]
		for i := range res {
			if res[i].Err != nil {
				return fmt.Errorf("put %s: %w", c.keys[i], res[i].Err)
			}
			refs = append(refs, res[i].Ref(c.keys[i]))
		}
		for i, err := range svc.PutEnd(ctx, refs) {
			if err != nil {
				return fmt.Errorf("put end %s: %w", refs[i].Key, err)
			}
		}
	}
	return nil
}

// BenchmarkGetCarry measures a GetReplicas of keys=n keys (100k objects)
// as a reader makes it back to back, embedded and (one key) over the fast
// path on loopback in this process: release=carried ends the previous
// get's n leases with it (ReleaseCarry); release=call ends them by a
// ReleaseLeases call of its own after the get (both timed); release=apart
// releases every 1024 or more gets' leases in one untimed call: what a
// carry adds to a get, against what it spares.
func BenchmarkGetCarry(b *testing.B) {
	const objects = 100_000
	type bench struct {
		kind string
		keys int
	}
	for _, bc := range []bench{{"embedded", 1}, {"fast", 1}, {"embedded", 16}, {"embedded", 64}} {
		for _, mode := range []string{"carried", "call", "apart"} {
			b.Run(fmt.Sprintf("client=%s/keys=%d/release=%s", bc.kind, bc.keys, mode), func(b *testing.B) {
				svc, c := benchService(b, "embedded")
				if bc.kind == "fast" {
					c = dialFast(b, serveFast(b, NewServer(svc, nil), nil), FastPath{})
					b.Cleanup(func() { _ = c.Close() })
				}
				fill(b, svc, objects)
				ctx := context.Background()
				all := make([]string, 1024*bc.keys)
				for i := range all {
					all[i] = "key-" + strconv.Itoa(i*7919%objects)
				}
				var prev, apart []uint64
				carry := &ReleaseCarry{}
				cctx := WithReleases(ctx, carry)
				i := 0
				for b.Loop() {
					keys := all[i%1024*bc.keys:][:bc.keys]
					i++
					var res []GetResult
					var err error
					if mode == "carried" && len(prev) > 0 {
						carry.IDs, carry.Released = prev, false
						res, err = c.GetReplicas(cctx, keys)
						if err == nil && !carry.Released {
							b.Fatal("carry not taken")
						}
					} else {
						res, err = c.GetReplicas(ctx, keys)
						if err == nil && mode == "call" && len(prev) > 0 {
							err = c.ReleaseLeases(ctx, prev)
						}
					}
					if err != nil {
						b.Fatal(err)
					}
					prev = prev[:0]
					for _, r := range res {
						if r.Err != nil {
							b.Fatal(r.Err)
						}
						prev = append(prev, r.LeaseID)
					}
					if mode == "apart" {
						apart, prev = append(apart, prev...), prev[:0]
						if len(apart) >= 1024 {
							b.StopTimer()
							if err := c.ReleaseLeases(ctx, apart); err != nil {
								b.Fatal(err)
							}
							apart = apart[:0]
							b.StartTimer()
						}
					}
				}
			})
		}
	}
}
