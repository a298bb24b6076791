package cabi

import (
	"encoding/json"
	"fmt"
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda"
)

// BatchRemove removes n keys (force: leased ones too); statuses (n int32s)
// receives each key's status. Return value as for BatchPut.
func BatchRemove(h int64, n uint64, keys, keyLens unsafe.Pointer, force bool, statuses unsafe.Pointer) int32 {
	var ran bool
	st := call(h, func(e *entry) error {
		b, err := decodeBatch(n, keys, keyLens, nil, nil, nil)
		if err != nil {
			return err
		}
		ran = true
		if n == 0 {
			return nil
		}
		return perKey(b.keys, e.store.BatchRemove(bg, b.keys, force), statuses)
	})
	if ran {
		return StatusOK
	}
	fill(statuses, n, st)
	return st
}

// BatchGetRanges reads ranges of n objects in one crossing: key i has
// counts[i] consecutive entries of dsts/srcs/lens, each copying lens[j]
// bytes of the object from offset srcs[j] to address dsts[j]. statuses (n
// int32s) receives each key's status. Return value as for BatchPut.
func BatchGetRanges(h int64, n uint64, keys, keyLens, dsts, srcs, lens, counts unsafe.Pointer,
	stream uintptr, statuses unsafe.Pointer) int32 {
	var ran bool
	st := call(h, func(e *entry) error {
		b, err := decodeBatch(n, keys, keyLens, nil, nil, nil)
		if err != nil {
			return err
		}
		if n == 0 {
			ran = true
			return nil
		}
		if counts == nil {
			return fmt.Errorf("%w: batch get ranges needs range counts", client.ErrInvalidArgument)
		}
		cs := unsafe.Slice((*uint32)(counts), n)
		var total uint64
		for _, c := range cs {
			total += uint64(c)
		}
		if total > maxBatch*64 {
			return fmt.Errorf("%w: %d ranges in one batch", client.ErrInvalidArgument, total)
		}
		if total > 0 && (dsts == nil || srcs == nil || lens == nil) {
			return fmt.Errorf("%w: batch get ranges needs destinations, sources and lengths", client.ErrInvalidArgument)
		}
		var d, s, l []uint64
		if total > 0 {
			d = unsafe.Slice((*uint64)(dsts), total)
			s = unsafe.Slice((*uint64)(srcs), total)
			l = unsafe.Slice((*uint64)(lens), total)
		}
		spans := make([][]client.Span, n)
		off := uint64(0)
		for i, c := range cs {
			spans[i] = make([]client.Span, c)
			for j := range spans[i] {
				k := off + uint64(j)
				spans[i][j] = client.Span{Dst: client.Region{Ptr: uintptr(d[k]), Len: l[k]}, Src: s[k]}
			}
			off += uint64(c)
		}
		ran = true
		return perKey(b.keys, e.store.BatchGetRanges(bg, b.keys, spans, cuda.Stream(stream)), statuses)
	})
	if ran {
		return StatusOK
	}
	fill(statuses, n, st)
	return st
}

// replicaJSON is one replica in Replicas' output.
type replicaJSON struct {
	Segment  string `json:"segment"`
	Node     string `json:"node"`
	Owner    string `json:"owner"`
	Tier     string `json:"tier"`
	Location int32  `json:"location"`
	Handle   string `json:"handle"`
	Offset   uint64 `json:"offset"`
	Length   uint64 `json:"length"`
}

// Replicas writes, as a JSON array of n elements (null for a key that
// failed, else {"size": …, "replicas": [{segment, node, owner, tier,
// location, handle, offset, length}, …]}), where keys' objects live into
// buf (capacity bufCap) and stores its length in *needed; statuses (n
// int32s) receives each key's status. When buf is too small the status is
// StatusBufferTooSmall and *needed says how much to pass.
func Replicas(h int64, n uint64, keys, keyLens, buf unsafe.Pointer, bufCap uint64, needed *uint64,
	statuses unsafe.Pointer) int32 {
	var ran bool
	st := call(h, func(e *entry) error {
		b, err := decodeBatch(n, keys, keyLens, nil, nil, nil)
		if err != nil {
			return err
		}
		infos, errs := e.store.Replicas(bg, b.keys)
		out := make([]any, len(b.keys))
		for i, inf := range infos {
			if i < len(errs) && errs[i] != nil {
				continue
			}
			reps := make([]replicaJSON, 0, len(inf.Replicas))
			for _, r := range inf.Replicas {
				d := r.Segment
				reps = append(reps, replicaJSON{Segment: d.ID, Node: d.Node, Owner: d.Owner, Tier: d.Tier.String(),
					Location: d.Location, Handle: d.Handle.Kind.String(), Offset: r.Offset, Length: r.Length})
			}
			out[i] = map[string]any{"size": inf.Size, "replicas": reps}
		}
		js, err := json.Marshal(out)
		if err != nil {
			return err
		}
		if needed != nil {
			*needed = uint64(len(js))
		}
		if uint64(len(js)) > bufCap || buf == nil {
			return fmt.Errorf("%w: replicas: %d bytes of JSON, buffer %d", client.ErrBufferTooSmall, len(js), bufCap)
		}
		copy(unsafe.Slice((*byte)(buf), bufCap), js)
		ran = true
		return perKey(b.keys, errs, statuses)
	})
	if ran {
		return StatusOK
	}
	fill(statuses, n, st)
	return st
}

// PhaseValues is how many values Phases writes: for BatchPut and then for
// BatchGet, the calls, the keys, and the nanoseconds of check, meta,
// resolve, copy, master, wait and end (client.PhaseStats, in that order).
const PhaseValues = 18

// phaser is a Backend that keeps a phase split (*client.Store does).
type phaser interface {
	Phases() (put, get client.PhaseStats)
}

// Phases writes the phase split of the Store's BatchPut and BatchGet calls
// since it opened (client.Store.Phases) to out: the first min(len(out),
// PhaseValues) values. Callers take two snapshots and subtract them.
func Phases(h int64, out []uint64) int32 {
	return call(h, func(e *entry) error {
		p, ok := e.store.(phaser)
		if !ok {
			return fmt.Errorf("%w: this store keeps no phase split", client.ErrInvalidArgument)
		}
		put, get := p.Phases()
		var v [PhaseValues]uint64
		for i, s := range []client.PhaseStats{put, get} {
			copy(v[9*i:], []uint64{s.Calls, s.Keys, uint64(s.Check), uint64(s.Meta), uint64(s.Resolve),
				uint64(s.Copy), uint64(s.Master), uint64(s.Wait), uint64(s.End)})
		}
		copy(out, v[:])
		return nil
	})
}
