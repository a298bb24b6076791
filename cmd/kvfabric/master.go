package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kvfabric/kvfabric/internal/master"
)

type masterOpts struct {
	listen, metricsListen string
	// fastListen is the fast path's address: "" for the --listen host with
	// an ephemeral port, "off" for none.
	fastListen      string
	fastSpin        time.Duration // --fast-spin: 0 off
	addrFile        string        // written with the gRPC address once listening
	cfg             master.Config
	shutdownTimeout time.Duration
	verbose         bool
	// Security: the master's TLS certificate and key, the CA of accepted
	// client certificates, the bearer tokens file; insecure allows
	// plaintext or unauthenticated callers on a non-loopback address.
	tlsCert, tlsKey, clientCA, tokensFile string
	insecure                              bool
	// High availability (master_ha.go).
	ha haOpts
}

func init() {
	var o masterOpts
	cmd := &cobra.Command{
		Use:   "master",
		Short: "Run the kvfabric master (metadata service) over gRPC until SIGINT/SIGTERM",
		Long: `master serves kvfabric's metadata service (segments, objects, leases,
eviction, client liveness) over gRPC on --listen, and on --metrics-listen a
read-only web dashboard (/), its JSON document (/api/v1/status, also printed
by kvfabric stat --json) and Prometheus metrics (/metrics), behind the same
TLS and credentials as gRPC when they are configured. On SIGINT or SIGTERM it stops accepting calls,
lets calls in flight finish for up to --shutdown-timeout, then stops.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runMaster(ctx, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:50051", "gRPC listen address")
	f.StringVar(&o.fastListen, "fast-listen", "", `address of the fast path for the hot calls (gets, puts, lease releases; advertised to clients, which fall back to gRPC without it): default the --listen host with an ephemeral port; "off" disables it`)
	f.DurationVar(&o.fastSpin, "fast-spin", master.DefaultFastSpin, "how long a fast path connection polls its socket for the next request, after a small one (at most 4 KiB: a get, a few keys), before it sleeps: a cross-CPU wake-up saved per call, for CPU (at most a quarter of GOMAXPROCS connections spin at once, at least one, yielding the CPU between polls); 0 off, at most 10ms")
	f.StringVar(&o.metricsListen, "metrics-listen", "127.0.0.1:9090", "HTTP address for the dashboard (/), its JSON (/api/v1/status) and /metrics; HTTPS with the gRPC credentials when TLS is on (empty: none)")
	f.DurationVar(&o.cfg.LeaseTTL, "lease-ttl", 5*time.Second, "read lease granted by GetReplicas")
	f.DurationVar(&o.cfg.PutTimeout, "put-timeout", 30*time.Second, "a put not ended within this can no longer become visible (its bytes stay reserved while its writer may still write them)")
	f.DurationVar(&o.cfg.ClientTTL, "client-ttl", 10*time.Second, "default client registration TTL (heartbeat deadline)")
	f.DurationVar(&o.cfg.DrainTimeout, "drain-timeout", 0, "a segment whose unmount was refused (leases or puts outstanding) takes no new puts or leases until its owner stops retrying the unmount for this long (0: max(10s, 2 × --lease-ttl))")
	f.Float64Var(&o.cfg.DRAM.High, "dram-high-watermark", 0.95, "DRAM usage fraction that starts eviction")
	f.Float64Var(&o.cfg.DRAM.Low, "dram-low-watermark", 0.85, "DRAM usage fraction eviction brings usage down to")
	f.Float64Var(&o.cfg.HBM.High, "hbm-high-watermark", 0.95, "HBM usage fraction that starts eviction")
	f.Float64Var(&o.cfg.HBM.Low, "hbm-low-watermark", 0.85, "HBM usage fraction eviction brings usage down to")
	f.IntVar(&o.cfg.MaxKeyLen, "max-key-len", 1024, "longest key in bytes (1 to 65536)")
	f.Uint64Var(&o.cfg.Alignment, "alignment", 64, "allocation alignment in bytes (a power of two, 8 to 1048576)")
	f.StringVar(&o.addrFile, "addr-file", "", "once listening, write the gRPC address to this file (for --listen 127.0.0.1:0)")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long calls in flight may finish on shutdown")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "log at info level (default: warnings)")
	f.StringVar(&o.tlsCert, "tls-cert-file", "", "PEM certificate of the master (TLS; see `kvfabric certs` and docs/security.md)")
	f.StringVar(&o.tlsKey, "tls-key-file", "", "PEM private key of --tls-cert-file")
	f.StringVar(&o.clientCA, "tls-client-ca-file", "", "PEM CA whose client certificates authenticate callers (mutual TLS; the principal is the subject CN, OU=admin gives the admin role)")
	f.StringVar(&o.tokensFile, "tokens-file", "", `bearer tokens, one "<principal> <client|admin> <token>" per line (needs TLS)`)
	f.IntVar(&o.cfg.Quotas.Segments, "quota-segments", 0, "segments one client may mount (0: 65536; -1: no limit)")
	f.IntVar(&o.cfg.Quotas.PendingPuts, "quota-pending-puts", 0, "puts one client may have in progress (0: 1Mi; -1: no limit)")
	f.Int64Var(&o.cfg.Quotas.ReservedBytes, "quota-reserved-bytes", 0, "bytes one client's puts in progress may reserve (0: 16TiB; -1: no limit)")
	addHAFlags(f, &o.ha)
	f.BoolVar(&o.insecure, "insecure", false, "allow plaintext or unauthenticated callers on a non-loopback --listen (anyone who reaches the port can then read and wipe the cache)")
	rootCmd.AddCommand(cmd)
}

func runMaster(ctx context.Context, o masterOpts) (err error) {
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := master.CheckFastSpin("--fast-spin", o.fastSpin); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := o.cfg
	cfg.Logger = log
	cfg.Registerer = reg
	sopts, tc, auth, err := o.security(&cfg)
	if err != nil {
		return err
	}
	if o.ha.enabled() {
		return runMasterHA(ctx, o, cfg, reg, sopts, tc, auth, log)
	}
	svc, err := master.New(cfg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, svc.Close()) }()
	srv := master.NewServerAuth(svc, reg, auth, sopts...) // serves nothing until Serve
	if err := srv.SetFastSpin(o.fastSpin); err != nil {
		return fmt.Errorf("--fast-spin: %w", err)
	}
	reg.MustRegister(srv.FastSpinCollector())

	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	flis, err := o.fastListener(lis.Addr())
	if err != nil {
		lis.Close()
		return err
	}
	mlis, err := o.httpListener()
	if err != nil {
		lis.Close()
		if flis != nil {
			flis.Close()
		}
		return err
	}
	if o.addrFile != "" {
		// Written whole (rename), so a reader never sees half an address.
		tmp := o.addrFile + ".tmp"
		err := os.WriteFile(tmp, []byte(lis.Addr().String()+"\n"), 0o644)
		if err == nil {
			err = os.Rename(tmp, o.addrFile)
		}
		if err != nil {
			lis.Close()
			if flis != nil {
				flis.Close()
			}
			if mlis != nil {
				mlis.Close()
			}
			return fmt.Errorf("--addr-file: %w", err)
		}
	}
	served := make(chan error, 2)
	n := 1
	if flis != nil {
		// Advertised from the first RegisterClient on.
		if err := srv.ListenFast(flis); err != nil {
			lis.Close()
			if mlis != nil {
				mlis.Close()
			}
			return err
		}
	}
	go func() { served <- srv.Serve(lis, mlis) }()
	fastAddr := "off"
	if flis != nil {
		n++
		fastAddr = flis.Addr().String()
		go func() { served <- srv.ServeFast(flis, tc) }()
	}
	log.Warn("kvfabric master serving", "grpc", lis.Addr().String(), "fast", fastAddr, "metrics", o.metricsListen,
		"tls", o.tlsCert != "", "client certificates", o.clientCA != "", "tokens", o.tokensFile != "", "authentication required", cfg.RequireAuth)

	var errs []error
	select {
	case err := <-served: // a listener failed: stop the other
		n--
		errs = append(errs, err)
	case <-ctx.Done():
		log.Warn("kvfabric master shutting down", "timeout", o.shutdownTimeout)
	}
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	errs = append(errs, srv.Shutdown(sctx))
	for range n {
		errs = append(errs, <-served)
	}
	return errors.Join(errs...)
}

// fastListener opens the fast path's listener (nil for --fast-listen off):
// by default on the gRPC listener's host with an ephemeral port.
func (o masterOpts) fastListener(grpcAddr net.Addr) (net.Listener, error) {
	addr := o.fastAddr(grpcAddr)
	if addr == "" {
		return nil, nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--fast-listen: %w", err)
	}
	return lis, nil
}

// fastAddr is the fast path's listen address ("" for off). grpcAddr, when
// not nil, is the bound gRPC listener; else the default is derived from
// --listen.
func (o masterOpts) fastAddr(grpcAddr net.Addr) string {
	switch o.fastListen {
	case "off":
		return ""
	case "":
		host, _, err := net.SplitHostPort(o.listen)
		if grpcAddr != nil {
			if a, ok := grpcAddr.(*net.TCPAddr); ok {
				host, err = a.IP.String(), nil
			}
		}
		if err != nil {
			return ""
		}
		return net.JoinHostPort(host, "0")
	}
	return o.fastListen
}

// security builds the master's TLS credentials and authenticator from the
// flags, and refuses what would expose the cache: a non-loopback --listen
// or --fast-listen without TLS and client authentication, unless
// --insecure says so. The fast path gets the same TLS configuration (tc,
// nil without TLS) and authenticator as gRPC.
func (o masterOpts) security(cfg *master.Config) (_ []grpc.ServerOption, tc *tls.Config, _ *master.Authenticator, _ error) {
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return nil, nil, nil, fmt.Errorf("--tls-cert-file %q and --tls-key-file %q must be given together", o.tlsCert, o.tlsKey)
	}
	tlsOn := o.tlsCert != ""
	if !tlsOn && (o.clientCA != "" || o.tokensFile != "") {
		return nil, nil, nil, errors.New("--tls-client-ca-file and --tokens-file need --tls-cert-file/--tls-key-file: credentials must not travel in plaintext")
	}
	authOn := o.clientCA != "" || o.tokensFile != ""
	for _, l := range []struct{ flag, addr string }{{"--listen", o.listen}, {"--fast-listen", o.fastAddr(nil)}} {
		if l.addr == "" || master.IsLoopback(l.addr) || o.insecure {
			continue
		}
		switch {
		case !tlsOn:
			return nil, nil, nil, fmt.Errorf("%s %s is not a loopback address: refusing to serve plaintext (anyone who reaches the port could read and wipe the cache); give --tls-cert-file/--tls-key-file and --tls-client-ca-file or --tokens-file (docs/security.md), or --insecure to accept the risk", l.flag, l.addr)
		case !authOn:
			return nil, nil, nil, fmt.Errorf("%s %s is not a loopback address: refusing to serve without client authentication; give --tls-client-ca-file or --tokens-file (docs/security.md), or --insecure to accept the risk", l.flag, l.addr)
		}
	}
	var opts []grpc.ServerOption
	if tlsOn {
		var err error
		if tc, err = master.ServerTLS(o.tlsCert, o.tlsKey, o.clientCA); err != nil {
			return nil, nil, nil, err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	var ps []master.Principal
	var toks [][]byte
	if o.tokensFile != "" {
		data, err := os.ReadFile(o.tokensFile)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--tokens-file: %w", err)
		}
		if ps, toks, err = master.ParseTokens(data); err != nil {
			return nil, nil, nil, fmt.Errorf("--tokens-file %s: %w", o.tokensFile, err)
		}
	}
	cfg.RequireAuth = authOn
	return opts, tc, master.NewAuthenticator(ps, toks, authOn), nil
}
