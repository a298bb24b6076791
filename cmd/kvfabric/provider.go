package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda/choose"
	"github.com/kvfabric/kvfabric/internal/ha"
	"github.com/kvfabric/kvfabric/internal/segment"
)

func init() {
	var configFile, clientID, readyFile string
	var closeTimeout time.Duration
	provider := &cobra.Command{
		Use:   "provider",
		Short: "Provide capacity (EGM DRAM pool or HBM) to a kvfabric master until SIGINT/SIGTERM",
		Long: `provider opens a Store that provides the configured capacity (the EGM
HOST_NUMA pool with --enable-egm-store-pool, HBM segments otherwise), mounts
it into the master at --master-server-addr, heartbeats, and serves its POSIX
fds to same-host consumers. On SIGINT or SIGTERM it tears everything down in
order (unmount → unregister → unmap → free VA → release, waiting for readers'
leases) and reports the live driver objects left (zero on success). While the
master cannot be reached it retries the unmounts up to --close-timeout; then
it releases the memory anyway (as its exit would; the master drops the
segments when the provider's registration expires) and removes its socket.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := configFromFlags(cmd, configFile)
			if err != nil {
				return err
			}
			if cfg.MasterServerAddr == config.MasterEmbedded {
				return fmt.Errorf("--master-server-addr: a provider needs a `kvfabric master` address (host:port)")
			}
			if cfg.GlobalSegmentSize == 0 {
				return fmt.Errorf("--global-segment-size: a provider needs capacity > 0")
			}
			return runProvider(cmd.Context(), cmd.OutOrStdout(), cfg, providerOptions{clientID: clientID, readyFile: readyFile, closeTimeout: closeTimeout})
		},
	}
	provider.Flags().StringVar(&configFile, "config", "", "JSON configuration file (flags override its keys)")
	provider.Flags().StringVar(&clientID, "client-id", "", "client id at the master (default <hostname>-<pid>-1); a restarted provider reusing it replaces the old one")
	provider.Flags().StringVar(&readyFile, "ready-file", "", "write this file once every segment is mounted (for scripts)")
	provider.Flags().DurationVar(&closeTimeout, "close-timeout", client.CloseTimeout, "on SIGINT/SIGTERM, how long to wait for readers' leases and for an unreachable master before releasing the memory anyway")
	addConfigFlags(provider)
	addSecurityFlags(provider)
	provider.Flags().String("master-server-addr", "", "host:port of `kvfabric master`")
	rootCmd.AddCommand(provider)

	var addr, httpAddr string
	var asJSON bool
	stat := &cobra.Command{
		Use:   "stat",
		Short: "Print a kvfabric master's segments and usage",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			mc, err := dialMaster(ctx, cmd, addr)
			if err != nil {
				return err
			}
			defer mc.Close()
			segs, err := mc.ListSegments(ctx)
			if err != nil {
				return err
			}
			st, err := mc.Stats(ctx)
			if err != nil {
				return err
			}
			status, err := fetchStatus(ctx, cmd, httpAddr)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				doc := map[string]any{"segments": segs, "stats": st}
				if status != nil {
					doc["status"] = status
				}
				return enc.Encode(doc)
			}
			fmt.Fprintf(out, "master %s: %d segments, %d objects, %d puts in progress, %d clients, %d evictions, %d views held\n",
				addr, st.Segments, st.Objects, st.PendingPuts, st.Clients, st.Evictions, st.Views)
			if h, ok := mc.(*ha.Client); ok {
				l := h.Leader()
				fmt.Fprintf(out, "  leader %s, epoch %d\n", l.Addr, l.Epoch)
			}
			printUsage(out, st, status)
			for _, c := range st.PerClient {
				fmt.Fprintf(out, "  client %s (%s, driver %s%s): provides %d segments%s, has %d segments (%s) of others mapped, holds %d views\n",
					c.ID, c.Node, orUnknown(c.Driver), domainNote(c.FabricDomain), c.Segments, handlesNote(c.Handles),
					c.Mapped.Segments, config.FormatSize(c.Mapped.Bytes), c.Views)
			}
			return nil
		},
	}
	stat.Flags().StringVar(&addr, "master-server-addr", "127.0.0.1:50051", "host:port of `kvfabric master`")
	stat.Flags().BoolVar(&asJSON, "json", false, `JSON output: {"segments", "stats"} and, with --http-addr, "status": the master's /api/v1/status document (the dashboard's)`)
	stat.Flags().StringVar(&httpAddr, "http-addr", "", "host:port of the master's --metrics-listen (e.g. 127.0.0.1:9090): adds traffic, hit ratio and errors to the text and the status document to --json")
	addSecurityFlags(stat)
	rootCmd.AddCommand(stat)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func domainNote(d string) string {
	if d == "" {
		return ""
	}
	return ", fabric domain " + d
}

// handlesNote is " (posix_fd handles)" and the like; "" for none.
func handlesNote(hs []segment.HandleKind) string {
	if len(hs) == 0 {
		return ""
	}
	s := make([]string, len(hs))
	for i, h := range hs {
		s[i] = h.String()
	}
	return " (" + strings.Join(s, ", ") + " handles)"
}

// addConfigFlags adds one flag per configuration key (see poolFlags).
func addConfigFlags(cmd *cobra.Command) {
	for _, f := range poolFlags {
		if f.key == "enable_egm_store_pool" {
			cmd.Flags().Bool(f.flag, false, f.usage)
			continue
		}
		cmd.Flags().String(f.flag, "", f.usage)
	}
}

// configFromFlags builds a Config from an optional JSON file and the flags
// that were set, each naming its key in errors.
func configFromFlags(cmd *cobra.Command, file string) (config.Config, error) {
	cfg := config.Defaults()
	if file != "" {
		var err error
		if cfg, err = config.FromFile(file); err != nil {
			return cfg, err
		}
	}
	keys := append([]struct{ flag, key, usage string }{{"master-server-addr", "master_server_addr", ""}}, poolFlags...)
	keys = append(keys, securityFlags...)
	for _, f := range keys {
		if fl := cmd.Flags().Lookup(f.flag); fl != nil && fl.Changed {
			if err := cfg.Set(f.key, fl.Value.String()); err != nil {
				return cfg, fmt.Errorf("--%s: %w", f.flag, err)
			}
		}
	}
	return cfg, cfg.Validate()
}

// providerOptions are runProvider's settings beyond the configuration.
type providerOptions struct {
	clientID, readyFile string
	closeTimeout        time.Duration // 0: client.CloseTimeout
}

func runProvider(ctx context.Context, out io.Writer, cfg config.Config, o providerOptions) (err error) {
	if ctx == nil {
		ctx = context.Background()
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	// The driver is opened here, not by the Store, so that its live objects
	// can be counted after the Store's teardown.
	drv, why, err := choose.ProviderDriver(cfg.Driver, log)
	if err != nil {
		return fmt.Errorf("driver %q: %w", cfg.Driver, err)
	}
	defer func() { err = errors.Join(err, drv.Close()) }()
	bar := newProgressBar(out, false)
	t0 := time.Now()
	s, err := client.Open(ctx, cfg, client.Options{Logger: log, ClientID: o.clientID, Progress: bar.update, Driver: drv,
		CloseTimeout: o.closeTimeout, ExitOnClose: true})
	bar.done()
	if err != nil {
		var oe *client.OpenError
		if errors.As(err, &oe) {
			err = errors.Join(err, oe.Retry())
		}
		return err
	}
	p := s.Pool()
	fmt.Fprintf(out, "provider %s: driver %s; %s mounted into %s in %v (handle %s)\n",
		s.ClientID(), why, config.FormatSize(p.Plan().Total), cfg.MasterServerAddr, time.Since(t0).Round(time.Millisecond), p.HandleType())
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tLOCATION\tCHUNKS\tMOUNTED\tBYTES")
	for _, n := range p.Nodes() {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", n.Tier, n.Location, n.Chunks, n.Mounted, config.FormatSize(n.Bytes))
	}
	tw.Flush()
	fmt.Fprintf(out, "live driver objects: %s\n", fmtObjects(liveObjects(drv)))
	if o.readyFile != "" {
		if err := os.WriteFile(o.readyFile, []byte(s.ClientID()+"\n"), 0o644); err != nil {
			return errors.Join(fmt.Errorf("--ready-file: %w", err), s.Close())
		}
	}
	sig := <-sigs
	fmt.Fprintf(out, "provider: %v: tearing down\n", sig)
	t1 := time.Now()
	if err := s.Close(); err != nil {
		return fmt.Errorf("provider close (cleanup pending, retry): %w", err)
	}
	left := liveObjects(drv)
	fmt.Fprintf(out, "provider: closed in %v; live driver objects after teardown: %s\n", time.Since(t1).Round(time.Millisecond), fmtObjects(left))
	if left.Total() != 0 {
		return fmt.Errorf("provider: teardown left driver objects: %s", fmtObjects(left))
	}
	return nil
}
