package fdx_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/fdx"
)

// TestTrustSocketPath: a consumer dials only socket paths that lie under
// its socket directory once cleaned and with symlinks resolved; anything
// else is ErrUntrusted (never ErrUnavailable, which would blame the
// provider), and a socket that is simply gone stays ErrUnavailable/ENOENT.
func TestTrustSocketPath(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "sockets")
	outside := filepath.Join(base, "elsewhere")
	for _, d := range []string{dir, outside} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	in, err := fdx.Listen(dir, "in", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := fdx.Listen(outside, "out", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	for _, s := range []*fdx.Server{in, out} {
		if err := s.Register(keyA, tempFD(t, filepath.Base(s.SocketPath()))); err != nil {
			t.Fatal(err)
		}
	}
	// A symlink inside the directory to the socket outside it, one to the
	// socket inside, and the directory itself reached through a symlink.
	if err := os.Symlink(out.SocketPath(), filepath.Join(dir, "escape.sock")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(in.SocketPath(), filepath.Join(dir, "alias.sock")); err != nil {
		t.Fatal(err)
	}
	linkDir := filepath.Join(base, "linkdir")
	if err := os.Symlink(dir, linkDir); err != nil {
		t.Fatal(err)
	}
	trust := fdx.Trust{SocketDir: dir}
	for _, tc := range []struct {
		name  string
		trust fdx.Trust
		path  string
		want  error  // nil: success
		read  string // the fetched fd's content
	}{
		{"inside", trust, in.SocketPath(), nil, "in.sock"},
		{"inside via symlink", trust, filepath.Join(dir, "alias.sock"), nil, "in.sock"},
		{"socket_dir is a symlink", fdx.Trust{SocketDir: linkDir}, filepath.Join(linkDir, "in.sock"), nil, "in.sock"},
		{"descriptor names the real dir of a symlinked socket_dir", fdx.Trust{SocketDir: linkDir}, in.SocketPath(), nil, "in.sock"},
		{"descriptor names a symlinked socket_dir", trust, filepath.Join(linkDir, "in.sock"), nil, "in.sock"},
		{"outside", trust, out.SocketPath(), fdx.ErrUntrusted, ""},
		{"dot-dot escape", trust, filepath.Join(dir, "..", "elsewhere", "out.sock"), fdx.ErrUntrusted, ""},
		{"dot-dot escape, uncleaned", trust, dir + "/../elsewhere/out.sock", fdx.ErrUntrusted, ""},
		{"symlink escape", trust, filepath.Join(dir, "escape.sock"), fdx.ErrUntrusted, ""},
		{"relative", trust, "in.sock", fdx.ErrUntrusted, ""},
		{"the directory itself", trust, dir, fdx.ErrUntrusted, ""},
		{"gone", trust, filepath.Join(dir, "gone.sock"), fdx.ErrUnavailable, ""},
		{"gone, outside", trust, filepath.Join(outside, "gone.sock"), fdx.ErrUntrusted, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd, err := tc.trust.Fetch(context.Background(), tc.path, keyA)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Fetch(%s): %v", tc.path, err)
				}
				defer syscall.Close(fd)
				if got := readFD(t, fd); got != tc.read {
					t.Fatalf("fetched %q, want %q", got, tc.read)
				}
				return
			}
			if !errors.Is(err, tc.want) || fd != -1 {
				t.Fatalf("Fetch(%s) = %d, %v; want -1, %v", tc.path, fd, err, tc.want)
			}
			if tc.want == fdx.ErrUntrusted && errors.Is(err, fdx.ErrUnavailable) {
				t.Fatalf("%v also matches ErrUnavailable (would blame the provider)", err)
			}
			if tc.want == fdx.ErrUnavailable && !errors.Is(err, syscall.ENOENT) {
				t.Fatalf("gone socket: %v, want ENOENT in the chain", err)
			}
		})
	}
}

// TestTrustServerUID: the consumer asks nothing of a server whose
// SO_PEERCRED uid it does not trust — not even the segment's name.
func TestTrustServerUID(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rogue.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan int, 1)
	go func() {
		c, err := l.AcceptUnix()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _ := c.Read(make([]byte, 512))
		got <- n
	}()
	// The listener runs as this process's uid; the consumer trusts only
	// another one.
	other := uint32(os.Getuid()) + 1
	fd, err := fdx.Trust{ServerUIDs: []uint32{other}}.Fetch(context.Background(), path, keyA)
	if !errors.Is(err, fdx.ErrUntrusted) || errors.Is(err, fdx.ErrUnavailable) || fd != -1 {
		t.Fatalf("Fetch from a server of an untrusted uid = %d, %v; want ErrUntrusted", fd, err)
	}
	if n := <-got; n != 0 {
		t.Fatalf("the untrusted server received %d bytes; want none", n)
	}
}

// TestTrustOtherUIDServer runs a real fd server as another uid (needs
// root): by default a consumer refuses it, even inside its socket
// directory; listing the uid in Trust.ServerUIDs accepts it.
func TestTrustOtherUIDServer(t *testing.T) {
	if os.Getenv("FDX_ROGUE_DIR") != "" {
		rogueServer()
		return
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to run a server under another uid")
	}
	const nobody = 65534
	dir, err := os.MkdirTemp("", "fdx-rogue")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
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
	cmd := exec.Command(bin, "-test.run=^TestTrustOtherUIDServer$")
	cmd.Env = append(os.Environ(), "FDX_ROGUE_DIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		t.Fatalf("rogue server: %q, %v", line, err)
	}
	path := strings.TrimSpace(strings.TrimPrefix(line, "ready "))

	fd, err := fdx.Trust{SocketDir: dir}.Fetch(context.Background(), path, keyA)
	if !errors.Is(err, fdx.ErrUntrusted) || fd != -1 {
		t.Fatalf("Fetch from a uid-%d server = %d, %v; want ErrUntrusted", nobody, fd, err)
	}
	if !strings.Contains(err.Error(), "uid 65534") {
		t.Errorf("error does not name the server's uid: %v", err)
	}
	fd, err = fdx.Trust{SocketDir: dir, ServerUIDs: []uint32{0, nobody}}.Fetch(context.Background(), path, keyA)
	if err != nil {
		t.Fatalf("Fetch with uid %d trusted: %v", nobody, err)
	}
	defer syscall.Close(fd)
	if got := readFD(t, fd); got != "rogue" {
		t.Fatalf("read %q", got)
	}
}

// rogueServer serves keyA as the helper's (foreign) uid until stdin closes.
func rogueServer() {
	s, err := fdx.ListenOptions(os.Getenv("FDX_ROGUE_DIR"), "rogue", fdx.Options{AllowUIDs: []uint32{0}})
	if err != nil {
		os.Stdout.WriteString("error " + err.Error() + "\n")
		return
	}
	defer s.Close()
	f, err := os.CreateTemp("", "rogue")
	if err != nil {
		os.Stdout.WriteString("error " + err.Error() + "\n")
		return
	}
	os.Remove(f.Name())
	f.WriteString("rogue")
	fd, _ := syscall.Dup(int(f.Fd()))
	f.Close()
	if err := s.Register(keyA, fd); err != nil {
		os.Stdout.WriteString("error " + err.Error() + "\n")
		return
	}
	os.Stdout.WriteString("ready " + s.SocketPath() + "\n")
	buf := make([]byte, 1)
	for {
		if _, err := os.Stdin.Read(buf); err != nil {
			return
		}
	}
}

// TestSweepStale: only this uid's sockets matching the pattern, old
// enough, that nobody listens on are removed.
func TestSweepStale(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-time.Minute)
	dead := func(name string) string {
		p := filepath.Join(dir, name)
		l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: p, Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		l.SetUnlinkOnClose(false)
		l.Close()
		return p
	}
	aged := func(p string) string {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
		return p
	}
	live, err := fdx.Listen(dir, "kvfabric-live", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	aged(live.SocketPath())
	stale := aged(dead("kvfabric-dead.sock"))
	fresh := dead("kvfabric-fresh.sock")
	other := aged(dead("other-dead.sock"))
	file := filepath.Join(dir, "kvfabric-file.sock")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	aged(file)
	keep := []string{live.SocketPath(), fresh, other, file}
	if os.Getuid() == 0 {
		foreign := aged(dead("kvfabric-foreign.sock"))
		if err := os.Lchown(foreign, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		aged(foreign)
		keep = append(keep, foreign)
	}
	removed, err := fdx.SweepStale(dir, "kvfabric-*.sock", 10*time.Second)
	if err != nil || len(removed) != 1 || removed[0] != stale {
		t.Fatalf("SweepStale = %v, %v; want [%s]", removed, err, stale)
	}
	if _, err := os.Lstat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale socket: %v", err)
	}
	for _, p := range keep {
		if _, err := os.Lstat(p); err != nil {
			t.Fatalf("%s was removed: %v", p, err)
		}
	}
	// The live server still serves.
	if _, err := fdx.Fetch(context.Background(), live.SocketPath(), keyA); !errors.Is(err, fdx.ErrUnknownSegment) {
		t.Fatalf("live server after the sweep: %v", err)
	}
}
