package master

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The client side of the fast path (fastpath.go). A remote Client keeps a
// pool of connections, each used by one call at a time; the calling
// goroutine writes the request and reads the answer itself on a blocking
// socket, waiting in poll(2) on its own thread. A call from C (the C ABI,
// Python) runs on a goroutine locked to its OS thread: waiting in the
// netpoller would hand its P to another thread and sleep, and the thread
// that finds the answer would have to wake it (docs/perf/latency.md, item
// 3); waiting in poll(2) the kernel wakes the waiting thread directly.

// FastPath configures a remote Client's use of the master's fast path. The
// zero value uses it in plaintext without a token, as a connection Dial
// makes without options.
type FastPath struct {
	// Off keeps every call on gRPC.
	Off bool
	// TLS is the gRPC connection's TLS configuration (nil: plaintext): the
	// fast path uses the same, its ServerName defaulting to the dialed
	// host as gRPC's does.
	TLS *tls.Config
	// Token is the bearer token the gRPC connection sends ("" none).
	Token string
	// Spin is how long a small call (spin.go) polls its connection for the
	// answer before it sleeps: 0 is DefaultFastSpin, negative turns it
	// off. At most 10 ms.
	Spin time.Duration
}

// spin is fp's spin resolved: 0 when off.
func (fp FastPath) spin() time.Duration {
	switch {
	case fp.Spin < 0:
		return 0
	case fp.Spin == 0:
		return DefaultFastSpin
	}
	return fp.Spin
}

// FastPath returns the fast path configuration that matches c's gRPC dial
// options: the same TLS configuration and token.
func (c ClientSecurity) FastPath() (FastPath, error) {
	if !c.Enabled() {
		return FastPath{}, nil
	}
	cfg, tok, err := c.tlsAndToken()
	if err != nil {
		return FastPath{}, err
	}
	return FastPath{TLS: cfg, Token: tok}, nil
}

// TransportStats counts a remote Client's hot calls (the fast path's six)
// by the transport that carried them.
type TransportStats struct {
	// Fast: calls sent over the fast path. GRPC: calls sent over gRPC (no
	// fast path advertised, turned off, or fallen back). Fallback: the
	// calls among GRPC that tried the fast path first and could not send
	// through it (dial or write failed before the request was complete).
	Fast, GRPC, Fallback uint64
	// UniformPuts: PutStart calls sent as uniform puts
	// (pb.UniformPutStart), among Fast and GRPC.
	UniformPuts uint64
	// Columns: GetReplicas and PutStart calls answered by column
	// (pb.GetColumns, pb.PutStartColumns), among Fast and GRPC.
	Columns uint64
	// SpinHits: fast path reads that polled the socket without sleeping
	// (FastPath.Spin) and found data; SpinMisses: those that polled for
	// the whole spin in vain, then slept.
	SpinHits, SpinMisses uint64
	// Conns is the number of fast path connections open now.
	Conns int
}

// Add returns the sum of t and u, field by field: the counters of several
// connections (ha.Client sums its masters'). TestTransportStatsAdd fails
// when a field is left out of it.
func (t TransportStats) Add(u TransportStats) TransportStats {
	return TransportStats{Fast: t.Fast + u.Fast, GRPC: t.GRPC + u.GRPC, Fallback: t.Fallback + u.Fallback,
		UniformPuts: t.UniformPuts + u.UniformPuts, Columns: t.Columns + u.Columns,
		SpinHits: t.SpinHits + u.SpinHits, SpinMisses: t.SpinMisses + u.SpinMisses, Conns: t.Conns + u.Conns}
}

// Transports returns the transport counters of c when it keeps them (a
// remote Client, and clients wrapping remote ones).
func Transports(c Client) (TransportStats, bool) {
	t, ok := c.(interface{ Transports() TransportStats })
	if !ok {
		return TransportStats{}, false
	}
	return t.Transports(), true
}

const (
	// fastMaxConns bounds a client's fast path connections: calls in
	// flight beyond it wait for one.
	fastMaxConns = 64
	// fastRetryAfter is how long the fast path is left alone after it could
	// not be reached (calls use gRPC meanwhile).
	fastRetryAfter = time.Second
	// fastPollSlice is the longest one poll(2) waits: between slices a call
	// checks its context (cancellation has no file descriptor).
	fastPollSlice = 20 * time.Millisecond
	// fastDialTimeout bounds connecting, the TLS handshake and the hello.
	fastDialTimeout = minConnectTimeout
)

// fastClient is a remote Client's fast path.
type fastClient struct {
	host   string // the host dialed for gRPC
	cfg    FastPath
	epochs *Epochs // nil without HA: answers carry no epoch to check
	// wake is an eventfd that becomes readable when Close begins: every
	// poll(2) of a call waits on it too, so a call in flight ends at once.
	wake  int
	slots chan struct{} // one per connection in use
	done  chan struct{} // closed when Close begins
	// retryAt is when (unix ns) the fast path is tried again after it
	// could not be reached.
	retryAt        atomic.Int64
	fast, fallback atomic.Uint64
	spin           time.Duration // cfg.spin()
	spins          spinCounts
	calls          sync.WaitGroup // calls in flight, waited for by close

	mu struct {
		sync.Mutex
		addr   unix.Sockaddr // the master's fast path; nil: none advertised
		port   uint32
		gen    uint64      // bumped when addr changes: older connections are dropped
		free   []*fastConn // idle connections, the last used last
		open   int
		closed bool
	}
}

// newFastClient returns the fast path of a remote Client dialed at addr
// (host:port); nil when addr names no host the fast path can dial.
func newFastClient(addr string, cfg FastPath, epochs *Epochs) (*fastClient, error) {
	if cfg.Spin > 0 {
		if err := CheckFastSpin("fast path spin", cfg.Spin); err != nil {
			return nil, err
		}
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return nil, nil // a gRPC target (dns:///…, unix:…): gRPC only
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("master: fast path: eventfd: %w", err)
	}
	return &fastClient{host: host, cfg: cfg, epochs: epochs, wake: wake, spin: cfg.spin(),
		slots: make(chan struct{}, fastMaxConns), done: make(chan struct{})}, nil
}

// advertise records the master's fast port (0: none), as its
// RegisterClient answer gave it. A new port drops the idle connections to
// the old one.
func (f *fastClient) advertise(ctx context.Context, port uint32) error {
	f.mu.Lock()
	same := f.mu.port == port && (port == 0 || f.mu.addr != nil)
	f.mu.Unlock()
	if same {
		return nil
	}
	var sa unix.Sockaddr
	if port != 0 {
		ip := net.ParseIP(f.host)
		if ip == nil {
			ips, err := net.DefaultResolver.LookupIP(ctx, "ip", f.host)
			if err != nil || len(ips) == 0 {
				return fmt.Errorf("master: fast path: resolve %s: %w", f.host, err)
			}
			ip = ips[0]
		}
		if ip4 := ip.To4(); ip4 != nil {
			a := &unix.SockaddrInet4{Port: int(port)}
			copy(a.Addr[:], ip4)
			sa = a
		} else {
			a := &unix.SockaddrInet6{Port: int(port)}
			copy(a.Addr[:], ip.To16())
			sa = a
		}
	}
	f.mu.Lock()
	if f.mu.closed {
		f.mu.Unlock()
		return nil
	}
	f.mu.addr, f.mu.port = sa, port
	f.mu.gen++
	old := f.mu.free
	f.mu.free = nil
	f.mu.open -= len(old)
	f.mu.Unlock()
	for _, c := range old {
		c.close()
	}
	return nil
}

// call makes one call over the fast path: req is the request message, resp
// receives the answer (wireMessages or generated messages, as for gRPC).
// used false means nothing was sent and the caller must use gRPC: no fast
// path is advertised, or it could not be reached (dial, or a write that
// failed before the request was complete; then it is left alone for
// fastRetryAfter). Otherwise err is the call's error as gRPC would return
// it (a status error, ErrClosed, or ErrStaleEpoch).
func (f *fastClient) call(ctx context.Context, m fastMethod, req, resp any) (used bool, err error) {
	if f.retryAt.Load() > time.Now().UnixNano() {
		return false, nil
	}
	f.mu.Lock()
	if f.mu.closed {
		f.mu.Unlock()
		return true, ErrClosed
	}
	if f.mu.addr == nil {
		f.mu.Unlock()
		return false, nil
	}
	f.calls.Add(1)
	f.mu.Unlock()
	defer f.calls.Done()

	select {
	case f.slots <- struct{}{}:
	default:
		select {
		case f.slots <- struct{}{}:
		case <-ctx.Done():
			return true, ctxStatus(ctx.Err())
		case <-f.done:
			return true, ErrClosed
		}
	}
	defer func() { <-f.slots }()
	if err := ctx.Err(); err != nil {
		return true, ctxStatus(err) // as gRPC: an ended context fails the call
	}
	c, err := f.get(ctx)
	if err != nil {
		if errors.Is(err, ErrClosed) {
			return true, ErrClosed
		}
		if errors.Is(err, errFastNone) {
			return false, nil
		}
		f.unreachable()
		return false, nil
	}
	sent, err := c.do(ctx, m, req, resp)
	f.put(c)
	switch {
	case sent:
	case errors.Is(err, ErrClosed):
		return true, ErrClosed
	case errors.Is(err, errFastTooLarge):
		return false, nil // gRPC answers it (with its own limit)
	default:
		f.unreachable()
		return false, nil
	}
	f.fast.Add(1)
	return true, err
}

var (
	// errFastNone: no fast path is advertised (any more).
	errFastNone = errors.New("master: fast path: none advertised")
	// errFastTooLarge: a request over the fast path's frame limit.
	errFastTooLarge = errors.New("master: fast path: request too large")
)

// unreachable records a call that could not use the fast path.
func (f *fastClient) unreachable() {
	f.fallback.Add(1)
	f.retryAt.Store(time.Now().Add(fastRetryAfter).UnixNano())
}

// get returns an idle connection (the one used last, if still open) or a
// new one.
func (f *fastClient) get(ctx context.Context) (*fastConn, error) {
	for {
		f.mu.Lock()
		if f.mu.closed {
			f.mu.Unlock()
			return nil, ErrClosed
		}
		addr, gen := f.mu.addr, f.mu.gen
		if addr == nil {
			f.mu.Unlock()
			return nil, errFastNone
		}
		n := len(f.mu.free)
		if n == 0 {
			f.mu.open++
			f.mu.Unlock()
			c, err := f.dial(ctx, addr, gen)
			if err != nil {
				f.mu.Lock()
				f.mu.open--
				f.mu.Unlock()
				return nil, err
			}
			return c, nil
		}
		c := f.mu.free[n-1]
		f.mu.free[n-1] = nil
		f.mu.free = f.mu.free[:n-1]
		f.mu.Unlock()
		if c.idleOK() {
			return c, nil
		}
		f.drop(c) // the master closed it (restarted, shut down)
	}
}

// put returns a connection after a call: to the pool, or closed when the
// call broke it, its port is no longer advertised, or the client closed.
func (f *fastClient) put(c *fastConn) {
	c.ctx, c.deadline = nil, time.Time{}
	f.mu.Lock()
	if !c.broken && c.gen == f.mu.gen && !f.mu.closed {
		f.mu.free = append(f.mu.free, c)
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	f.drop(c)
}

func (f *fastClient) drop(c *fastConn) {
	c.close()
	f.mu.Lock()
	f.mu.open--
	f.mu.Unlock()
}

// stats adds f's counters to st.
func (f *fastClient) stats(st *TransportStats) {
	st.Fast += f.fast.Load()
	st.Fallback += f.fallback.Load()
	st.SpinHits += f.spins.hits.Load()
	st.SpinMisses += f.spins.misses.Load()
	f.mu.Lock()
	st.Conns += f.mu.open
	f.mu.Unlock()
}

// close ends the fast path: calls in flight end with ErrClosed and are
// waited for, then every connection and the eventfd are closed. Later
// calls return ErrClosed. Idempotent.
func (f *fastClient) close() error {
	f.mu.Lock()
	if f.mu.closed {
		f.mu.Unlock()
		return nil
	}
	f.mu.closed = true
	f.mu.Unlock()
	close(f.done)
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	_, werr := unix.Write(f.wake, one[:])
	f.calls.Wait()
	f.mu.Lock()
	free := f.mu.free
	f.mu.free = nil
	f.mu.open -= len(free)
	f.mu.Unlock()
	for _, c := range free {
		c.close()
	}
	var err error
	if werr != nil {
		err = fmt.Errorf("master: fast path: wake calls: %w", werr)
	}
	if cerr := unix.Close(f.wake); cerr != nil {
		err = errors.Join(err, fmt.Errorf("master: fast path: close eventfd: %w", cerr))
	}
	return err
}

// fastConn is one fast path connection: a blocking TCP socket, used by one
// call at a time. It is the net.Conn under crypto/tls when TLS is on.
type fastConn struct {
	f      *fastClient
	fd     int
	gen    uint64
	rw     io.ReadWriter // the connection itself, or TLS over it
	remote net.Addr
	// ctx and deadline bound the call (or the dial) in progress: Read and
	// Write wait in slices of fastPollSlice, checking ctx between.
	ctx      context.Context
	deadline time.Time
	buf      []byte
	pfd      [2]unix.PollFd
	broken   bool // a call failed mid-way: the connection is not reused
	// spin: the call in progress is small enough that its reads spin
	// (spin.go); false during the dial.
	spin bool
}

var _ net.Conn = (*fastConn)(nil)

// dial connects to the master's fast path at addr, with TLS when
// configured, and says hello.
func (f *fastClient) dial(ctx context.Context, addr unix.Sockaddr, gen uint64) (_ *fastConn, err error) {
	// A copy per dial: Connect writes the raw form into the Sockaddr.
	family := unix.AF_INET
	var remote *net.TCPAddr
	switch a := addr.(type) {
	case *unix.SockaddrInet4:
		cp := *a
		addr, remote = &cp, &net.TCPAddr{IP: net.IP(cp.Addr[:]), Port: cp.Port}
	case *unix.SockaddrInet6:
		cp := *a
		family, addr, remote = unix.AF_INET6, &cp, &net.TCPAddr{IP: net.IP(cp.Addr[:]), Port: cp.Port}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.IPPROTO_TCP)
	if err != nil {
		return nil, fmt.Errorf("master: fast path: socket: %w", err)
	}
	c := &fastConn{f: f, fd: fd, gen: gen, remote: remote, ctx: ctx, deadline: time.Now().Add(fastDialTimeout)}
	if d, ok := ctx.Deadline(); ok && d.Before(c.deadline) {
		c.deadline = d
	}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		return nil, fmt.Errorf("master: fast path: TCP_NODELAY: %w", err)
	}
	if err := unix.Connect(fd, addr); err != nil {
		if !errors.Is(err, unix.EINPROGRESS) {
			return nil, fmt.Errorf("master: fast path: connect %v: %w", remote, err)
		}
		if err := c.wait(unix.POLLOUT); err != nil {
			return nil, fmt.Errorf("master: fast path: connect %v: %w", remote, err)
		}
		if soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || soerr != 0 {
			return nil, fmt.Errorf("master: fast path: connect %v: %w", remote, errors.Join(err, unix.Errno(soerr)))
		}
	}
	// Blocking from here: a call's reads wait in poll(2), never in the
	// netpoller (writes use MSG_DONTWAIT so that deadlines hold).
	if err := unix.SetNonblock(fd, false); err != nil {
		return nil, fmt.Errorf("master: fast path: set blocking: %w", err)
	}
	c.rw = c
	if f.cfg.TLS != nil {
		cfg := f.cfg.TLS.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName = f.host
		}
		t := tls.Client(c, cfg)
		if err := t.Handshake(); err != nil {
			return nil, fmt.Errorf("master: fast path: TLS handshake with %v: %w", remote, err)
		}
		c.rw = t
	}
	hello := append(make([]byte, fastHeaderLen, fastHeaderLen+2+len(f.cfg.Token)), fastVersion, 0)
	hello = append(hello, f.cfg.Token...)
	putFastRequest(hello, fastHello, len(hello)-fastHeaderLen, 0)
	if _, err := c.rw.Write(hello); err != nil {
		return nil, fmt.Errorf("master: fast path: hello to %v: %w", remote, err)
	}
	code, _, body, err := c.readAnswer()
	if err != nil {
		return nil, fmt.Errorf("master: fast path: hello to %v: %w", remote, err)
	}
	if code != codes.OK {
		return nil, fmt.Errorf("master: fast path: hello refused by %v: %w", remote, answerStatus(code, body))
	}
	c.ctx, c.deadline = nil, time.Time{}
	return c, nil
}

// do makes one call. sent reports whether the request was written whole:
// before that the master cannot have run it.
func (c *fastConn) do(ctx context.Context, m fastMethod, req, resp any) (sent bool, err error) {
	defer c.trim() // after the answer is decoded: it is read into c.buf
	c.ctx = ctx
	var dl int64
	if d, ok := ctx.Deadline(); ok {
		c.deadline, dl = d, d.UnixNano()
		if dl <= 0 {
			dl = 1 // long past, but not "none"
		}
	}
	// The call owns the buffer until it sets c.buf again: one grown
	// (growBuf) may have gone back to its pool, and a failed call's is
	// dropped, never pooled twice.
	buf := c.buf[:0]
	c.buf = nil
	b, err := appendMessage(append(buf, make([]byte, fastHeaderLen)...), req)
	if err != nil {
		// As gRPC's codec error: the call fails, nothing was sent.
		return true, status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	if len(b)-fastHeaderLen > fastMaxFrame {
		c.buf = b[:0]
		return false, fmt.Errorf("%w: %v request of %d bytes exceeds %d", errFastTooLarge, m, len(b)-fastHeaderLen, fastMaxFrame)
	}
	putFastRequest(b, m, len(b)-fastHeaderLen, dl)
	c.spin = len(b)-fastHeaderLen <= spinMaxRequest
	_, err = c.rw.Write(b)
	c.buf = b[:0]
	if err != nil {
		c.broken = true
		if errors.Is(err, ErrClosed) {
			return false, ErrClosed
		}
		return false, err
	}
	code, epoch, body, err := c.readAnswer()
	if err != nil {
		c.broken = true
		return true, c.lost(err)
	}
	if code != codes.OK {
		return true, answerStatus(code, body)
	}
	if err := decodeMessage(body, resp); err != nil {
		return true, status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
	}
	if e := c.f.epochs; e != nil {
		// As epochConn: every answer of an HA master carries its term.
		if epoch == 0 {
			return true, fmt.Errorf("%w: the answer carries no epoch (a master without HA?)", ErrStaleEpoch)
		}
		return true, e.Observe(epoch)
	}
	return true, nil
}

// trim ends a call's use of the connection's buffer: a large one goes
// back to its pool (fastbuf.go), a small one is kept for the next call.
func (c *fastConn) trim() {
	if cap(c.buf) > fastBufKeep {
		putBigBuf(c.buf)
		c.buf = nil
	}
}

// lost is the error of a call whose answer did not arrive: the class gRPC
// gives (fromStatus decodes it).
func (c *fastConn) lost(err error) error {
	switch {
	case errors.Is(err, ErrClosed):
		return ErrClosed
	case errors.Is(err, context.Canceled):
		return ctxStatus(context.Canceled)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return ctxStatus(context.DeadlineExceeded)
	}
	return status.Errorf(codes.Unavailable, "master: fast path: connection to %v lost after the request was sent: %v", c.remote, err)
}

// ctxStatus is the status gRPC gives a call whose context ended.
func ctxStatus(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Canceled, err.Error())
}

// answerStatus decodes an error answer: the master's gRPC status.
func answerStatus(code codes.Code, body []byte) error {
	var s spb.Status
	if err := proto.Unmarshal(body, &s); err != nil || s.Code != int32(code) {
		return status.Errorf(codes.Internal, "master: fast path: malformed error answer (code %v, %d bytes)", code, len(body))
	}
	return status.ErrorProto(&s)
}

// readAnswer reads one answer frame. body is valid until the next call.
func (c *fastConn) readAnswer() (code codes.Code, epoch uint64, body []byte, err error) {
	b := c.buf[:0]
	c.buf = nil // owned here until the answer is read whole (do's buffer)
	if cap(b) < 4096 {
		b = make([]byte, 0, 4096)
	}
	want := fastHeaderLen
	for len(b) < want {
		n, err := c.rw.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if len(b) >= fastHeaderLen && want == fastHeaderLen {
			length := int(binary.LittleEndian.Uint32(b[0:4]))
			if length > fastMaxFrame || b[5] != 0 || b[6] != 0 || b[7] != 0 {
				return 0, 0, nil, fmt.Errorf("malformed answer header (length %d, bytes 5-7 %#x %#x %#x)", length, b[5], b[6], b[7])
			}
			want = fastHeaderLen + length
			b = growBuf(b, want-len(b))
		}
		if len(b) >= want {
			break
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, 0, nil, err
		}
	}
	c.buf = b[:0] // (the caller trims it once the body is decoded)
	if len(b) > want {
		return 0, 0, nil, fmt.Errorf("%d bytes past the answer", len(b)-want)
	}
	return codes.Code(b[4]), binary.LittleEndian.Uint64(b[8:16]), b[fastHeaderLen:want], nil
}

// wait waits in poll(2) until the socket is ready for ev, the call's
// context or deadline ends, or the client closes.
func (c *fastConn) wait(ev int16) error {
	for {
		slice := fastPollSlice
		if !c.deadline.IsZero() {
			left := time.Until(c.deadline)
			if left <= 0 {
				return os.ErrDeadlineExceeded
			}
			slice = min(slice, left)
		}
		if c.ctx != nil {
			if err := c.ctx.Err(); err != nil {
				return err
			}
		}
		c.pfd[0] = unix.PollFd{Fd: int32(c.fd), Events: ev}
		c.pfd[1] = unix.PollFd{Fd: int32(c.f.wake), Events: unix.POLLIN}
		n, err := unix.Poll(c.pfd[:], int((slice+time.Millisecond-1)/time.Millisecond))
		switch {
		case errors.Is(err, unix.EINTR) || n == 0:
			continue
		case err != nil:
			return fmt.Errorf("poll: %w", err)
		case c.pfd[1].Revents != 0:
			return ErrClosed
		case c.pfd[0].Revents != 0:
			return nil
		}
	}
}

// idleOK reports whether an idle connection is still usable: nothing is
// readable on it (the master sends nothing unasked; readable means it
// closed the connection).
func (c *fastConn) idleOK() bool {
	c.pfd[0] = unix.PollFd{Fd: int32(c.fd), Events: unix.POLLIN | unix.POLLRDHUP}
	for {
		n, err := unix.Poll(c.pfd[:1], 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n == 0
	}
}

// Read waits until the socket is readable, then reads: for a small call
// first polling it for the client's spin, when a spin slot is free, then
// in poll(2).
func (c *fastConn) Read(p []byte) (int, error) {
	if c.spin {
		if n, ok := spinRecv(c.fd, p, c.f.spin, &c.f.spins); ok {
			return n, nil
		}
	}
	for {
		if err := c.wait(unix.POLLIN); err != nil {
			return 0, err
		}
		n, err := unix.Read(c.fd, p)
		switch {
		case errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN):
			continue
		case err != nil:
			return 0, fmt.Errorf("read: %w", err)
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// Write writes p whole, waiting in poll(2) while the socket's buffer is
// full.
func (c *fastConn) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n, err := unix.SendmsgN(c.fd, p[done:], nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		switch {
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EAGAIN):
			if err := c.wait(unix.POLLOUT); err != nil {
				return done, err
			}
		case err != nil:
			return done, fmt.Errorf("write: %w", err)
		default:
			done += n
		}
	}
	return done, nil
}

// Close is a no-op for crypto/tls: the pool closes the socket (close).
func (c *fastConn) Close() error { return nil }

func (c *fastConn) close() {
	if c.fd >= 0 {
		_ = unix.Close(c.fd)
		c.fd = -1
	}
}

func (c *fastConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (c *fastConn) RemoteAddr() net.Addr               { return c.remote }
func (c *fastConn) SetDeadline(t time.Time) error      { c.deadline = t; return nil }
func (c *fastConn) SetReadDeadline(t time.Time) error  { c.deadline = t; return nil }
func (c *fastConn) SetWriteDeadline(t time.Time) error { c.deadline = t; return nil }
