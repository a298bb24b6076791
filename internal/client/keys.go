package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/master"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// storedKey returns the key the master stores key under: key itself in the
// default namespace, else key in the Store's tenant namespace
// (master.TenantKey). Keys starting with NUL are reserved for namespaces.
func (s *Store) storedKey(key string) (string, error) {
	if strings.HasPrefix(key, "\x00") {
		return "", fmt.Errorf("%w: key %q: keys must not start with NUL (reserved for tenant namespaces)", ErrInvalidArgument, key)
	}
	return master.TenantKey(s.cfg.Tenant, key), nil
}

// storedKeys maps keys with storedKey; the first bad key fails them all.
func (s *Store) storedKeys(keys []string) ([]string, error) {
	if s.cfg.Tenant == "" {
		for _, k := range keys {
			if _, err := s.storedKey(k); err != nil {
				return nil, err
			}
		}
		return keys, nil
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		sk, err := s.storedKey(k)
		if err != nil {
			return nil, err
		}
		out[i] = sk
	}
	return out, nil
}

// putEndErr is the error of a put whose PutEnd failed. A put the master
// revoked meanwhile (past its timeout, or its segment's provider left or
// was reported unreachable) wrote bytes nobody will read: a transfer
// failure to the caller, not a missing key.
func putEndErr(key string, e error) error {
	err := fmt.Errorf("put end %q: %w", key, e)
	if errors.Is(e, master.ErrNotFound) {
		return fmt.Errorf("%w: %w", ErrTransfer, err)
	}
	return mapErr(err)
}

// Span is one range of a ranged get: Len bytes of the object from offset
// Src are copied to Dst.
type Span struct {
	Dst Region
	Src uint64
}

// BatchGetRanges copies ranges of objects: for key i, each spans[i][j]
// copies bytes [Src, Src+Dst.Len) of the object to Dst. A span past the
// object's end fails the key with ErrInvalidArgument; keys may repeat. One
// master round trip and one transfer batch, as BatchGet; results are
// positional.
func (s *Store) BatchGetRanges(ctx context.Context, keys []string, spans [][]Span, stream cuda.Stream) []error {
	errs := make([]error, len(keys))
	if len(spans) != len(keys) {
		return fill(errs, fmt.Errorf("%w: %d keys but %d span lists", ErrInvalidArgument, len(keys), len(spans)))
	}
	// Each key's destination regions, for the buffer checks and the copy.
	dsts := make([][]Region, len(keys))
	for i, sp := range spans {
		dsts[i] = make([]Region, len(sp))
		for j, x := range sp {
			dsts[i][j] = x.Dst
		}
	}
	return s.batchGet(ctx, keys, dsts, stream, nil, func(i int, size uint64, base cuda.DevicePtr, copies []cuda.Copy) ([]cuda.Copy, error) {
		for j, x := range spans[i] {
			if x.Src > size || x.Dst.Len > size-x.Src {
				return copies, fmt.Errorf("%w: get %q: range %d [%d, +%d) past the object's end (%d bytes)", ErrInvalidArgument, keys[i], j, x.Src, x.Dst.Len, size)
			}
		}
		for _, x := range spans[i] {
			copies = append(copies, cuda.Copy{Dst: cuda.DevicePtr(x.Dst.Ptr), Src: base + cuda.DevicePtr(x.Src), Len: x.Dst.Len})
		}
		return copies, nil
	})
}

// ReplicaInfo is where one replica of an object lives.
type ReplicaInfo struct {
	Segment        *segment.Descriptor
	Offset, Length uint64
}

// ObjectInfo is an object's size and replicas, as Replicas reports them.
type ObjectInfo struct {
	Size     uint64
	Replicas []ReplicaInfo
}

// Replicas describes where keys' objects live (the replicas this process
// can read), positionally; a missing key is ErrNotFound. The read leases the
// master grants for the lookup are released before it returns: the answer
// is a snapshot.
func (s *Store) Replicas(ctx context.Context, keys []string) ([]ObjectInfo, []error) {
	out := make([]ObjectInfo, len(keys))
	errs := make([]error, len(keys))
	if err := s.enter(); err != nil {
		return out, fill(errs, err)
	}
	defer s.exit()
	sks, err := s.storedKeys(keys)
	if err != nil {
		return out, fill(errs, err)
	}
	res, err := s.lookup(master.WithReader(ctx, s.clientID), sks)
	if err != nil {
		return out, fill(errs, mapErr(fmt.Errorf("get replicas: %w", err)))
	}
	s.releaseLeases(ctx, res)
	for i, r := range res {
		if r.Err != nil {
			errs[i] = mapErr(fmt.Errorf("replicas of %q: %w", keys[i], r.Err))
			continue
		}
		out[i].Size = r.Size
		for _, rep := range r.Replicas {
			out[i].Replicas = append(out[i].Replicas, ReplicaInfo{Segment: rep.Segment, Offset: rep.Offset, Length: rep.Length})
		}
	}
	return out, errs
}
