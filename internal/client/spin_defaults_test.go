package client_test

import (
	"testing"

	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/master"
)

// TestFastSpinDefaultsAgree: config cannot import master, so its
// master_fast_path_spin default and bound repeat master's; they must agree.
func TestFastSpinDefaultsAgree(t *testing.T) {
	if config.DefaultMasterFastPathSpin != master.DefaultFastSpin {
		t.Errorf("config default %v, master default %v", config.DefaultMasterFastPathSpin, master.DefaultFastSpin)
	}
	if err := master.CheckFastSpin("x", config.MaxMasterFastPathSpin); err != nil {
		t.Errorf("config's bound %v is refused by master: %v", config.MaxMasterFastPathSpin, err)
	}
	if err := master.CheckFastSpin("x", config.MaxMasterFastPathSpin+1); err == nil {
		t.Errorf("master takes %v, beyond config's bound", config.MaxMasterFastPathSpin+1)
	}
}
