package cabi

import (
	"errors"
	"testing"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
)

// closeCounter counts the Close calls of the Backend it wraps.
type closeCounter struct {
	*fakeStore
	closes int
}

func (c *closeCounter) Close() error {
	c.closes++
	return c.fakeStore.Close()
}

// TestOwnedDriverClose checks the teardown order of a Store on a driver
// cabi created: the driver is closed only after the Store, and a retry
// does only what is left.
func TestOwnedDriverClose(t *testing.T) {
	drv, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	drv.Inject(sim.Fault{Method: "Close", Nth: 1, Code: cuda.ErrorUnknown})
	f := newFake(1 << 20)
	f.mu.closeFails = 1
	store := &closeCounter{fakeStore: f}
	o := &ownedDriver{Backend: store, drv: drv}

	for i, want := range []struct {
		err                       error // nil: Close succeeds
		storeCloses, driverCloses int   // calls so far
	}{
		{err: errAny, storeCloses: 1, driverCloses: 0},            // the Store fails: the driver waits
		{err: cuda.ErrorUnknown, storeCloses: 2, driverCloses: 1}, // the Store is closed; the driver fails
		{err: nil, storeCloses: 2, driverCloses: 2},               // only the driver is retried
		{err: nil, storeCloses: 2, driverCloses: 2},               // idempotent
	} {
		err := o.Close()
		switch {
		case want.err == nil && err != nil, want.err != nil && err == nil:
			t.Errorf("Close #%d = %v, want %v", i+1, err, want.err)
		case want.err != nil && want.err != errAny && !errors.Is(err, want.err):
			t.Errorf("Close #%d = %v, want errors.Is %v", i+1, err, want.err)
		}
		if store.closes != want.storeCloses || drv.CallCount("Close") != want.driverCloses {
			t.Errorf("after Close #%d: Store closed %d times, driver %d times; want %d, %d",
				i+1, store.closes, drv.CallCount("Close"), want.storeCloses, want.driverCloses)
		}
	}
}

// errAny stands for any error in a want.
var errAny = errors.New("any error")
