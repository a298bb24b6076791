package fdx

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvfabric/kvfabric/internal/segment"
	"github.com/kvfabric/kvfabric/internal/teardown"
)

// Options configures a Server. The zero value is useful.
type Options struct {
	// AllowUIDs are uids other than the server's own that may fetch fds.
	// The socket file is mode 0600, so a peer of another uid also needs the
	// directory and file opened to it by the deployment (e.g. a group ACL);
	// SO_PEERCRED is the check that counts.
	AllowUIDs []uint32
	// MaxConns bounds concurrently served connections (default 128); extra
	// connections are closed at once.
	MaxConns int
	// IOTimeout bounds one request/response exchange and how long an idle
	// connection is kept (default 5s).
	IOTimeout time.Duration
	// Logger receives refusals and accept errors; nil discards.
	Logger *slog.Logger
}

// Server serves registered fds to local consumers. It satisfies the pool's
// FDRegistry interface (Register, Unregister, SocketPath).
//
// All methods are safe for concurrent use. The server owns every registered
// fd and one goroutine per connection plus the accept loop; Close joins them
// all.
type Server struct {
	path      string
	uid       atomic.Uint32 // the server's uid (atomic only for a test hook)
	allow     map[uint32]bool
	maxConns  int
	ioTimeout time.Duration
	log       *slog.Logger

	ln       *net.UnixListener
	sockStat os.FileInfo // the socket file we created, to remove only ours
	wg       sync.WaitGroup

	mu struct {
		sync.Mutex
		closed bool
		// fds holds the owned fd of every registered key.
		fds map[segment.Key]int
		// gens counts registered generations per id (refusal reasons).
		gens map[string]int
		// conns are the connections being served (closed by Close).
		conns map[*net.UnixConn]struct{}
		// closeFailed records keys whose fd close reported an error. Linux
		// releases the descriptor even then, so it must never be closed
		// again; a retried Unregister of such a key succeeds (the pool's
		// retry contract) instead of reporting ErrNotRegistered.
		closeFailed map[segment.Key]struct{}
	}
	closeMu  sync.Mutex      // serialises Close
	closeSt  teardown.Record // guarded by closeMu: Close steps that succeeded
	closeErr error           // guarded by closeMu: first Close's result for joined retries
}

// maxSocketPath is sizeof(sockaddr_un.sun_path) minus the terminating NUL.
const maxSocketPath = 107

// Listen creates a Server on dir/name.sock with default options.
func Listen(dir, name string, log *slog.Logger) (*Server, error) {
	return ListenOptions(dir, name, Options{Logger: log})
}

// ListenOptions creates a Server on dir/name.sock. A stale socket file left
// by a dead server at that path is replaced; a live one yields ErrInUse; a
// non-socket file there is an error and is left alone.
func ListenOptions(dir, name string, opts Options) (_ *Server, err error) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return nil, fmt.Errorf("fdx: socket name %q: must be a non-empty file name", name)
	}
	path := filepath.Join(dir, name+".sock")
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("fdx: socket path %q is %d bytes, the limit is %d", path, len(path), maxSocketPath)
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	s := &Server{
		path:      path,
		allow:     make(map[uint32]bool, len(opts.AllowUIDs)),
		maxConns:  opts.MaxConns,
		ioTimeout: opts.IOTimeout,
		log:       opts.Logger,
	}
	s.uid.Store(uint32(os.Getuid()))
	for _, u := range opts.AllowUIDs {
		s.allow[u] = true
	}
	if s.maxConns <= 0 {
		s.maxConns = 128
	}
	if s.ioTimeout <= 0 {
		s.ioTimeout = 5 * time.Second
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.mu.fds = make(map[segment.Key]int)
	s.mu.closeFailed = make(map[segment.Key]struct{})
	s.mu.gens = make(map[string]int)
	s.mu.conns = make(map[*net.UnixConn]struct{})

	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("fdx: listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false) // Close removes the file only if it is still ours
	defer func() {
		if err != nil {
			ln.Close()
			os.Remove(path)
		}
	}()
	// The window between bind and chmod is covered by the SO_PEERCRED check.
	if err = os.Chmod(path, 0o600); err != nil {
		return nil, fmt.Errorf("fdx: chmod %s: %w", path, err)
	}
	if s.sockStat, err = os.Lstat(path); err != nil {
		return nil, fmt.Errorf("fdx: stat %s: %w", path, err)
	}
	s.ln = ln
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// removeStale removes a socket file at path that no server answers on.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("fdx: stat %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("fdx: %s exists and is not a socket (mode %v)", path, fi.Mode())
	}
	c, err := net.DialTimeout("unixpacket", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%w: %s", ErrInUse, path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.EPROTOTYPE) {
		return fmt.Errorf("fdx: probe %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("fdx: remove stale socket %s: %w", path, err)
	}
	return nil
}

// SweepStale removes the sockets of dead servers in dir: files matching
// pattern (filepath.Match, e.g. "kvfabric-*.sock") that are sockets owned by
// this process's uid, last changed at least minAge ago, and on which
// nobody listens (a connect is refused). A provider that died without
// teardown leaves its socket behind, and one named after its pid is never
// reused by the next provider, so the next to start sweeps. minAge keeps a
// server that has just bound its socket and not yet listened on it (a
// window of microseconds) from being swept. Anything else — a live socket,
// another uid's, another kind of file or socket — is left alone. It returns
// the paths it removed, and the errors of the ones it could not.
func SweepStale(dir, pattern string, minAge time.Duration) ([]string, error) {
	names, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil {
		return nil, fmt.Errorf("fdx: sweep %s: %w", dir, err)
	}
	uid := uint32(os.Getuid())
	var removed []string
	var errs []error
	for _, p := range names {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSocket == 0 || time.Since(fi.ModTime()) < minAge {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != uid {
			continue
		}
		c, err := net.DialTimeout("unixpacket", p, time.Second)
		if err == nil {
			c.Close()
			continue // live
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			continue // not ours to judge (another socket type, a full backlog, …)
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("fdx: remove stale socket %s: %w", p, err))
			continue
		}
		removed = append(removed, p)
	}
	return removed, errors.Join(errs...)
}

// SocketPath is the path consumers pass to Fetch (it goes into the segment
// descriptor's Handle.SocketPath).
func (s *Server) SocketPath() string { return s.path }

// Register hands fd to the server for key k. On success the server owns fd
// (Unregister or Close closes it); on error the caller still owns it.
func (s *Server) Register(k segment.Key, fd int) error {
	if k.ID == "" || len(k.ID) > segment.MaxIDLen {
		return fmt.Errorf("fdx: register: segment id %q: must be 1..%d bytes", k.ID, segment.MaxIDLen)
	}
	if fd < 0 {
		return fmt.Errorf("fdx: register %v: invalid fd %d", k, fd)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return fmt.Errorf("fdx: register %v: %w", k, ErrClosed)
	}
	if _, ok := s.mu.fds[k]; ok {
		return fmt.Errorf("fdx: register %v: %w", k, ErrDuplicate)
	}
	s.mu.fds[k] = fd
	s.mu.gens[k.ID]++
	return nil
}

// Unregister stops serving k and closes its fd. Fds already sent stay valid
// in the receivers (they hold their own references).
func (s *Server) Unregister(k segment.Key) error {
	s.mu.Lock()
	fd, ok := s.mu.fds[k]
	closed := s.mu.closed
	if ok {
		delete(s.mu.fds, k)
		if s.mu.gens[k.ID]--; s.mu.gens[k.ID] == 0 {
			delete(s.mu.gens, k.ID)
		}
	}
	_, retry := s.mu.closeFailed[k]
	if !ok && retry {
		delete(s.mu.closeFailed, k)
	}
	s.mu.Unlock()
	if !ok {
		if retry {
			return nil // the earlier close released the fd despite its error
		}
		if closed {
			return fmt.Errorf("fdx: unregister %v: %w", k, ErrClosed)
		}
		return fmt.Errorf("fdx: unregister %v: %w", k, ErrNotRegistered)
	}
	if err := closeFD(fd); err != nil {
		s.mu.Lock()
		s.mu.closeFailed[k] = struct{}{}
		s.mu.Unlock()
		return fmt.Errorf("fdx: unregister %v: close fd %d: %w", k, fd, err)
	}
	return nil
}

// closeFD closes an owned fd; tests replace it to inject close failures.
var closeFD = syscall.Close

// Close shuts the server down. In order:
//
//  1. new connections and registrations are refused (ErrClosed);
//  2. the listener is closed;
//  3. connections being served are closed;
//  4. the accept loop and connection goroutines are joined;
//  5. the socket file is removed (only if it is still the one Listen made);
//  6. every still-registered fd is closed.
//
// Close is idempotent: a second call redoes only failed steps (and step 4,
// which needs step 2) and returns nil once all have succeeded.
func (s *Server) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	s.mu.Lock()
	s.mu.closed = true
	s.mu.Unlock()

	const listener = "fdx: close listener"
	return s.closeSt.Run(
		teardown.Step{Name: listener, Do: s.closeListener},
		teardown.Step{Name: "fdx: close connections", Do: s.closeConns},
		teardown.Step{Name: "fdx: join goroutines", Needs: []string{listener}, Do: func() error {
			s.wg.Wait() // bounded: the listener and every connection are closed
			return nil
		}},
		teardown.Step{Name: "fdx: remove socket", Do: s.removeSocket},
		teardown.Step{Name: "fdx: close registered fds", Do: s.closeFDs},
	)
}

// closeListener closes the listener (Close step 2; closeMu held).
func (s *Server) closeListener() error {
	if err := s.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("%s: %w", s.path, err)
	}
	return nil
}

// closeConns closes the connections being served (Close step 3; closeMu
// held); each serving goroutine reports and forgets its own.
func (s *Server) closeConns() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.mu.conns {
		c.Close()
	}
	return nil
}

// removeSocket removes the socket file if it is still the one Listen made
// (Close step 5; closeMu held).
func (s *Server) removeSocket() error {
	fi, err := os.Lstat(s.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("stat %s: %w", s.path, err)
	case !os.SameFile(fi, s.sockStat):
		return nil // someone else's now; not ours to remove
	}
	if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %w", s.path, err)
	}
	return nil
}

// closeFDs closes every still-registered fd (Close step 6; closeMu held).
// Linux releases an fd even when close reports an error, so no fd is ever
// closed twice: the fds are forgotten first, and a retry after an error
// finds none left.
func (s *Server) closeFDs() error {
	s.mu.Lock()
	fds := s.mu.fds
	s.mu.fds = map[segment.Key]int{}
	s.mu.gens = map[string]int{}
	s.mu.Unlock()
	var errs []error
	for k, fd := range fds {
		if err := syscall.Close(fd); err != nil {
			errs = append(errs, fmt.Errorf("fd %d of %v: %w", fd, k, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closed := s.mu.closed
			s.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and friends: back off instead of spinning.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("fdx: accept failed", "socket", s.path, "err", err, "retry_in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s.mu.Lock()
		if s.mu.closed || len(s.mu.conns) >= s.maxConns {
			full := !s.mu.closed
			s.mu.Unlock()
			if full {
				s.log.Warn("fdx: too many connections; dropping one", "socket", s.path, "max", s.maxConns)
			}
			c.Close()
			continue
		}
		s.mu.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

// peerUID returns the SO_PEERCRED uid and pid of c.
func peerUID(c *net.UnixConn) (uid uint32, pid int32, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if cerr != nil {
		return 0, 0, cerr
	}
	return cred.Uid, cred.Pid, nil
}

func (s *Server) serve(c *net.UnixConn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.mu.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	uid, pid, err := peerUID(c)
	permitted := err == nil && (uid == s.uid.Load() || s.allow[uid])
	if err != nil {
		s.log.Warn("fdx: SO_PEERCRED failed; refusing", "socket", s.path, "err", err)
	}
	buf := make([]byte, maxPacket+1)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	for {
		if err := c.SetDeadline(time.Now().Add(s.ioTimeout)); err != nil {
			return
		}
		n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.log.Debug("fdx: read request", "socket", s.path, "peer_pid", pid, "err", err)
			}
			return
		}
		if n == 0 && oobn == 0 {
			return // orderly shutdown by the peer (SOCK_SEQPACKET reads 0)
		}
		var resp []byte
		var sendFD = -1
		switch k, derr := decodeRequest(buf[:n]); {
		case oobn > 0 || flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0:
			closeRights(oob[:oobn])
			resp = encodeResponse(statusBadRequest, "request must be one packet without ancillary data")
		case derr != nil:
			resp = encodeResponse(statusBadRequest, derr.Error())
		case !permitted:
			s.log.Info("fdx: refused peer", "socket", s.path, "peer_uid", uid, "peer_pid", pid, "segment", k.String())
			resp = encodeResponse(statusNotPermitted, fmt.Sprintf("uid %d is not permitted by the provider (uid %d)", uid, s.uid.Load()))
		default:
			resp, sendFD = s.lookup(k)
		}
		var rights []byte
		if sendFD >= 0 {
			rights = syscall.UnixRights(sendFD)
		}
		_, _, werr := c.WriteMsgUnix(resp, rights, nil)
		if sendFD >= 0 {
			syscall.Close(sendFD)
		}
		if werr != nil {
			s.log.Debug("fdx: write response", "socket", s.path, "peer_pid", pid, "err", werr)
			return
		}
		if !permitted {
			return
		}
	}
}

// lookup returns the response for k and, when found, a close-on-exec
// duplicate of its fd that the caller sends and closes. Duplicating under the
// lock lets Unregister close the original at any time.
func (s *Server) lookup(k segment.Key) (resp []byte, dup int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return encodeResponse(statusClosing, "provider is shutting down"), -1
	}
	fd, ok := s.mu.fds[k]
	if !ok {
		if s.mu.gens[k.ID] > 0 {
			return encodeResponse(statusGenerationMismatch, fmt.Sprintf("segment %q is registered, but not generation %#x", k.ID, k.Generation)), -1
		}
		return encodeResponse(statusUnknownSegment, fmt.Sprintf("segment %q is not registered", k.ID)), -1
	}
	d, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if errno != 0 {
		return encodeResponse(statusClosing, "provider cannot duplicate the fd: "+errno.Error()), -1
	}
	return encodeResponse(statusOK, ""), int(d)
}

// closeRights closes every fd carried in the control message bytes oob.
func closeRights(oob []byte) {
	for _, fd := range parseRights(oob) {
		syscall.Close(fd)
	}
}

func parseRights(oob []byte) []int {
	if len(oob) == 0 {
		return nil
	}
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if got, err := syscall.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}
