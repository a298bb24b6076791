// Package ha runs kvfabric masters in high availability on etcd (issue 14):
// every master campaigns in an etcd election (go.etcd.io/etcd/client/v3
// concurrency, on a lease); the leader serves, the others stand by and
// answer every call with the leader's address; clients find the leader in
// etcd (master_server_addr etcd://host:port,…/prefix) and follow it.
//
// Each term's epoch is the revision at which its leader's election key was
// created. The leader stamps it on every answer, clients refuse answers of
// older epochs, and a leader whose lease ended by its own clock answers
// nothing more (master.Router). A new term starts with an empty Service:
// providers and clients register again, objects of the previous term are
// lost (a cache), and puts are placed only after a fence that outlasts every
// lease and put the previous term may have granted (docs/design.md §9,
// docs/decisions.md).
package ha

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// ElectionPrefix is the key prefix of the election under a cluster prefix
// (--etcd-prefix): the leader's key is the one under it with the lowest
// create revision, and its value is the leader's address.
func ElectionPrefix(clusterPrefix string) string { return clusterPrefix + "/leader/" }

// EtcdTLS is the TLS configuration of an etcd client: etcd's certificate
// verified against caFile, this process's certificate from certFile/keyFile
// when set (etcd's --client-cert-auth). Nil when caFile is empty
// (plaintext).
func EtcdTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" {
		if certFile != "" || keyFile != "" {
			return nil, fmt.Errorf("ha: etcd client certificate %q without a CA: it must not travel in plaintext", certFile)
		}
		return nil, nil
	}
	pemData, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("ha: etcd CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemData) {
		return nil, fmt.Errorf("ha: etcd CA file %s holds no PEM certificate", caFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("ha: etcd certificate %q and key %q must be given together", certFile, keyFile)
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("ha: etcd certificate %s / key %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// NewEtcdClient connects to etcd at endpoints (TLS when tc is not nil). The
// etcd client's own logging is off: this package logs what matters.
func NewEtcdClient(endpoints []string, tc *tls.Config) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         tc,
		DialTimeout: 5 * time.Second,
		// Find a dead etcd member quickly and move to another.
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("ha: etcd %v: %w", endpoints, err)
	}
	return cli, nil
}
