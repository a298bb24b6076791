package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
	"github.com/kvfabric/kvfabric/internal/master"
)

// TestClientIDRefusedUpFront: a provider whose client id holds '/' or a
// space used to register under the raw id, mount its segments under a
// sanitized owner, and fail with a misleading "unknown client". Now Open
// refuses the id before it builds anything, naming it; and the default id
// is valid whatever local_hostname holds.
func TestClientIDRefusedUpFront(t *testing.T) {
	drv, err := sim.New(sim.Config{})
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
	for _, id := range []string{"prov/1", "my provider", strings.Repeat("p", master.MaxClientIDLen+1)} {
		s, err := client.Open(ctx, cfgFor(t, egmProvider("16MiB")), client.Options{Driver: drv, Master: mc, ClientID: id})
		if err == nil {
			_ = s.Close()
			t.Fatalf("Open with client id %q succeeded", id)
		}
		if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "client id") || errors.Is(err, master.ErrUnknownClient) {
			t.Fatalf("Open with client id %q: %v; want ErrInvalidArgument naming the client id", id, err)
		}
	}
	if st, err := mc.Stats(ctx); err != nil || st.Clients != 0 || st.Segments != 0 {
		t.Fatalf("refused ids left state behind: %+v, %v", st, err)
	}
	simtest.AssertNoLeaks(t, drv)

	// A default id built from a local_hostname with a space.
	cfg := egmProvider("16MiB")
	cfg["local_hostname"] = "rack 7 node"
	s, err := client.Open(ctx, cfgFor(t, cfg), client.Options{Driver: drv, Master: mc})
	if err != nil {
		t.Fatalf("Open with the default id on host %q: %v", "rack 7 node", err)
	}
	if err := master.ValidateClientID(s.ClientID()); err != nil {
		t.Errorf("default id: %v", err)
	}
	if st, err := mc.Stats(ctx); err != nil || st.Segments == 0 {
		t.Errorf("provider with the default id mounted nothing: %+v, %v", st, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	simtest.AssertNoLeaks(t, drv)
}

// TestClientIDFromConfig: the client_id key names the client (its segments'
// owner), so a put may prefer that provider's segments by naming it, as
// Mooncake clients prefer a segment by its host:port name.
func TestClientIDFromConfig(t *testing.T) {
	drv, err := sim.New(sim.Config{})
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
	open := func(id, size string) *client.Store {
		cfg := egmProvider(size)
		cfg["client_id"] = id
		s, err := client.Open(ctx, cfgFor(t, cfg), client.Options{Driver: drv, Master: mc})
		if err != nil {
			t.Fatalf("Open with client_id %q: %v", id, err)
		}
		if s.ClientID() != id {
			t.Fatalf("ClientID() = %q, want %q", s.ClientID(), id)
		}
		return s
	}
	// b has more free bytes, so only the preference puts objects on a.
	a, b := open("localhost:12345", "16MiB"), open("localhost:12346", "64MiB")
	for i, want := range []*client.Store{a, b, a, a} {
		key := fmt.Sprintf("k%d-%s", i, want.ClientID())
		if err := a.PutBytes(ctx, key, []byte("v"), client.PutOptions{PreferredSegments: []string{want.ClientID()}}); err != nil {
			t.Fatal(err)
		}
		res, err := mc.GetReplicas(ctx, []string{key})
		if err != nil || res[0].Err != nil {
			t.Fatalf("GetReplicas(%s): %v %v", key, err, res[0].Err)
		}
		if owner := res[0].Replicas[0].Segment.Owner; owner != want.ClientID() {
			t.Errorf("put preferring %s landed on a segment of %s", want.ClientID(), owner)
		}
		_ = mc.ReleaseLeases(ctx, []uint64{res[0].LeaseID})
	}
	for _, s := range []*client.Store{a, b} {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	simtest.AssertNoLeaks(t, drv)
}
