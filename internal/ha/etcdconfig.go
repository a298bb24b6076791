package ha

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
