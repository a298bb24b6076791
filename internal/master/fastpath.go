package master

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/kvfabric/kvfabric/api/kvfabric/v1"
)

// The fast path: a second listener of the master for its hot calls
// (GetReplicas, ReleaseLeases, PutStart, PutEnd, PutRevoke, Exists), where
// a client's calling thread writes the request and reads the answer itself
// on a connection of its own, and the master answers on the connection's
// goroutine. gRPC passes each call through several goroutines on each side;
// across processes those hand-offs cost ~70–85 µs per call on the GPU host
// (docs/perf/latency.md), the fast path ~25 µs.
//
// Everything else about a call is the gRPC server's: the bodies are the
// protobuf bytes of the gRPC messages (wire.go's hand codec, or the
// generated code for ReleaseLeases and Exists), the call runs through the
// same grpcService methods, the same authentication (one TLS configuration,
// Authenticator.authenticate), the same leadership gate (Router.enter and
// leave) and the same decode-error and status mapping (decodeError,
// toStatus); an error answer is the gRPC status itself (google.rpc.Status
// with its details), so a client decodes errors identically.
//
// A connection carries one call at a time, in order:
//
//	hello    client → master  request frame, method 0, body: version u16, then the bearer token (may be empty)
//	         master → client  answer frame: OK, or an error status after which the master closes
//	call     client → master  request frame: method 1–6, body: the gRPC request message
//	         master → client  answer frame: OK and the gRPC response message, or an error status
//
// Frames (little-endian):
//
//	request  length u32 | method u8 | flags u8 (0) | 0 u16 | deadline u64 (unix ns, 0: none) | body
//	answer   length u32 | code u8 (gRPC codes) | 0 u8 ×3 | epoch u64 (0: not an HA term) | body
//
// The master bounds a request's length by fastMaxFrame before it reads (or
// allocates) the body, refuses unknown methods and flags, and applies the
// deadline to the call's context. A malformed frame is answered with an
// error naming the field and its value, then the connection is closed.

// fastVersion is the fast path protocol version sent in the hello.
const fastVersion = 1

// fastHeaderLen is the length of request and answer headers.
const fastHeaderLen = 16

// fastMaxFrame bounds a frame's body: gRPC's default receive limit, which
// the master's gRPC server and its clients use (they set none), so both
// transports take the same requests.
const fastMaxFrame = 4 << 20

// fastMaxHello bounds the hello's body (version and token).
const fastMaxHello = 2 + 4096

// fastHelloTimeout bounds the TLS handshake and hello of a new connection.
const fastHelloTimeout = 10 * time.Second

// fastMethod numbers the fast path's calls on the wire.
type fastMethod uint8

const (
	fastHello fastMethod = iota
	fastGetReplicas
	fastReleaseLeases
	fastPutStart
	fastPutEnd
	fastPutRevoke
	fastExists
	fastMethods // the number of methods, hello included
)

// fastMethodNames are the gRPC method names (errors name them as gRPC does).
var fastMethodNames = [fastMethods]string{"hello", "GetReplicas", "ReleaseLeases", "PutStart", "PutEnd", "PutRevoke", "Exists"}

func (m fastMethod) String() string {
	if m < fastMethods {
		return fastMethodNames[m]
	}
	return fmt.Sprintf("method %d", uint8(m))
}

// fastRequest is a decoded request header.
type fastRequest struct {
	method   fastMethod
	length   int
	deadline int64 // unix ns, 0: none
}

// errFastFrame: a frame the master refuses; the connection is closed.
var errFastFrame = errors.New("master: fast path: malformed frame")

// parseFastRequest decodes and checks a request header: the length within
// fastMaxFrame (fastMaxHello for a hello), a known method, hello first and
// only first, no flags.
func parseFastRequest(h []byte, first bool) (fastRequest, error) {
	r := fastRequest{method: fastMethod(h[4]), length: int(binary.LittleEndian.Uint32(h[0:4])),
		deadline: int64(binary.LittleEndian.Uint64(h[8:16]))}
	switch {
	case r.method >= fastMethods:
		return r, fmt.Errorf("%w: method %d is unknown (want 0 to %d)", errFastFrame, h[4], fastMethods-1)
	case first && r.method != fastHello:
		return r, fmt.Errorf("%w: method %v before the hello", errFastFrame, r.method)
	case !first && r.method == fastHello:
		return r, fmt.Errorf("%w: a second hello", errFastFrame)
	case h[5] != 0 || h[6] != 0 || h[7] != 0:
		return r, fmt.Errorf("%w: flags %#x and reserved bytes %#x %#x must be 0", errFastFrame, h[5], h[6], h[7])
	case r.method == fastHello && r.length > fastMaxHello:
		return r, fmt.Errorf("%w: hello length %d exceeds %d bytes", errFastFrame, r.length, fastMaxHello)
	case r.length > fastMaxFrame:
		return r, fmt.Errorf("%w: length %d exceeds the limit of %d bytes", errFastFrame, r.length, fastMaxFrame)
	case r.deadline < 0:
		return r, fmt.Errorf("%w: deadline %d is negative", errFastFrame, r.deadline)
	}
	return r, nil
}

// putFastRequest writes a request header at the start of b.
func putFastRequest(b []byte, m fastMethod, length int, deadline int64) {
	binary.LittleEndian.PutUint32(b[0:4], uint32(length))
	b[4], b[5], b[6], b[7] = byte(m), 0, 0, 0
	binary.LittleEndian.PutUint64(b[8:16], uint64(deadline))
}

// putFastAnswer writes an answer header at the start of b.
func putFastAnswer(b []byte, code codes.Code, epoch uint64, length int) {
	binary.LittleEndian.PutUint32(b[0:4], uint32(length))
	b[4], b[5], b[6], b[7] = byte(code), 0, 0, 0
	binary.LittleEndian.PutUint64(b[8:16], epoch)
}

// fastServer is a Server's fast path listener and connections.
type fastServer struct {
	mu struct {
		sync.Mutex
		lis      net.Listener
		conns    map[net.Conn]struct{}
		shutdown bool
	}
	wg sync.WaitGroup // one per connection goroutine
	// spin is how long (ns) a connection polls its socket for data before
	// it waits in the netpoller (spin.go), read when a connection starts:
	// 0 until SetFastSpin (DefaultFastSpin), -1 for none.
	spin  atomic.Int64
	spins spinCounts
}

// SetFastSpin sets how long each fast path connection polls its socket for
// the next request after a small one (spin.go) before it sleeps (0: never;
// at most 10 ms), for the connections accepted from now on. Without it,
// DefaultFastSpin. At most a quarter of GOMAXPROCS waits of the process
// (at least one) spin at once.
func (s *Server) SetFastSpin(d time.Duration) error {
	if err := CheckFastSpin("fast path spin", d); err != nil {
		return err
	}
	if d == 0 {
		s.fast.spin.Store(-1)
	} else {
		s.fast.spin.Store(int64(d))
	}
	return nil
}

// FastSpinCounts returns how many of the fast path's reads polled the
// socket and found data (hits) and how many polled for the whole spin in
// vain and slept (misses).
func (s *Server) FastSpinCounts() (hits, misses uint64) {
	return s.fast.spins.hits.Load(), s.fast.spins.misses.Load()
}

// spinFor is the spin of a connection accepted now.
func (f *fastServer) spinFor() time.Duration {
	switch d := f.spin.Load(); {
	case d == 0:
		return DefaultFastSpin
	case d < 0:
		return 0
	default:
		return time.Duration(d)
	}
}

// spinConn is a fast path connection whose reads, after a small call
// (armed), first poll the socket for up to spin without sleeping (spin.go),
// then wait in the netpoller. Deadlines and Close are the connection's: a
// spinning read sees them once its spin ends. Only the connection's
// goroutine uses it.
type spinConn struct {
	net.Conn
	raw    syscall.RawConn
	spin   time.Duration
	counts *spinCounts
	armed  bool // the last request was small: its client may call again soon
}

func (c *spinConn) Read(p []byte) (int, error) {
	if !c.armed {
		return c.Conn.Read(p)
	}
	var n int
	var ok bool
	if err := c.raw.Read(func(fd uintptr) bool {
		n, ok = spinRecv(int(fd), p, c.spin, c.counts)
		return true // never wait here: the netpoller wait is Conn.Read's
	}); err == nil && ok {
		return n, nil
	}
	return c.Conn.Read(p)
}

// ListenFast makes lis the fast path's listener and advertises its port to
// clients in RegisterClient's answer, from now on; ServeFast serves it.
// Call it before clients may register (ServeFast calls it too, but usually
// on a goroutine of its own, which may run late). After Shutdown it closes
// lis.
func (s *Server) ListenFast(lis net.Listener) error {
	f := &s.fast
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.shutdown {
		return lis.Close()
	}
	if f.mu.lis != nil && f.mu.lis != lis {
		return fmt.Errorf("%w: the fast path listens on %v already", ErrInvalid, f.mu.lis.Addr())
	}
	f.mu.lis = lis
	if a, ok := lis.Addr().(*net.TCPAddr); ok {
		s.g.fastPort.Store(uint32(a.Port))
	}
	return nil
}

// ServeFast serves the fast path on lis until Shutdown, with TLS when tc is
// not nil (the gRPC listener's configuration: the same certificate and
// client CAs). The port of lis is advertised to clients in RegisterClient's
// answer (see ListenFast). It returns nil after Shutdown, or the
// listener's error.
func (s *Server) ServeFast(lis net.Listener, tc *tls.Config) error {
	f := &s.fast
	if err := s.ListenFast(lis); err != nil {
		return err
	}
	if f.down() {
		return nil
	}
	var delay time.Duration
	for {
		c, err := lis.Accept()
		if err != nil {
			f.mu.Lock()
			down := f.mu.shutdown
			f.mu.Unlock()
			if down {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of file descriptors or similar: wait and retry, as
				// net/http does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			s.g.fastPort.Store(0)
			return fmt.Errorf("master: fast path: accept: %w", err)
		}
		delay = 0
		f.mu.Lock()
		if f.mu.shutdown {
			f.mu.Unlock()
			_ = c.Close()
			return nil
		}
		if f.mu.conns == nil {
			f.mu.conns = map[net.Conn]struct{}{}
		}
		f.mu.conns[c] = struct{}{}
		f.wg.Add(1)
		f.mu.Unlock()
		go func() {
			defer f.wg.Done()
			defer f.forget(c)
			s.serveFastConn(c, tc)
		}()
	}
}

func (f *fastServer) forget(c net.Conn) {
	_ = c.Close()
	f.mu.Lock()
	delete(f.mu.conns, c)
	f.mu.Unlock()
}

func (f *fastServer) down() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.shutdown
}

// shutdown stops the fast path: no new connections; idle connections end
// at once, a connection in a call ends after its answer. When ctx ends
// first, the connections are closed under their calls.
func (f *fastServer) shutdown(ctx context.Context) error {
	f.mu.Lock()
	f.mu.shutdown = true
	var err error
	if f.mu.lis != nil {
		if cerr := f.mu.lis.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
			err = fmt.Errorf("master: fast path: close listener: %w", cerr)
		}
	}
	// A reader waiting for a request wakes with a timeout and, seeing
	// shutdown, ends; one in a call reads next after its answer.
	for c := range f.mu.conns {
		_ = c.SetReadDeadline(time.Unix(1, 0))
	}
	f.mu.Unlock()
	done := make(chan struct{})
	go func() {
		f.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		f.mu.Lock()
		for c := range f.mu.conns {
			_ = c.Close()
		}
		f.mu.Unlock()
		<-done
		err = errors.Join(err, fmt.Errorf("master: fast path shutdown: %w (calls in flight were cut)", ctx.Err()))
	}
	return err
}

// fastConnState is the server's state of one connection.
type fastConnState struct {
	g   *grpcService
	rw  io.ReadWriter
	br  *bufio.Reader
	ctx context.Context // carries the connection's principal
	in  []byte          // request body buffer
	out []byte          // answer buffer
	// spin is the connection when it spins (nil: it never does): armed
	// after answering a small request.
	spin *spinConn
}

// fastBufKeep bounds the buffers a connection keeps between calls.
const fastBufKeep = 64 << 10

func (s *Server) serveFastConn(c net.Conn, tc *tls.Config) {
	_ = c.SetDeadline(time.Now().Add(fastHelloTimeout))
	var st *tls.ConnectionState
	var rw io.ReadWriter = c
	var nc net.Conn = c // the connection under TLS
	var spin *spinConn
	if d := s.fast.spinFor(); d > 0 {
		if sc, ok := c.(syscall.Conn); ok {
			if raw, err := sc.SyscallConn(); err == nil {
				spin = &spinConn{Conn: c, raw: raw, spin: d, counts: &s.fast.spins}
				nc, rw = spin, spin
			}
		}
	}
	if tc != nil {
		t := tls.Server(nc, tc)
		if err := t.Handshake(); err != nil {
			return // the client sees the handshake fail
		}
		cs := t.ConnectionState()
		st, rw = &cs, t
	}
	cs := &fastConnState{g: s.g, rw: rw, br: bufio.NewReaderSize(rw, 4096), ctx: context.Background(), spin: spin}
	if !cs.hello(st) {
		return
	}
	// Idle connections wait without a deadline. Shutdown sets one after
	// setting its flag, so checking the flag after clearing ours misses
	// no shutdown.
	if c.SetDeadline(time.Time{}) != nil || s.fast.down() {
		return
	}
	for cs.call() {
	}
}

// hello reads the client's hello and authenticates it; false ends the
// connection (after an error answer when the hello was read).
func (cs *fastConnState) hello(st *tls.ConnectionState) bool {
	_, body, err := cs.read(true)
	if err != nil {
		return false
	}
	if len(body) < 2 {
		cs.refuse(fmt.Errorf("%w: %w: hello of %d bytes, want at least 2 (the version)", ErrInvalid, errFastFrame, len(body)))
		return false
	}
	if v := binary.LittleEndian.Uint16(body); v != fastVersion {
		cs.refuse(fmt.Errorf("%w: %w: hello version %d, this master speaks %d", ErrInvalid, errFastFrame, v, fastVersion))
		return false
	}
	tok := string(body[2:])
	p, err := cs.g.auth.authenticate(st, tok, tok != "", "the fast path")
	if err != nil {
		cs.refuse(err)
		return false
	}
	if p.Name != "" {
		cs.ctx = WithPrincipal(cs.ctx, p)
	}
	return cs.answer(0, nil, nil) == nil
}

// read reads one request: its header and body (a buffer reused between
// calls; the length is checked before anything is allocated for it). A
// malformed header is answered and returned as an error.
func (cs *fastConnState) read(first bool) (fastRequest, []byte, error) {
	var h [fastHeaderLen]byte
	if _, err := io.ReadFull(cs.br, h[:]); err != nil {
		return fastRequest{}, nil, err
	}
	req, err := parseFastRequest(h[:], first)
	if err != nil {
		cs.refuse(fmt.Errorf("%w: %w", ErrInvalid, err))
		return req, nil, err
	}
	if cs.spin != nil {
		// A small call's client may call again soon: the reads from here
		// to the next request's header spin. A large one's body is
		// streaming in, and its client comes back later.
		cs.spin.armed = req.length <= spinMaxRequest
	}
	cs.in = growBuf(cs.in[:0], req.length)
	body := cs.in[:req.length]
	if n, err := io.ReadFull(cs.br, body); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			cs.refuse(fmt.Errorf("%w: %w: %v body of %d bytes ends after %d", ErrInvalid, errFastFrame, req.method, req.length, n))
		}
		return req, nil, err
	}
	return req, body, nil
}

// head returns the answer buffer holding a header's room.
func (cs *fastConnState) head() []byte {
	if cap(cs.out) < fastHeaderLen {
		cs.out = make([]byte, fastHeaderLen, 4096)
	}
	return cs.out[:fastHeaderLen]
}

// refuse answers err (best effort: the connection ends next).
func (cs *fastConnState) refuse(err error) {
	_ = cs.answer(0, nil, toStatus(err))
}

// call serves one call; false ends the connection.
func (cs *fastConnState) call() bool {
	req, body, err := cs.read(false)
	if err != nil {
		return false
	}
	ctx := cs.ctx
	if req.deadline != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, time.Unix(0, req.deadline))
		defer cancel()
	}
	epoch, out, err := cs.g.fastCall(ctx, req.method, body, cs.head())
	if len(out) > fastHeaderLen+fastMaxFrame {
		// What a gRPC client says of an answer over its receive limit.
		out, err = cs.head(), status.Errorf(codes.ResourceExhausted, "master: fast path: %v answer of %d bytes exceeds the limit of %d bytes; send smaller batches",
			req.method, len(out)-fastHeaderLen, fastMaxFrame)
	}
	werr := cs.answer(epoch, out, err)
	if cap(cs.in) > fastBufKeep {
		putBigBuf(cs.in) // the request decoded from a copy (fastDo)
		cs.in = nil
	}
	return werr == nil
}

// answer writes an answer: out holds a reserved header and the body of a
// success; err (a status error) replaces it with its status.
func (cs *fastConnState) answer(epoch uint64, out []byte, err error) error {
	code := codes.OK
	if err != nil {
		st := status.Convert(err)
		code = st.Code()
		b, merr := proto.MarshalOptions{}.MarshalAppend(cs.head(), st.Proto())
		if merr != nil {
			b, _ = proto.MarshalOptions{}.MarshalAppend(cs.head(), status.New(codes.Internal, "master: fast path: encode status: "+merr.Error()).Proto())
		}
		out = b
	}
	if out == nil {
		out = cs.head()
	}
	putFastAnswer(out, code, epoch, len(out)-fastHeaderLen)
	_, werr := cs.rw.Write(out)
	cs.out = out[:0]
	if cap(out) > fastBufKeep {
		putBigBuf(out)
		cs.out = nil
	}
	return werr
}

// fastCall runs one call of the fast path as the gRPC server would (see
// serviceDesc): the leadership gate (routed), the body decoded (a body that
// does not decode is the caller's fault: invalidOnDecodeError), the
// grpcService method. It appends the encoded answer to out and returns the
// answer's epoch; err is a status error.
func (g *grpcService) fastCall(ctx context.Context, m fastMethod, body, out []byte) (epoch uint64, _ []byte, err error) {
	method := m.String()
	if g.router != nil {
		t, err := g.router.enter(method)
		if err != nil {
			return 0, out, toStatus(err)
		}
		epoch = t.term.Epoch
		out, err = t.g.fastDo(ctx, m, body, out)
		if lerr := g.router.leave(t); lerr != nil {
			return epoch, out, toStatus(lerr)
		}
		return epoch, out, err
	}
	out, err = g.fastDo(ctx, m, body, out)
	return 0, out, err
}

// fastDo decodes body, calls the method and appends its answer to out.
func (g *grpcService) fastDo(ctx context.Context, m fastMethod, body, out []byte) ([]byte, error) {
	var resp any
	var err error
	switch m {
	case fastGetReplicas:
		in := new(keysRequest)
		if derr := in.unmarshalOwned(string(body)); derr != nil {
			return out, toStatus(decodeError(m.String(), derr))
		}
		resp, err = g.getReplicas(WithReader(ctx, in.reader), in)
		in.free()
	case fastPutStart:
		in := new(putStartRequest)
		if derr := in.unmarshalOwned(string(body)); derr != nil {
			return out, toStatus(decodeError(m.String(), derr))
		}
		resp, err = g.putStart(ctx, in)
		in.free()
	case fastPutEnd, fastPutRevoke:
		in := new(putRefsRequest)
		if derr := in.unmarshalOwned(string(body)); derr != nil {
			return out, toStatus(decodeError(m.String(), derr))
		}
		op := opPutEnd
		if m == fastPutRevoke {
			op = opPutRevoke
		}
		resp, err = g.putFinish(ctx, op, in.puts)
		in.free()
	case fastReleaseLeases:
		var in pb.ReleaseLeasesRequest
		if derr := proto.Unmarshal(body, &in); derr != nil {
			return out, toStatus(decodeError(m.String(), derr))
		}
		resp, err = g.ReleaseLeases(ctx, &in)
	case fastExists:
		var in pb.ExistsRequest
		if derr := proto.Unmarshal(body, &in); derr != nil {
			return out, toStatus(decodeError(m.String(), derr))
		}
		resp, err = g.Exists(ctx, &in)
	default:
		return out, status.Errorf(codes.Unimplemented, "master: fast path: %v is not served", m)
	}
	if err != nil {
		return out, err
	}
	b, err := appendMessage(out, resp)
	if err != nil {
		return out, toStatus(fmt.Errorf("master: fast path: encode %v answer: %w", m, err))
	}
	return b, nil
}

// appendMessage appends the encoding of a wireMessage or a generated
// message.
func appendMessage(b []byte, v any) ([]byte, error) {
	switch m := v.(type) {
	case wireMessage:
		return m.appendWire(growBuf(b, m.wireSize()))
	case proto.Message:
		return proto.MarshalOptions{}.MarshalAppend(b, m)
	}
	return b, fmt.Errorf("master: fast path: cannot encode %T", v)
}

// decodeMessage decodes b into a wireMessage or a generated message.
func decodeMessage(b []byte, v any) error {
	switch m := v.(type) {
	case wireMessage:
		return m.unmarshalWire(b)
	case proto.Message:
		return proto.Unmarshal(b, m)
	}
	return fmt.Errorf("master: fast path: cannot decode %T", v)
}
