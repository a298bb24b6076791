package main

import (
	"crypto/tls"
	"fmt"
	"net"

	"github.com/kvfabric/kvfabric/internal/master"
)

// httpListener opens --metrics-listen (nil when empty) as the master's
// access rules say: over TLS with the gRPC listener's certificate and
// client CA when TLS is on, so the dashboard, the status document and
// /metrics take the same credentials as gRPC calls (master.HTTPHandler).
// A non-loopback address without TLS and client authentication is refused
// unless --insecure: the status document names clients, segments and, in
// its recent errors, keys.
func (o masterOpts) httpListener() (net.Listener, error) {
	if o.metricsListen == "" {
		return nil, nil
	}
	tlsOn, authOn := o.tlsCert != "", o.clientCA != "" || o.tokensFile != ""
	if !master.IsLoopback(o.metricsListen) && !o.insecure && (!tlsOn || !authOn) {
		return nil, fmt.Errorf("--metrics-listen %s is not a loopback address: refusing to serve the dashboard, status and metrics without TLS and client authentication; give --tls-cert-file/--tls-key-file and --tls-client-ca-file or --tokens-file (docs/security.md), or --insecure to accept the risk", o.metricsListen)
	}
	var tc *tls.Config
	if tlsOn {
		var err error
		if tc, err = master.ServerTLS(o.tlsCert, o.tlsKey, o.clientCA); err != nil {
			return nil, err
		}
	}
	lis, err := net.Listen("tcp", o.metricsListen)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	if tc != nil {
		lis = tls.NewListener(lis, tc)
	}
	return lis, nil
}
