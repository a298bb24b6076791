package config

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// egm is a valid EGM-pool configuration the rule tests start from.
func egm() map[string]any {
	return map[string]any{
		"enable_egm_store_pool": true,
		"protocol":              "nvlink",
		"global_segment_size":   "16GiB",
		"local_buffer_size":     0,
	}
}

func with(m map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
			continue
		}
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

func TestDefaultsValid(t *testing.T) {
	c := Defaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.EGMEnabled() || c.EGMNUMANodes != nil || c.NUMANodesString() != "auto" || c.HandleType != HandleAuto ||
		c.Driver != DriverAuto || c.MasterServerAddr != MasterEmbedded || c.Protocol != ProtocolNVLink || c.MaxMRSize != 1<<30 {
		t.Fatalf("unexpected defaults %+v", c)
	}
}

// TestEGMRules covers every rule that enables the EGM pool (DESIGN §3): the
// flag is accepted only with protocol=nvlink, global_segment_size>0 and
// local_buffer_size=0, and each violation names its key and value.
func TestEGMRules(t *testing.T) {
	for _, tc := range []struct {
		name    string
		m       map[string]any
		wantErr string // substring naming key=value; "" means valid
		egm     bool
	}{
		{"all rules met", egm(), "", true},
		{"sizes as numbers", with(egm(), "global_segment_size", float64(1<<34)), "", true},
		{"protocol defaults to nvlink", with(egm(), "protocol", nil), "", true},
		{"local_buffer_size defaults to 0", with(egm(), "local_buffer_size", nil), "", true},
		{"protocol rdma", with(egm(), "protocol", "rdma"), "protocol=rdma", false},
		{"protocol tcp", with(egm(), "protocol", "tcp"), "protocol=tcp", false},
		{"global_segment_size 0", with(egm(), "global_segment_size", 0), "global_segment_size=0", false},
		{"global_segment_size unset", with(egm(), "global_segment_size", nil), "global_segment_size=0", false},
		{"local_buffer_size set", with(egm(), "local_buffer_size", "1GiB"), "local_buffer_size=1073741824", false},
		{"flag as string", with(egm(), "enable_egm_store_pool", "true"), "", true},
		// Consumers and HBM providers never need the flag: with it off,
		// the combinations the EGM rules reject are all valid.
		{"off: rdma with a local buffer", map[string]any{"protocol": "rdma", "local_buffer_size": "1GiB", "global_segment_size": "4GiB"}, "", false},
		{"off: pure consumer", map[string]any{"global_segment_size": 0}, "", false},
		{"off: numa nodes ignored but still checked", map[string]any{"egm_numa_nodes": "0,1"}, "", false},
		{"off explicitly", with(egm(), "enable_egm_store_pool", false, "protocol", "tcp"), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := FromMap(tc.m)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.EGMEnabled() != tc.egm {
					t.Fatalf("EGMEnabled = %v, want %v", c.EGMEnabled(), tc.egm)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v; want ErrInvalid naming %q", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), "enable_egm_store_pool=true") {
				t.Fatalf("error %q does not say the flag causes it", err)
			}
		})
	}
}

// TestFieldRules covers every per-key rule of Validate and the setters.
func TestFieldRules(t *testing.T) {
	for _, tc := range []struct {
		key     string
		v       any
		wantErr string // "" means accepted
	}{
		{"protocol", "NVLink", ""},
		{"protocol", "rdma", ""},
		{"protocol", "tcp", ""},
		{"protocol", "ib", "protocol=ib"},
		{"protocol", 1, "protocol=1"},
		{"handle_type", "auto", ""},
		{"handle_type", "FABRIC", ""},
		{"handle_type", "posix_fd", ""},
		{"handle_type", "ipc", "handle_type=ipc"},
		{"driver", "auto", ""},
		{"driver", "cuda", ""},
		{"driver", "sim", ""},
		{"driver", "rocm", "driver=rocm"},
		{"lease_ttl", "2s", ""},
		{"lease_ttl", 1.5, ""},
		{"lease_ttl", "500ms", ""},
		{"lease_ttl", "-1s", "lease_ttl=-1s"},
		{"lease_ttl", "forever", "lease_ttl=\"forever\""},
		{"put_timeout", "48h", "put_timeout=48h"},
		{"put_timeout", true, "put_timeout=true"},
		{"client_ttl", "10s", ""},
		{"master_server_addr", "embedded", ""},
		{"master_server_addr", "10.0.0.1:50051", ""},
		{"master_server_addr", "", "master_server_addr="},
		{"master_server_addr", "somehost", "master_server_addr=somehost"},
		{"local_hostname", "gpu-7", ""},
		{"local_hostname", " ", "local_hostname="},
		{"local_hostname", "\xf7", "not valid UTF-8"},
		{"client_id", "localhost:12345", ""},
		{"client_id", "", ""},
		{"client_id", "a/b", `client_id="a/b"`},
		{"client_id", strings.Repeat("x", 129), "want at most 128"},
		{"client_id", 7, "client_id=7"},
		{"device", 1, ""},
		{"device", "2", ""},
		{"device", float64(3), ""},
		{"device", -1, "device=-1"},
		{"device", 1.5, "device=1.5"},
		{"device", "x", "device=x"},
		{"max_mr_size", "2GiB", ""},
		{"max_mr_size", 0, "max_mr_size=0"},
		{"max_mr_size", "-1", "max_mr_size=-1"},
		{"copy_engine_min_bytes", "64KiB", ""},
		{"copy_engine_min_bytes", 0, "copy_engine_min_bytes=0"},
		{"get_copy_engine_min_bytes", "32KiB", ""},
		{"get_copy_engine_min_bytes", 0, "get_copy_engine_min_bytes=0"},
		{"global_segment_size", "junk", "global_segment_size=junk"},
		{"global_segment_size", -5, "global_segment_size=-5"},
		{"global_segment_size", true, "global_segment_size=true"},
		{"local_buffer_size", "1.5MiB", ""},
		{"enable_egm_store_pool", "yes", "global_segment_size=0"}, // accepted; then the EGM rule fires
		{"enable_egm_store_pool", "maybe", "enable_egm_store_pool=maybe"},
		{"enable_egm_store_pool", 1, "enable_egm_store_pool=1"},
		{"socket_dir", "/run/kvfabric", ""},
		{"socket_dir", 7, "socket_dir=7"},
		{"no_such_key", 1, `unknown key "no_such_key"`},
	} {
		t.Run(tc.key+"="+strings.ReplaceAll(toString(tc.v), "/", "_"), func(t *testing.T) {
			_, err := FromMap(map[string]any{tc.key: tc.v})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v; want ErrInvalid naming %q", err, tc.wantErr)
			}
		})
	}
}

func toString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestValidateStruct covers the rules that only a Config built in Go (not
// through the setters) can break.
// TestMasterSettingsNeedEmbedded: lease_ttl and put_timeout configure the
// embedded master; with a remote one they would silently do nothing.
func TestMasterSettingsNeedEmbedded(t *testing.T) {
	c, err := FromMap(map[string]any{"lease_ttl": "2s", "put_timeout": "10s", "client_ttl": "3s"})
	if err != nil || c.LeaseTTL != 2*time.Second || c.PutTimeout != 10*time.Second || c.ClientTTL != 3*time.Second {
		t.Fatalf("FromMap = %+v, %v", c, err)
	}
	_, err = FromMap(map[string]any{"lease_ttl": "2s", "master_server_addr": "10.0.0.1:50051"})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "lease_ttl=2s") {
		t.Fatalf("lease_ttl with a remote master: %v", err)
	}
	if _, err := FromMap(map[string]any{"client_ttl": "2s", "master_server_addr": "10.0.0.1:50051"}); err != nil {
		t.Fatalf("client_ttl with a remote master: %v", err)
	}
}

func TestValidateStruct(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mut     func(*Config)
		wantErr string
	}{
		{"negative device", func(c *Config) { c.Device = -2 }, "device=-2"},
		{"empty node list", func(c *Config) { c.EGMNUMANodes = []int{} }, "egm_numa_nodes="},
		{"unsorted nodes", func(c *Config) { c.EGMNUMANodes = []int{2, 0} }, "egm_numa_nodes=2,0"},
		{"duplicate nodes", func(c *Config) { c.EGMNUMANodes = []int{1, 1} }, "egm_numa_nodes=1,1"},
		{"negative node", func(c *Config) { c.EGMNUMANodes = []int{-1, 0} }, "egm_numa_nodes=-1,0"},
		{"uppercase protocol", func(c *Config) { c.Protocol = "NVLINK" }, "protocol=NVLINK"},
		{"empty hostname", func(c *Config) { c.LocalHostname = "" }, "local_hostname="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.mut(&c)
			err := c.Validate()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v; want ErrInvalid naming %q", err, tc.wantErr)
			}
		})
	}
}

// TestNUMANodes covers every egm_numa_nodes form: auto, comma lists, JSON
// lists, single integers, and each kind of junk.
func TestNUMANodes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		v       any
		want    []int // nil: auto
		wantErr string
	}{
		{"auto", "auto", nil, ""},
		{"AUTO with spaces", "  AUTO ", nil, ""},
		{"one node", "0", []int{0}, ""},
		{"list", "0,2", []int{0, 2}, ""},
		{"list with spaces", " 1 , 3 ", []int{1, 3}, ""},
		{"unsorted list is sorted", "3,1,2", []int{1, 2, 3}, ""},
		{"JSON list", []any{float64(2), float64(0)}, []int{0, 2}, ""},
		{"JSON list of strings", []any{"1", "0"}, []int{0, 1}, ""},
		{"JSON number", json.Number("1"), []int{1}, ""},
		{"Go int", 3, []int{3}, ""},
		{"Go []int", []int{4, 1}, []int{1, 4}, ""},
		{"empty string", "", nil, "egm_numa_nodes="},
		{"blank string", "   ", nil, "egm_numa_nodes="},
		{"empty JSON list", []any{}, nil, "empty list"},
		{"empty Go list", []int{}, nil, "empty list"},
		{"duplicate", "0,0", nil, "duplicate node 0"},
		{"duplicate after sorting", "2,1,2", nil, "duplicate node 2"},
		{"negative", "0,-1", nil, "negative node -1"},
		{"negative int", -1, nil, "negative node -1"},
		{"empty element", "0,,2", nil, "bad node"},
		{"trailing comma", "0,", nil, "bad node"},
		{"junk element", "0,x", nil, "bad node x"},
		{"float element", []any{0.5}, nil, "bad node 0.5"},
		{"hex is junk", "0x1", nil, "bad node 0x1"},
		{"space separated", "0 1", nil, "bad node 0 1"},
		{"too large", "2000000", nil, "out of range"},
		{"bool", true, nil, "egm_numa_nodes=true"},
		{"null", nil, nil, "egm_numa_nodes=<nil>"},
		{"nested list", []any{[]any{0}}, nil, "bad node"},
		{"object", map[string]any{}, nil, "egm_numa_nodes="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseNUMANodes(tc.v)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "egm_numa_nodes=") {
					t.Fatalf("got %v, %v; want ErrInvalid naming egm_numa_nodes and %q", got, err, tc.wantErr)
				}
				// The same value through FromMap fails the same way and
				// changes nothing.
				if _, err := FromMap(map[string]any{"egm_numa_nodes": tc.v}); !errors.Is(err, ErrInvalid) {
					t.Fatalf("FromMap accepted %v", tc.v)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
			c, err := FromMap(map[string]any{"egm_numa_nodes": tc.v})
			if err != nil || !slices.Equal(c.EGMNUMANodes, tc.want) {
				t.Fatalf("FromMap: %v, %v", c.EGMNUMANodes, err)
			}
			// The rendered value parses back to the same selection.
			back, err := ParseNUMANodes(c.NUMANodesString())
			if err != nil || !slices.Equal(back, tc.want) || (back == nil) != (tc.want == nil) {
				t.Fatalf("round trip of %q: %v, %v", c.NUMANodesString(), back, err)
			}
		})
	}
}

func TestSetLeavesConfigUnchangedOnError(t *testing.T) {
	c := Defaults()
	before := c
	for _, kv := range [][2]any{{"device", -1}, {"egm_numa_nodes", "0,0"}, {"max_mr_size", "x"}, {"nope", 1}} {
		if err := c.Set(kv[0].(string), kv[1]); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Set(%v) = %v", kv, err)
		}
	}
	if !reflect.DeepEqual(c, before) {
		t.Fatalf("config changed: %+v", c)
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		bad  bool
	}{
		{"4096", 4096, false},
		{"0", 0, false},
		{"64GiB", 64 << 30, false},
		{"64gib", 64 << 30, false},
		{" 2 MiB ", 2 << 20, false},
		{"1.5 MiB", 3 << 19, false},
		{"2G", 2 << 30, false},
		{"2K", 2 << 10, false},
		{"1T", 1 << 40, false},
		{"1TiB", 1 << 40, false},
		{"3GB", 3e9, false},
		{"5MB", 5e6, false},
		{"7KB", 7000, false},
		{"1TB", 1e12, false},
		{"100B", 100, false},
		{"0x200000", 2 << 20, false},
		{"0xffffffffffffffff", 1<<64 - 1, false},
		{"18446744073709551615", 1<<64 - 1, false},
		{"", 0, true},
		{"  ", 0, true},
		{"GiB", 0, true},
		{"-1", 0, true},
		{"-1GiB", 0, true},
		{"abc", 0, true},
		{"0x", 0, true},
		{"0xg", 0, true},
		{"16EiB", 0, true},
		{"16777216TiB", 0, true},    // 2^64: overflows
		{"17179869184GiB", 0, true}, // 2^64 through the integer path
		{"1e30", 0, true},
		{"NaN", 0, true},
		{"Inf", 0, true},
		{"1.5.2MiB", 0, true},
		{"1.25KiB", 1280, false},
		{"67108864.5", 0, true}, // a fraction of a byte (issue 11)
		{"0.1KiB", 0, true},     // 102.4 bytes
		{"1.1GiB", 0, true},     // 1181116006.4 bytes
		{"67108864.0", 67108864, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSize(tc.in)
			if tc.bad {
				if err == nil {
					t.Fatalf("ParseSize(%q) = %d, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	for _, tc := range []struct {
		n    uint64
		want string
	}{
		{0, "0B"}, {4096, "4KiB"}, {64 << 30, "64GiB"}, {3 << 19, "1.5MiB"}, {1000, "1000B"}, {1 << 50, "1024TiB"},
	} {
		if got := FormatSize(tc.n); got != tc.want {
			t.Errorf("FormatSize(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestJSON(t *testing.T) {
	c, err := FromJSON([]byte(`{"enable_egm_store_pool": true, "global_segment_size": "16GiB",
		"egm_numa_nodes": [0, 2], "max_mr_size": 1073741824, "handle_type": "posix_fd", "device": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	if !c.EGMEnabled() || c.GlobalSegmentSize != 16<<30 || !slices.Equal(c.EGMNUMANodes, []int{0, 2}) ||
		c.MaxMRSize != 1<<30 || c.HandleType != HandlePosixFD || c.Device != 1 {
		t.Fatalf("parsed %+v", c)
	}
	for _, bad := range []string{
		``, `null`, `[]`, `"x"`, `{`, `{"protocol": "nvlink"} {}`, `{"protocol": "nvlink"} x`,
		`{"unknown": 1}`, `{"device": 1e400}`, `{"global_segment_size": -1}`, `{"device": 1.5}`,
	} {
		if _, err := FromJSON([]byte(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("FromJSON(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

// TestJSONRefusesDuplicatesAndFractions: encoding/json keeps the last of
// two equal keys, which made a file with global_segment_size twice run with
// whichever came last; and a fractional byte count was truncated.
func TestJSONRefusesDuplicatesAndFractions(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"global_segment_size": "1GiB", "driver": "sim", "global_segment_size": "1TiB"}`, `"global_segment_size" given twice`},
		{`{"driver": "sim", "driver": "sim"}`, `"driver" given twice`},
		{`{"global_segment_size": 67108864.5}`, "global_segment_size=67108864.5"},
		{`{"global_segment_size": "67108864.5"}`, "not a whole number of bytes"},
		{`{"max_mr_size": 1.5}`, "max_mr_size=1.5"},
		{`{"device": 1e30}`, "device=1e30"},
	} {
		_, err := FromJSON([]byte(tc.in))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("FromJSON(%s) = %v, want ErrInvalid naming %s", tc.in, err, tc.want)
		}
	}
	// fabric_domain is a bounded string.
	if c, err := FromMap(map[string]any{"fabric_domain": " nvl72-a "}); err != nil || c.FabricDomain != "nvl72-a" {
		t.Errorf("fabric_domain: %q, %v", c.FabricDomain, err)
	}
	if _, err := FromMap(map[string]any{"fabric_domain": strings.Repeat("d", 129)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("fabric_domain of 129 bytes: %v", err)
	}
	// Python dicts reach FromMap with float64 values.
	for _, v := range []any{67108864.5, 1e30, -1.0} {
		if _, err := FromMap(map[string]any{"global_segment_size": v}); !errors.Is(err, ErrInvalid) {
			t.Errorf("FromMap(global_segment_size=%v) = %v, want ErrInvalid", v, err)
		}
	}
	if c, err := FromMap(map[string]any{"global_segment_size": 67108864.0}); err != nil || c.GlobalSegmentSize != 67108864 {
		t.Errorf("FromMap(global_segment_size=67108864.0) = %d, %v", c.GlobalSegmentSize, err)
	}
}

func TestKeysAndMapRoundTrip(t *testing.T) {
	keys := Keys()
	if !slices.IsSorted(keys) {
		t.Fatalf("Keys not sorted: %v", keys)
	}
	c := Defaults()
	m := c.Map()
	if len(m) != len(keys) {
		t.Fatalf("Map has %d keys, schema %d", len(m), len(keys))
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("Map lacks key %q", k)
		}
	}
	c.EnableEGMStorePool, c.GlobalSegmentSize, c.EGMNUMANodes, c.MaxMRSize = true, 1<<64-1, []int{0, 3}, 1<<64-1
	checkRoundTrip(t, c)
}

// checkRoundTrip asserts that c survives Map → FromMap and Map → JSON →
// FromJSON unchanged.
func checkRoundTrip(t *testing.T, c Config) {
	t.Helper()
	back, err := FromMap(c.Map())
	if err != nil {
		t.Fatalf("FromMap(Map()): %v", err)
	}
	if !reflect.DeepEqual(back, c) {
		t.Fatalf("Map round trip:\n got %+v\nwant %+v", back, c)
	}
	data, err := json.Marshal(c.Map())
	if err != nil {
		t.Fatal(err)
	}
	back, err = FromJSON(data)
	if err != nil {
		t.Fatalf("FromJSON(%s): %v", data, err)
	}
	if !reflect.DeepEqual(back, c) {
		t.Fatalf("JSON round trip of %s:\n got %+v\nwant %+v", data, back, c)
	}
}

// FuzzFromJSON: any input either fails with ErrInvalid or yields a config
// that validates and round-trips through Map and JSON.
func FuzzFromJSON(f *testing.F) {
	f.Add(`{"enable_egm_store_pool": true, "global_segment_size": "16GiB", "egm_numa_nodes": "0,2"}`)
	f.Add(`{"protocol": "rdma", "local_buffer_size": 1048576, "device": 1}`)
	f.Add(`{"egm_numa_nodes": [1, 0], "max_mr_size": "0x40000000", "handle_type": "fabric"}`)
	f.Add(`{"master_server_addr": "h:1", "driver": "sim", "copy_engine_min_bytes": 1e6}`)
	f.Add(`{"egm_numa_nodes": "auto"} `)
	f.Add(`{"device": "1"}{}`)
	f.Fuzz(func(t *testing.T, s string) {
		c, err := FromJSON([]byte(s))
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error without ErrInvalid: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("FromJSON returned an invalid config: %v", err)
		}
		checkRoundTrip(t, c)
	})
}

// FuzzFromMap feeds one key with a value of each shape a Python dict or a
// JSON decoder produces.
func FuzzFromMap(f *testing.F) {
	for _, k := range Keys() {
		f.Add(k, "1", int64(1), 1.0, true, uint8(0))
	}
	f.Add("egm_numa_nodes", "0,2", int64(-1), 0.5, false, uint8(4))
	f.Add("enable_egm_store_pool", "on", int64(0), 0.0, true, uint8(3))
	f.Fuzz(func(t *testing.T, key, s string, i int64, fl float64, b bool, kind uint8) {
		var v any
		switch kind % 6 {
		case 0:
			v = s
		case 1:
			v = i
		case 2:
			v = fl
		case 3:
			v = b
		case 4:
			v = []any{s, fl}
		case 5:
			v = json.Number(s)
		}
		m := map[string]any{key: v}
		if b {
			for k, v := range egm() {
				if k != key {
					m[k] = v
				}
			}
		}
		c, err := FromMap(m)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error without ErrInvalid: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("FromMap returned an invalid config: %v", err)
		}
		checkRoundTrip(t, c)
	})
}

// FuzzParseSize: ParseSize never panics; plain integers parse exactly; a
// FormatSize rendering without a fraction parses back to the same value.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"4096", "64GiB", "1.5 MiB", "2G", "3GB", "0x10", "-1", "1e30", "NaN", "18446744073709551615"} {
		f.Add(s, uint64(4096))
	}
	f.Fuzz(func(t *testing.T, s string, n uint64) {
		got, err := ParseSize(s)
		if u, perr := strconv.ParseUint(strings.TrimSpace(s), 10, 64); perr == nil && (err != nil || got != u) {
			t.Fatalf("ParseSize(%q) = %d, %v; want %d", s, got, err, u)
		}
		f := FormatSize(n)
		if !strings.Contains(f, ".") {
			back, err := ParseSize(f)
			if err != nil || back != n {
				t.Fatalf("ParseSize(FormatSize(%d) = %q) = %d, %v", n, f, back, err)
			}
		}
	})
}

// TestMergeCopies: merge_copies defaults to true, takes a bool or its
// spellings, and refuses anything else naming the key and the value.
func TestMergeCopies(t *testing.T) {
	if !Defaults().MergeCopies {
		t.Fatal("merge_copies defaults to false")
	}
	testBoolKey(t, "merge_copies", nil, func(c Config) bool { return c.MergeCopies })
}

// TestMasterFastPath: master_fast_path defaults to true, takes a bool or
// its spellings, and refuses anything else naming the key and the value.
func TestMasterFastPath(t *testing.T) {
	if !Defaults().MasterFastPath {
		t.Fatal("master_fast_path defaults to false")
	}
	testBoolKey(t, "master_fast_path", map[string]any{"master_server_addr": "10.0.0.1:50051"}, func(c Config) bool { return c.MasterFastPath })
}

// testBoolKey checks that key (set with the other keys of with) takes a
// bool or its spellings, read back by get, and refuses anything else with
// ErrInvalid naming the key and the value.
func testBoolKey(t *testing.T, key string, with map[string]any, get func(Config) bool) {
	t.Helper()
	for _, tc := range []struct {
		v       any
		want    bool
		wantErr string
	}{
		{false, false, ""},
		{true, true, ""},
		{"off", false, ""},
		{"yes", true, ""},
		{"maybe", false, key + "=maybe"},
		{1.0, false, key + "=1"},
	} {
		t.Run(toString(tc.v), func(t *testing.T) {
			m := map[string]any{key: tc.v}
			for k, v := range with {
				m[k] = v
			}
			c, err := FromMap(m)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v; want ErrInvalid naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || get(c) != tc.want {
				t.Fatalf("FromMap = %v, %v; want %v", get(c), err, tc.want)
			}
			checkRoundTrip(t, c)
		})
	}
}

// TestMasterFastPathSpin: master_fast_path_spin takes a duration (0 off)
// up to MaxMasterFastPathSpin, defaults to DefaultMasterFastPathSpin, and
// refuses the rest naming the key and the value.
func TestMasterFastPathSpin(t *testing.T) {
	if d := Defaults().MasterFastPathSpin; d != DefaultMasterFastPathSpin {
		t.Fatalf("default master_fast_path_spin %v", d)
	}
	for _, tc := range []struct {
		v       any
		want    time.Duration
		wantErr string
	}{
		{"20us", 20 * time.Microsecond, ""},
		{"10ms", 10 * time.Millisecond, ""},
		{"0", 0, ""},
		{0, 0, ""},
		{"-1us", 0, "master_fast_path_spin=-1us: want 0 (off) up to 10ms"},
		{"11ms", 0, "master_fast_path_spin=11ms"},
		{"soon", 0, `master_fast_path_spin="soon"`},
	} {
		t.Run(toString(tc.v), func(t *testing.T) {
			c, err := FromMap(map[string]any{"master_fast_path_spin": tc.v, "master_server_addr": "10.0.0.1:50051"})
			if tc.wantErr != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v; want ErrInvalid naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || c.MasterFastPathSpin != tc.want {
				t.Fatalf("FromMap = %v, %v; want %v", c.MasterFastPathSpin, err, tc.want)
			}
			if m := c.Map(); m["master_fast_path_spin"] != tc.want.String() {
				t.Fatalf("Map: master_fast_path_spin=%v", m["master_fast_path_spin"])
			}
		})
	}
}

// TestRPCTimeout: rpc_timeout takes a duration or seconds, defaults to
// DefaultRPCTimeout, and applies to a remote master too (that is its use).
func TestRPCTimeout(t *testing.T) {
	if d := Defaults().RPCTimeout; d != DefaultRPCTimeout {
		t.Fatalf("default rpc_timeout %v", d)
	}
	for _, tc := range []struct {
		v       any
		want    time.Duration
		wantErr string
	}{
		{"2s", 2 * time.Second, ""},
		{"250ms", 250 * time.Millisecond, ""},
		{3, 3 * time.Second, ""},
		{1.5, 1500 * time.Millisecond, ""},
		{"0.5", 500 * time.Millisecond, ""},
		{0, 0, ""},
		{"-1s", 0, "rpc_timeout=-1s"},
		{"2d", 0, `rpc_timeout="2d"`},
		{"25h", 0, "rpc_timeout=25h"},
		{true, 0, "rpc_timeout=true"},
	} {
		t.Run(toString(tc.v), func(t *testing.T) {
			c, err := FromMap(map[string]any{"rpc_timeout": tc.v, "master_server_addr": "10.0.0.1:50051"})
			if tc.wantErr != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v; want ErrInvalid naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || c.RPCTimeout != tc.want {
				t.Fatalf("FromMap = %v, %v; want %v", c.RPCTimeout, err, tc.want)
			}
			if m := c.Map(); m["rpc_timeout"] != tc.want.String() {
				t.Fatalf("Map: rpc_timeout=%v", m["rpc_timeout"])
			}
		})
	}
}
