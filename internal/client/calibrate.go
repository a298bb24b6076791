package client

import (
	"errors"
	"fmt"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/transfer"
)

// calibrateCopies measures where the copy engines overtake the SM kernel
// on this GPU and host (transfer.Engine.Calibrate), between an HBM buffer
// and a HOST_NUMA allocation of its own on the GPU's NUMA node (the DRAM
// tier's kind of memory: not the pool's, which other clients may already
// be putting into), and makes the Store route by it: puts' blocks to the
// copy engines from the put crossover, gets' from the get crossover.
// Every resource it takes is released before it returns, in reverse
// order, whatever fails. A failure leaves the configured crossovers.
func (s *Store) calibrateCopies() (c transfer.Crossover, err error) {
	const n = transfer.CalibrationBytes
	var undo []func() error
	defer func() {
		for i := len(undo) - 1; i >= 0; i-- {
			err = errors.Join(err, undo[i]())
		}
	}()
	numa := max(s.numa, 0)
	prop := cuda.AllocProp{Location: cuda.Location{Type: cuda.LocationHostNUMA, ID: numa}}
	gran, err := s.drv.MemGetAllocationGranularity(s.cctx, prop, cuda.GranularityMinimum)
	if err != nil {
		return c, err
	}
	size := (uint64(n) + gran - 1) / gran * gran
	h, err := s.drv.MemCreate(s.cctx, size, prop)
	if err != nil {
		return c, fmt.Errorf("HOST_NUMA scratch of %d bytes on node %d: %w", size, numa, err)
	}
	undo = append(undo, func() error { return s.drv.MemRelease(s.cctx, h) })
	host, err := s.drv.MemAddressReserve(s.cctx, size, gran)
	if err != nil {
		return c, err
	}
	undo = append(undo, func() error { return s.drv.MemAddressFree(s.cctx, host, size) })
	if err := s.drv.MemMap(s.cctx, host, size, 0, h); err != nil {
		return c, err
	}
	undo = append(undo, func() error { return s.drv.MemUnmap(s.cctx, host, size) })
	acc := []cuda.AccessDesc{{Location: cuda.Location{Type: cuda.LocationDevice, ID: int32(s.dev)}, Flags: cuda.AccessReadWrite}}
	if err := s.drv.MemSetAccess(s.cctx, host, size, acc); err != nil {
		return c, err
	}
	dev, err := s.drv.MemAlloc(s.cctx, n)
	if err != nil {
		return c, err
	}
	undo = append(undo, func() error { return s.drv.MemFree(s.cctx, dev) })
	if c, err = s.xfer.Calibrate(host, dev); err != nil {
		return c, err
	}
	s.xfer.SetCopyEngineMinBytes(c.PutMin)
	s.cfg.CopyEngineMinBytes, s.cfg.GetCopyEngineMinBytes = c.PutMin, c.GetMin
	s.crossover = &c
	return c, nil
}

// CopyCrossovers reports the block sizes from which this Store's puts and
// gets copy on the copy engines instead of the SM kernel, and what was
// measured at Open when it calibrated them (copy_engine_calibrate; nil:
// the configured sizes).
func (s *Store) CopyCrossovers() (put, get uint64, measured *transfer.Crossover) {
	return s.cfg.CopyEngineMinBytes, s.cfg.GetCopyEngineMinBytes, s.crossover
}
