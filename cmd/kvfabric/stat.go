package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"

	"github.com/spf13/cobra"

	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/master"
)

// fetchStatus GETs the master's status document (master.StatusPath) from
// httpAddr, the master's --metrics-listen, with cmd's security flags
// (HTTPS when they are set); nil when httpAddr is empty. It is not guessed
// from the gRPC address: another master's listener could answer there.
func fetchStatus(ctx context.Context, cmd *cobra.Command, httpAddr string) (*master.Status, error) {
	if httpAddr == "" {
		return nil, nil
	}
	st, err := getStatus(ctx, clientSecurity(cmd), httpAddr)
	if err != nil {
		return nil, fmt.Errorf("--http-addr=%s: %w", httpAddr, err)
	}
	return st, nil
}

func getStatus(ctx context.Context, sec master.ClientSecurity, httpAddr string) (*master.Status, error) {
	cl, scheme, err := sec.HTTPClient()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+httpAddr+master.StatusPath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%s: %s", resp.Status, msg)
	}
	var st master.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("status document: %w", err)
	}
	return &st, nil
}

// printUsage prints per-tier totals and per-location usage (from Stats),
// and traffic when the status document is at hand.
func printUsage(out io.Writer, st master.Stats, status *master.Status) {
	for _, t := range st.Tiers {
		fmt.Fprintf(out, "  tier %s: %d segments, %s used of %s (%.1f%%), %s free\n", t.Tier, t.Segments,
			config.FormatSize(t.Used), config.FormatSize(t.Capacity), percent(t.Used, t.Capacity), config.FormatSize(t.Capacity-t.Used))
	}
	locs := slices.Clone(st.Locations)
	slices.SortFunc(locs, func(a, b master.UsageStats) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Tier, b.Tier), cmp.Compare(a.Location, b.Location))
	})
	for _, l := range locs {
		where := fmt.Sprintf("numa %d", l.Location)
		if l.Tier.String() == "hbm" {
			where = fmt.Sprintf("gpu %d", l.Location)
		}
		fmt.Fprintf(out, "  %s %s %s: %d segments, %s used of %s (%.1f%%)\n", l.Node, l.Tier, where, l.Segments,
			config.FormatSize(l.Used), config.FormatSize(l.Capacity), percent(l.Used, l.Capacity))
	}
	if status == nil {
		return
	}
	r, c := status.Rates, status.Counters
	fmt.Fprintf(out, "  traffic over %.1f s: %.1f puts/s (%.3f GB/s), %.1f gets/s (%.3f GB/s), hit ratio %.1f%%, %.1f evictions/s, %.1f errors/s\n",
		r.WindowSeconds, r.Puts, r.PutBytes/1e9, r.Gets, r.GetBytes/1e9, 100*r.HitRatio, r.Evictions, r.Errors)
	fmt.Fprintf(out, "  since start: %d puts (%s), %d gets (%d hits, %d misses), %d evictions, %d errors, %d leases held\n",
		c.Puts, config.FormatSize(c.PutBytes), c.Gets, c.Hits, c.Misses, c.Evictions, c.Errors, status.LeasesHeld)
	if len(status.Errors) > 0 {
		e := status.Errors[0]
		fmt.Fprintf(out, "  last error %s: %s %s: %s\n", e.Time.Format("15:04:05"), e.Op, e.Result, e.Message)
	}
}

func percent(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}
