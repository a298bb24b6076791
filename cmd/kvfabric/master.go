package main

import (
	"context"
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

	"github.com/kvfabric/kvfabric/internal/master"
)

type masterOpts struct {
	listen, metricsListen string
	cfg                   master.Config
	shutdownTimeout       time.Duration
	verbose               bool
}

func init() {
	var o masterOpts
	cmd := &cobra.Command{
		Use:   "master",
		Short: "Run the kvfabric master (metadata service) over gRPC until SIGINT/SIGTERM",
		Long: `master serves kvfabric's metadata service (segments, objects, leases,
eviction, client liveness) over gRPC on --listen, and Prometheus metrics on
--metrics-listen (/metrics). On SIGINT or SIGTERM it stops accepting calls,
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
	f.StringVar(&o.metricsListen, "metrics-listen", "127.0.0.1:9090", "HTTP address for /metrics (empty: none)")
	f.DurationVar(&o.cfg.LeaseTTL, "lease-ttl", 5*time.Second, "read lease granted by GetReplicas")
	f.DurationVar(&o.cfg.PutTimeout, "put-timeout", 30*time.Second, "a put not ended within this can no longer become visible (its bytes stay reserved while its writer may still write them)")
	f.DurationVar(&o.cfg.ClientTTL, "client-ttl", 10*time.Second, "default client registration TTL (heartbeat deadline)")
	f.DurationVar(&o.cfg.DrainTimeout, "drain-timeout", 0, "a segment whose unmount was refused (leases or puts outstanding) takes no new puts or leases until its owner stops retrying the unmount for this long (0: max(10s, 2 × --lease-ttl))")
	f.Float64Var(&o.cfg.DRAM.High, "dram-high-watermark", 0.95, "DRAM usage fraction that starts eviction")
	f.Float64Var(&o.cfg.DRAM.Low, "dram-low-watermark", 0.85, "DRAM usage fraction eviction brings usage down to")
	f.Float64Var(&o.cfg.HBM.High, "hbm-high-watermark", 0.95, "HBM usage fraction that starts eviction")
	f.Float64Var(&o.cfg.HBM.Low, "hbm-low-watermark", 0.85, "HBM usage fraction eviction brings usage down to")
	f.IntVar(&o.cfg.MaxKeyLen, "max-key-len", 1024, "longest key in bytes")
	f.Uint64Var(&o.cfg.Alignment, "alignment", 64, "allocation alignment in bytes (a power of two)")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long calls in flight may finish on shutdown")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "log at info level (default: warnings)")
	rootCmd.AddCommand(cmd)
}

func runMaster(ctx context.Context, o masterOpts) (err error) {
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := o.cfg
	cfg.Logger = log
	cfg.Registerer = reg
	svc, err := master.New(cfg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, svc.Close()) }()

	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	var mlis net.Listener
	if o.metricsListen != "" {
		if mlis, err = net.Listen("tcp", o.metricsListen); err != nil {
			lis.Close()
			return fmt.Errorf("--metrics-listen: %w", err)
		}
	}
	srv := master.NewServer(svc, reg)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis, mlis) }()
	log.Warn("kvfabric master serving", "grpc", lis.Addr().String(), "metrics", o.metricsListen)

	select {
	case err := <-served: // a listener failed
		return err
	case <-ctx.Done():
	}
	log.Warn("kvfabric master shutting down", "timeout", o.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	return errors.Join(srv.Shutdown(sctx), <-served)
}
