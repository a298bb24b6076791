package master

import (
	"time"

	pb "github.com/kvfabric/kvfabric/api/kvfabric/v1"
	"github.com/kvfabric/kvfabric/internal/segment"
)

func descToPB(d *segment.Descriptor) *pb.SegmentDescriptor {
	h := &pb.Handle{Kind: pb.HandleKind(d.Handle.Kind), SocketPath: d.Handle.SocketPath}
	if d.Handle.Fabric != ([64]byte{}) {
		h.Fabric = d.Handle.Fabric[:]
	}
	return &pb.SegmentDescriptor{
		Id: d.ID, Generation: d.Generation, Node: d.Node, Owner: d.Owner,
		Tier: pb.Tier(d.Tier), Location: d.Location, Size: d.Size, Handle: h,
	}
}

// descFromPB converts a wire descriptor. Out-of-range enums and a fabric
// handle of the wrong length are kept recognisably invalid (Validate
// rejects them) rather than silently truncated.
func descFromPB(p *pb.SegmentDescriptor) segment.Descriptor {
	if p == nil {
		return segment.Descriptor{}
	}
	d := segment.Descriptor{
		ID: p.Id, Generation: p.Generation, Node: p.Node, Owner: p.Owner,
		Tier: clampTier(int32(p.Tier)), Location: p.Location, Size: p.Size,
	}
	if h := p.Handle; h != nil {
		d.Handle.Kind = segment.HandleKind(min(max(int32(h.Kind), 0), 255))
		if int32(h.Kind) > 255 {
			d.Handle.Kind = 255
		}
		d.Handle.SocketPath = h.SocketPath
		switch len(h.Fabric) {
		case 0:
		case 64:
			copy(d.Handle.Fabric[:], h.Fabric)
		default:
			d.Handle.Kind = 255 // invalid
		}
	}
	return d
}

func clampTier(t int32) segment.Tier {
	if t < 0 || t > 255 {
		return 255
	}
	return segment.Tier(t)
}

func placementToPB(p *Placement) *pb.Placement {
	return &pb.Placement{
		Tier: pb.Tier(p.Tier), TierOnly: p.TierOnly, Client: p.Client, Node: p.Node,
		NumaNode: p.NUMANode, Device: p.Device, Segments: p.Segments,
	}
}

func placementFromPB(p *pb.Placement) Placement {
	if p == nil {
		return NoPlacement
	}
	return Placement{
		Tier: clampTier(int32(p.Tier)), TierOnly: p.TierOnly, Client: p.Client, Node: p.Node,
		NUMANode: p.NumaNode, Device: p.Device, Segments: p.Segments,
	}
}

// segTable collects the distinct descriptors of a response.
type segTable struct {
	idx  map[*segment.Descriptor]uint32
	list []*pb.SegmentDescriptor
}

func (t *segTable) add(d *segment.Descriptor) uint32 {
	if i, ok := t.idx[d]; ok {
		return i
	}
	if t.idx == nil {
		t.idx = map[*segment.Descriptor]uint32{}
	}
	i := uint32(len(t.list))
	t.idx[d] = i
	t.list = append(t.list, descToPB(d))
	return i
}

func (t *segTable) replicas(rs []Replica) []*pb.Replica {
	if len(rs) == 0 {
		return nil
	}
	backing := make([]pb.Replica, len(rs))
	out := make([]*pb.Replica, len(rs))
	for i, r := range rs {
		backing[i] = pb.Replica{Segment: t.add(r.Segment), Offset: r.Offset, Length: r.Length}
		out[i] = &backing[i]
	}
	return out
}

func usageToPB(us []UsageStats) []*pb.UsageStats {
	out := make([]*pb.UsageStats, len(us))
	for i, u := range us {
		out[i] = &pb.UsageStats{Node: u.Node, Tier: pb.Tier(u.Tier), Location: u.Location,
			Segments: uint32(u.Segments), Capacity: u.Capacity, Used: u.Used}
	}
	return out
}

func usageFromPB(us []*pb.UsageStats) []UsageStats {
	var out []UsageStats
	for _, u := range us {
		out = append(out, UsageStats{Node: u.Node, Tier: clampTier(int32(u.Tier)), Location: u.Location,
			Segments: int(u.Segments), Capacity: u.Capacity, Used: u.Used})
	}
	return out
}

func statsToPB(st *Stats) *pb.StatsResponse {
	return &pb.StatsResponse{
		Objects: uint64(st.Objects), PendingPuts: uint64(st.PendingPuts), Segments: uint64(st.Segments),
		Clients: uint64(st.Clients), Tiers: usageToPB(st.Tiers), Locations: usageToPB(st.Locations),
		Evictions: st.Evictions, ClientStats: clientStatsToPB(st.PerClient), Views: uint64(st.Views),
	}
}

func clientStatsToPB(cs []ClientStats) []*pb.ClientStats {
	out := make([]*pb.ClientStats, len(cs))
	for i, c := range cs {
		out[i] = &pb.ClientStats{Id: c.ID, Node: c.Node, Segments: uint32(c.Segments),
			MappedSegments: uint32(c.Mapped.Segments), MappedBytes: c.Mapped.Bytes,
			Driver: c.Driver, FabricDomain: c.FabricDomain, Views: uint32(c.Views)}
		for _, k := range c.Handles {
			out[i].HandleKinds = append(out[i].HandleKinds, pb.HandleKind(k))
		}
	}
	return out
}

func statsFromPB(p *pb.StatsResponse) Stats {
	return Stats{
		Objects: int(p.Objects), PendingPuts: int(p.PendingPuts), Segments: int(p.Segments),
		Clients: int(p.Clients), Tiers: usageFromPB(p.Tiers), Locations: usageFromPB(p.Locations),
		Evictions: p.Evictions, PerClient: clientStatsFromPB(p.ClientStats), Views: int(p.Views),
	}
}

func clientStatsFromPB(cs []*pb.ClientStats) []ClientStats {
	if len(cs) == 0 {
		return nil
	}
	out := make([]ClientStats, len(cs))
	for i, c := range cs {
		out[i] = ClientStats{ID: c.Id, Node: c.Node, Segments: int(c.Segments),
			Mapped: Mapped{Segments: int(c.MappedSegments), Bytes: c.MappedBytes},
			Driver: c.Driver, FabricDomain: c.FabricDomain, Views: int(c.Views)}
		for _, k := range c.HandleKinds {
			out[i].Handles = append(out[i].Handles, segment.HandleKind(min(max(int32(k), 0), 255)))
		}
	}
	return out
}

func unixNS(ns int64) time.Time { return time.Unix(0, ns) }
