package cabi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/teardown"
)

// EnvTestFaults is a test hook: a JSON list of simulator faults, e.g.
//
//	[{"method":"MemUnmap","nth":1,"code":999}]
//
// (fields of sim.Fault: method, nth, sticky, code). When set, Open builds
// the simulator itself (topology from sim.EnvVar), arms the faults and hands
// it to the Store as Options.Driver, so Python tests can make teardown fail
// and exercise close/retry. It requires driver=sim. The Go runtime reads the
// environment once when the library loads, so set it before loading.
const EnvTestFaults = "KVFABRIC_TEST_FAULTS"

// faultDriver returns the fault-injecting simulator that EnvTestFaults asks
// for, or nil when it is unset.
func faultDriver(cfg config.Config) (*sim.Driver, error) {
	v := os.Getenv(EnvTestFaults)
	if v == "" {
		return nil, nil
	}
	if cfg.Driver != config.DriverSim {
		return nil, fmt.Errorf("%w: driver=%s: %s needs driver=sim", config.ErrInvalid, cfg.Driver, EnvTestFaults)
	}
	var faults []sim.Fault
	dec := json.NewDecoder(bytes.NewReader([]byte(v)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&faults); err != nil {
		return nil, fmt.Errorf("%w: %s=%q: %v", config.ErrInvalid, EnvTestFaults, v, err)
	}
	for _, f := range faults {
		if f.Nth < 1 || f.Code == cuda.Success {
			return nil, fmt.Errorf("%w: %s: fault %+v needs nth >= 1 and a failure code", config.ErrInvalid, EnvTestFaults, f)
		}
	}
	scfg, err := sim.ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	d, err := sim.New(scfg)
	if err != nil {
		return nil, err
	}
	for _, f := range faults {
		d.Inject(f)
	}
	return d, nil
}

// ownedDriver is a Store opened on a driver that cabi created: the driver
// is closed once the Store's teardown has succeeded. Close is safe for
// concurrent use (closeMu serializes it).
type ownedDriver struct {
	Backend
	drv cuda.Driver

	closeMu sync.Mutex
	done    teardown.Record // guarded by closeMu: Close steps that succeeded
}

// Close tears down, in order:
//
//  1. the Store (see client.Store.Close);
//  2. the driver, once the Store is closed.
//
// A retry does only what is left; nil once both are done.
func (o *ownedDriver) Close() error {
	o.closeMu.Lock()
	defer o.closeMu.Unlock()
	const closeStore = "close store"
	return o.done.Run(
		teardown.Step{Name: closeStore, Do: o.Backend.Close},
		teardown.Step{Name: "close driver", Needs: []string{closeStore}, Do: o.drv.Close},
	)
}
