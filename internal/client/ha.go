package client

import (
	"context"
	"fmt"
	"time"

	"github.com/kvfabric/kvfabric/internal/ha"
	"github.com/kvfabric/kvfabric/internal/master"
)

// dialHA connects to the masters' etcd cluster (master_server_addr
// etcd://…): calls go to the leader, follow it across failovers, and a new
// term makes the heartbeat register with the new leader at once (and a
// provider remount), instead of at its next beat.
func (s *Store) dialHA(ctx context.Context) (master.Client, error) {
	cfg := s.cfg
	sec := master.ClientSecurity{CAFile: cfg.TLSCAFile, CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile,
		ServerName: cfg.TLSServerName, TokenFile: cfg.AuthTokenFile}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := ha.Dial(dctx, cfg.MasterServerAddr, ha.DialOptions{Security: sec, Logger: s.log, NoFastPath: !cfg.MasterFastPath, FastSpin: master.ConfiguredSpin(cfg.MasterFastPathSpin), OnNewTerm: func(uint64) {
		select {
		case s.hbKick <- struct{}{}:
		default:
		}
	}})
	if err != nil {
		return nil, fmt.Errorf("%w: masters at %s: %v", ErrRPC, cfg.MasterServerAddr, err)
	}
	return m, nil
}
