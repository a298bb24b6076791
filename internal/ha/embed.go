package ha

import (
	"context"
	"fmt"
	"net/url"

	etcdtransport "go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// EtcdConfig configures an etcd member run inside this process
// (go.etcd.io/etcd/server/v3/embed): `kvfabric master --embedded-etcd` and
// tests.
type EtcdConfig struct {
	// Dir holds the member's data.
	Dir string
	// Name is the member's name (default "kvfabric").
	Name string
	// ClientURL and PeerURL are where it serves clients and peers
	// ("http://127.0.0.1:2379"; https with TLS).
	ClientURL, PeerURL string
	// InitialCluster lists every member of a new cluster as
	// "name=peerURL,…"; empty: this member alone.
	InitialCluster string
	// CertFile/KeyFile make it serve clients over TLS; ClientCAFile then
	// requires client certificates signed by that CA (the master's own
	// --tls-cert-file, --tls-key-file, --tls-client-ca-file). Peers talk
	// plaintext: an embedded cluster is for one host.
	CertFile, KeyFile, ClientCAFile string
	// TickMs and ElectionMs are etcd's heartbeat and election timeout
	// (defaults 100 and 1000). The shortest lease etcd grants is 1.5
	// election timeouts, rounded up to whole seconds.
	TickMs, ElectionMs uint
	// UnsafeNoFsync skips fsync (tests only: a crash loses data).
	UnsafeNoFsync bool
}

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
