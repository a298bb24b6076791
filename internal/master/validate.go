package master

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// MaxObjectSize bounds PutStartReq.Size (1 PiB): larger sizes are certainly
// bugs and would overflow alignment arithmetic.
const MaxObjectSize = 1 << 50

// maxPreferredSegments bounds Placement.Segments.
const maxPreferredSegments = 64

// The validators below check a request's shape only (no state); they run
// before the Service takes its lock, so a rejected request changes nothing.
// Each error wraps ErrInvalid and names the field and the value.

func validateKey(key string, maxLen int) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case len(key) > maxLen:
		return fmt.Errorf("%w: key %.32q…: %d bytes, limit %d", ErrInvalid, key, len(key), maxLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key %q: not valid UTF-8", ErrInvalid, key)
	}
	return nil
}

func validateID(field, id string) error {
	if len(id) > segment.MaxIDLen {
		return fmt.Errorf("%w: %s %.32q…: %d bytes, limit %d", ErrInvalid, field, id, len(id), segment.MaxIDLen)
	}
	// One pass over the bytes (every put validates its writer's id and
	// node): utf8.ValidString only for non-ASCII ids.
	ascii, ctl := true, false
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c >= utf8.RuneSelf:
			ascii = false
		case c == 0 || c == '\n':
			ctl = true
		}
	}
	switch {
	case !ascii && !utf8.ValidString(id):
		return fmt.Errorf("%w: %s %q: not valid UTF-8", ErrInvalid, field, id)
	case ctl:
		return fmt.Errorf("%w: %s %q: contains NUL or newline", ErrInvalid, field, id)
	}
	return nil
}

// MaxClientIDLen bounds a client id in bytes. Segment ids embed it
// (host/owner/tierN/i, at most segment.MaxIDLen = 256 bytes), so half of
// that leaves the host name room.
const MaxClientIDLen = 128

// ValidateClientID checks a client id chosen by a client: 1 to
// MaxClientIDLen bytes of ASCII letters, digits, '-', '_', '.' and ':'. The
// id is a path component of the client's segment ids and of its
// fd-exchange socket name, so '/' or a space would make those ambiguous
// (before this check such an id registered raw, its segments were mounted
// under a sanitized owner, and the master answered "unknown client"). The
// error wraps ErrInvalid and names the id and the first bad byte.
func ValidateClientID(id string) error {
	if id == "" || len(id) > MaxClientIDLen {
		return fmt.Errorf("%w: client id %.40q: %d bytes, want 1..%d", ErrInvalid, id, len(id), MaxClientIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !clientIDByte(c) {
			return fmt.Errorf("%w: client id %q: byte %d is %q; allowed are letters, digits, '-', '_', '.' and ':'", ErrInvalid, id, i, c)
		}
	}
	return nil
}

func clientIDByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':'
}

func validateClientInfo(info *ClientInfo) error {
	if info.ID != "" { // empty: the master assigns one
		if err := ValidateClientID(info.ID); err != nil {
			return err
		}
	}
	if err := validateID("client node", info.Node); err != nil {
		return err
	}
	if err := validateID("client driver", info.Driver); err != nil {
		return err
	}
	if err := validateID("client fabric domain", info.FabricDomain); err != nil {
		return err
	}
	switch {
	case info.TTL < 0:
		return fmt.Errorf("%w: client %q: ttl %v", ErrInvalid, info.ID, info.TTL)
	case info.NUMANode < -1:
		return fmt.Errorf("%w: client %q: numa node %d", ErrInvalid, info.ID, info.NUMANode)
	case info.Device < -1:
		return fmt.Errorf("%w: client %q: device %d", ErrInvalid, info.ID, info.Device)
	}
	return nil
}

func validateDescriptor(d *segment.Descriptor) error {
	if err := d.Validate(); err != nil {
		// segment's message already names the field; keep one sentinel.
		return fmt.Errorf("%w: %s", ErrInvalid, strings.TrimPrefix(err.Error(), segment.ErrInvalid.Error()+": "))
	}
	if d.Owner == "" {
		return fmt.Errorf("%w: segment %q: no owner (the registered client id)", ErrInvalid, d.ID)
	}
	for _, f := range []struct{ name, v string }{{"segment id", d.ID}, {"segment node", d.Node}, {"segment owner", d.Owner}, {"segment socket path", d.Handle.SocketPath}} {
		if err := validateID(f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

func validateSegmentKey(k segment.Key) error {
	if k.ID == "" {
		return fmt.Errorf("%w: empty segment id", ErrInvalid)
	}
	if err := validateID("segment id", k.ID); err != nil {
		return err
	}
	if k.Generation == 0 {
		return fmt.Errorf("%w: segment %q: generation 0 is reserved", ErrInvalid, k.ID)
	}
	return nil
}

func validatePutStart(r *PutStartReq, maxKeyLen int) error {
	return validatePutStartAfter(r, maxKeyLen, nil)
}

// validatePutStartAfter is validatePutStart where prev, if not nil, is a
// placement that passed it: a writer id and node equal to prev's are not
// checked again (a batch's puts usually share them).
func validatePutStartAfter(r *PutStartReq, maxKeyLen int, prev *Placement) error {
	if err := validateKey(r.Key, maxKeyLen); err != nil {
		return err
	}
	p := &r.Placement
	switch {
	case r.Size == 0:
		return fmt.Errorf("%w: key %q: size 0", ErrInvalid, r.Key)
	case r.Size > MaxObjectSize:
		return fmt.Errorf("%w: key %q: size %d exceeds %d", ErrInvalid, r.Key, r.Size, uint64(MaxObjectSize))
	case r.Replicas < 0 || r.Replicas > MaxReplicas:
		return fmt.Errorf("%w: key %q: replicas %d, want 1..%d", ErrInvalid, r.Key, r.Replicas, MaxReplicas)
	case p.Tier != segment.TierUnknown && p.Tier != segment.TierDRAM && p.Tier != segment.TierHBM:
		return fmt.Errorf("%w: key %q: tier %d", ErrInvalid, r.Key, p.Tier)
	case p.TierOnly && p.Tier == segment.TierUnknown:
		return fmt.Errorf("%w: key %q: tier-only placement without a tier", ErrInvalid, r.Key)
	case p.NUMANode < -1:
		return fmt.Errorf("%w: key %q: numa node %d", ErrInvalid, r.Key, p.NUMANode)
	case p.Device < -1:
		return fmt.Errorf("%w: key %q: device %d", ErrInvalid, r.Key, p.Device)
	case r.SoftPinTTL < 0:
		return fmt.Errorf("%w: key %q: soft pin TTL %v", ErrInvalid, r.Key, r.SoftPinTTL)
	case r.SoftPinTTL > 0 && !r.SoftPin:
		return fmt.Errorf("%w: key %q: soft pin TTL %v without a soft pin", ErrInvalid, r.Key, r.SoftPinTTL)
	case r.KeepSoftPin && !r.Upsert:
		return fmt.Errorf("%w: key %q: keep soft pin without upsert", ErrInvalid, r.Key)
	case r.KeepSoftPin && (r.SoftPin || r.SoftPinTTL != 0):
		return fmt.Errorf("%w: key %q: keep soft pin together with a new soft pin", ErrInvalid, r.Key)
	case len(p.Segments) > maxPreferredSegments:
		return fmt.Errorf("%w: key %q: %d preferred segments, limit %d", ErrInvalid, r.Key, len(p.Segments), maxPreferredSegments)
	}
	if prev == nil || p.Client != prev.Client {
		if err := validateID("client id", p.Client); err != nil {
			return err
		}
	}
	if prev == nil || p.Node != prev.Node {
		if err := validateID("node", p.Node); err != nil {
			return err
		}
	}
	for _, id := range p.Segments {
		if err := validateID("preferred segment", id); err != nil {
			return err
		}
	}
	return nil
}

// Tenants' namespaces. A tenant's keys are stored as NUL, the tenant, NUL,
// the key (TenantKey); keys of the default namespace never start with NUL
// (clients refuse such keys), so no key of one namespace is a key of
// another.
const (
	tenantMark   = "\x00"
	MaxTenantLen = 64
)

// ValidateTenant checks a tenant name: "" (the default namespace) or up to
// MaxTenantLen bytes of UTF-8 without NUL or newline.
func ValidateTenant(tenant string) error {
	switch {
	case len(tenant) > MaxTenantLen:
		return fmt.Errorf("%w: tenant %.32q…: %d bytes, limit %d", ErrInvalid, tenant, len(tenant), MaxTenantLen)
	case !utf8.ValidString(tenant):
		return fmt.Errorf("%w: tenant %q: not valid UTF-8", ErrInvalid, tenant)
	case strings.ContainsAny(tenant, "\x00\n"):
		return fmt.Errorf("%w: tenant %q: contains NUL or newline", ErrInvalid, tenant)
	}
	return nil
}

// TenantKey returns the stored key of key in tenant's namespace; the
// default namespace ("") stores keys as they are. Callers validate both.
func TenantKey(tenant, key string) string {
	if tenant == "" {
		return key
	}
	return tenantMark + tenant + tenantMark + key
}

// matcher validates f and returns its predicate on stored keys (it does
// not keep or allocate them).
func (f Filter) matcher() (func([]byte) bool, error) {
	if err := ValidateTenant(f.Tenant); err != nil {
		return nil, err
	}
	if len(f.Pattern) > maxPatternLen {
		return nil, fmt.Errorf("%w: key pattern %.32q…: %d bytes, limit %d", ErrInvalid, f.Pattern, len(f.Pattern), maxPatternLen)
	}
	var re *regexp.Regexp
	if f.Pattern != "" {
		var err error
		if re, err = regexp.Compile(f.Pattern); err != nil {
			return nil, fmt.Errorf("%w: key pattern %q: %w", ErrInvalid, f.Pattern, err)
		}
	}
	prefix := []byte(TenantKey(f.Tenant, ""))
	return func(k []byte) bool {
		var name []byte
		if f.Tenant == "" {
			if len(k) > 0 && k[0] == tenantMark[0] {
				return false
			}
			name = k
		} else {
			var ok bool
			if name, ok = bytes.CutPrefix(k, prefix); !ok {
				return false
			}
		}
		return re == nil || re.Match(name)
	}, nil
}

// maxPatternLen bounds a RemoveAll pattern.
const maxPatternLen = 4096
