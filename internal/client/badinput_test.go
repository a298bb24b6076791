package client_test

import (
	"context"
	"errors"
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
