package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/ha"
	"github.com/kvfabric/kvfabric/internal/master"
)

// haOpts are the flags of `kvfabric master` for high availability on etcd.
type haOpts struct {
	endpoints, prefix              string
	embeddedDir, embeddedClientURL string
	embeddedPeerURL                string
	advertise                      string
	leaseTTL                       time.Duration
	etcdCA, etcdCert, etcdKey      string
}

func addHAFlags(f *pflag.FlagSet, o *haOpts) {
	f.StringVar(&o.endpoints, "etcd-endpoints", "", "run highly available: campaign for leadership in this etcd cluster (host:port,…); clients use master_server_addr etcd://<endpoints><prefix>")
	f.StringVar(&o.prefix, "etcd-prefix", config.DefaultEtcdPrefix, "the cluster's key prefix in etcd (one per set of masters)")
	f.StringVar(&o.embeddedDir, "embedded-etcd", "", "run a one-member etcd in this process with its data in DIR (development, one host) and campaign there")
	f.StringVar(&o.embeddedClientURL, "embedded-etcd-client-url", "", "where the embedded etcd serves clients (default http://127.0.0.1:2379, https with --tls-cert-file)")
	f.StringVar(&o.embeddedPeerURL, "embedded-etcd-peer-url", "http://127.0.0.1:2380", "the embedded etcd's peer URL")
	f.StringVar(&o.advertise, "advertise-addr", "", "address clients dial while this master leads, published in etcd (default: --listen)")
	f.DurationVar(&o.leaseTTL, "etcd-lease-ttl", 2*time.Second, "election lease: a leader that stops renewing it is replaced after about this long (whole seconds; etcd raises it to 1.5 of its election timeouts)")
	f.StringVar(&o.etcdCA, "etcd-ca-file", "", "PEM CA of etcd's certificate (turns on TLS to --etcd-endpoints)")
	f.StringVar(&o.etcdCert, "etcd-cert-file", "", "PEM client certificate this master presents to etcd (etcd --client-cert-auth)")
	f.StringVar(&o.etcdKey, "etcd-key-file", "", "PEM private key of --etcd-cert-file")
}

func (o haOpts) enabled() bool { return o.endpoints != "" || o.embeddedDir != "" }

// runMasterHA runs the master as one of an HA set (ha.Master): it serves
// gRPC throughout, as the leader while it leads a term and as a standby
// naming the leader otherwise.
func runMasterHA(ctx context.Context, o masterOpts, cfg master.Config, reg *prometheus.Registry,
	sopts []grpc.ServerOption, tc *tls.Config, auth *master.Authenticator, log *slog.Logger) (err error) {
	h := o.ha
	if h.endpoints != "" && h.embeddedDir != "" {
		return errors.New("--etcd-endpoints and --embedded-etcd exclude each other: an embedded etcd is the master's own")
	}
	if !strings.HasPrefix(h.prefix, "/") || strings.HasSuffix(h.prefix, "/") {
		return fmt.Errorf("--etcd-prefix %q: want a path like /kvfabric/rack1", h.prefix)
	}
	var cli *clientv3.Client
	if h.embeddedDir != "" {
		curl := h.embeddedClientURL
		if curl == "" {
			curl = "http://127.0.0.1:2379"
			if o.tlsCert != "" {
				curl = "https://127.0.0.1:2379"
			}
		}
		if o.tlsCert != "" && !strings.HasPrefix(curl, "https://") {
			return fmt.Errorf("--embedded-etcd-client-url %s: with --tls-cert-file the embedded etcd serves https", curl)
		}
		if o.tlsCert == "" && !o.insecure && !master.IsLoopback(strings.TrimPrefix(strings.TrimPrefix(curl, "http://"), "https://")) {
			return fmt.Errorf("--embedded-etcd-client-url %s is not a loopback address: refusing to serve etcd in plaintext; give --tls-cert-file/--tls-key-file/--tls-client-ca-file or --insecure", curl)
		}
		var stopEtcd func()
		if cli, stopEtcd, err = startEmbeddedEtcd(ctx, ha.EtcdConfig{Dir: h.embeddedDir, ClientURL: curl, PeerURL: h.embeddedPeerURL,
			CertFile: o.tlsCert, KeyFile: o.tlsKey, ClientCAFile: o.clientCA}); err != nil {
			return fmt.Errorf("--embedded-etcd: %w", err)
		}
		defer stopEtcd()
		log.Warn("kvfabric master: embedded etcd serving", "dir", h.embeddedDir, "clients", curl,
			"master_server_addr", "etcd://"+strings.TrimPrefix(strings.TrimPrefix(curl, "http://"), "https://")+h.prefix)
	} else {
		eps := strings.Split(h.endpoints, ",")
		if h.etcdCA == "" && !o.insecure {
			for _, ep := range eps {
				if !master.IsLoopback(ep) {
					return fmt.Errorf("--etcd-endpoints %s is not a loopback address: refusing to talk to etcd in plaintext; give --etcd-ca-file (and --etcd-cert-file/--etcd-key-file), or --insecure", ep)
				}
			}
		}
		tc, err := ha.EtcdTLS(h.etcdCA, h.etcdCert, h.etcdKey)
		if err != nil {
			return err
		}
		if cli, err = ha.NewEtcdClient(eps, tc); err != nil {
			return err
		}
		defer cli.Close()
	}

	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	adv, err := advertiseAddr(h.advertise, lis.Addr())
	if err != nil {
		lis.Close()
		return err
	}
	flis, err := o.fastListener(lis.Addr())
	if err != nil {
		lis.Close()
		return err
	}
	closeAll := func() {
		lis.Close()
		if flis != nil {
			flis.Close()
		}
	}
	cfg.Registerer = nil // each term's Service has its own registry (ha.Master.Gatherer)
	m, err := ha.NewMaster(ha.MasterConfig{Etcd: cli, Prefix: h.prefix, Advertise: adv, LeaseTTL: h.leaseTTL,
		Service: cfg, Auth: auth, ServerOptions: sopts, FastListener: flis, FastTLS: tc, FastSpin: master.ConfiguredSpin(o.fastSpin), Logger: log})
	if err != nil {
		closeAll()
		return err
	}
	if o.metricsListen != "" {
		mlis, err := o.httpListener()
		if err != nil {
			closeAll()
			return err
		}
		metrics := promhttp.HandlerFor(prometheus.Gatherers{reg, m.Gatherer()}, promhttp.HandlerOpts{})
		hs := &http.Server{Handler: master.HTTPHandler(m.Service, metrics, auth), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(mlis) }()
		defer hs.Close()
	}
	fastAddr := "off"
	if flis != nil {
		fastAddr = flis.Addr().String()
	}
	log.Warn("kvfabric master serving (HA: campaigning for leadership)", "grpc", lis.Addr().String(), "fast", fastAddr, "advertise", adv,
		"prefix", h.prefix, "term fence", ha.Fence(cfg), "tls", o.tlsCert != "", "authentication required", cfg.RequireAuth)
	return m.Serve(ctx, lis, o.shutdownTimeout)
}

// advertiseAddr is the address published for clients: adv, or the listen
// address when it names a host (its port filled in when it was 0).
func advertiseAddr(adv string, bound net.Addr) (string, error) {
	if adv != "" {
		if _, _, err := net.SplitHostPort(adv); err != nil {
			return "", fmt.Errorf("--advertise-addr %q: want host:port", adv)
		}
		return adv, nil
	}
	tcp, ok := bound.(*net.TCPAddr)
	if !ok || tcp.IP.IsUnspecified() {
		return "", fmt.Errorf("--listen %s names no host clients can dial: give --advertise-addr", bound)
	}
	return tcp.String(), nil
}
