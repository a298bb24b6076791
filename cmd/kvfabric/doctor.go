package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/choose"
)

// imexChannelGlob is where the IMEX driver creates its channel devices; a
// FABRIC allocation needs one (without it cuMemCreate returns NOT_PERMITTED).
const imexChannelGlob = "/dev/nvidia-caps-imex-channels/channel*"

func init() {
	var (
		driverKind string
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Report what this machine offers kvfabric: driver, GPUs, handle types, NUMA nodes",
		Long: `doctor reports the CUDA driver version; per GPU its VMM, POSIX-fd, FABRIC and
host-NUMA attributes and whether a FABRIC allocation is actually permitted (a
one-granule probe, released at once); IMEX channel devices; host NUMA nodes
with their HOST_NUMA allocation granularity; and whether the real CUDA driver
or the simulator is in use.

Without a driver it says so and exits 0, unless --driver=cuda demanded one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := diagnose(driverKind)
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if e := enc.Encode(rep); e != nil {
					return e
				}
			} else {
				rep.writeText(out)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&driverKind, "driver", choose.Auto, "driver to use: auto|cuda|sim")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	rootCmd.AddCommand(cmd)
}

// doctorReport is what doctor prints (the --json schema).
type doctorReport struct {
	// Driver is "cuda", "sim" or "none".
	Driver string `json:"driver"`
	// Reason says why this driver is in use (or why there is none).
	Reason           string      `json:"reason"`
	DriverVersion    int         `json:"driver_version,omitempty"`
	MemcpyBatchAsync bool        `json:"memcpy_batch_async"`
	GPUs             []gpuReport `json:"gpus"`
	// IMEXChannels lists the IMEX channel device files present.
	IMEXChannels []string     `json:"imex_channels"`
	NUMANodes    []numaReport `json:"host_numa_nodes"`
	// Problems are failed queries; the report is partial where they occurred.
	Problems []string `json:"problems,omitempty"`
}

type gpuReport struct {
	Index                  int    `json:"index"`
	Name                   string `json:"name"`
	VMM                    bool   `json:"vmm"`
	PosixFD                bool   `json:"posix_fd"`
	Fabric                 bool   `json:"fabric"`
	HostNUMAID             int    `json:"host_numa_id"`
	HostNUMAVMM            bool   `json:"host_numa_vmm"`
	HostNUMAMultinodeIPC   bool   `json:"host_numa_multinode_ipc"`
	FabricAllocation       string `json:"fabric_allocation"` // "permitted" or the CUresult name
	FabricAllocationPermit bool   `json:"fabric_allocation_permitted"`
}

type numaReport struct {
	Node int   `json:"node"`
	GPUs []int `json:"gpus"` // GPUs whose HOST_NUMA_ID is this node
	// Granularity is the minimum and recommended HOST_NUMA allocation
	// granularity with a POSIX-fd handle; 0 when the query failed.
	Granularity            uint64 `json:"granularity"`
	RecommendedGranularity uint64 `json:"recommended_granularity"`
	Error                  string `json:"error,omitempty"`
}

// diagnose builds the report. It returns an error only when the driver kind
// was demanded explicitly (cuda or sim) and could not be had.
func diagnose(kind string) (*doctorReport, error) {
	rep := &doctorReport{GPUs: []gpuReport{}, NUMANodes: []numaReport{}, IMEXChannels: []string{}}
	if m, _ := filepath.Glob(imexChannelGlob); m != nil {
		rep.IMEXChannels = m
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, reason, err := choose.Driver(kind, log)
	if err != nil {
		rep.Driver = "none"
		rep.Reason = err.Error()
		if strings.EqualFold(strings.TrimSpace(kind), choose.Auto) || strings.TrimSpace(kind) == "" {
			return rep, nil
		}
		return rep, err
	}
	defer func() {
		if err := d.Close(); err != nil {
			rep.problem("close driver", err)
		}
	}()
	rep.Driver = d.Name()
	rep.Reason = reason
	rep.MemcpyBatchAsync = d.Capabilities().MemcpyBatchAsync
	if v, err := d.DriverVersion(); err != nil {
		rep.problem("driver version", err)
	} else {
		rep.DriverVersion = v
	}
	n, err := d.DeviceCount()
	if err != nil {
		rep.problem("device count", err)
		return rep, nil
	}
	nodes := map[int][]int{}
	var ctx0 cuda.Context
	for i := 0; i < n; i++ {
		g := rep.gpu(d, cuda.Device(i))
		rep.GPUs = append(rep.GPUs, g)
		if g.HostNUMAID >= 0 {
			nodes[g.HostNUMAID] = append(nodes[g.HostNUMAID], i)
		}
	}
	if d.Name() == "cuda" {
		// Nodes without an attached GPU can still hold HOST_NUMA memory.
		for _, id := range sysfsNUMANodes() {
			if _, ok := nodes[id]; !ok {
				nodes[id] = []int{}
			}
		}
	}
	if n > 0 && len(nodes) > 0 {
		c, err := d.PrimaryCtxRetain(0)
		if err != nil {
			rep.problem("retain context of GPU 0", err)
			return rep, nil
		}
		ctx0 = c
		defer func() {
			if err := d.PrimaryCtxRelease(0); err != nil {
				rep.problem("release context of GPU 0", err)
			}
		}()
	}
	ids := make([]int, 0, len(nodes))
	for id := range nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		nr := numaReport{Node: id, GPUs: nodes[id]}
		prop := cuda.AllocProp{Location: cuda.Location{Type: cuda.LocationHostNUMA, ID: int32(id)}, HandleTypes: cuda.HandlePosixFD}
		g, err := d.MemGetAllocationGranularity(ctx0, prop, cuda.GranularityMinimum)
		if err == nil {
			nr.Granularity = g
			g, err = d.MemGetAllocationGranularity(ctx0, prop, cuda.GranularityRecommended)
			nr.RecommendedGranularity = g
		}
		if err != nil {
			nr.Error = err.Error()
		}
		rep.NUMANodes = append(rep.NUMANodes, nr)
	}
	return rep, nil
}

func (rep *doctorReport) problem(what string, err error) {
	rep.Problems = append(rep.Problems, what+": "+err.Error())
}

// gpu reads the attributes of dev and probes a FABRIC allocation on it.
func (rep *doctorReport) gpu(d cuda.Driver, dev cuda.Device) gpuReport {
	g := gpuReport{Index: int(dev), HostNUMAID: -1}
	name, err := d.DeviceName(dev)
	if err != nil {
		rep.problem(fmt.Sprintf("GPU %d name", dev), err)
	}
	g.Name = name
	attr := func(a cuda.Attribute, label string) int {
		v, err := d.DeviceAttribute(dev, a)
		if err != nil {
			rep.problem(fmt.Sprintf("GPU %d attribute %s", dev, label), err)
			return 0
		}
		return v
	}
	g.VMM = attr(cuda.AttrVirtualMemoryManagementSupported, "VMM") != 0
	g.PosixFD = attr(cuda.AttrHandleTypePosixFDSupported, "POSIX_FD") != 0
	g.Fabric = attr(cuda.AttrHandleTypeFabricSupported, "FABRIC") != 0
	if v, err := d.DeviceAttribute(dev, cuda.AttrHostNUMAID); err == nil {
		g.HostNUMAID = v
	} else {
		rep.problem(fmt.Sprintf("GPU %d attribute HOST_NUMA_ID", dev), err)
	}
	g.HostNUMAVMM = attr(cuda.AttrHostNUMAVirtualMemoryManagementSupport, "HOST_NUMA_VMM") != 0
	g.HostNUMAMultinodeIPC = attr(cuda.AttrHostNUMAMultinodeIPCSupported, "HOST_NUMA_MULTINODE_IPC") != 0
	g.FabricAllocation, g.FabricAllocationPermit = probeFabric(d, dev)
	return g
}

// probeFabric allocates one granule of DEVICE memory with a FABRIC handle on
// dev and releases it at once. It returns "permitted" or why not.
func probeFabric(d cuda.Driver, dev cuda.Device) (result string, ok bool) {
	ctx, err := d.PrimaryCtxRetain(dev)
	if err != nil {
		return "retain context: " + cuda.ResultOf(err).String(), false
	}
	defer func() {
		if err := d.PrimaryCtxRelease(dev); err != nil && ok {
			result, ok = "release context: "+cuda.ResultOf(err).String(), false
		}
	}()
	prop := cuda.AllocProp{Location: cuda.Location{Type: cuda.LocationDevice, ID: int32(dev)}, HandleTypes: cuda.HandleFabric}
	g, err := d.MemGetAllocationGranularity(ctx, prop, cuda.GranularityMinimum)
	if err != nil {
		return cuda.ResultOf(err).String(), false
	}
	h, err := d.MemCreate(ctx, g, prop)
	if err != nil {
		return cuda.ResultOf(err).String(), false
	}
	if err := d.MemRelease(ctx, h); err != nil {
		return "release probe: " + cuda.ResultOf(err).String(), false
	}
	return "permitted", true
}

// sysfsNUMANodes lists the host's NUMA node ids (none where sysfs lacks them).
func sysfsNUMANodes() []int {
	m, _ := filepath.Glob("/sys/devices/system/node/node[0-9]*")
	var ids []int
	for _, p := range m {
		if id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "node")); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

func yesno(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func sizeString(n uint64) string {
	switch {
	case n == 0:
		return "?"
	case n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func (rep *doctorReport) writeText(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	if rep.Driver == "none" {
		fmt.Fprintf(tw, "driver:\tNONE — %s\n", rep.Reason)
	} else {
		fmt.Fprintf(tw, "driver:\t%s\n", rep.Reason) // says "CUDA …" or "simulator …"
	}
	if rep.DriverVersion != 0 {
		fmt.Fprintf(tw, "driver version:\t%d (CUDA %d.%d), cuMemcpyBatchAsync: %s\n", rep.DriverVersion,
			rep.DriverVersion/1000, rep.DriverVersion%1000/10, yesno(rep.MemcpyBatchAsync))
	}
	if len(rep.IMEXChannels) == 0 {
		fmt.Fprintf(tw, "IMEX channels:\tnone (%s)\n", imexChannelGlob)
	} else {
		fmt.Fprintf(tw, "IMEX channels:\t%s\n", strings.Join(rep.IMEXChannels, " "))
	}
	if rep.Driver == "none" {
		return
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "GPU\tNAME\tVMM\tPOSIX_FD\tFABRIC\tFABRIC ALLOC\tHOST_NUMA_ID\tHOST_NUMA VMM\tHOST_NUMA MULTINODE IPC")
	for _, g := range rep.GPUs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", g.Index, g.Name, yesno(g.VMM), yesno(g.PosixFD),
			yesno(g.Fabric), g.FabricAllocation, g.HostNUMAID, yesno(g.HostNUMAVMM), yesno(g.HostNUMAMultinodeIPC))
	}
	if len(rep.GPUs) == 0 {
		fmt.Fprintln(tw, "(no GPUs)")
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "HOST NUMA NODE\tGPUS\tGRANULARITY (min / recommended, HOST_NUMA + POSIX_FD)")
	for _, n := range rep.NUMANodes {
		gpus := make([]string, len(n.GPUs))
		for i, g := range n.GPUs {
			gpus[i] = strconv.Itoa(g)
		}
		gs := strings.Join(gpus, ",")
		if gs == "" {
			gs = "-"
		}
		if n.Error != "" {
			fmt.Fprintf(tw, "%d\t%s\t%s\n", n.Node, gs, n.Error)
		} else {
			fmt.Fprintf(tw, "%d\t%s\t%s / %s\n", n.Node, gs, sizeString(n.Granularity), sizeString(n.RecommendedGranularity))
		}
	}
	if len(rep.NUMANodes) == 0 {
		fmt.Fprintln(tw, "(none)")
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(tw, "problem:\t%s\n", p)
	}
}
