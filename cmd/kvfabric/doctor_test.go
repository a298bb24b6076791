package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestDoctorSim(t *testing.T) {
	t.Setenv("KVFABRIC_SIM", `{"gpus": 2, "host_numa": [0, 1]}`)
	rep, err := diagnose("sim")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Driver != "sim" || len(rep.GPUs) != 2 || len(rep.NUMANodes) != 2 || len(rep.Problems) != 0 {
		t.Fatalf("report: %+v", rep)
	}
	for _, g := range rep.GPUs {
		// The simulator's default is FABRIC not permitted, like the lab H200s.
		if g.FabricAllocationPermit || g.FabricAllocation != "CUDA_ERROR_NOT_PERMITTED" || !g.HostNUMAVMM {
			t.Errorf("GPU %d: %+v", g.Index, g)
		}
	}
	if n := rep.NUMANodes[1]; n.Node != 1 || n.Granularity != 2<<20 || len(n.GPUs) != 1 || n.GPUs[0] != 1 {
		t.Errorf("node 1: %+v", n)
	}
	var buf bytes.Buffer
	rep.writeText(&buf)
	if !strings.Contains(buf.String(), "simulator (2 GPUs)") || !strings.Contains(buf.String(), "2 MiB / 2 MiB") {
		t.Errorf("text report:\n%s", buf.String())
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
}

func TestDoctorNoDriver(t *testing.T) {
	t.Setenv("KVFABRIC_LIBCUDA", "/nonexistent/libcuda.so.1")
	rep, err := diagnose("cuda")
	if err == nil || rep.Driver != "none" {
		t.Fatalf("--driver=cuda without libcuda: %+v, %v", rep, err)
	}
	var buf bytes.Buffer
	rep.writeText(&buf)
	if !strings.Contains(buf.String(), "NONE") {
		t.Errorf("text report does not say there is no driver:\n%s", buf.String())
	}
	// auto falls back to the simulator and says so.
	t.Setenv("KVFABRIC_SIM", "")
	rep, err = diagnose("auto")
	if err != nil || rep.Driver != "sim" || !strings.Contains(rep.Reason, "no usable CUDA driver") {
		t.Fatalf("auto: %+v, %v", rep, err)
	}
}
