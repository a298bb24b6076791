package dash_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
	"github.com/kvfabric/kvfabric/internal/master"
)

// BrowserEnv turns the browser test on (`make browser-test`, part of
// `make test`): it is off in plain `go test ./...` and the -race run, which
// would start Chromium again for nothing.
const BrowserEnv = "KVFABRIC_BROWSER_TEST"

// ScreenshotEnv names a file the browser test writes its screenshot to
// (the README's docs/img/dashboard.png is made with it); unset, the
// screenshot goes to the test's temporary directory only.
const ScreenshotEnv = "KVFABRIC_DASHBOARD_PNG"

// chromium finds a Chromium (KVFABRIC_CHROMIUM, else the Debian package's
// names and Chrome's).
func chromium() string {
	if p := os.Getenv("KVFABRIC_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestDashboardInBrowser loads the dashboard of a master with a simulated
// EGM provider and two consumers putting and getting in a loop, in
// headless Chromium: the page must show every segment the master has
// mounted and put/get rates that change between two reads.
func TestDashboardInBrowser(t *testing.T) {
	if os.Getenv(BrowserEnv) != "1" {
		t.Skip("SKIPPED: set " + BrowserEnv + "=1 (make browser-test does) to test the dashboard in headless Chromium")
	}
	exe := chromium()
	if exe == "" {
		t.Skip("SKIPPED: no Chromium found (apt-get install chromium, or set KVFABRIC_CHROMIUM): the dashboard was not tested in a browser")
	}
	if testing.Short() {
		t.Skip("SKIPPED: -short")
	}
	start := time.Now()
	reg := prometheus.NewRegistry()
	svc, err := master.New(master.Config{Registerer: reg, LeaseTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := master.NewServer(svc, reg)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis, hlis) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		if err := <-served; err != nil {
			t.Error(err)
		}
		_ = svc.Close()
	}()

	drv, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		simtest.AssertNoLeaks(t, drv)
		_ = drv.Close()
	}()
	sock := t.TempDir()
	open := func(id string, extra map[string]any) *client.Store {
		t.Helper()
		m := map[string]any{"master_server_addr": lis.Addr().String(), "driver": "sim", "socket_dir": sock, "local_hostname": "node-a"}
		for k, v := range extra {
			m[k] = v
		}
		cfg, err := config.FromMap(m)
		if err != nil {
			t.Fatal(err)
		}
		s, err := client.Open(context.Background(), cfg, client.Options{Driver: drv, ClientID: id})
		if err != nil {
			t.Fatalf("open %s: %v", id, err)
		}
		return s
	}
	prov := open("provider-a", map[string]any{"global_segment_size": "48MiB", "enable_egm_store_pool": true, "max_mr_size": "8MiB"})
	defer prov.Close()
	segs, err := svc.ListSegments(context.Background())
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments mounted by the provider: %d, %v", len(segs), err)
	}

	// Two consumers put and get until the test is done: new keys of 64-256
	// KiB (the 48 MiB fill up and evict), gets of recent keys (hits, or
	// misses once evicted) and of a key never put now and then.
	load, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	loadErr := make(chan error, 2)
	for i := range 2 {
		cons := open(fmt.Sprintf("engine-%d", i), nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cons.Close()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for n := 0; load.Err() == nil; n++ {
				key := fmt.Sprintf("engine-%d/%d", i, n)
				data := bytes.Repeat([]byte{byte(n)}, (64+rng.IntN(192))<<10)
				if err := cons.PutBytes(load, key, data, client.PutOptions{}); err != nil && !errors.Is(err, client.ErrNoSpace) && load.Err() == nil {
					loadErr <- fmt.Errorf("put %s: %w", key, err)
					return
				}
				key = fmt.Sprintf("engine-%d/%d", i, max(0, n-rng.IntN(400)))
				if _, err := cons.GetBytes(load, key); err != nil && !errors.Is(err, client.ErrNotFound) && load.Err() == nil {
					loadErr <- fmt.Errorf("get %s: %w", key, err)
					return
				}
				if n%10 == 0 {
					_, _ = cons.GetBytes(load, "never-put")
				}
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
			}
		}()
	}
	defer func() {
		stopLoad()
		wg.Wait()
		select {
		case err := <-loadErr:
			t.Error(err)
		default:
		}
	}()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	eval := func(expr string, out any) {
		t.Helper()
		var err error
		switch o := out.(type) {
		case *int:
			*o, err = chromedp.Run(ctx, chromedp.Evaluate[int](expr))
		case *string:
			*o, err = chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		case *[]string:
			*o, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](expr))
		default:
			t.Fatalf("eval into %T", out)
		}
		if err != nil {
			t.Fatalf("evaluating %s: %v", expr, err)
		}
	}

	url := "http://" + hlis.Addr().String() + "/"
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("loading %s in %s: %v", url, exe, err)
	}
	var rows int
	var conn string
	for deadline := time.Now().Add(20 * time.Second); ; {
		eval(`document.querySelectorAll("#segments tbody tr").length`, &rows)
		eval(`document.getElementById("conn").textContent`, &conn)
		if rows == len(segs) && conn == "live" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page shows %d segment rows (state %q); the master has %d segments", rows, conn, len(segs))
		}
		time.Sleep(200 * time.Millisecond)
	}
	var ids []string
	eval(`[...document.querySelectorAll("#segments tbody tr")].map(r => r.dataset.segment)`, &ids)
	for _, d := range segs {
		if !strings.Contains(strings.Join(ids, "\n"), d.ID) {
			t.Errorf("segment %s is not on the page (%v)", d.ID, ids)
		}
	}

	// Rates: read the put and get rates until both are non-zero and the
	// pair has changed between two reads (the page polls every second).
	read := func() (puts, gets float64) {
		var p, g string
		eval(`document.querySelector("#rate-puts .value").textContent`, &p)
		eval(`document.querySelector("#rate-gets .value").textContent`, &g)
		pf, err1 := strconv.ParseFloat(strings.ReplaceAll(p, ",", ""), 64)
		gf, err2 := strconv.ParseFloat(strings.ReplaceAll(g, ",", ""), 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("rates on the page: %q, %q", p, g)
		}
		return pf, gf
	}
	p0, g0 := read()
	changed := false
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		time.Sleep(1500 * time.Millisecond)
		p1, g1 := read()
		if p1 > 0 && g1 > 0 && (p1 != p0 || g1 != g0) {
			t.Logf("put rate %.1f/s → %.1f/s, get rate %.1f/s → %.1f/s", p0, p1, g0, g1)
			changed = true
			break
		}
		p0, g0 = p1, g1
	}
	if !changed {
		t.Fatalf("put/get rates on the page did not change under load (last %.1f, %.1f)", p0, g0)
	}
	var clients int
	eval(`document.querySelectorAll("#clients tbody tr").length`, &clients)
	if clients != 3 {
		t.Errorf("clients on the page: %d, want 3", clients)
	}

	if os.Getenv(ScreenshotEnv) != "" {
		time.Sleep(20 * time.Second) // sparklines with some history for the README
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir() + "/dashboard.png"
	if p := os.Getenv(ScreenshotEnv); p != "" {
		out = p
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("browser test ran in %v with %s; screenshot %s (%d bytes)", time.Since(start).Round(time.Millisecond), exe, out, len(png))
}
