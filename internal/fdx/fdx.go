// Package fdx exchanges exported allocation file descriptors between a
// provider and consumers on the same host (DESIGN §2, handle kind posix-fd).
//
// The provider runs a Server on a Unix socket (SOCK_SEQPACKET, file mode
// 0600). A consumer connects, is checked with SO_PEERCRED (same uid as the
// server, or a uid in the server's allowed list), names a segment by id and
// generation, and receives the allocation's fd by SCM_RIGHTS — or a refusal
// that says why (unknown segment, wrong generation, not permitted). A refusal
// never carries an fd.
//
// The check goes both ways: the consumer (Trust) dials only socket paths
// under its own socket directory, and asks nothing of a server whose
// SO_PEERCRED uid it does not trust — the descriptor naming the socket
// comes from the master, not from the provider itself.
//
// Wire format (one packet each way, little endian):
//
//	request:  "KVFX" | version u8 (1) | generation u64 | id length u16 | id
//	response: status u8 | reason length u16 | reason   (+ one fd when status is OK)
package fdx

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// Sentinel errors returned by Fetch (wrapped with the server's reason) and by
// the Server.
var (
	// ErrUnknownSegment: the server has no segment with that id.
	ErrUnknownSegment = errors.New("fdx: unknown segment")
	// ErrGenerationMismatch: the server has the id, but not that generation
	// (the provider re-allocated; the caller's descriptor is stale).
	ErrGenerationMismatch = errors.New("fdx: generation mismatch")
	// ErrPermission: the server refused the caller's uid.
	ErrPermission = errors.New("fdx: not permitted")
	// ErrUnavailable: the socket could not be reached or the exchange failed
	// (no server, server closing, I/O error, malformed reply, deadline).
	ErrUnavailable = errors.New("fdx: server unavailable")
	// ErrUntrusted: the consumer refused the server before asking it for
	// anything: its socket path lies outside the consumer's socket
	// directory, or it runs as a uid the consumer does not trust (see
	// Trust). Not a sign that the provider is gone.
	ErrUntrusted = errors.New("fdx: untrusted fd server")

	// ErrClosed is returned by Server methods after Close.
	ErrClosed = errors.New("fdx: server closed")
	// ErrDuplicate is returned by Register for a key that is registered.
	ErrDuplicate = errors.New("fdx: segment already registered")
	// ErrNotRegistered is returned by Unregister for an unknown key.
	ErrNotRegistered = errors.New("fdx: segment not registered")
	// ErrInUse is returned by Listen when another live server owns the socket
	// path.
	ErrInUse = errors.New("fdx: socket path in use by a live server")
)

const (
	magic          = "KVFX"
	version   byte = 1
	headerLen      = 4 + 1 + 8 + 2
	// maxPacket bounds both directions; ids are at most segment.MaxIDLen.
	maxPacket = headerLen + segment.MaxIDLen + 64
	maxReason = 200
)

// Response status codes.
const (
	statusOK                 byte = 0
	statusUnknownSegment     byte = 1
	statusGenerationMismatch byte = 2
	statusNotPermitted       byte = 3
	statusBadRequest         byte = 4
	statusClosing            byte = 5
)

func encodeRequest(k segment.Key) ([]byte, error) {
	if k.ID == "" || len(k.ID) > segment.MaxIDLen {
		return nil, fmt.Errorf("fdx: segment id %q: must be 1..%d bytes", k.ID, segment.MaxIDLen)
	}
	b := make([]byte, 0, headerLen+len(k.ID))
	b = append(b, magic...)
	b = append(b, version)
	b = binary.LittleEndian.AppendUint64(b, k.Generation)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(k.ID)))
	b = append(b, k.ID...)
	return b, nil
}

func decodeRequest(b []byte) (segment.Key, error) {
	if len(b) < headerLen || string(b[:4]) != magic {
		return segment.Key{}, errors.New("bad magic or short request")
	}
	if b[4] != version {
		return segment.Key{}, fmt.Errorf("protocol version %d, want %d", b[4], version)
	}
	gen := binary.LittleEndian.Uint64(b[5:13])
	n := int(binary.LittleEndian.Uint16(b[13:15]))
	if n == 0 || n > segment.MaxIDLen || len(b) != headerLen+n {
		return segment.Key{}, fmt.Errorf("id length %d does not match request of %d bytes", n, len(b))
	}
	return segment.Key{ID: string(b[headerLen:]), Generation: gen}, nil
}

func encodeResponse(status byte, reason string) []byte {
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	b := make([]byte, 0, 3+len(reason))
	b = append(b, status)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(reason)))
	return append(b, reason...)
}

func decodeResponse(b []byte) (status byte, reason string, err error) {
	if len(b) < 3 {
		return 0, "", fmt.Errorf("short response (%d bytes)", len(b))
	}
	n := int(binary.LittleEndian.Uint16(b[1:3]))
	if len(b) != 3+n {
		return 0, "", fmt.Errorf("response length %d, header says %d", len(b), 3+n)
	}
	return b[0], string(b[3:]), nil
}

// statusErr maps a refusal status to its sentinel.
func statusErr(status byte) error {
	switch status {
	case statusUnknownSegment:
		return ErrUnknownSegment
	case statusGenerationMismatch:
		return ErrGenerationMismatch
	case statusNotPermitted:
		return ErrPermission
	}
	return ErrUnavailable
}
