package master

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvfabric/kvfabric/internal/certs"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// TestStatus: the status document's capacity map, per-segment usage,
// clients, counters, server-side rates and recent errors follow what the
// Service did, and agree with Stats.
func TestStatus(t *testing.T) {
	e := newEnvWith(t, testConfig(), transports["embedded"])
	e.register("p1", "n1", 0, 0)
	e.register("p2", "n2", 0, 0)
	e.mount(desc("n1/p1/dram0/0", "p1", "n1", segment.TierDRAM, 0, 1<<20))
	e.mount(desc("n1/p1/dram1/0", "p1", "n1", segment.TierDRAM, 1, 1<<20))
	e.mount(desc("n1/p1/hbm0/0", "p1", "n1", segment.TierHBM, 0, 2<<20))
	e.mount(desc("n2/p2/dram0/0", "p2", "n2", segment.TierDRAM, 0, 4<<20))

	st0, err := e.svc.Status(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 10, 4096
	for i := range n {
		e.put(keyN(i), size)
	}
	for i := range n {
		if g := e.get(keyN(i)); g.Err != nil {
			t.Fatal(g.Err)
		}
	}
	for i := n; i < n+3; i++ { // misses: ordinary outcomes, not errors
		wantErr(t, "get of a missing key", e.get(keyN(i)).Err, ErrNotFound)
	}
	// A PutEnd with a wrong token is an error and goes to the ring.
	if errs := e.c.PutEnd(e.ctx, []PutRef{{Key: "nope", Token: 1}}); !errors.Is(errs[0], ErrNotFound) {
		t.Fatalf("PutEnd without a put: %v", errs[0])
	}
	e.clk.Advance(2 * time.Second)
	st, err := e.svc.Status(e.ctx)
	if err != nil {
		t.Fatal(err)
	}

	// Capacity map: nodes → locations → segments, sorted, with totals that
	// add up and agree with Stats.
	var nodes []string
	var segUsed, segCap uint64
	for _, nd := range st.Nodes {
		nodes = append(nodes, nd.Node)
		var nu uint64
		for _, l := range nd.Locations {
			var lu uint64
			for _, s := range l.Segments {
				if s.Used+s.Free != s.Capacity || s.State != "ok" || s.LargestFree > s.Free {
					t.Errorf("segment %+v: used+free != capacity, or not ok", s)
				}
				lu += s.Used
				segCap += s.Capacity
			}
			if lu != l.Used {
				t.Errorf("%s %s %d: used %d, segments sum to %d", nd.Node, l.Tier, l.Location, l.Used, lu)
			}
			nu += l.Used
		}
		if nu != nd.Used {
			t.Errorf("node %s: used %d, locations sum to %d", nd.Node, nd.Used, nu)
		}
		segUsed += nu
	}
	if !slices.Equal(nodes, []string{"n1", "n2"}) || len(st.Nodes[0].Locations) != 3 {
		t.Fatalf("nodes %v, n1 locations %+v", nodes, st.Nodes[0].Locations)
	}
	stats := e.stats()
	var tierUsed, tierCap uint64
	var blocks int
	for _, ts := range st.Tiers {
		tierUsed += ts.Used
		tierCap += ts.Capacity
		blocks += ts.Blocks
		if ts.Used+ts.Free != ts.Capacity {
			t.Errorf("tier %+v: used+free != capacity", ts)
		}
	}
	var statsUsed uint64
	for _, ts := range stats.Tiers {
		statsUsed += ts.Used
	}
	if segUsed == 0 || segUsed != tierUsed || tierUsed != statsUsed || segCap != 8<<20 || tierCap != segCap || blocks != n {
		t.Errorf("used: segments %d, tiers %d, Stats %d; capacity %d / %d; blocks %d, want %d", segUsed, tierUsed, statsUsed, segCap, tierCap, blocks, n)
	}

	// Clients: roles and liveness.
	roles := map[string][]string{}
	for _, c := range st.PerClient {
		roles[c.ID] = c.Roles
		if c.Liveness != "live" || c.ExpiresIn <= 0 {
			t.Errorf("client %s: liveness %q, expires in %v", c.ID, c.Liveness, c.ExpiresIn)
		}
	}
	if !slices.Equal(roles["p1"], []string{"provider"}) || !slices.Equal(roles["writer"], []string{"consumer"}) {
		t.Errorf("roles %v", roles)
	}

	// Counters and rates (the window is the 2 s since the first Status).
	c := st.Counters
	if c.Puts != n || c.PutBytes != n*size || c.Hits != n || c.Misses != 3 || c.Gets != n+3 || c.GetBytes != n*size || c.Errors != 1 {
		t.Errorf("counters %+v", c)
	}
	r := st.Rates
	if r.WindowSeconds != 2 || r.Puts != n/2 || r.PutBytes != n*size/2 || r.Hits != n/2 || r.Misses != 1.5 || r.Errors != 0.5 {
		t.Errorf("rates %+v (first status at %v)", r, st0.Time)
	}
	if want := float64(n) / (n + 3); r.HitRatio != want {
		t.Errorf("hit ratio %v, want %v", r.HitRatio, want)
	}
	if len(st.Errors) != 1 || st.Errors[0].Op != "put_end" || st.Errors[0].Result != "not_found" || !strings.Contains(st.Errors[0].Message, `"nope"`) {
		t.Errorf("errors %+v, want the one PutEnd failure", st.Errors)
	}

	// Quiet for longer than the rate window: rates fall to zero; a client
	// silent for half its TTL is late.
	e.clk.Advance(rateWindow + time.Second)
	if st, err = e.svc.Status(e.ctx); err != nil {
		t.Fatal(err)
	}
	if st.Rates.Puts != 0 || st.Rates.WindowSeconds <= 0 {
		t.Errorf("rates after a quiet window: %+v", st.Rates)
	}
	e.clk.Advance(testConfig().ClientTTL / 2)
	if st, err = e.svc.Status(e.ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range st.PerClient {
		if c.Liveness != "late" {
			t.Errorf("client %s after half its TTL without heartbeat: %q", c.ID, c.Liveness)
		}
	}
}

// TestStatusEvictionReasons: evictions for puts and for watermarks are
// told apart, and add up to the eviction counter.
func TestStatusEvictionReasons(t *testing.T) {
	cfg := testConfig()
	cfg.DRAM = Watermarks{High: 0.5, Low: 0.25}
	e := newEnvWith(t, cfg, transports["embedded"])
	e.register("p", "n", 0, 0)
	e.mount(desc("n/p/dram0/0", "p", "n", segment.TierDRAM, 0, 1<<20))
	for i := range 64 { // 64 × 64 KiB into 1 MiB: evictions on the way
		e.put(keyN(i), 64<<10)
		e.clk.Advance(time.Millisecond)
	}
	st, err := e.svc.Status(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	reasons := map[string]uint64{}
	for _, ev := range st.Evictions {
		sum += ev.Count
		reasons[ev.Reason] += ev.Count
		if !slices.Contains(evictReasonNames[:], ev.Reason) || (ev.Tier != "dram" && ev.Tier != "hbm") {
			t.Errorf("eviction row %+v", ev)
		}
	}
	if sum == 0 || sum != st.Counters.Evictions || reasons["watermark"] == 0 {
		t.Errorf("evictions %+v (sum %d), counter %d; want watermark evictions", st.Evictions, sum, st.Counters.Evictions)
	}
}

// TestHTTPHandler: the HTTP listener serves the dashboard, the status
// document and metrics read-only, and authenticates like gRPC: a verified
// client certificate, a bearer token, or a token as a basic-auth password;
// nothing without a credential when authentication is required.
func TestHTTPHandler(t *testing.T) {
	dir := t.TempDir()
	ca, err := certs.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteCA(dir); err != nil {
		t.Fatal(err)
	}
	sp, err := ca.Server([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := ca.Client("ops", false, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if sp.Write(dir, "server") != nil || cp.Write(dir, "ops") != nil {
		t.Fatal("writing certificates")
	}
	token := strings.Repeat("t", MinTokenLen)
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	cfg := testConfig()
	cfg.Registerer = reg
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	var standby bool
	current := func() *Service {
		if standby {
			return nil
		}
		return svc
	}
	auth := NewAuthenticator([]Principal{{Name: "viewer", Role: RoleClient}}, [][]byte{[]byte(token)}, true)
	srv := httptest.NewUnstartedServer(HTTPHandler(current, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), auth))
	if srv.TLS, err = ServerTLS(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), filepath.Join(dir, "ca.pem")); err != nil {
		t.Fatal(err)
	}
	srv.StartTLS()
	defer srv.Close()

	client := func(sec ClientSecurity) *http.Client {
		t.Helper()
		sec.CAFile = filepath.Join(dir, "ca.pem")
		cl, scheme, err := sec.HTTPClient()
		if err != nil || scheme != "https" {
			t.Fatalf("HTTPClient(%+v): %q, %v", sec, scheme, err)
		}
		return cl
	}
	anon := client(ClientSecurity{})
	withCert := client(ClientSecurity{CertFile: filepath.Join(dir, "ops.pem"), KeyFile: filepath.Join(dir, "ops-key.pem")})
	withToken := client(ClientSecurity{TokenFile: tokFile})
	type req struct {
		name   string
		cl     *http.Client
		method string
		path   string
		basic  string // basic-auth password
		bearer string
		want   int
		body   string // a substring of the body
	}
	for _, tc := range []req{
		{"no credential", anon, "GET", StatusPath, "", "", 401, "unauthenticated"},
		{"no credential, dashboard", anon, "GET", "/", "", "", 401, ""},
		{"no credential, metrics", anon, "GET", "/metrics", "", "", 401, ""},
		{"unknown bearer token", anon, "GET", StatusPath, "", strings.Repeat("x", MinTokenLen), 401, "unknown bearer token"},
		{"unknown basic password", anon, "GET", "/", strings.Repeat("x", MinTokenLen), "", 401, ""},
		{"client certificate", withCert, "GET", StatusPath, "", "", 200, `"counters"`},
		{"bearer token", withToken, "GET", StatusPath, "", "", 200, `"rates"`},
		{"token as basic password", anon, "GET", "/", token, "", 200, "kvfabric master"},
		{"script", withCert, "GET", "/app.js", "", "", 200, "api/v1/status"},
		{"metrics", withCert, "GET", "/metrics", "", "", 200, "kvfabric_master_put_bytes_total"},
		{"POST is refused", withCert, "POST", StatusPath, "", "", 405, "read-only"},
		{"DELETE is refused", withToken, "DELETE", "/", "", "", 405, "read-only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.basic != "" {
				r.SetBasicAuth("anyone", tc.basic)
			}
			if tc.bearer != "" {
				r.Header.Set("Authorization", "Bearer "+tc.bearer)
			}
			resp, err := tc.cl.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want || !strings.Contains(string(body), tc.body) {
				t.Fatalf("%s %s: %d %.200q, want %d with %q", tc.method, tc.path, resp.StatusCode, body, tc.want, tc.body)
			}
			if tc.want == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
				t.Errorf("401 without a basic-auth challenge: %q", resp.Header.Get("WWW-Authenticate"))
			}
			if tc.path == StatusPath && tc.want == 200 {
				var st Status
				if err := json.Unmarshal(body, &st); err != nil || st.Time.IsZero() {
					t.Errorf("status document: %v (%+v)", err, st)
				}
			}
		})
	}
	standby = true
	resp, err := withCert.Get(srv.URL + StatusPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status of a standby: %d, want 503", resp.StatusCode)
	}
	// The listener serves TLS 1.3 only, like gRPC.
	if _, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12}); err == nil {
		t.Error("TLS 1.2 handshake accepted")
	}
}

// TestHTTPHandlerNoAuth: without authentication anyone on the listener
// reads (loopback; the master refuses other addresses without TLS and
// credentials unless --insecure), and still cannot write.
func TestHTTPHandlerNoAuth(t *testing.T) {
	svc, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	srv := httptest.NewServer(HTTPHandler(func() *Service { return svc }, nil, nil))
	defer srv.Close()
	for path, want := range map[string]int{StatusPath: 200, "/": 200, "/style.css": 200, "/metrics": 404} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	resp, err := http.Post(srv.URL+StatusPath, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	resp, err = http.Get(srv.URL + StatusPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status of a closed Service: %d, want 503", resp.StatusCode)
	}
}

// captureRegisterer records the collectors a Service registers.
type captureRegisterer struct{ cs []prometheus.Collector }

func (c *captureRegisterer) Register(col prometheus.Collector) error {
	c.cs = append(c.cs, col)
	return nil
}
func (c *captureRegisterer) MustRegister(cs ...prometheus.Collector) { c.cs = append(c.cs, cs...) }
func (c *captureRegisterer) Unregister(prometheus.Collector) bool    { return false }

// TestGrafanaDashboard: docs/grafana/kvfabric-master.json is well-formed
// Grafana JSON whose queries name only metrics the master registers, and
// it has a panel for each part of the web dashboard.
func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile("../../docs/grafana/kvfabric-master.json")
	if err != nil {
		t.Fatal(err)
	}
	var board struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &board); err != nil {
		t.Fatalf("grafana JSON: %v", err)
	}
	if board.Title == "" || board.UID == "" || len(board.Panels) == 0 {
		t.Fatalf("grafana board without title, uid or panels: %q %q %d", board.Title, board.UID, len(board.Panels))
	}

	var capture captureRegisterer
	cfg := testConfig()
	cfg.Registerer = &capture
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	registered := map[string]bool{}
	fq := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for _, c := range capture.cs {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := fq.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("desc %s: no fqName", d)
			}
			registered[m[1]] = true
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				registered[m[1]+suffix] = true // histograms
			}
		}
	}
	name := regexp.MustCompile(`kvfabric_[a-z_]+`)
	titles := map[string]bool{}
	for _, p := range board.Panels {
		titles[p.Title] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			ms := name.FindAllString(tg.Expr, -1)
			if len(ms) == 0 {
				t.Errorf("panel %q: query %q names no kvfabric metric", p.Title, tg.Expr)
			}
			for _, m := range ms {
				if !registered[m] {
					t.Errorf("panel %q: query %q uses %s, which the master does not register", p.Title, tg.Expr, m)
				}
			}
		}
	}
	for _, want := range []string{"Capacity by node and location", "Used by node and location", "Tier usage", "Objects and pending puts",
		"Clients", "Put and get rate", "Put and get throughput", "Hit ratio", "Evictions by reason", "Errors by op and result", "Leases held", "Imports (mapped segments) by client"} {
		if !titles[want] {
			t.Errorf("grafana board has no panel %q", want)
		}
	}
}
