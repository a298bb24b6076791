package cabi

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/ha"
	"github.com/kvfabric/kvfabric/internal/master"
)

// TestOpenEtcdAddr: the C ABI (and so Python) takes master_server_addr
// etcd://… (issue 14): the Store finds the leader of an HA master set in
// etcd and works through it.
func TestOpenEtcdAddr(t *testing.T) {
	var ports []int
	var held []net.Listener
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range held {
		l.Close() // picked: etcd listens there next
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep := fmt.Sprintf("127.0.0.1:%d", ports[0])
	e, err := ha.StartEtcd(ctx, ha.EtcdConfig{Dir: t.TempDir(), ClientURL: "http://" + ep,
		PeerURL: fmt.Sprintf("http://127.0.0.1:%d", ports[1]), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cli, err := ha.NewEtcdClient([]string{ep}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m, err := ha.NewMaster(ha.MasterConfig{Etcd: cli, Prefix: "/kvfabric/cabi", Advertise: lis.Addr().String(),
		Service: master.Config{LeaseTTL: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	mctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(mctx, lis, time.Second) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	sockets, err := os.MkdirTemp("", "kvf-cabi")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockets)
	h, st, msg := Open(fmt.Appendf(nil, `{"driver":"sim","master_server_addr":"etcd://%s/kvfabric/cabi","socket_dir":%q,
		"global_segment_size":"8MiB","enable_egm_store_pool":true,"max_mr_size":"8MiB"}`, ep, sockets))
	if st != StatusOK {
		t.Fatalf("Open = %s (%s)", StatusName(st), msg)
	}
	defer func() {
		if st := Close(h); st != StatusOK {
			t.Errorf("Close = %s", StatusName(st))
		}
	}()
	data := []byte("bytes through the leader found in etcd")
	k, kl := keyArg("k")
	if st := PutBytes(h, k, kl, unsafe.Pointer(&data[0]), uint64(len(data)), 0, 0, nil, 0, 0); st != StatusOK {
		t.Fatalf("PutBytes = %s", StatusName(st))
	}
	buf := make([]byte, len(data))
	var size uint64
	if st := GetBytes(h, k, kl, unsafe.Pointer(&buf[0]), uint64(len(buf)), &size); st != StatusOK || string(buf) != string(data) {
		t.Fatalf("GetBytes = %s %q", StatusName(st), buf)
	}
}
