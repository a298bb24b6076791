//go:build !kvfabric_noembed

package ha

import (
	"context"
	"fmt"
	"net/url"

	etcdtransport "go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// StartEtcd starts an etcd member and waits until it serves (or ctx is
// done). Close the returned Etcd to stop it.
func StartEtcd(ctx context.Context, c EtcdConfig) (_ *embed.Etcd, err error) {
	cfg := embed.NewConfig()
	cfg.Dir = c.Dir
	if c.Name != "" {
		cfg.Name = c.Name
	} else {
		cfg.Name = "kvfabric"
	}
	cu, err := url.Parse(c.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("ha: etcd client URL %q: %w", c.ClientURL, err)
	}
	pu, err := url.Parse(c.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("ha: etcd peer URL %q: %w", c.PeerURL, err)
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = c.InitialCluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = cfg.Name + "=" + pu.String()
	}
	cfg.InitialClusterToken = "kvfabric"
	if c.TickMs > 0 {
		cfg.TickMs = c.TickMs
	}
	if c.ElectionMs > 0 {
		cfg.ElectionMs = c.ElectionMs
	}
	if c.CertFile != "" {
		cfg.ClientTLSInfo = etcdtransport.TLSInfo{CertFile: c.CertFile, KeyFile: c.KeyFile,
			TrustedCAFile: c.ClientCAFile, ClientCertAuth: c.ClientCAFile != ""}
	}
	cfg.UnsafeNoFsync = c.UnsafeNoFsync
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("ha: start etcd in %s: %w", c.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("ha: etcd in %s: %w", c.Dir, err)
	case <-ctx.Done():
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("ha: etcd in %s not ready: %w", c.Dir, ctx.Err())
	}
}
