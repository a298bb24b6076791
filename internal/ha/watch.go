package ha

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Leader is a term's leader as published in etcd.
type Leader struct {
	// Addr is the address clients dial; "" when no master leads.
	Addr string
	// Epoch is the create revision of the leader's election key.
	Epoch uint64
}

// Watcher follows the leader published under an election prefix. Its
// methods are safe for concurrent use.
type Watcher struct {
	cli      *clientv3.Client
	pfx      string
	onChange func(Leader)

	mu      sync.Mutex // guards cur, changed
	cur     Leader
	changed chan struct{} // closed at the next change of cur

	cancel context.CancelFunc
	done   chan struct{}
}

// Watch starts following the leader under pfx (ElectionPrefix). onChange,
// when not nil, is called from the Watcher's goroutine with every new
// leader.
func Watch(cli *clientv3.Client, pfx string, onChange func(Leader)) *Watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watcher{cli: cli, pfx: pfx, onChange: onChange, changed: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go w.run(ctx)
	return w
}

// Leader returns the leader known now and a channel closed when it
// changes.
func (w *Watcher) Leader() (Leader, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur, w.changed
}

// WaitLeader waits until a leader is known or ctx is done.
func (w *Watcher) WaitLeader(ctx context.Context) (Leader, error) {
	for {
		l, ch := w.Leader()
		if l.Addr != "" {
			return l, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return l, ctx.Err()
		}
	}
}

// Close stops the Watcher and waits for its goroutine.
func (w *Watcher) Close() {
	w.cancel()
	<-w.done
}

func (w *Watcher) set(l Leader) {
	w.mu.Lock()
	if l == w.cur {
		w.mu.Unlock()
		return
	}
	w.cur = l
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
	if w.onChange != nil {
		w.onChange(l)
	}
}

// run reads the leader (the key with the lowest create revision, as
// concurrency.Election.Leader does) and reads it again after every change
// under the prefix.
func (w *Watcher) run(ctx context.Context) {
	defer close(w.done)
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		rev, err := w.read(ctx)
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		w.waitChange(ctx, rev)
	}
}

func (w *Watcher) read(ctx context.Context) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := w.cli.Get(rctx, w.pfx, clientv3.WithFirstCreate()...)
	if err != nil {
		return 0, err
	}
	var l Leader
	if len(resp.Kvs) > 0 {
		l = Leader{Addr: string(resp.Kvs[0].Value), Epoch: uint64(resp.Kvs[0].CreateRevision)}
	}
	w.set(l)
	return resp.Header.Revision, nil
}

// waitChange returns after the first change under the prefix since rev,
// or when the watch fails (the member lost its quorum: WithRequireLeader).
func (w *Watcher) waitChange(ctx context.Context, rev int64) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range w.cli.Watch(wctx, w.pfx, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if wr.Err() != nil || len(wr.Events) > 0 || wr.Canceled {
			return
		}
	}
}
