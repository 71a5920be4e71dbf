package etcdbackend

import (
	"context"
	"errors"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/claimstore/claimstore/claimstore/storage"
)

// Waiting on etcd is etcd's own way (as its concurrency.Mutex waits): read
// the cluster's revision, then watch each key's prefix from the revision
// after it, so that nothing published after that read is missed; every
// event is only a hint, on which the caller reads again. A watch that
// etcd ends — its starting revision compacted away (ErrCompacted), or the
// stream cut (its member lost its leader; the client closed) — is made
// again from a fresh read of the revision, and wakes the caller, whose
// next read covers whatever happened in between. There is no polling:
// between events the waiter sleeps on the watch stream.

var _ storage.Watcher = (*Backend)(nil)

// WatchLocs implements storage.Watcher.
func (b *Backend) WatchLocs(ctx context.Context, locs ...storage.Loc) (storage.Watch, error) {
	if err := b.checkCopy(ctx); err != nil {
		return nil, err
	}
	if len(locs) == 0 {
		return nil, errors.New("etcdbackend: WatchLocs of no key")
	}
	w := &watch{b: b, locs: locs}
	if err := w.start(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

type watch struct {
	b    *Backend
	locs []storage.Loc

	mu     sync.Mutex
	cancel context.CancelFunc // ends the current etcd watches
	events chan struct{}      // something was published (cap 1)
	ended  chan error         // an etcd watch ended (cap len(locs))
	closed bool
}

// start reads the cluster's current revision and watches every key's
// prefix from the next one.
func (w *watch) start(ctx context.Context) error {
	dir := w.b.KeyDir(w.locs[0])
	rctx, cancel := w.b.ctx(ctx)
	resp, err := w.b.cli.Get(rctx, dir, clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return w.b.reqErr(ctx, "watch", dir, err)
	}
	rev := resp.Header.Revision
	// The watches outlive the call that starts them; Close or the next
	// start ends them. They require a leader: a member cut off from its
	// quorum ends the stream rather than keeping a waiter on a stale view.
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	events, ended := make(chan struct{}, 1), make(chan error, len(w.locs))
	for _, loc := range w.locs {
		ch := w.b.cli.Watch(wctx, w.b.KeyDir(loc), clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithFilterDelete())
		go func() {
			for resp := range ch {
				if err := resp.Err(); err != nil {
					ended <- err
					return
				}
				if len(resp.Events) > 0 {
					select {
					case events <- struct{}{}:
					default: // a wake-up is pending already
					}
				}
			}
			ended <- errors.New("the watch stream closed")
		}()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		wcancel()
		return errors.New("etcdbackend: the watch was closed")
	}
	if w.cancel != nil {
		w.cancel()
	}
	w.cancel, w.events, w.ended = wcancel, events, ended
	return nil
}

// Wait implements storage.Watch.
func (w *watch) Wait(ctx context.Context) error {
	w.mu.Lock()
	events, ended := w.events, w.ended
	w.mu.Unlock()
	select {
	case <-events:
		return nil
	case <-ended:
		// Compacted, or cut: watch anew from now, and wake the caller to
		// read what it may have missed.
		if err := ctx.Err(); err != nil {
			return err
		}
		return w.start(ctx)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close implements storage.Watch.
func (w *watch) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.cancel != nil {
		w.cancel()
	}
	return nil
}
