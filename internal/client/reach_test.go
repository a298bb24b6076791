package client_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
	"github.com/kvfabric/kvfabric/internal/master"
)

// TestStoresReachOnlyWhatTheyCanImport runs Stores of several "hosts"
// (local_hostname) and fabric domains against one master. A POSIX fd
// crosses no host boundary and a fabric handle no domain boundary, so the
// master must neither place a put nor offer a replica across one. The
// simulator imports anything on this machine, so before the placement and
// GetReplicas filters these puts and gets "worked" here, while on real
// hosts they would fail to import (and report a healthy provider
// unreachable).
func TestStoresReachOnlyWhatTheyCanImport(t *testing.T) {
	for _, tc := range []struct {
		name string
		sim  sim.Config
		prov map[string]any // provider on host-a
		// far and near: consumers that cannot and can reach the provider.
		far, near map[string]any
	}{
		{"posix_fd", sim.Config{},
			egmProvider("16MiB"),
			map[string]any{"local_hostname": "host-b"},
			map[string]any{"local_hostname": "host-a"}},
		{"fabric", sim.Config{FabricPermitted: true},
			with(egmProvider("16MiB"), "handle_type", "fabric", "fabric_domain", "nvl-1"),
			map[string]any{"local_hostname": "host-b", "fabric_domain": "nvl-2"},
			map[string]any{"local_hostname": "host-b", "fabric_domain": "nvl-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := tc.sim
			sc.FabricRegistryDir = t.TempDir()
			drv, err := sim.New(sc)
			if err != nil {
				t.Fatal(err)
			}
			defer drv.Close()
			svc, err := master.New(master.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer svc.Close()
			mc := master.NewEmbedded(svc)
			ctx := context.Background()
			open := func(id string, m map[string]any) *client.Store {
				t.Helper()
				if _, ok := m["local_hostname"]; !ok {
					m["local_hostname"] = "host-a"
				}
				s, err := client.Open(ctx, cfgFor(t, m), client.Options{Driver: drv, Master: mc, ClientID: id})
				if err != nil {
					t.Fatalf("open %s: %v", id, err)
				}
				return s
			}
			prov := open("prov", tc.prov)
			far := open("far", tc.far)
			near := open("near", tc.near)
			if prov.DriverName() != "sim" || prov.HandleType() != tc.name || far.HandleType() != "" {
				t.Errorf("driver %q, handle types %q / %q", prov.DriverName(), prov.HandleType(), far.HandleType())
			}

			data := bytes.Repeat([]byte("kv"), 2048)
			err = far.PutBytes(ctx, "from-far", data, client.PutOptions{})
			if !errors.Is(err, client.ErrNoSpace) || !strings.Contains(err.Error(), "reachable") {
				t.Fatalf("put from a consumer that cannot reach the only provider: %v; want ErrNoSpace saying why", err)
			}
			if err := near.PutBytes(ctx, "from-near", data, client.PutOptions{}); err != nil {
				t.Fatalf("put from a consumer that reaches the provider: %v", err)
			}
			if _, err := far.GetBytes(ctx, "from-near"); !errors.Is(err, client.ErrNotFound) {
				t.Fatalf("get of an unreachable replica: %v; want ErrNotFound", err)
			}
			got, err := near.GetBytes(ctx, "from-near")
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("near get: %d bytes, %v", len(got), err)
			}
			// The far reader's miss reported nobody unreachable: the
			// provider's segments still take puts.
			if err := near.PutBytes(ctx, "again", data, client.PutOptions{}); err != nil {
				t.Fatalf("put after the far reader's miss: %v", err)
			}
			st, err := mc.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range st.PerClient {
				if c.Driver != "sim" || c.ID == "prov" && (len(c.Handles) != 1 || c.Handles[0].String() != tc.name) {
					t.Errorf("stats of %s: %+v", c.ID, c)
				}
			}
			for _, s := range []*client.Store{near, far, prov} {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			simtest.AssertNoLeaks(t, drv)
		})
	}
}

// with returns m with the key/value pairs kv set.
func with(m map[string]any, kv ...any) map[string]any {
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}
