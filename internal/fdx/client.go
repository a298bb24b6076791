package fdx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// DefaultFetchTimeout bounds Fetch when ctx has no deadline.
const DefaultFetchTimeout = 10 * time.Second

// Trust is what a consumer accepts of an fd server. The socket path comes
// from a segment descriptor, that is from the master and whoever mounted
// the segment: a consumer must not connect wherever it says, nor import an
// fd from a server that is not a provider it trusts. The zero value checks
// only the server's uid (this process's own). A Trust is a value; its
// methods are safe for concurrent use.
type Trust struct {
	// SocketDir, when set, is the directory every socket path must lie
	// under (the consumer's socket_dir): an absolute path that, cleaned and
	// with symlinks resolved, stays inside SocketDir (resolved too).
	SocketDir string
	// ServerUIDs are the uids a server may run as (SO_PEERCRED of the
	// connected socket: the uid that created the listener). Empty means
	// this process's uid only; when set it replaces that default (list
	// os.Getuid() to keep it).
	ServerUIDs []uint32
}

// trustsUID reports whether a server running as uid is trusted.
func (t Trust) trustsUID(uid uint32) bool {
	if len(t.ServerUIDs) == 0 {
		return uid == uint32(os.Getuid())
	}
	return slices.Contains(t.ServerUIDs, uid)
}

// expectedUIDs describes the trusted uids for error messages.
func (t Trust) expectedUIDs() string {
	if len(t.ServerUIDs) == 0 {
		return fmt.Sprintf("uid %d (this process's)", os.Getuid())
	}
	return fmt.Sprintf("uids %v", t.ServerUIDs)
}

// within reports whether path p lies strictly inside directory dir (both
// clean and absolute).
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// resolve checks socketPath against t.SocketDir and returns the path to
// connect to: the socket with every symlink resolved, so that what was
// checked is what is dialled. The resolved path must lie inside the
// resolved directory (so a socket_dir reached through a symlink, or a
// descriptor naming the directory's real path, are both fine). A path
// outside is ErrUntrusted; a socket that does not exist (its provider
// removed it or never ran) is ErrUnavailable wrapping ENOENT, as a failed
// connect would be — when its cleaned path lies inside the directory.
func (t Trust) resolve(socketPath string, k segment.Key) (string, error) {
	if t.SocketDir == "" {
		return socketPath, nil
	}
	untrusted := func(why string) (string, error) {
		return "", fmt.Errorf("%w: fetch %v: socket path %q %s socket_dir %q", ErrUntrusted, k, socketPath, why, t.SocketDir)
	}
	if !filepath.IsAbs(socketPath) {
		return untrusted("is not absolute; it must lie under")
	}
	dir, err := filepath.Abs(t.SocketDir)
	if err != nil {
		return "", fmt.Errorf("fdx: socket_dir %q: %w", t.SocketDir, err)
	}
	rdir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("fdx: socket_dir %q: %w", t.SocketDir, err)
	}
	p := filepath.Clean(socketPath)
	rp, err := filepath.EvalSymlinks(p)
	switch {
	case err != nil && (within(dir, p) || within(rdir, p)):
		// Gone (or never there): as unreachable as a refused connect.
		return "", fmt.Errorf("%w: fetch %v from %s: resolve socket path: %w", ErrUnavailable, k, socketPath, err)
	case err != nil:
		return untrusted("lies outside")
	case !within(rdir, rp):
		return untrusted(fmt.Sprintf("resolves to %q, outside", rp))
	}
	return rp, nil
}

// Fetch asks the server at socketPath for the fd of allocation k. On success
// the caller owns the returned fd (close-on-exec); it is typically passed to
// cuda.Driver.MemImportFromFD and closed right after.
//
// Errors wrap ErrUnknownSegment, ErrGenerationMismatch or ErrPermission when
// the server refused (with its reason), and ErrUnavailable when the exchange
// itself failed (also wrapping ctx.Err() when ctx ended it). Fetch never
// leaks an fd it received on an error path.
func Fetch(ctx context.Context, socketPath string, k segment.Key) (int, error) {
	return Trust{}.Fetch(ctx, socketPath, k)
}

// Fetch is the package-level Fetch with t's checks: before connecting,
// socketPath must lie under t.SocketDir (ErrUntrusted otherwise); before
// sending the request, the server at the other end must run as a trusted
// uid (SO_PEERCRED; ErrUntrusted otherwise). An untrusted server is not an
// unavailable one: the errors do not wrap ErrUnavailable.
//
// A server closes a connection that stays idle past its IOTimeout. When it
// closed this one before taking the request — the consumer was paused
// (SIGSTOP, a stall) between connecting and sending — the request, which
// changes nothing on the server, is sent once more on a new connection:
// a paused consumer would otherwise fail the copies that needed the
// mapping, with the provider alive.
func (t Trust) Fetch(ctx context.Context, socketPath string, k segment.Key) (int, error) {
	req, err := encodeRequest(k)
	if err != nil {
		return -1, err
	}
	dial, err := t.resolve(socketPath, k)
	if err != nil {
		return -1, err
	}
	fd, dropped, err := t.fetchOnce(ctx, socketPath, dial, req, k)
	if dropped && ctx.Err() == nil {
		fd, _, err = t.fetchOnce(ctx, socketPath, dial, req, k)
	}
	return fd, err
}

// fetchOnce is one connection of Fetch. dropped reports that the server
// closed the connection before it took the request (the send failed with
// EPIPE or ECONNRESET, or the reply was the close itself).
func (t Trust) fetchOnce(ctx context.Context, socketPath, dial string, req []byte, k segment.Key) (fd int, dropped bool, err error) {
	ctxDeadline, hasDeadline := ctx.Deadline()
	fail := func(what string, err error) (int, bool, error) {
		cerr := ctx.Err()
		if cerr == nil && hasDeadline && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(ctxDeadline) {
			// The socket deadline is ctx's; its timer may not have fired yet.
			cerr = context.DeadlineExceeded
		}
		if cerr != nil {
			return -1, false, fmt.Errorf("%w: fetch %v from %s: %s: %w", ErrUnavailable, k, socketPath, what, cerr)
		}
		return -1, false, fmt.Errorf("%w: fetch %v from %s: %s: %w", ErrUnavailable, k, socketPath, what, err)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", dial)
	if err != nil {
		return fail("connect", err)
	}
	c := nc.(*net.UnixConn)
	defer c.Close()
	// The listener's credentials, recorded by the kernel at listen(2): a
	// process of another uid cannot pose as a provider of ours, wherever
	// its socket is.
	uid, pid, err := peerUID(c)
	if err != nil {
		return fail("peer credentials", err)
	}
	if !t.trustsUID(uid) {
		return -1, false, fmt.Errorf("%w: fetch %v from %s: the fd server runs as uid %d (pid %d), expected %s",
			ErrUntrusted, k, socketPath, uid, pid, t.expectedUIDs())
	}
	afterConnect()
	deadline := ctxDeadline
	if !hasDeadline {
		deadline = time.Now().Add(DefaultFetchTimeout)
	}
	if err := c.SetDeadline(deadline); err != nil {
		return fail("set deadline", err)
	}
	// Cancellation interrupts blocked I/O by moving the deadline to the past.
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	if _, _, err := c.WriteMsgUnix(req, nil, nil); err != nil {
		fd, _, ferr := fail("send request", err)
		return fd, errors.Is(ferr, syscall.EPIPE) || errors.Is(ferr, syscall.ECONNRESET), ferr
	}
	buf := make([]byte, 3+maxReason+1)
	// Room for several fds so that a misbehaving server's extras are
	// received (and closed) rather than truncated.
	oob := make([]byte, syscall.CmsgSpace(4*8))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return fail("read response", err)
	}
	fds := parseRights(oob[:oobn])
	closeAll := func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}
	if n == 0 && oobn == 0 {
		fd, _, err := fail("read response", fmt.Errorf("server closed the connection without replying"))
		return fd, true, err
	}
	if flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0 {
		closeAll()
		return fail("read response", fmt.Errorf("response truncated (flags %#x)", flags))
	}
	status, reason, err := decodeResponse(buf[:n])
	if err != nil {
		closeAll()
		return fail("decode response", err)
	}
	if status != statusOK {
		closeAll() // a refusal never carries an fd; drop any a faulty server sent
		if reason == "" {
			reason = fmt.Sprintf("status %d", status)
		}
		return -1, false, fmt.Errorf("%w: fetch %v from %s: %s", statusErr(status), k, socketPath, reason)
	}
	if len(fds) != 1 {
		closeAll()
		return fail("decode response", fmt.Errorf("success carried %d fds, want 1", len(fds)))
	}
	return fds[0], false, nil
}

// afterConnect runs between a fetch's connect and its request (a test
// hook: a pause there).
var afterConnect = func() {}
