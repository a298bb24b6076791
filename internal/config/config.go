// Package config is kvfabric's one configuration schema (DESIGN §6): the same
// keys in a Python dict, a JSON file and CLI flags. Unknown keys are errors,
// and every error names the key and the value.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrInvalid is wrapped by every configuration error.
var ErrInvalid = errors.New("config: invalid")

// Protocols.
const (
	ProtocolNVLink = "nvlink"
	// ProtocolRDMA and ProtocolTCP are accepted for Mooncake compatibility;
	// kvfabric's data path is always GPU copies, and the EGM pool requires
	// nvlink.
	ProtocolRDMA = "rdma"
	ProtocolTCP  = "tcp"
)

// Handle types.
const (
	HandleAuto    = "auto"
	HandleFabric  = "fabric"
	HandlePosixFD = "posix_fd"
)

// Drivers.
const (
	DriverAuto = "auto"
	DriverCUDA = "cuda"
	DriverSim  = "sim"
)

// MasterEmbedded is the master_server_addr for an in-process master.
const MasterEmbedded = "embedded"

// Config is one kvfabric client's configuration. The zero value is not
// valid; start from Defaults. Config is a plain value, copied at construction
// by its users.
type Config struct {
	// Protocol is nvlink (default), or rdma/tcp for Mooncake compatibility.
	Protocol string `json:"protocol"`
	// GlobalSegmentSize is the capacity this process provides to the store
	// (0: a pure consumer).
	GlobalSegmentSize uint64 `json:"global_segment_size"`
	// LocalBufferSize is Mooncake's local transfer buffer; kvfabric copies
	// directly between the caller's buffers and segments, so it must be 0
	// when the EGM pool is enabled.
	LocalBufferSize uint64 `json:"local_buffer_size"`
	// EnableEGMStorePool makes the provided capacity HOST_NUMA DRAM (the EGM
	// pool) instead of GPU HBM.
	EnableEGMStorePool bool `json:"enable_egm_store_pool"`
	// EGMNUMANodes is nil for "auto" (the GPUs' host NUMA ids), else the
	// explicit, sorted list of host NUMA nodes.
	EGMNUMANodes []int `json:"egm_numa_nodes"`
	// MaxMRSize bounds one chunk (one allocation = one segment).
	MaxMRSize uint64 `json:"max_mr_size"`
	// MasterServerAddr is "embedded", host:port, or
	// etcd://host:port[,host:port…][/prefix]: the masters' etcd cluster,
	// where the client finds the leader and follows leadership changes
	// (HA; see ParseEtcdAddr).
	MasterServerAddr string `json:"master_server_addr"`
	// MasterFastPath lets a remote master's hot calls (gets, puts, lease
	// releases, existence checks) use the master's fast path when it
	// advertises one (default true); false keeps every call on gRPC. The
	// fast path has the same TLS and credentials as gRPC, and calls fall
	// back to gRPC while it cannot be reached.
	MasterFastPath bool `json:"master_fast_path"`
	// MasterFastPathSpin is how long a small fast path call (a request of
	// at most 4 KiB) polls its socket for the master's answer before it
	// sleeps (default 50us; 0 off; at most 10ms). It saves a wake-up across CPUs per call, which on virtual
	// machines costs tens of µs, for that much CPU; at most a quarter of
	// GOMAXPROCS calls of a process (at least one) spin at once.
	MasterFastPathSpin time.Duration `json:"master_fast_path_spin"`
	// HandleType is auto|fabric|posix_fd.
	HandleType string `json:"handle_type"`
	// Driver is auto|cuda|sim.
	Driver string `json:"driver"`
	// LocalHostname is this process's host identity.
	LocalHostname string `json:"local_hostname"`
	// ClientID is this process's id at the master and the owner part of
	// its segment ids; "" (the default) means "<local_hostname>-<pid>-<n>".
	// A put's preferred segments may name it to prefer every segment this
	// client provides. Two live processes must not use one id: the second
	// waits for the first one's registration to end.
	ClientID string `json:"client_id"`
	// Device is the CUDA device ordinal this client copies with and, when the
	// EGM pool is off, provides HBM capacity on.
	Device int `json:"device"`
	// CopyEngineMinBytes is the block size from which copies go to the copy
	// engine (cuMemcpyBatchAsync) instead of the SM kernel.
	CopyEngineMinBytes uint64 `json:"copy_engine_min_bytes"`
	// GetCopyEngineMinBytes is the same for the copies of gets (into this
	// GPU): on H200 the copy engine overtakes the SM kernel at 64 KiB that
	// way and at 128 KiB the other (docs/perf/store.md).
	GetCopyEngineMinBytes uint64 `json:"get_copy_engine_min_bytes"`
	// MergeCopies (default true) lets batch puts and gets copy objects
	// whose bytes continue one another on both sides in one copy, inside
	// one segment mapping and one allocation of the caller's buffers;
	// false copies every object's regions as given (the same bytes).
	MergeCopies bool `json:"merge_copies"`
	// SocketDir is where posix_fd providers create their fd-exchange socket,
	// and the only directory whose sockets a consumer imports from.
	SocketDir string `json:"socket_dir"`
	// LeaseTTL and PutTimeout configure the embedded master (0: its
	// defaults, 5s and 30s); a remote master has its own flags, so setting
	// them with a host:port master_server_addr is an error.
	LeaseTTL   time.Duration `json:"lease_ttl"`
	PutTimeout time.Duration `json:"put_timeout"`
	// ClientTTL is the registration TTL this client asks of the master (0:
	// the master's default, 10s): it heartbeats every third of it, and a
	// process that stops heartbeating loses its segments and puts after it.
	ClientTTL time.Duration `json:"client_ttl"`
	// TLSCAFile turns on TLS to a remote master, verified against this CA;
	// TLSCertFile/TLSKeyFile are this client's certificate (mutual TLS);
	// TLSServerName overrides the name checked in the master's certificate;
	// AuthTokenFile holds a bearer token (docs/security.md).
	TLSCAFile     string `json:"tls_ca_file"`
	TLSCertFile   string `json:"tls_cert_file"`
	TLSKeyFile    string `json:"tls_key_file"`
	TLSServerName string `json:"tls_server_name"`
	AuthTokenFile string `json:"auth_token_file"`
	// FabricDomain names this client's fabric (NVLink/IMEX) domain: fabric
	// handles import only within one. "" (the default) is the default
	// domain, so a deployment that never sets it is one domain. The master
	// places this client's puts, and offers its reads, only on fabric
	// segments of its domain (and POSIX-fd segments of its host).
	FabricDomain string `json:"fabric_domain"`
	// RPCTimeout bounds every call to a remote master made without a
	// deadline of its own (the C ABI and Python pass none): a call the
	// master does not answer in time fails with the client's RPC error
	// instead of blocking an inference thread forever. An embedded master
	// answers in the process and is not timed. 0 means DefaultRPCTimeout.
	RPCTimeout time.Duration `json:"rpc_timeout"`
	// Tenant names this client's key namespace ("" is the default one):
	// its keys, existence checks and removals never see another tenant's
	// keys (Mooncake's tenant_id). A namespace, not an access control: see
	// docs/security.md.
	Tenant string `json:"tenant"`
}

// DefaultMasterFastPathSpin is master_fast_path_spin's default
// (master.DefaultFastSpin); MaxMasterFastPathSpin its largest value.
const (
	DefaultMasterFastPathSpin = 50 * time.Microsecond
	MaxMasterFastPathSpin     = 10 * time.Millisecond
)

// DefaultRPCTimeout is rpc_timeout's default.
const DefaultRPCTimeout = 5 * time.Second

// Defaults returns the default configuration.
func Defaults() Config {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	return Config{
		Protocol:              ProtocolNVLink,
		MaxMRSize:             1 << 30,
		MasterServerAddr:      MasterEmbedded,
		MasterFastPath:        true,
		MasterFastPathSpin:    DefaultMasterFastPathSpin,
		HandleType:            HandleAuto,
		Driver:                DriverAuto,
		LocalHostname:         host,
		CopyEngineMinBytes:    128 << 10, // measured crossover, see transfer.DefaultCopyEngineMinBytes
		GetCopyEngineMinBytes: 64 << 10,  // measured for gets, docs/perf/store.md
		MergeCopies:           true,
		SocketDir:             os.TempDir(),
		RPCTimeout:            DefaultRPCTimeout,
	}
}

// EGMEnabled reports whether the provided capacity is the EGM DRAM pool.
func (c *Config) EGMEnabled() bool { return c.EnableEGMStorePool }

// NUMANodesString renders EGMNUMANodes as the config value ("auto" or "0,2").
func (c *Config) NUMANodesString() string {
	if c.EGMNUMANodes == nil {
		return "auto"
	}
	s := make([]string, len(c.EGMNUMANodes))
	for i, n := range c.EGMNUMANodes {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// Validate checks every field and the EGM combination rules. The error names
// the key and the value.
func (c *Config) Validate() error {
	switch c.Protocol {
	case ProtocolNVLink, ProtocolRDMA, ProtocolTCP:
	default:
		return invalid("protocol", c.Protocol, "want nvlink, rdma or tcp")
	}
	switch c.HandleType {
	case HandleAuto, HandleFabric, HandlePosixFD:
	default:
		return invalid("handle_type", c.HandleType, "want auto, fabric or posix_fd")
	}
	switch c.Driver {
	case DriverAuto, DriverCUDA, DriverSim:
	default:
		return invalid("driver", c.Driver, "want auto, cuda or sim")
	}
	if c.MasterServerAddr == "" {
		return invalid("master_server_addr", c.MasterServerAddr, "want embedded or host:port")
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"lease_ttl", c.LeaseTTL}, {"put_timeout", c.PutTimeout}, {"client_ttl", c.ClientTTL}, {"rpc_timeout", c.RPCTimeout}} {
		if d.v < 0 || d.v > 24*time.Hour {
			return invalid(d.key, d.v, "want 0 (the default) up to 24h")
		}
		if (d.key == "lease_ttl" || d.key == "put_timeout") && d.v != 0 && c.MasterServerAddr != MasterEmbedded {
			return invalid(d.key, d.v, "sets the embedded master only; a remote master ("+c.MasterServerAddr+") takes it as its own flag")
		}
	}
	if c.MasterFastPathSpin < 0 || c.MasterFastPathSpin > MaxMasterFastPathSpin {
		return invalid("master_fast_path_spin", c.MasterFastPathSpin, "want 0 (off) up to "+MaxMasterFastPathSpin.String())
	}
	switch {
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		return invalid("tls_cert_file", c.TLSCertFile, "tls_cert_file and tls_key_file go together (tls_key_file="+strconv.Quote(c.TLSKeyFile)+")")
	case c.TLSCAFile == "" && (c.TLSCertFile != "" || c.AuthTokenFile != "" || c.TLSServerName != ""):
		return invalid("tls_ca_file", c.TLSCAFile, "required with tls_cert_file, auth_token_file or tls_server_name: credentials never travel in plaintext")
	case c.TLSCAFile != "" && c.MasterServerAddr == MasterEmbedded:
		return invalid("tls_ca_file", c.TLSCAFile, "is for a remote master; master_server_addr is embedded")
	}
	if IsEtcdAddr(c.MasterServerAddr) {
		if _, _, err := ParseEtcdAddr(c.MasterServerAddr); err != nil {
			return invalid("master_server_addr", c.MasterServerAddr, err.Error())
		}
	} else if c.MasterServerAddr != MasterEmbedded && !strings.Contains(c.MasterServerAddr, ":") {
		return invalid("master_server_addr", c.MasterServerAddr, "want embedded, host:port or etcd://host:port[,host:port…][/prefix]")
	}
	if c.LocalHostname == "" {
		return invalid("local_hostname", c.LocalHostname, "must not be empty")
	}
	if err := validateClientID(c.ClientID); err != nil {
		return err
	}
	if len(c.FabricDomain) > 128 || strings.ContainsAny(c.FabricDomain, "\x00\n") {
		return invalid("fabric_domain", strconv.Quote(c.FabricDomain), "want at most 128 bytes, no NUL or newline")
	}
	if len(c.Tenant) > 64 || !utf8.ValidString(c.Tenant) || strings.ContainsAny(c.Tenant, "\x00\n") {
		return invalid("tenant", strconv.Quote(c.Tenant), "want at most 64 bytes of UTF-8, no NUL or newline")
	}
	if c.Device < 0 {
		return invalid("device", c.Device, "must be >= 0")
	}
	if c.MaxMRSize == 0 {
		return invalid("max_mr_size", c.MaxMRSize, "must be > 0")
	}
	if c.CopyEngineMinBytes == 0 {
		return invalid("copy_engine_min_bytes", c.CopyEngineMinBytes, "must be > 0")
	}
	if c.GetCopyEngineMinBytes == 0 {
		return invalid("get_copy_engine_min_bytes", c.GetCopyEngineMinBytes, "must be > 0")
	}
	if c.EGMNUMANodes != nil {
		if len(c.EGMNUMANodes) == 0 {
			return invalid("egm_numa_nodes", "", "empty list (use auto)")
		}
		for i, n := range c.EGMNUMANodes {
			if n < 0 {
				return invalid("egm_numa_nodes", c.NUMANodesString(), fmt.Sprintf("negative node %d", n))
			}
			if i > 0 && c.EGMNUMANodes[i-1] >= n {
				return invalid("egm_numa_nodes", c.NUMANodesString(), "must be sorted without duplicates")
			}
		}
	}
	if c.EnableEGMStorePool {
		if c.Protocol != ProtocolNVLink {
			return invalid("protocol", c.Protocol, "enable_egm_store_pool=true requires protocol=nvlink")
		}
		if c.GlobalSegmentSize == 0 {
			return invalid("global_segment_size", c.GlobalSegmentSize, "enable_egm_store_pool=true requires global_segment_size>0")
		}
		if c.LocalBufferSize != 0 {
			return invalid("local_buffer_size", c.LocalBufferSize, "enable_egm_store_pool=true requires local_buffer_size=0")
		}
	}
	return nil
}

// maxClientIDLen and the bytes validateClientID allows are the master's
// rules for client ids (master.ValidateClientID), checked here so that the
// error names the key before anything is opened.
const maxClientIDLen = 128

func validateClientID(id string) error {
	if id == "" {
		return nil
	}
	if len(id) > maxClientIDLen {
		return invalid("client_id", strconv.Quote(id), fmt.Sprintf("%d bytes, want at most %d", len(id), maxClientIDLen))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return invalid("client_id", strconv.Quote(id), "allowed are letters, digits, '-', '_', '.' and ':'")
		}
	}
	return nil
}

func invalid(key string, value any, why string) error {
	return fmt.Errorf("%w: %s=%v: %s", ErrInvalid, key, value, why)
}

// Keys lists the accepted configuration keys, sorted.
func Keys() []string {
	k := make([]string, 0, len(setters))
	for name := range setters {
		k = append(k, name)
	}
	sort.Strings(k)
	return k
}

type setter func(c *Config, v any) error

var setters = map[string]setter{
	"protocol":                  stringKey("protocol", func(c *Config, s string) { c.Protocol = strings.ToLower(s) }),
	"global_segment_size":       sizeKey("global_segment_size", func(c *Config, n uint64) { c.GlobalSegmentSize = n }),
	"local_buffer_size":         sizeKey("local_buffer_size", func(c *Config, n uint64) { c.LocalBufferSize = n }),
	"max_mr_size":               sizeKey("max_mr_size", func(c *Config, n uint64) { c.MaxMRSize = n }),
	"copy_engine_min_bytes":     sizeKey("copy_engine_min_bytes", func(c *Config, n uint64) { c.CopyEngineMinBytes = n }),
	"get_copy_engine_min_bytes": sizeKey("get_copy_engine_min_bytes", func(c *Config, n uint64) { c.GetCopyEngineMinBytes = n }),
	"enable_egm_store_pool":     boolKey("enable_egm_store_pool", func(c *Config, b bool) { c.EnableEGMStorePool = b }),
	"merge_copies":              boolKey("merge_copies", func(c *Config, b bool) { c.MergeCopies = b }),
	"master_server_addr":        stringKey("master_server_addr", func(c *Config, s string) { c.MasterServerAddr = s }),
	"master_fast_path":          boolKey("master_fast_path", func(c *Config, b bool) { c.MasterFastPath = b }),
	"master_fast_path_spin":     spinKey("master_fast_path_spin", func(c *Config, d time.Duration) { c.MasterFastPathSpin = d }),
	"handle_type":               stringKey("handle_type", func(c *Config, s string) { c.HandleType = strings.ToLower(s) }),
	"driver":                    stringKey("driver", func(c *Config, s string) { c.Driver = strings.ToLower(s) }),
	"local_hostname":            stringKey("local_hostname", func(c *Config, s string) { c.LocalHostname = s }),
	"client_id":                 stringKey("client_id", func(c *Config, s string) { c.ClientID = s }),
	"socket_dir":                stringKey("socket_dir", func(c *Config, s string) { c.SocketDir = s }),
	"lease_ttl":                 durationKey("lease_ttl", func(c *Config, d time.Duration) { c.LeaseTTL = d }),
	"put_timeout":               durationKey("put_timeout", func(c *Config, d time.Duration) { c.PutTimeout = d }),
	"client_ttl":                durationKey("client_ttl", func(c *Config, d time.Duration) { c.ClientTTL = d }),
	"tls_ca_file":               stringKey("tls_ca_file", func(c *Config, s string) { c.TLSCAFile = s }),
	"tls_cert_file":             stringKey("tls_cert_file", func(c *Config, s string) { c.TLSCertFile = s }),
	"tls_key_file":              stringKey("tls_key_file", func(c *Config, s string) { c.TLSKeyFile = s }),
	"tls_server_name":           stringKey("tls_server_name", func(c *Config, s string) { c.TLSServerName = s }),
	"auth_token_file":           stringKey("auth_token_file", func(c *Config, s string) { c.AuthTokenFile = s }),
	"device": func(c *Config, v any) error {
		n, err := toInt(v)
		if err != nil || n < 0 {
			return invalid("device", v, "want a device ordinal >= 0")
		}
		c.Device = int(n)
		return nil
	},
	"egm_numa_nodes": func(c *Config, v any) error {
		nodes, err := ParseNUMANodes(v)
		if err != nil {
			return err
		}
		c.EGMNUMANodes = nodes
		return nil
	},
	"fabric_domain": stringKey("fabric_domain", func(c *Config, s string) { c.FabricDomain = s }),
	"rpc_timeout":   durationKey("rpc_timeout", func(c *Config, d time.Duration) { c.RPCTimeout = d }),
	"tenant":        stringKey("tenant", func(c *Config, s string) { c.Tenant = s }),
}

// Set applies one key. On error c is unchanged.
func (c *Config) Set(key string, v any) error {
	s, ok := setters[key]
	if !ok {
		return fmt.Errorf("%w: unknown key %q", ErrInvalid, key)
	}
	tmp := *c
	if err := s(&tmp, v); err != nil {
		return err
	}
	*c = tmp
	return nil
}

// FromMap builds a validated Config from Defaults and m. Values may be JSON
// types (string, float64, bool), Go integers, or strings for every key.
func FromMap(m map[string]any) (Config, error) {
	c := Defaults()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic first error
	for _, k := range keys {
		if err := c.Set(k, m[k]); err != nil {
			return Config{}, err
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// FromJSON parses a JSON object with the schema's keys. A key given twice is
// an error naming it: encoding/json would silently keep the last value, so
// a file edited by two hands could run with a size nobody meant.
func FromJSON(data []byte) (Config, error) {
	m, err := decodeObject(data)
	if err != nil {
		return Config{}, err
	}
	return FromMap(m)
}

// decodeObject decodes one JSON object (numbers as json.Number), refusing
// duplicate keys and trailing data.
func decodeObject(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%w: JSON: %v", ErrInvalid, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("%w: JSON: want an object", ErrInvalid)
	}
	m := map[string]any{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: JSON: %v", ErrInvalid, err)
		}
		key, ok := tok.(string)
		if !ok { // the decoder only yields strings as object keys
			return nil, fmt.Errorf("%w: JSON: object key %v", ErrInvalid, tok)
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%w: JSON: key %q: %v", ErrInvalid, key, err)
		}
		if _, dup := m[key]; dup {
			return nil, fmt.Errorf("%w: JSON: key %q given twice", ErrInvalid, key)
		}
		m[key] = v
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, fmt.Errorf("%w: JSON: %v", ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: JSON: trailing data after the object", ErrInvalid)
	}
	return m, nil
}

// FromFile reads a JSON configuration file.
func FromFile(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return FromJSON(data)
}

// Map renders c with the schema's keys (sizes as byte counts), the inverse of
// FromMap.
func (c *Config) Map() map[string]any {
	return map[string]any{
		"protocol":                  c.Protocol,
		"global_segment_size":       c.GlobalSegmentSize,
		"local_buffer_size":         c.LocalBufferSize,
		"enable_egm_store_pool":     c.EnableEGMStorePool,
		"egm_numa_nodes":            c.NUMANodesString(),
		"max_mr_size":               c.MaxMRSize,
		"master_server_addr":        c.MasterServerAddr,
		"master_fast_path":          c.MasterFastPath,
		"master_fast_path_spin":     c.MasterFastPathSpin.String(),
		"handle_type":               c.HandleType,
		"driver":                    c.Driver,
		"local_hostname":            c.LocalHostname,
		"client_id":                 c.ClientID,
		"device":                    c.Device,
		"copy_engine_min_bytes":     c.CopyEngineMinBytes,
		"get_copy_engine_min_bytes": c.GetCopyEngineMinBytes,
		"merge_copies":              c.MergeCopies,
		"socket_dir":                c.SocketDir,
		"lease_ttl":                 c.LeaseTTL.String(),
		"put_timeout":               c.PutTimeout.String(),
		"client_ttl":                c.ClientTTL.String(),
		"tls_ca_file":               c.TLSCAFile,
		"tls_cert_file":             c.TLSCertFile,
		"tls_key_file":              c.TLSKeyFile,
		"tls_server_name":           c.TLSServerName,
		"auth_token_file":           c.AuthTokenFile,
		"fabric_domain":             c.FabricDomain,
		"rpc_timeout":               c.RPCTimeout.String(),
		"tenant":                    c.Tenant,
	}
}

// durationKey accepts a Go duration string ("5s", "1m30s") or a number of
// seconds, from 0 (the default) up to 24h.
func durationKey(key string, set func(*Config, time.Duration)) setter {
	return func(c *Config, v any) error {
		d, err := durationValue(key, v)
		if err != nil {
			return err
		}
		if d < 0 || d > 24*time.Hour {
			return invalid(key, v, "want 0 (the default) up to 24h")
		}
		set(c, d)
		return nil
	}
}

// spinKey is master_fast_path_spin's setter: a duration as durationKey
// takes it, from 0 (off) up to MaxMasterFastPathSpin.
func spinKey(key string, set func(*Config, time.Duration)) setter {
	return func(c *Config, v any) error {
		d, err := durationValue(key, v)
		if err != nil {
			return err
		}
		if d < 0 || d > MaxMasterFastPathSpin {
			return invalid(key, v, "want 0 (off) up to "+MaxMasterFastPathSpin.String())
		}
		set(c, d)
		return nil
	}
}

// durationValue reads v, a Go duration string or a number of seconds.
func durationValue(key string, v any) (time.Duration, error) {
	var d time.Duration
	switch x := v.(type) {
	case string:
		t := strings.TrimSpace(x)
		var err error
		if d, err = time.ParseDuration(t); err != nil {
			f, ferr := strconv.ParseFloat(t, 64)
			if ferr != nil {
				return 0, invalid(key, strconv.Quote(x), "want a duration like 5s or a number of seconds")
			}
			d = time.Duration(f * float64(time.Second))
		}
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return 0, invalid(key, x, "want a duration like 5s or a number of seconds")
		}
		d = time.Duration(f * float64(time.Second))
	case float64:
		d = time.Duration(x * float64(time.Second))
	case int:
		d = time.Duration(x) * time.Second
	case int64:
		d = time.Duration(x) * time.Second
	default:
		return 0, invalid(key, v, "want a duration like 5s or a number of seconds")
	}
	return d, nil
}

func stringKey(key string, set func(*Config, string)) setter {
	return func(c *Config, v any) error {
		s, ok := v.(string)
		if !ok {
			return invalid(key, v, "want a string")
		}
		if !utf8.ValidString(s) {
			// Values travel in JSON and protobuf strings, which would
			// silently replace the invalid bytes.
			return invalid(key, strconv.Quote(s), "not valid UTF-8")
		}
		set(c, strings.TrimSpace(s))
		return nil
	}
}

func sizeKey(key string, set func(*Config, uint64)) setter {
	return func(c *Config, v any) error {
		n, err := toSize(v)
		if err != nil {
			return invalid(key, v, err.Error())
		}
		set(c, n)
		return nil
	}
}

func boolKey(key string, set func(*Config, bool)) setter {
	return func(c *Config, v any) error {
		switch b := v.(type) {
		case bool:
			set(c, b)
			return nil
		case string:
			switch strings.ToLower(strings.TrimSpace(b)) {
			case "true", "1", "yes", "on":
				set(c, true)
				return nil
			case "false", "0", "no", "off":
				set(c, false)
				return nil
			}
		}
		return invalid(key, v, "want true or false")
	}
}

func toSize(v any) (uint64, error) {
	switch x := v.(type) {
	case string:
		return ParseSize(x)
	case json.Number:
		return ParseSize(x.String())
	case uint64: // Map renders sizes as uint64; all of them must round-trip
		return x, nil
	case uint:
		return uint64(x), nil
	}
	n, err := toInt(v)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, errors.New("negative size")
	}
	return uint64(n), nil
}

func toInt(v any) (int64, error) {
	switch x := v.(type) {
	case int:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint32:
		return int64(x), nil
	case uint64:
		if x > 1<<63-1 {
			return 0, errors.New("too large")
		}
		return int64(x), nil
	case float64:
		if x != math.Trunc(x) {
			return 0, errors.New("not an integer")
		}
		if !(x >= -(1<<63) && x < 1<<63) { // also NaN
			return 0, errors.New("out of range")
		}
		return int64(x), nil
	case json.Number:
		return x.Int64()
	case string:
		return strconv.ParseInt(strings.TrimSpace(x), 10, 64)
	}
	return 0, fmt.Errorf("want a number, got %T", v)
}

var sizeUnits = []struct {
	suffix string
	mult   uint64
}{
	{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"TIB", 1 << 40},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"TB", 1000 * 1000 * 1000 * 1000},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// ParseSize parses "4096", "64GiB", "1.5 MiB", "2G" (binary), "3GB"
// (decimal), or a 0x-prefixed hex byte count. A fraction is accepted only
// when the result is a whole number of bytes ("1.5MiB" yes, "67108864.5" and
// "0.1KiB" no): rounding a size nobody wrote would be a silent change.
func ParseSize(s string) (uint64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	if t == "" {
		return 0, errors.New("empty size")
	}
	if strings.HasPrefix(t, "0X") {
		n, err := strconv.ParseUint(t[2:], 16, 64)
		if err != nil {
			return 0, fmt.Errorf("bad size %q", s)
		}
		return n, nil
	}
	mult := uint64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			mult = u.mult
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			break
		}
	}
	if n, err := strconv.ParseUint(t, 10, 64); err == nil {
		if mult != 0 && n > (1<<64-1)/mult {
			return 0, fmt.Errorf("size %q overflows", s)
		}
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || f != f {
		return 0, fmt.Errorf("bad size %q", s)
	}
	v := f * float64(mult)
	if v >= 1<<64 {
		return 0, fmt.Errorf("size %q overflows", s)
	}
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("size %q is not a whole number of bytes", s)
	}
	return uint64(v), nil
}

// FormatSize renders n with a binary unit ("64GiB", "1.5MiB", "4096B").
// A rendering without a fraction is exact (ParseSize gives n back); one with
// a fraction is rounded to a tenth of the unit.
func FormatSize(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for i < len(units)-1 && n>>(10*(i+1)) > 0 {
		i++
	}
	shift := 10 * uint(i)
	if n&(1<<shift-1) == 0 {
		return fmt.Sprintf("%d%s", n>>shift, units[i])
	}
	return fmt.Sprintf("%.1f%s", float64(n)/float64(uint64(1)<<shift), units[i])
}

// ParseNUMANodes parses egm_numa_nodes: "auto" (nil), "0,2", a JSON list,
// or a single integer. Duplicates, negatives and junk are errors naming the
// value. The result is sorted.
func ParseNUMANodes(v any) ([]int, error) {
	var parts []any
	switch x := v.(type) {
	case string:
		s := strings.TrimSpace(x)
		if strings.EqualFold(s, "auto") {
			return nil, nil
		}
		if s == "" {
			return nil, invalid("egm_numa_nodes", x, `want "auto" or a list like "0,2"`)
		}
		for _, p := range strings.Split(s, ",") {
			parts = append(parts, strings.TrimSpace(p))
		}
	case []any:
		parts = x
	case []int:
		for _, n := range x {
			parts = append(parts, n)
		}
	default:
		if _, err := toInt(v); err != nil {
			return nil, invalid("egm_numa_nodes", v, `want "auto" or a list like "0,2"`)
		}
		parts = []any{v}
	}
	if len(parts) == 0 {
		return nil, invalid("egm_numa_nodes", v, "empty list")
	}
	seen := map[int]bool{}
	nodes := make([]int, 0, len(parts))
	for _, p := range parts {
		n, err := toInt(p)
		if err != nil || (p == "") {
			return nil, invalid("egm_numa_nodes", v, fmt.Sprintf("bad node %v", p))
		}
		if n < 0 {
			return nil, invalid("egm_numa_nodes", v, fmt.Sprintf("negative node %d", n))
		}
		if n > 1<<20 {
			return nil, invalid("egm_numa_nodes", v, fmt.Sprintf("node %d out of range", n))
		}
		if seen[int(n)] {
			return nil, invalid("egm_numa_nodes", v, fmt.Sprintf("duplicate node %d", n))
		}
		seen[int(n)] = true
		nodes = append(nodes, int(n))
	}
	sort.Ints(nodes)
	return nodes, nil
}
