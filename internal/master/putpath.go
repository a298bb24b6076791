package master

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// PutPathCost is what a master's own put path costs per key on this host:
// an embedded Store's BatchPut without the GPU or the Store around it.
// PutStart and PutEnd run under the master's lock, one after another for
// every key; the preparation runs beside them, on the Store's pipeline.
// So 1 / (PutStartNs + PutEndNs) keys per ns is the most an embedded
// master lets one process put, whatever the link: for small objects the
// put's ceiling on this host's CPU, which varies from host to host.
type PutPathCost struct {
	Size       uint64  `json:"size"`
	Keys       int     `json:"keys"` // keys timed (rounds × keys per round)
	PrepareNs  float64 `json:"prepare_ns_per_key"`
	PutStartNs float64 `json:"putstart_ns_per_key"`
	PutEndNs   float64 `json:"putend_ns_per_key"`
}

// SerialNs is PutStart and PutEnd per key: the master's lock's time.
func (c PutPathCost) SerialNs() float64 { return c.PutStartNs + c.PutEndNs }

// GBps is the most bytes per ns (GB/s) the master's lock lets through at
// c.Size: Size / SerialNs.
func (c PutPathCost) GBps() float64 {
	if c.SerialNs() <= 0 {
		return 0
	}
	return float64(c.Size) / c.SerialNs()
}

// MeasurePutPath times a master's put path as an embedded Store's BatchPut
// drives it: a Service of segs segments of segSize bytes (DRAM), rounds of
// keys objects of size bytes cut into the Store's chunks (chunk/8 keys,
// doubling up to chunk), each chunk prepared as uniform puts
// (PrepareUniformPutStart), started (PutStartPrepared) and ended (PutEnd)
// on the calling goroutine. A round's objects are removed after it,
// untimed; the first round warms up and is not counted.
func MeasurePutPath(ctx context.Context, size uint64, keys, chunk, rounds, segs int, segSize uint64) (PutPathCost, error) {
	switch {
	case size == 0:
		return PutPathCost{}, fmt.Errorf("%w: put path: size=0 (want an object size of at least 1 byte)", ErrInvalid)
	case keys < 1:
		return PutPathCost{}, fmt.Errorf("%w: put path: keys=%d (want at least 1)", ErrInvalid, keys)
	case chunk < 1:
		return PutPathCost{}, fmt.Errorf("%w: put path: chunk=%d (want at least 1)", ErrInvalid, chunk)
	case rounds < 1:
		return PutPathCost{}, fmt.Errorf("%w: put path: rounds=%d (want at least 1)", ErrInvalid, rounds)
	case segs < 1:
		return PutPathCost{}, fmt.Errorf("%w: put path: segs=%d (want at least 1)", ErrInvalid, segs)
	}
	svc, err := New(Config{ReapInterval: -1, PutTimeout: time.Hour, LeaseTTL: time.Minute})
	if err != nil {
		return PutPathCost{}, err
	}
	defer svc.Close()
	// A round must fit without evicting (its objects are removed by name).
	align := svc.cfg.Alignment
	if need, have := uint64(keys)*((size+align-1)/align*align), uint64(segs)*(segSize/align*align); need > have {
		return PutPathCost{}, fmt.Errorf("%w: put path: keys=%d of size=%d need %d bytes, more than segs=%d of segSize=%d hold (%d)",
			ErrInvalid, keys, size, need, segs, segSize, have)
	}
	const who = "putpath"
	if _, err := svc.RegisterClient(ctx, ClientInfo{ID: who, Node: who, TTL: time.Hour, NUMANode: -1, Device: -1}); err != nil {
		return PutPathCost{}, err
	}
	for i := range segs {
		d := segment.Descriptor{ID: who + "/" + strconv.Itoa(i), Generation: 1, Node: who, Owner: who, Tier: segment.TierDRAM,
			Size: segSize, Handle: segment.Handle{Kind: segment.HandleFabric}}
		d.Handle.Fabric[0] = 1
		if err := svc.MountSegment(ctx, d); err != nil {
			return PutPathCost{}, fmt.Errorf("put path: mount segment %d of %d (%d bytes): %w", i, segs, segSize, err)
		}
	}
	names := make([]string, keys)
	sizes := make([]uint64, keys)
	for i := range names {
		names[i] = fmt.Sprintf("putpath/%d/%d", size, i)
		sizes[i] = size
	}
	tmpl := PutStartReq{Placement: Placement{Client: who, NUMANode: -1, Device: -1}}
	var prep, start, end time.Duration
	refs := make([]PutRef, 0, chunk)
	for r := range rounds + 1 {
		var p, s, e time.Duration
		for lo, n := 0, max(chunk/8, 1); lo < keys; lo, n = lo+n, min(2*n, chunk) {
			hi := min(lo+n, keys)
			t0 := time.Now()
			pre, err := svc.PrepareUniformPutStart(UniformPuts{Keys: names[lo:hi], Sizes: sizes[lo:hi], Req: tmpl})
			if err != nil {
				return PutPathCost{}, err
			}
			t1 := time.Now()
			res, err := svc.PutStartPrepared(ctx, pre)
			if err != nil {
				return PutPathCost{}, err
			}
			t2 := time.Now()
			refs = refs[:0]
			for j := range res {
				if res[j].Err != nil {
					return PutPathCost{}, fmt.Errorf("put path: put %q: %w", names[lo+j], res[j].Err)
				}
				refs = append(refs, res[j].Ref(names[lo+j]))
			}
			t3 := time.Now()
			for j, err := range svc.PutEnd(ctx, refs) {
				if err != nil {
					return PutPathCost{}, fmt.Errorf("put path: end %q: %w", refs[j].Key, err)
				}
			}
			p, s, e = p+t1.Sub(t0), s+t2.Sub(t1), e+time.Since(t3)
		}
		if r > 0 {
			prep, start, end = prep+p, start+s, end+e
		}
		for j, err := range svc.Remove(ctx, names, true) {
			if err != nil {
				return PutPathCost{}, fmt.Errorf("put path: remove %q: %w", names[j], err)
			}
		}
	}
	n := float64(rounds * keys)
	return PutPathCost{Size: size, Keys: rounds * keys, PrepareNs: float64(prep.Nanoseconds()) / n,
		PutStartNs: float64(start.Nanoseconds()) / n, PutEndNs: float64(end.Nanoseconds()) / n}, nil
}
