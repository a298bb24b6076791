package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// EnvVar names the environment variable ConfigFromEnv reads: a JSON object
// (the Config) or the path of a file holding one.
const EnvVar = "KVFABRIC_SIM"

// DefaultGranularity is the allocation granularity of every simulated device
// and host NUMA node unless the Config says otherwise (2 MiB, as measured on
// H200 for DEVICE and HOST_NUMA).
const DefaultGranularity = 2 << 20

// DefaultDriverVersion is the cuDriverGetVersion the simulator reports by
// default (CUDA 13.0).
const DefaultDriverVersion = 13000

// memcpyBatchMinVersion is the first driver with cuMemcpyBatchAsync (12.8).
const memcpyBatchMinVersion = 12080

// ErrInvalidConfig is wrapped by every Config validation error.
var ErrInvalidConfig = errors.New("sim: invalid config")

// Config is the simulated machine: GPUs, their host NUMA nodes, allocation
// granularities, which handle types the (simulated) driver permits, and
// optional capacity limits. The zero value is one GPU on host NUMA node 0
// with 2 MiB granularity, FABRIC not permitted (like the lab H200s without
// IMEX), POSIX fd permitted, driver 13.0 with cuMemcpyBatchAsync.
//
// Config is JSON-serializable so it can be handed to child processes
// (Env, ConfigFromEnv); unknown keys are errors.
type Config struct {
	// GPUs is the number of simulated devices; 0 means 1.
	GPUs int `json:"gpus,omitempty"`
	// HostNUMA is CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID per GPU (-1: none, as on
	// x86 hosts with discrete GPUs). Empty means every GPU is on node 0;
	// otherwise it has one entry per GPU.
	HostNUMA []int `json:"host_numa,omitempty"`
	// NUMANodes lists the host NUMA nodes that exist (that HOST_NUMA
	// allocations may target). Empty means the distinct valid HostNUMA ids,
	// or node 0 when there are none.
	NUMANodes []int `json:"numa_nodes,omitempty"`
	// Granularity is the default minimum (and recommended) allocation
	// granularity in bytes for devices and nodes; 0 means 2 MiB. It must be
	// a power of two and a multiple of the OS page size.
	Granularity uint64 `json:"granularity,omitempty"`
	// NodeGranularity overrides Granularity per host NUMA node.
	NodeGranularity map[int]uint64 `json:"node_granularity,omitempty"`
	// DeviceGranularity overrides Granularity per device.
	DeviceGranularity map[int]uint64 `json:"device_granularity,omitempty"`
	// FabricPermitted lets cuMemCreate request CU_MEM_HANDLE_TYPE_FABRIC.
	// False (the default) makes such a request fail with
	// CUDA_ERROR_NOT_PERMITTED, as on hosts without an IMEX channel.
	FabricPermitted bool `json:"fabric_permitted,omitempty"`
	// PosixFDNotPermitted makes cuMemCreate with
	// CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR fail with
	// CUDA_ERROR_NOT_PERMITTED (POSIX fds are permitted by default).
	PosixFDNotPermitted bool `json:"posix_fd_not_permitted,omitempty"`
	// FabricRegistryDir is where fabric exports are published for importers
	// on the same host. Empty means os.TempDir()/kvfabric-sim-fabric-<uid>.
	FabricRegistryDir string `json:"fabric_registry_dir,omitempty"`
	// DriverVersion is what cuDriverGetVersion reports; 0 means 13000.
	DriverVersion int `json:"driver_version,omitempty"`
	// NoMemcpyBatch removes the cuMemcpyBatchAsync capability (it is also
	// absent when DriverVersion < 12080).
	NoMemcpyBatch bool `json:"no_memcpy_batch,omitempty"`
	// NodeCapacity limits the bytes of live HOST_NUMA allocations per node;
	// absent or 0 means unlimited. Exceeding it fails cuMemCreate with
	// CUDA_ERROR_OUT_OF_MEMORY.
	NodeCapacity map[int]uint64 `json:"node_capacity,omitempty"`
	// DeviceCapacity limits the bytes of live DEVICE allocations and
	// cuMemAlloc buffers per device; absent or 0 means unlimited.
	DeviceCapacity map[int]uint64 `json:"device_capacity,omitempty"`
}

// withDefaults returns c with every zero field replaced by its default.
func (c Config) withDefaults() Config {
	if c.GPUs == 0 {
		c.GPUs = 1
	}
	if len(c.HostNUMA) == 0 {
		c.HostNUMA = make([]int, max(c.GPUs, 0))
	} else {
		c.HostNUMA = slices.Clone(c.HostNUMA)
	}
	if len(c.NUMANodes) == 0 {
		for _, n := range c.HostNUMA {
			if n >= 0 && !slices.Contains(c.NUMANodes, n) {
				c.NUMANodes = append(c.NUMANodes, n)
			}
		}
		if len(c.NUMANodes) == 0 {
			c.NUMANodes = []int{0}
		}
	} else {
		c.NUMANodes = slices.Clone(c.NUMANodes)
	}
	slices.Sort(c.NUMANodes)
	if c.Granularity == 0 {
		c.Granularity = DefaultGranularity
	}
	if c.FabricRegistryDir == "" {
		c.FabricRegistryDir = filepath.Join(os.TempDir(), "kvfabric-sim-fabric-"+strconv.Itoa(os.Getuid()))
	}
	if c.DriverVersion == 0 {
		c.DriverVersion = DefaultDriverVersion
	}
	return c
}

// Validate reports the first invalid field of c (after defaults), naming
// the field and the value.
func (c Config) Validate() error {
	d := c.withDefaults()
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("%w: %s=%v: %s", ErrInvalidConfig, field, v, why)
	}
	if d.GPUs < 0 || d.GPUs > 64 {
		return bad("gpus", c.GPUs, "must be in 0..64")
	}
	if len(d.HostNUMA) != d.GPUs {
		return bad("host_numa", c.HostNUMA, fmt.Sprintf("need one entry per GPU (%d)", d.GPUs))
	}
	for i, n := range d.NUMANodes {
		if n < 0 || n > 1023 {
			return bad("numa_nodes", c.NUMANodes, "node ids must be in 0..1023")
		}
		if i > 0 && d.NUMANodes[i-1] == n {
			return bad("numa_nodes", c.NUMANodes, "duplicate node")
		}
	}
	for _, n := range d.HostNUMA {
		if n < -1 || (n >= 0 && !slices.Contains(d.NUMANodes, n)) {
			return bad("host_numa", c.HostNUMA, fmt.Sprintf("id %d is neither -1 nor in numa_nodes %v", n, d.NUMANodes))
		}
	}
	page := uint64(os.Getpagesize())
	checkGran := func(field string, g uint64) error {
		if g < page || g&(g-1) != 0 {
			return bad(field, g, fmt.Sprintf("must be a power of two >= the page size %d", page))
		}
		return nil
	}
	if err := checkGran("granularity", d.Granularity); err != nil {
		return err
	}
	for n, g := range d.NodeGranularity {
		if !slices.Contains(d.NUMANodes, n) {
			return bad("node_granularity", n, "no such node")
		}
		if err := checkGran("node_granularity["+strconv.Itoa(n)+"]", g); err != nil {
			return err
		}
	}
	for dev, g := range d.DeviceGranularity {
		if dev < 0 || dev >= d.GPUs {
			return bad("device_granularity", dev, "no such device")
		}
		if err := checkGran("device_granularity["+strconv.Itoa(dev)+"]", g); err != nil {
			return err
		}
	}
	for n := range d.NodeCapacity {
		if !slices.Contains(d.NUMANodes, n) {
			return bad("node_capacity", n, "no such node")
		}
	}
	for dev := range d.DeviceCapacity {
		if dev < 0 || dev >= d.GPUs {
			return bad("device_capacity", dev, "no such device")
		}
	}
	if d.DriverVersion < 0 {
		return bad("driver_version", c.DriverVersion, "must not be negative")
	}
	if !filepath.IsAbs(d.FabricRegistryDir) {
		return bad("fabric_registry_dir", c.FabricRegistryDir, "must be an absolute path")
	}
	return nil
}

// Env returns c as the value of EnvVar for a child process
// (EnvVar+"="+c.Env()).
func (c Config) Env() string {
	b, err := json.Marshal(c)
	if err != nil {
		// Config holds only ints, bools, strings, slices and int-keyed maps.
		panic("sim: marshal Config: " + err.Error())
	}
	return string(b)
}

// ParseConfig decodes a JSON Config; unknown keys are errors.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if dec.More() {
		return Config{}, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalidConfig)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// ConfigFromEnv reads the Config from EnvVar: a JSON object, or the path of
// a file holding one. Unset or empty means the zero Config (the defaults).
func ConfigFromEnv() (Config, error) {
	v := strings.TrimSpace(os.Getenv(EnvVar))
	if v == "" {
		return Config{}, nil
	}
	data := []byte(v)
	if !strings.HasPrefix(v, "{") {
		b, err := os.ReadFile(v)
		if err != nil {
			return Config{}, fmt.Errorf("%w: %s=%q: %v", ErrInvalidConfig, EnvVar, v, err)
		}
		data = b
	}
	c, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", EnvVar, err)
	}
	return c, nil
}

// granularity returns the granularity of a location, or 0 if it does not
// exist. c has defaults applied.
func (c *Config) granularity(dev bool, id int) uint64 {
	if dev {
		if id < 0 || id >= c.GPUs {
			return 0
		}
		if g, ok := c.DeviceGranularity[id]; ok {
			return g
		}
		return c.Granularity
	}
	if !slices.Contains(c.NUMANodes, id) {
		return 0
	}
	if g, ok := c.NodeGranularity[id]; ok {
		return g
	}
	return c.Granularity
}

// minGranularity is the smallest granularity of any location: the unit
// cuMemAddressReserve sizes must be a multiple of.
func (c *Config) minGranularity() uint64 {
	g := c.Granularity
	for _, v := range c.NodeGranularity {
		g = min(g, v)
	}
	for _, v := range c.DeviceGranularity {
		g = min(g, v)
	}
	return g
}
