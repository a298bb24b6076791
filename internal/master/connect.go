package master

import (
	"runtime"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"
)

// Reconnection. gRPC's default backoff (1 s growing ×1.6 up to 120 s)
// leaves a client failing with Unavailable for seconds — minutes after a
// long outage — after a restarted master is serving again, because its next
// connection attempt is still far off. The master is one local service
// whose clients must come back at once, so attempts are retried at most
// reconnectMaxDelay (+ jitter) apart however long the outage: a client
// reconnects within about 0.6 s of the master listening again (measured in
// docs/perf/recovery.md). A dead port costs an attempt a refused SYN, so the
// retry rate is cheap for the master's host even with many clients.
const (
	reconnectBaseDelay  = 100 * time.Millisecond
	reconnectMultiplier = 1.6
	reconnectJitter     = 0.2
	reconnectMaxDelay   = 500 * time.Millisecond
	// minConnectTimeout bounds one connection attempt (TCP + TLS + HTTP/2
	// handshake). Only a host that drops SYNs (down, partitioned) makes an
	// attempt last that long; it stays long enough for a TLS handshake with
	// a loaded master.
	minConnectTimeout = 2 * time.Second
)

// Keepalive. Without it a client holding a connection to a master host that
// died silently (power, partition: no FIN or RST) waits for TCP's
// retransmission timeout, many minutes, before it even starts to reconnect;
// with it the connection is declared dead keepaliveTime+keepaliveTimeout
// after the last sign of life. gRPC-Go clients ping at most every 10 s.
const (
	keepaliveTime    = 10 * time.Second
	keepaliveTimeout = 3 * time.Second
	// keepaliveMinTime is the server's floor on a client's ping interval:
	// below keepaliveTime, so that the master never ends a client's
	// connection with GOAWAY "too_many_pings" (gRPC's default floor is
	// 5 minutes, and idle connections may not be pinged at all).
	keepaliveMinTime = 5 * time.Second
	// serverKeepaliveTime and serverKeepaliveTimeout let the master notice
	// clients that vanished without closing their connections.
	serverKeepaliveTime    = 30 * time.Second
	serverKeepaliveTimeout = 10 * time.Second
)

// dialDefaults are the options Dial applies before the caller's (which
// override them: for gRPC options the last one wins).
func dialDefaults() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  reconnectBaseDelay,
				Multiplier: reconnectMultiplier,
				Jitter:     reconnectJitter,
				MaxDelay:   reconnectMaxDelay,
			},
			MinConnectTimeout: minConnectTimeout,
		}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                keepaliveTime,
			Timeout:             keepaliveTimeout,
			PermitWithoutStream: true,
		}),
		// Fixed flow-control windows: they turn off gRPC's bandwidth-delay
		// probing, which sends a PING with every data frame received — two
		// more writes per small call.
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(connWindow),
	}
}

// Flow-control windows of both ends (fixed: see dialDefaults). A 4096-key
// batch answer is ~0.5 MiB.
const (
	streamWindow = 8 << 20
	connWindow   = 32 << 20
)

// serverDefaults are the options NewServer applies before the caller's.
func serverDefaults() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             keepaliveMinTime,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    serverKeepaliveTime,
			Timeout: serverKeepaliveTimeout,
		}),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		// Calls run on a fixed set of workers (whose stacks have grown
		// already) instead of a new goroutine each.
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
	}
}
