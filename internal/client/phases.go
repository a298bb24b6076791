package client

import (
	"slices"
	"sync/atomic"
	"time"
)

// PhaseStats splits the time of one kind of batch operation (BatchPut or
// BatchGet) into its phases, summed over calls: where a slow put or get
// spends its time. Timestamps are taken per batch, never per block.
type PhaseStats struct {
	Calls, Keys uint64
	// Check classifies the buffers' memory (a driver call per get part or
	// put pipeline chunk, none for registered buffers) and maps the keys'
	// names.
	Check time.Duration
	// Meta is the master round trips (PutStart + PutEnd, or GetReplicas).
	Meta time.Duration
	// Resolve turns replicas into local addresses (mapping cache lookups,
	// imports on first use).
	Resolve time.Duration
	// Copy is the transfer engine: enqueue and wait for completion (and,
	// for puts, ending the previous chunk's puts).
	Copy time.Duration

	// A breakdown that overlaps the phases above and is not part of Total:
	// with the batch pipelined, the master call of one chunk runs while
	// another chunk copies, so the wall time of a phase says little about
	// what bounds it.
	//
	// Master is the time spent inside the master's metadata calls
	// (PutStart or GetReplicas), on whichever goroutine they ran: more
	// than Meta means the pipeline hid the difference.
	Master time.Duration
	// Wait is the time the caller was blocked on copies completing (part
	// of Copy): the GPU was busy while it waited.
	Wait time.Duration
	// End is the time in PutEnd (part of Copy; puts only).
	End time.Duration
	// GPU is, with Options.TimeCopies, the chunks' time on the GPU: from
	// the GPU reaching a chunk's copies to their completion. Against the
	// wall time it says whether the GPU was kept busy.
	GPU time.Duration
}

// Sub returns p minus an earlier snapshot q of the same counters: the
// phases of the calls made in between.
func (p PhaseStats) Sub(q PhaseStats) PhaseStats {
	return PhaseStats{Calls: p.Calls - q.Calls, Keys: p.Keys - q.Keys, Check: p.Check - q.Check,
		Meta: p.Meta - q.Meta, Resolve: p.Resolve - q.Resolve, Copy: p.Copy - q.Copy,
		Master: p.Master - q.Master, Wait: p.Wait - q.Wait, End: p.End - q.End, GPU: p.GPU - q.GPU}
}

// Add returns the sum of p and q.
func (p PhaseStats) Add(q PhaseStats) PhaseStats {
	return PhaseStats{Calls: p.Calls + q.Calls, Keys: p.Keys + q.Keys, Check: p.Check + q.Check,
		Meta: p.Meta + q.Meta, Resolve: p.Resolve + q.Resolve, Copy: p.Copy + q.Copy,
		Master: p.Master + q.Master, Wait: p.Wait + q.Wait, End: p.End + q.End, GPU: p.GPU + q.GPU}
}

// Total is the sum of the phases.
func (p PhaseStats) Total() time.Duration { return p.Check + p.Meta + p.Resolve + p.Copy }

type phaseCounters struct {
	calls, keys                atomic.Uint64
	check, meta, resolve, copy atomic.Int64
	master, wait, end, gpu     atomic.Int64
}

func (c *phaseCounters) snapshot() PhaseStats {
	return PhaseStats{
		Calls: c.calls.Load(), Keys: c.keys.Load(),
		Check: time.Duration(c.check.Load()), Meta: time.Duration(c.meta.Load()),
		Resolve: time.Duration(c.resolve.Load()), Copy: time.Duration(c.copy.Load()),
		Master: time.Duration(c.master.Load()), Wait: time.Duration(c.wait.Load()), End: time.Duration(c.end.Load()),
		GPU: time.Duration(c.gpu.Load()),
	}
}

// phaseTimer attributes the time since its last lap to a counter.
type phaseTimer struct{ last time.Time }

func (c *phaseCounters) begin(keys int) phaseTimer {
	c.calls.Add(1)
	c.keys.Add(uint64(keys))
	return phaseTimer{last: time.Now()}
}

func (t *phaseTimer) lap(into *atomic.Int64) {
	now := time.Now()
	into.Add(int64(now.Sub(t.last)))
	t.last = now
}

// Phases reports where BatchPut and BatchGet spent their time.
func (s *Store) Phases() (put, get PhaseStats) {
	return s.phases.put.snapshot(), s.phases.get.snapshot()
}

// since adds the time since t0 to into.
func since(into *atomic.Int64, t0 time.Time) { into.Add(int64(time.Since(t0))) }

// ChunkTime is one chunk of a put pipeline on its way through the Store,
// with Options.TimeCopies: offsets from the pipeline's start, on the CPU
// (when its copies were submitted, when the pipeline's wait for them
// returned) and on the GPU (when the GPU reached them and completed them,
// from an event recorded at the start), and its PutStart: when the call
// began and returned (on whichever goroutine made it) and when the
// pipeline's loop took its answer.
type ChunkTime struct {
	Keys                int
	Asked, Answered     time.Duration
	Received            time.Duration
	Submitted, Waited   time.Duration
	GPUStart, GPUFinish time.Duration
}

// LastPutTimeline returns the chunks of the last put pipeline that ran
// with Options.TimeCopies (of a split batch, the last part to finish), or
// nil.
func (s *Store) LastPutTimeline() []ChunkTime {
	s.putTimeline.Lock()
	defer s.putTimeline.Unlock()
	return slices.Clone(s.putTimeline.chunks)
}
