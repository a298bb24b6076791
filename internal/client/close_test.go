package client_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
	"github.com/kvfabric/kvfabric/internal/master"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// unreachableUnmount is a master client whose UnmountSegment fails as a
// master that cannot be reached does (gRPC Unavailable) while down is set.
type unreachableUnmount struct {
	master.Client
	down  *atomic.Bool
	calls *atomic.Int32
}

func (u unreachableUnmount) UnmountSegment(ctx context.Context, k segment.Key) error {
	u.calls.Add(1)
	if u.down.Load() {
		return status.Error(codes.Unavailable, "connection error: dial tcp 127.0.0.1:50051: connect: connection refused")
	}
	return u.Client.UnmountSegment(ctx, k)
}

// UnregisterClient is unreachable too while the master is down.
func (u unreachableUnmount) UnregisterClient(ctx context.Context, id string) error {
	if u.down.Load() {
		return status.Error(codes.Unavailable, "connection error: dial tcp 127.0.0.1:50051: connect: connection refused")
	}
	return u.Client.UnregisterClient(ctx, id)
}

// TestCloseWhileMasterUnreachable: a provider's Close retries unmounts the
// master cannot take (it is down) up to the close timeout instead of giving
// up at once. If the master comes back in time the teardown is clean; if
// not, an ExitOnClose Store releases the memory and removes its socket
// anyway (the master expires the segments), and any other keeps it all for
// a later Close.
func TestCloseWhileMasterUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		exit    bool
		backIn  time.Duration // 0: not before Close returns
		timeout time.Duration
	}{
		{"master back in time", false, 400 * time.Millisecond, 10 * time.Second},
		{"master gone, exiting", true, 0, 500 * time.Millisecond},
		{"master gone, staying", false, 0, 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			drv, err := sim.New(sim.Config{})
			if err != nil {
				t.Fatal(err)
			}
			svc, err := master.New(master.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer svc.Close()
			mc := master.NewEmbedded(svc)
			defer mc.Close()
			var down atomic.Bool
			var calls atomic.Int32
			ctx := context.Background()
			p, err := client.Open(ctx, cfgFor(t, egmProvider("16MiB")), client.Options{
				Driver: drv, Master: unreachableUnmount{mc, &down, &calls}, ClientID: "prov",
				CloseTimeout: tc.timeout, ExitOnClose: tc.exit,
			})
			if err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(sockDir(t), "kvfabric-prov.sock")
			if _, err := os.Stat(sock); err != nil {
				t.Fatalf("provider socket: %v", err)
			}
			nsegs := len(p.Pool().Segments())
			down.Store(true)
			if tc.backIn > 0 {
				time.AfterFunc(tc.backIn, func() { down.Store(false) })
			}
			start := time.Now()
			cerr := p.Close()
			took := time.Since(start)
			segs, err := mc.ListSegments(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, serr := os.Stat(sock)
			switch {
			case tc.backIn > 0:
				if cerr != nil || len(segs) != 0 || took < tc.backIn || int(calls.Load()) <= nsegs {
					t.Fatalf("Close = %v after %v and %d unmount calls, %d segments left; want nil, all unmounted after retrying",
						cerr, took, calls.Load(), len(segs))
				}
			case tc.exit:
				if cerr != nil || took < tc.timeout || len(segs) != nsegs {
					t.Fatalf("Close = %v after %v, %d of %d segments left at the master; want nil after the close timeout, the segments left to expire",
						cerr, took, len(segs), nsegs)
				}
			default:
				if !errors.Is(cerr, client.ErrCleanupPending) || took < tc.timeout || !p.CleanupPending() {
					t.Fatalf("Close = %v after %v; want ErrCleanupPending after the close timeout", cerr, took)
				}
				if serr != nil {
					t.Fatalf("a provider still holding its memory removed its socket: %v", serr)
				}
				down.Store(false)
				if err := p.Close(); err != nil {
					t.Fatalf("Close once the master is back: %v", err)
				}
				if segs, err := mc.ListSegments(ctx); err != nil || len(segs) != 0 {
					t.Fatalf("segments after the retried Close: %d, %v", len(segs), err)
				}
				_, serr = os.Stat(sock)
			}
			if !errors.Is(serr, os.ErrNotExist) {
				t.Fatalf("socket after Close: %v; want it removed", serr)
			}
			if took > tc.timeout+2*time.Second {
				t.Fatalf("Close took %v, close timeout %v", took, tc.timeout)
			}
			simtest.AssertNoLeaks(t, drv)
			if err := drv.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
