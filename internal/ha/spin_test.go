package ha_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvfabric/kvfabric/internal/ha"
	"github.com/kvfabric/kvfabric/internal/master"
)

// TestNewMasterFastSpin: a fast path spin beyond the limit is refused,
// naming it; 0 (the default) and negative (none) are taken.
func TestNewMasterFastSpin(t *testing.T) {
	cfg := ha.MasterConfig{Etcd: &clientv3.Client{}, Prefix: "/kvf-spin", Advertise: "127.0.0.1:1"}
	for _, d := range []time.Duration{0, -1, time.Millisecond} {
		cfg.FastSpin = d
		if _, err := ha.NewMaster(cfg); err != nil {
			t.Errorf("FastSpin %v: %v", d, err)
		}
	}
	cfg.FastSpin = 11 * time.Millisecond
	if _, err := ha.NewMaster(cfg); !errors.Is(err, master.ErrInvalid) || !strings.Contains(err.Error(), "11ms") {
		t.Fatalf("FastSpin 11ms: %v", err)
	}
}
