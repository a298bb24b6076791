package fdx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// DefaultFetchTimeout bounds Fetch when ctx has no deadline.
const DefaultFetchTimeout = 10 * time.Second

// Fetch asks the server at socketPath for the fd of allocation k. On success
// the caller owns the returned fd (close-on-exec); it is typically passed to
// cuda.Driver.MemImportFromFD and closed right after.
//
// Errors wrap ErrUnknownSegment, ErrGenerationMismatch or ErrPermission when
// the server refused (with its reason), and ErrUnavailable when the exchange
// itself failed (also wrapping ctx.Err() when ctx ended it). Fetch never
// leaks an fd it received on an error path.
func Fetch(ctx context.Context, socketPath string, k segment.Key) (int, error) {
	req, err := encodeRequest(k)
	if err != nil {
		return -1, err
	}
	ctxDeadline, hasDeadline := ctx.Deadline()
	fail := func(what string, err error) (int, error) {
		cerr := ctx.Err()
		if cerr == nil && hasDeadline && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(ctxDeadline) {
			// The socket deadline is ctx's; its timer may not have fired yet.
			cerr = context.DeadlineExceeded
		}
		if cerr != nil {
			return -1, fmt.Errorf("%w: fetch %v from %s: %s: %w", ErrUnavailable, k, socketPath, what, cerr)
		}
		return -1, fmt.Errorf("%w: fetch %v from %s: %s: %w", ErrUnavailable, k, socketPath, what, err)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", socketPath)
	if err != nil {
		return fail("connect", err)
	}
	c := nc.(*net.UnixConn)
	defer c.Close()
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
		return fail("send request", err)
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
		return fail("read response", fmt.Errorf("server closed the connection without replying"))
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
		return -1, fmt.Errorf("%w: fetch %v from %s: %s", statusErr(status), k, socketPath, reason)
	}
	if len(fds) != 1 {
		closeAll()
		return fail("decode response", fmt.Errorf("success carried %d fds, want 1", len(fds)))
	}
	return fds[0], nil
}
