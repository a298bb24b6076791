package master

import (
	"math"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// The placement index answers "which segment should the next replica go
// to" (place.go) in O(log S) rather than with a scan over all S mounted
// segments (an NVL72 rack mounts ~17,000).
//
// The policy ranks a candidate by (score, free bytes, lowest slot). Its
// score depends only on the candidate's node and location (NUMA node or
// device) — nearness to the target, spreading from the object's other
// replicas — and which segments a writer may use depends only on the
// tier, the handle kind and the node (posix_fd) or fabric domain (fabric).
// So the usable segments are kept in a three-level tournament:
//
//	placeGroup  (tier, handle kind, node or domain): what one writer reaches
//	 └ nodeBucket  (node): a max-heap of its locBuckets
//	    └ locBucket  (location): a max-heap of its segments
//
// Every heap is ordered by pkey (most free bytes, then lowest slot) and a
// bucket's key is its best segment's, so a group's top is its best
// segment whatever the node. A query evaluates explicitly the few nodes
// whose score is not 0 — the target node and the nodes of replicas already
// chosen, each with a handful of locations — and takes the best of all
// other nodes (score 0) from the group heap, walking past the special
// nodes. A query costs O(G·(1 + k·L) + log S) for G groups the writer
// reaches (normally 1–3; every node's posix_fd group for a writer
// registered without a node), k special nodes (at most MaxReplicas+1) and
// L locations per node. Free bytes change on every alloc and free: the
// segment moves in its heap and the change propagates up while the
// bucket's top changes, O(log S).
//
// Only usable segments (not draining, not suspect) that the put being
// placed has not taken or tried (segState.held) are in the heaps; every
// mounted segment counts in its group's n and sizes, which answer the
// size and replica-count checks that come before placement.
//
// Everything here is guarded by Service.mu.

// pkey orders placement candidates: more free bytes first, then the lower
// slot.
type pkey struct {
	free uint64
	slot uint32
}

// pkeyNone is the key of an empty heap: after every real key.
var pkeyNone = pkey{free: 0, slot: math.MaxUint32}

func (a pkey) before(b pkey) bool { return a.free > b.free || a.free == b.free && a.slot < b.slot }

// hnode is an element of a pheap.
type hnode struct {
	key pkey
	pos int32 // index in its heap; -1 when in none
}

// pheap is a max-heap (by pkey.before) of hnodes that know their index:
// the buckets of one node or group.
type pheap []*hnode

func (h pheap) top() pkey {
	if len(h) == 0 {
		return pkeyNone
	}
	return h[0].key
}

func (h *pheap) push(n *hnode) {
	n.pos = int32(len(*h))
	*h = append(*h, n)
	h.up(int(n.pos))
}

func (h *pheap) remove(n *hnode) {
	i, last := int(n.pos), len(*h)-1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	n.pos = -1
	if i < last {
		h.fix(i)
	}
}

// fix restores the order after the key at i changed.
func (h pheap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h pheap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = int32(i), int32(j)
}

func (h pheap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].key.before(h[p].key) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h pheap) down(i int) bool {
	i0 := i
	for {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if r := c + 1; r < len(h) && h[r].key.before(h[c].key) {
			c = r
		}
		if !h[c].key.before(h[i].key) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > i0
}

// segHeap is a 4-ary max-heap (by pkey.before) of segment keys, stored
// inline so that a sift reads one cache line per level; the index of
// segment slot s is pos[s] (-1 when in none). Every alloc and free moves a
// segment in its heap, so this is the hot one.
type segHeap []pkey

func (h segHeap) top() pkey {
	if len(h) == 0 {
		return pkeyNone
	}
	return h[0]
}

func (h *segHeap) push(k pkey, pos []int32) {
	*h = append(*h, k)
	h.up(len(*h)-1, pos)
}

func (h *segHeap) remove(slot uint32, pos []int32) {
	i, last := int(pos[slot]), len(*h)-1
	pos[slot] = -1
	if i != last {
		(*h)[i] = (*h)[last]
		pos[(*h)[i].slot] = int32(i)
	}
	*h = (*h)[:last]
	if i < last {
		h.fix(i, pos)
	}
}

// fix restores the order after the key at i changed.
func (h segHeap) fix(i int, pos []int32) {
	if !h.down(i, pos) {
		h.up(i, pos)
	}
}

func (h segHeap) up(i int, pos []int32) {
	k := h[i]
	for i > 0 {
		p := (i - 1) / 4
		if !k.before(h[p]) {
			break
		}
		h[i] = h[p]
		pos[h[i].slot] = int32(i)
		i = p
	}
	h[i] = k
	pos[k.slot] = int32(i)
}

func (h segHeap) down(i int, pos []int32) bool {
	i0, k := i, h[i]
	for {
		c := 4*i + 1
		if c >= len(h) {
			break
		}
		best := c
		for j := c + 1; j < min(c+4, len(h)); j++ {
			if h[j].before(h[best]) {
				best = j
			}
		}
		if !h[best].before(k) {
			break
		}
		h[i] = h[best]
		pos[h[i].slot] = int32(i)
		i = best
	}
	h[i] = k
	pos[k.slot] = int32(i)
	return i > i0
}

// locBucket holds one group's segments on one node at one location.
type locBucket struct {
	h    hnode // in node.locs; key: segs.top()
	loc  int32
	node *nodeBucket
	segs segHeap // usable segments not held
	n    int     // mounted segments
}

// nodeBucket holds one group's segments on one node.
type nodeBucket struct {
	h     hnode // in group.nodes; key: locs.top()
	name  string
	group *placeGroup
	locs  pheap        // of &locBucket.h
	byLoc []*locBucket // every locBucket, for the special-node evaluation
	n     int          // mounted segments
}

// placeGroup holds the segments one writer reaches or not as a whole: one
// tier and handle kind, and for posix_fd one node, for fabric one domain.
type placeGroup struct {
	key    groupKey
	nodes  pheap // of &nodeBucket.h
	byNode map[string]*nodeBucket
	n      int            // mounted segments
	sizes  map[uint64]int // mounted segments by allocator size
	max    uint64         // largest key of sizes
}

type groupKey struct {
	tier segment.Tier
	kind segment.HandleKind
	name string // node (posix_fd), fabric domain (fabric), "" (other kinds)
}

func groupKeyOf(sg *segState) groupKey {
	k := groupKey{tier: sg.desc.Tier, kind: sg.desc.Handle.Kind}
	switch k.kind {
	case segment.HandlePosixFD:
		k.name = sg.desc.Node
	case segment.HandleFabric:
		k.name = sg.domain
	}
	return k
}

// placeIndex is the Service's placement index (see above).
type placeIndex struct {
	groups  map[groupKey]*placeGroup
	byTier  [3][]*placeGroup // every group of a tier
	mounted [3]int           // mounted segments by tier
	version uint64           // changes when a group or node bucket is added or removed
	// moves changes whenever a segment enters, leaves or moves in a heap:
	// while it does not, a query's answer stays what it was (bestMemo).
	moves uint64
	pos   []int32 // by segment slot: index in its locBucket's segs, -1 when out

	// last caches the answer of the last query (puts of one batch usually
	// have one writer and one target node).
	last candidates
	held []uint32 // scratch: segments held by the put being placed
}

func newPlaceIndex() placeIndex {
	return placeIndex{groups: map[groupKey]*placeGroup{}}
}

// add indexes sg, mounted at slot.
func (ix *placeIndex) add(slot uint32, sg *segState) {
	gk := groupKeyOf(sg)
	g := ix.groups[gk]
	if g == nil {
		g = &placeGroup{key: gk, byNode: map[string]*nodeBucket{}, sizes: map[uint64]int{}}
		ix.groups[gk] = g
		ix.byTier[gk.tier] = append(ix.byTier[gk.tier], g)
		ix.version++
	}
	nb := g.byNode[sg.desc.Node]
	if nb == nil {
		nb = &nodeBucket{h: hnode{key: pkeyNone}, name: sg.desc.Node, group: g}
		g.byNode[nb.name] = nb
		g.nodes.push(&nb.h)
		ix.version++
	}
	var lb *locBucket
	for _, b := range nb.byLoc {
		if b.loc == sg.desc.Location {
			lb = b
			break
		}
	}
	if lb == nil {
		lb = &locBucket{h: hnode{key: pkeyNone}, loc: sg.desc.Location, node: nb}
		nb.byLoc = append(nb.byLoc, lb)
		nb.locs.push(&lb.h)
	}
	lb.n++
	nb.n++
	g.n++
	size := sg.al.Size()
	g.sizes[size]++
	g.max = max(g.max, size)
	ix.mounted[gk.tier]++
	sg.lb, sg.slot = lb, slot
	for int(slot) >= len(ix.pos) {
		ix.pos = append(ix.pos, -1)
	}
	ix.pos[slot] = -1
	ix.update(sg)
}

// remove takes sg, about to be unmounted, out of the index.
func (ix *placeIndex) remove(sg *segState) {
	ix.moves++
	lb := sg.lb
	if ix.pos[sg.slot] >= 0 {
		lb.segs.remove(sg.slot, ix.pos)
		ix.propagate(lb)
	}
	sg.lb = nil
	nb := lb.node
	g := nb.group
	lb.n--
	nb.n--
	g.n--
	ix.mounted[g.key.tier]--
	size := sg.al.Size()
	if g.sizes[size]--; g.sizes[size] == 0 {
		delete(g.sizes, size)
		if size == g.max {
			g.max = 0
			for sz := range g.sizes {
				g.max = max(g.max, sz)
			}
		}
	}
	if lb.n == 0 {
		nb.locs.remove(&lb.h)
		for i, b := range nb.byLoc {
			if b == lb {
				nb.byLoc[i] = nb.byLoc[len(nb.byLoc)-1]
				nb.byLoc[len(nb.byLoc)-1] = nil
				nb.byLoc = nb.byLoc[:len(nb.byLoc)-1]
				break
			}
		}
		ix.propagateNode(nb)
	}
	if nb.n == 0 {
		g.nodes.remove(&nb.h)
		delete(g.byNode, nb.name)
		ix.version++
	}
	if g.n == 0 {
		delete(ix.groups, g.key)
		t := ix.byTier[g.key.tier]
		for i, x := range t {
			if x == g {
				t[i] = t[len(t)-1]
				t[len(t)-1] = nil
				ix.byTier[g.key.tier] = t[:len(t)-1]
				break
			}
		}
		ix.version++
	}
}

// update puts sg where its free bytes, usability and hold say: in its
// locBucket's heap at its current key, or out.
func (ix *placeIndex) update(sg *segState) {
	lb := sg.lb
	in := sg.usable() && !sg.held
	free := sg.al.FreeBytes()
	switch i := ix.pos[sg.slot]; {
	case in && i < 0:
		lb.segs.push(pkey{free: free, slot: sg.slot}, ix.pos)
	case in && lb.segs[i].free != free:
		lb.segs[i].free = free
		lb.segs.fix(int(i), ix.pos)
	case !in && i >= 0:
		lb.segs.remove(sg.slot, ix.pos)
	default:
		return
	}
	ix.moves++
	ix.propagate(lb)
}

// allocated is update after an allocation of n bytes from sg, which is
// not held: while its free bytes stay less than sg.slack below the key it
// is ranked by, and another n bytes would still fit, it keeps its place.
// A key is so never below its segment's free bytes (a free, a hold or any
// other change re-keys it exactly), only above by less than the slack: a
// query may pick a segment whose key says a put fits when it does not, and
// the put's Alloc failing holds it and takes the next best
// (tryPlaceLocked), whose re-insertion re-keys it exactly. Re-keying at
// every allocation was a quarter of PutStart's CPU (4 KiB puts over 192
// equal segments, dev VM profile; each one moved the top segment down its
// heap), and PutStart took 16–30 % less without it.
// A segment that cannot take another n is re-keyed at once, so that in a
// full store, where each put fills what its eviction freed, the next put
// of the size does not try it first. ExactPlacement (slack 0) re-keys
// every time.
func (ix *placeIndex) allocated(sg *segState, n uint64) {
	if i := ix.pos[sg.slot]; i >= 0 {
		if k, free := sg.lb.segs[i].free, sg.al.FreeBytes(); k >= free && k-free < sg.slack && free >= n {
			return
		}
	}
	ix.update(sg)
}

// slackOf is the slack in bytes of a segment of size bytes with
// Config.PlacementSlack frac.
func slackOf(frac float64, size uint64) uint64 {
	if frac <= 0 {
		return 0
	}
	return uint64(frac * float64(size))
}

// propagate carries a change of lb's best segment up to its group.
func (ix *placeIndex) propagate(lb *locBucket) {
	if k := lb.segs.top(); k != lb.h.key {
		lb.h.key = k
		lb.node.locs.fix(int(lb.h.pos))
		ix.propagateNode(lb.node)
	}
}

func (ix *placeIndex) propagateNode(nb *nodeBucket) {
	if k := nb.locs.top(); k != nb.h.key {
		nb.h.key = k
		nb.group.nodes.fix(int(nb.h.pos))
	}
}

// candidates are the groups, by tier, whose segments a writer may use, and
// in each the node bucket of the target node (or nil).
type candidates struct {
	groups [3][]*placeGroup
	near   [3][]*nodeBucket // near[t][i] is groups[t][i]'s bucket of node

	valid   bool
	w       reach
	node    string
	version uint64
}

// candidatesFor returns the candidates of a writer with reach w and a put
// whose target is node. A writer may use (reach.go) every group when
// nothing is known of it; else the posix_fd segments of its node (all of
// them if it has none), the fabric segments of its domain, and segments of
// any other handle kind. The answer is valid until the index next changes
// or the next call.
func (ix *placeIndex) candidatesFor(w reach, node string) *candidates {
	c := &ix.last
	if c.valid && c.version == ix.version && c.w == w && c.node == node {
		return c
	}
	c.valid, c.w, c.node, c.version = true, w, node, ix.version
	for t := range c.groups {
		c.groups[t], c.near[t] = c.groups[t][:0], c.near[t][:0]
		for _, g := range ix.byTier[t] {
			if reachesGroup(w, g.key) {
				c.groups[t] = append(c.groups[t], g)
				var nb *nodeBucket
				if node != "" {
					nb = g.byNode[node]
				}
				c.near[t] = append(c.near[t], nb)
			}
		}
	}
	return c
}

// reachesGroup is reachesLocked for every segment of a group.
func reachesGroup(w reach, k groupKey) bool {
	if !w.known {
		return true
	}
	switch k.kind {
	case segment.HandlePosixFD:
		return w.node == "" || w.node == k.name
	case segment.HandleFabric:
		return w.domain == k.name
	}
	return true
}

// candidate is the best segment found so far by a placement query.
type candidate struct {
	score int
	key   pkey
	found bool
}

func (c *candidate) consider(score int, k pkey) {
	if !c.found || score > c.score || score == c.score && k.before(c.key) {
		*c = candidate{score: score, key: k, found: true}
	}
}

// maxSpecial bounds the nodes a query evaluates by hand: the target node
// and one per replica already chosen.
const maxSpecial = MaxReplicas + 1

// bestInLocked finds, among the candidates of tier, the best segment with
// at least need free bytes for the next replica after those on the
// segments cd, and considers it into c.
func (s *Service) bestInLocked(c *candidate, cands *candidates, tier segment.Tier, t *target, need uint64, cd []*segment.Descriptor) {
	for i, g := range cands.groups[tier] {
		// The nodes whose segments may score other than 0: the target's
		// and those of the replicas already chosen.
		var special [maxSpecial]*nodeBucket
		ns := 0
		if nb := cands.near[tier][i]; nb != nil {
			special[0], ns = nb, 1
		}
	chosen:
		for _, d := range cd {
			nb := g.byNode[d.Node]
			if nb == nil {
				continue
			}
			for _, x := range special[:ns] {
				if x == nb {
					continue chosen
				}
			}
			special[ns] = nb
			ns++
		}
		for _, nb := range special[:ns] {
			for _, lb := range nb.byLoc {
				if lb.h.key.free >= need {
					c.consider(score(t, tier, nb.name, lb.loc, cd), lb.h.key)
				}
			}
		}
		if c.found && c.score > 0 {
			continue // every other node scores 0
		}
		if k := g.nodes.bestExcept(special[:ns]); k.free >= need {
			c.consider(0, k)
		}
	}
}

// bestExcept returns the best key of h's elements other than those of
// the nodeBuckets skip, visiting at most 2·len(skip)+1 elements: an
// element not skipped dominates its subtree.
func (h pheap) bestExcept(skip []*nodeBucket) pkey {
	best := pkeyNone
	var stack [2*maxSpecial + 2]int32
	sp := 0
	if len(h) > 0 {
		stack[0], sp = 0, 1
	}
	for sp > 0 {
		sp--
		i := stack[sp]
		n := h[i]
		skipped := false
		for _, nb := range skip {
			if &nb.h == n {
				skipped = true
				break
			}
		}
		if !skipped {
			if n.key.before(best) {
				best = n.key
			}
			continue
		}
		for _, c := range [2]int32{2*i + 1, 2*i + 2} {
			if int(c) < len(h) {
				stack[sp] = c
				sp++
			}
		}
	}
	return best
}

// score is a segment's placement score on node at loc in tier: nearness to
// the target (its node +4, and its NUMA node in DRAM or device in HBM +2)
// and spreading from the replicas already chosen (-8 for each on the same
// node, -4 more if also at the same location).
func score(t *target, tier segment.Tier, node string, loc int32, chosen []*segment.Descriptor) int {
	sc := 0
	for _, d := range chosen {
		if d.Node == node {
			sc -= 8 // spread over nodes
			if d.Location == loc {
				sc -= 4 // and over NUMA nodes / devices
			}
		}
	}
	if t.node != "" && t.node == node {
		sc += 4
		if (tier == segment.TierDRAM && t.numa >= 0 && loc == t.numa) ||
			(tier == segment.TierHBM && t.dev >= 0 && loc == t.dev) {
			sc += 2
		}
	}
	return sc
}
