package fdx_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/fdx"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// openFDs counts this process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("read /proc/self/fd: %v", err)
	}
	return len(ents) - 1 // the ReadDir's own descriptor
}

// tempFD returns an fd of a fresh file holding content; the caller owns it.
func tempFD(t *testing.T, content string) int {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "seg")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	return fd
}

// settleFDs waits until the open-fd count is want: the in-process server
// closes its side of a connection asynchronously after the client leaves.
func settleFDs(t testing.TB, want int) {
	t.Helper()
	got := openFDs(t)
	for end := time.Now().Add(3 * time.Second); got != want && time.Now().Before(end); got = openFDs(t) {
		time.Sleep(5 * time.Millisecond)
	}
	if got != want {
		t.Fatalf("open fds: %d, want %d (leak)", got, want)
	}
}

// stableFDs returns the open-fd count once it stops changing (server-side
// closes of earlier connections have landed).
func stableFDs(t testing.TB) int {
	t.Helper()
	prev := openFDs(t)
	for range 100 {
		time.Sleep(20 * time.Millisecond)
		cur := openFDs(t)
		if cur == prev {
			return cur
		}
		prev = cur
	}
	t.Fatal("open-fd count never settled")
	return 0
}

func readFD(t *testing.T, fd int) string {
	t.Helper()
	b := make([]byte, 64)
	n, err := syscall.Pread(fd, b, 0)
	if err != nil {
		t.Fatalf("pread fd %d: %v", fd, err)
	}
	return string(b[:n])
}

func newServer(t *testing.T, opts fdx.Options) *fdx.Server {
	t.Helper()
	s, err := fdx.ListenOptions(t.TempDir(), "prov", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

var keyA = segment.Key{ID: "host/c1/dram0/0", Generation: 0x9f01}

func TestFetchRoundTrip(t *testing.T) {
	s := newServer(t, fdx.Options{})
	fi, err := os.Stat(s.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want socket 0600", fi.Mode())
	}
	if err := s.Register(keyA, tempFD(t, "generation-9f01")); err != nil {
		t.Fatal(err)
	}
	before := stableFDs(t)
	for i := 0; i < 3; i++ {
		fd, err := fdx.Fetch(context.Background(), s.SocketPath(), keyA)
		if err != nil {
			t.Fatal(err)
		}
		if got := readFD(t, fd); got != "generation-9f01" {
			t.Fatalf("fetched fd reads %q", got)
		}
		flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
		if errno != 0 || flags&syscall.FD_CLOEXEC == 0 {
			t.Fatalf("fetched fd flags %#x errno %v: want FD_CLOEXEC", flags, errno)
		}
		syscall.Close(fd)
	}
	settleFDs(t, before)
}

func TestRefusals(t *testing.T) {
	s := newServer(t, fdx.Options{})
	if err := s.Register(keyA, tempFD(t, "a")); err != nil {
		t.Fatal(err)
	}
	// Warm up the runtime's poller so that the fd count is stable.
	if fd, err := fdx.Fetch(context.Background(), s.SocketPath(), keyA); err != nil {
		t.Fatal(err)
	} else {
		syscall.Close(fd)
	}
	before := stableFDs(t)
	for _, tc := range []struct {
		name string
		path string
		key  segment.Key
		want error
	}{
		{"unknown segment", s.SocketPath(), segment.Key{ID: "nope", Generation: 1}, fdx.ErrUnknownSegment},
		{"wrong generation", s.SocketPath(), segment.Key{ID: keyA.ID, Generation: keyA.Generation + 1}, fdx.ErrGenerationMismatch},
		{"no server", filepath.Join(t.TempDir(), "none.sock"), keyA, fdx.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd, err := fdx.Fetch(context.Background(), tc.path, tc.key)
			if !errors.Is(err, tc.want) || fd != -1 {
				t.Fatalf("Fetch = %d, %v; want -1, %v", fd, err, tc.want)
			}
			for _, other := range []error{fdx.ErrUnknownSegment, fdx.ErrGenerationMismatch, fdx.ErrPermission, fdx.ErrUnavailable} {
				if other != tc.want && errors.Is(err, other) {
					t.Fatalf("%v also matches %v", err, other)
				}
			}
		})
	}
	if _, err := fdx.Fetch(context.Background(), s.SocketPath(), segment.Key{ID: "", Generation: 1}); err == nil {
		t.Fatal("empty id accepted")
	}
	settleFDs(t, before)
}

func TestPermissionRefusedForForeignUID(t *testing.T) {
	s := newServer(t, fdx.Options{})
	if err := s.Register(keyA, tempFD(t, "a")); err != nil {
		t.Fatal(err)
	}
	fdx.SetServerUIDForTest(s, uint32(os.Getuid())+1)
	fd, err := fdx.Fetch(context.Background(), s.SocketPath(), keyA)
	if !errors.Is(err, fdx.ErrPermission) || fd != -1 {
		t.Fatalf("Fetch = %d, %v; want ErrPermission", fd, err)
	}

	// The same foreign server with the caller's uid on its allowed list.
	s2 := newServer(t, fdx.Options{AllowUIDs: []uint32{uint32(os.Getuid())}})
	fdx.SetServerUIDForTest(s2, uint32(os.Getuid())+1)
	if err := s2.Register(keyA, tempFD(t, "allowed")); err != nil {
		t.Fatal(err)
	}
	fd, err = fdx.Fetch(context.Background(), s2.SocketPath(), keyA)
	if err != nil {
		t.Fatalf("allowed uid: %v", err)
	}
	if got := readFD(t, fd); got != "allowed" {
		t.Fatalf("read %q", got)
	}
	syscall.Close(fd)
}

// TestPeerCredOtherUID runs a client as another uid (needs root): SO_PEERCRED
// refuses it unless its uid is allowed.
func TestPeerCredOtherUID(t *testing.T) {
	if os.Getenv("FDX_HELPER_SOCK") != "" {
		helperFetch()
		return
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client under another uid")
	}
	const nobody = 65534
	dir, err := os.MkdirTemp("", "fdx-uid")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The test binary's own directory is private; copy it where nobody can
	// execute it.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "fdx.test")
	if data, err := os.ReadFile(exe); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		allow []uint32
		want  string
	}{
		{"not allowed", nil, "permission"},
		{"allowed", []uint32{nobody}, "ok:content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := fdx.ListenOptions(dir, "uid-"+strconv.Itoa(len(tc.allow)), fdx.Options{AllowUIDs: tc.allow})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// Let the file mode pass so that SO_PEERCRED is what decides.
			if err := os.Chmod(s.SocketPath(), 0o666); err != nil {
				t.Fatal(err)
			}
			if err := s.Register(keyA, tempFD(t, "content")); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "-test.run=^TestPeerCredOtherUID$")
			cmd.Env = append(os.Environ(), "FDX_HELPER_SOCK="+s.SocketPath())
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("helper: %v\n%s", err, out)
			}
			if got := firstLine(string(out)); got != tc.want {
				t.Fatalf("helper said %q, want %q (output %q)", got, tc.want, out)
			}
		})
	}
}

func firstLine(s string) string {
	for i := range len(s) {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}

func helperFetch() {
	// The helper trusts the provider's uid (root), so that the server's
	// check is the one under test.
	fd, err := fdx.Trust{ServerUIDs: []uint32{0}}.Fetch(context.Background(), os.Getenv("FDX_HELPER_SOCK"), keyA)
	switch {
	case errors.Is(err, fdx.ErrPermission):
		fmt.Println("permission")
	case err != nil:
		fmt.Println("error:", err)
	default:
		b := make([]byte, 64)
		n, _ := syscall.Pread(fd, b, 0)
		fmt.Printf("ok:%s\n", b[:n])
	}
}

func TestConcurrentFetches(t *testing.T) {
	s := newServer(t, fdx.Options{})
	keys := make([]segment.Key, 8)
	for i := range keys {
		keys[i] = segment.Key{ID: fmt.Sprintf("seg/%d", i), Generation: uint64(100 + i)}
		if err := s.Register(keys[i], tempFD(t, keys[i].String())); err != nil {
			t.Fatal(err)
		}
	}
	if fd, err := fdx.Fetch(context.Background(), s.SocketPath(), keys[0]); err != nil {
		t.Fatal(err)
	} else {
		syscall.Close(fd)
	}
	before := stableFDs(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				k := keys[(g+i)%len(keys)]
				if i%5 == 4 { // interleave refusals
					k.Generation++
				}
				fd, err := fdx.Fetch(context.Background(), s.SocketPath(), k)
				if i%5 == 4 {
					if !errors.Is(err, fdx.ErrGenerationMismatch) {
						errs <- fmt.Errorf("stale generation: %v", err)
						return
					}
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				b := make([]byte, 64)
				n, _ := syscall.Pread(fd, b, 0)
				syscall.Close(fd)
				if string(b[:n]) != k.String() {
					errs <- fmt.Errorf("key %v got file %q", k, b[:n])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	settleFDs(t, before)
}

func TestRegisterUnregister(t *testing.T) {
	s := newServer(t, fdx.Options{})
	base := stableFDs(t)
	fd := tempFD(t, "x")
	if err := s.Register(keyA, fd); err != nil {
		t.Fatal(err)
	}
	other := tempFD(t, "y")
	if err := s.Register(keyA, other); !errors.Is(err, fdx.ErrDuplicate) {
		t.Fatalf("duplicate Register: %v", err)
	}
	syscall.Close(other) // still ours after a failed Register
	if err := s.Register(segment.Key{ID: "", Generation: 1}, 3); err == nil {
		t.Fatal("empty id registered")
	}
	if err := s.Register(segment.Key{ID: "neg", Generation: 1}, -1); err == nil {
		t.Fatal("fd -1 registered")
	}
	if err := s.Unregister(keyA); err != nil {
		t.Fatal(err)
	}
	if err := s.Unregister(keyA); !errors.Is(err, fdx.ErrNotRegistered) {
		t.Fatalf("second Unregister: %v", err)
	}
	settleFDs(t, base) // Unregister closed the fd
	if _, err := fdx.Fetch(context.Background(), s.SocketPath(), keyA); !errors.Is(err, fdx.ErrUnknownSegment) {
		t.Fatalf("Fetch after Unregister: %v", err)
	}
}

func TestCloseWhileClientsConnected(t *testing.T) {
	dir := t.TempDir()
	base := stableFDs(t)
	s, err := fdx.Listen(dir, "prov", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Register(keyA, tempFD(t, "a")); err != nil {
		t.Fatal(err)
	}
	// Idle clients that never send a request.
	var conns []net.Conn
	for i := 0; i < 4; i++ {
		c, err := net.Dial("unixpacket", s.SocketPath())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// Give the server time to accept them.
	time.Sleep(50 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Close blocked on idle clients")
	}
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := c.Read(make([]byte, 8)); err == nil {
			t.Error("client connection still open after Close")
		} else if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			// SOCK_SEQPACKET reports the peer's close as a 0-byte read (EOF).
			t.Logf("client read after Close: %v", err)
		}
		c.Close()
	}
	if _, err := os.Lstat(s.SocketPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket file after Close: %v", err)
	}
	if _, err := fdx.Fetch(context.Background(), s.SocketPath(), keyA); !errors.Is(err, fdx.ErrUnavailable) {
		t.Fatalf("Fetch after Close: %v", err)
	}
	if err := s.Register(keyA, 0); !errors.Is(err, fdx.ErrClosed) {
		t.Fatalf("Register after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	settleFDs(t, base) // the registered fd and all connections are closed
}

func TestListenSocketPath(t *testing.T) {
	dir := t.TempDir()
	s, err := fdx.Listen(dir, "p", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fdx.Listen(dir, "p", nil); !errors.Is(err, fdx.ErrInUse) {
		t.Fatalf("second Listen on a live socket: %v", err)
	}
	// A dead server's socket file (simulated: a listener closed without
	// unlinking) is replaced.
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: stale, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	s2, err := fdx.Listen(dir, "stale", nil)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	s2.Close()
	// A regular file is never removed.
	if err := os.WriteFile(filepath.Join(dir, "file.sock"), []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fdx.Listen(dir, "file", nil); err == nil {
		t.Fatal("Listen replaced a regular file")
	}
	for _, bad := range []string{"", "a/b", "..", "x\x00"} {
		if _, err := fdx.Listen(dir, bad, nil); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	if _, err := fdx.Listen(dir, fmt.Sprintf("%0120d", 0), nil); err == nil {
		t.Error("over-long socket path accepted")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestClientDefences drives Fetch against hand-rolled servers: a silent one
// (deadline), and one that sends an fd with a refusal (must be closed).
func TestClientDefences(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rogue.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	extra := tempFD(t, "rogue")
	defer syscall.Close(extra)
	var mode sync.Map
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			buf := make([]byte, 512)
			n, _ := c.Read(buf)
			if _, silent := mode.Load("silent"); silent {
				c.Read(buf) // blocks until the client gives up
				c.Close()
				continue
			}
			_ = n
			// status 1 (unknown segment), empty reason, plus an fd.
			c.WriteMsgUnix([]byte{1, 0, 0}, syscall.UnixRights(extra), nil)
			c.Close()
		}
	}()
	// Warm-up so the fd count includes the poller.
	fdx.Fetch(context.Background(), path, keyA)
	before := stableFDs(t)
	if _, err := fdx.Fetch(context.Background(), path, keyA); !errors.Is(err, fdx.ErrUnknownSegment) {
		t.Fatalf("rogue refusal: %v", err)
	}
	settleFDs(t, before)
	mode.Store("silent", true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = fdx.Fetch(ctx, path, keyA)
	if !errors.Is(err, fdx.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("silent server: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Fetch took %v past its deadline", d)
	}
	l.Close()
	wg.Wait()
}

func TestBadRequests(t *testing.T) {
	s := newServer(t, fdx.Options{})
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: s.SocketPath(), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 256)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("nonsense")); err != nil {
		t.Fatal(err)
	}
	n, err := c.Read(buf)
	if err != nil || n < 3 || buf[0] != 4 {
		t.Fatalf("response %q, %v; want bad request", buf[:n], err)
	}
	// The server has accepted c by now: count from here.
	sent := tempFD(t, "client's")
	before := stableFDs(t)
	// A request carrying an fd is refused and the server closes what it got.
	if _, _, err := c.WriteMsgUnix([]byte("KVFX\x01garbage"), syscall.UnixRights(sent), nil); err != nil {
		t.Fatal(err)
	}
	n, err = c.Read(buf)
	if err != nil || n < 3 || buf[0] != 4 {
		t.Fatalf("response %q, %v; want bad request", buf[:n], err)
	}
	settleFDs(t, before)
}

// TestUnregisterRetryAfterCloseError: a close error still releases the fd
// (Linux), so the registry must not close it again, and the retried
// Unregister the pool's contract promises succeeds.
func TestUnregisterRetryAfterCloseError(t *testing.T) {
	s := newServer(t, fdx.Options{})
	if err := s.Register(keyA, tempFD(t, "x")); err != nil {
		t.Fatal(err)
	}
	restore := fdx.FailNextClose(syscall.EIO)
	defer restore()
	if err := s.Unregister(keyA); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Unregister with a failing close: %v, want EIO", err)
	}
	if err := s.Unregister(keyA); err != nil {
		t.Fatalf("retried Unregister: %v", err)
	}
	if err := s.Unregister(keyA); !errors.Is(err, fdx.ErrNotRegistered) {
		t.Fatalf("third Unregister: %v, want ErrNotRegistered", err)
	}
	if _, err := fdx.Fetch(context.Background(), s.SocketPath(), keyA); !errors.Is(err, fdx.ErrUnknownSegment) {
		t.Fatalf("fetch after unregister: %v", err)
	}
}

// TestFetchAfterIdleClose: a consumer paused between connecting and
// sending past the server's IOTimeout finds its connection closed; Fetch
// asks once more on a new connection and gets the fd. Paused on every
// connection, it fails with ErrUnavailable after that one retry, leaking
// nothing.
func TestFetchAfterIdleClose(t *testing.T) {
	s := newServer(t, fdx.Options{IOTimeout: 50 * time.Millisecond})
	if err := s.Register(keyA, tempFD(t, "idle")); err != nil {
		t.Fatal(err)
	}
	before := stableFDs(t)
	var connects atomic.Int32
	pauses := int32(1)
	defer fdx.SetAfterConnect(func() {
		if connects.Add(1) <= pauses {
			time.Sleep(300 * time.Millisecond) // past the server's IOTimeout
		}
	})()
	fd, err := fdx.Fetch(context.Background(), s.SocketPath(), keyA)
	if err != nil {
		t.Fatalf("fetch after a pause past the server's idle timeout: %v", err)
	}
	if got := readFD(t, fd); got != "idle" || connects.Load() != 2 {
		t.Fatalf("fetched fd reads %q after %d connections; want \"idle\" after 2", got, connects.Load())
	}
	syscall.Close(fd)

	connects.Store(0)
	pauses = 1 << 30
	if fd, err := fdx.Fetch(context.Background(), s.SocketPath(), keyA); !errors.Is(err, fdx.ErrUnavailable) || connects.Load() != 2 {
		if err == nil {
			syscall.Close(fd)
		}
		t.Fatalf("fetch paused on every connection: %v after %d connections; want ErrUnavailable after 2", err, connects.Load())
	}
	settleFDs(t, before)
}
