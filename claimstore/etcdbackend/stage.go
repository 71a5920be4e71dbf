package etcdbackend

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/claimstore/claimstore/claimstore/storage"
)

// A copy into an etcd root cannot be renamed into place: the root is built
// under its own prefix, and the prefix is marked unfinished first
// (<prefix>/copying, created only while the prefix holds nothing), so that
// every backend on that prefix refuses the root (ErrUnfinishedCopy) until
// the copy deletes the mark. A copy that failed leaves the mark: run again,
// it resumes (what is there already must be the source's, byte for byte);
// Unstage deletes the whole prefix, mark and all, in one transaction.
//
// Unstage keeps one key: the fence epoch (fence.go), which it moves instead.
// A copy's writes are create-if-absent transactions that compare the epoch
// they were sent under; a request of an aborted copy still in flight (its
// process killed, the request held by a member or the network) would find
// every key it compares deleted — its revision, its fence, an epoch that
// was never written reads ModRevision 0 — and land in the emptied prefix.
// The moved epoch fails it, however late it comes, and a copy still
// running meets the moved epoch on its next write and stops there, having
// found its mark gone or made again by another copy (checkMark). A prefix
// that holds only the epoch key is empty for Stage.

// copyMark is the key under the prefix that marks an unfinished copy.
const copyMark = "copying"

func (b *Backend) markKey() string { return b.prefix + "/" + copyMark }

var _ storage.Stager = (*Backend)(nil)

// checkCopy fails every operation on a root marked unfinished. It asks the
// cluster once per backend: a root is marked only while a copy builds it,
// before anyone uses it, so a backend that found no mark needs no other
// look. The same read-only transaction reads the fence epoch (fence.go),
// so that the first publish is sent under the current one without a
// request of its own; an epoch that moves later is learnt from the
// transaction that fails on it.
func (b *Backend) checkCopy(ctx context.Context) error {
	if b.staging {
		return nil
	}
	b.mu.Lock()
	ok := b.copyOK
	b.mu.Unlock()
	if ok {
		return nil
	}
	rctx, cancel := b.ctx(ctx)
	defer cancel()
	txn, err := b.cli.Txn(rctx).Then(clientv3.OpGet(b.markKey(), clientv3.WithKeysOnly()), clientv3.OpGet(b.epochKey(), clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return b.reqErr(ctx, "read", b.markKey(), err)
	}
	b.learnEpoch(epochOf((*clientv3.GetResponse)(txn.Responses[1].GetResponseRange())), txn.Header.Revision)
	if resp := txn.Responses[0].GetResponseRange(); len(resp.Kvs) > 0 {
		return pathErr("open", b.prefix, fmt.Errorf("%w: claimctl copy began copying a root here and did not finish (its mark %s is there), so keys of the source may be missing; finish it by running the same claimctl copy again, or remove it with `claimctl copy --abort --to etcd://…%s`", storage.ErrUnfinishedCopy, b.markKey(), b.prefix))
	}
	b.mu.Lock()
	b.copyOK = true
	b.mu.Unlock()
	return nil
}

// Stage implements storage.Stager: it marks the prefix unfinished, if it
// holds nothing, or takes up the unfinished copy marked there.
func (b *Backend) Stage(ctx context.Context) (storage.Staged, error) {
	rctx, cancel := b.ctx(ctx)
	defer cancel()
	resp, err := b.cli.Get(rctx, b.markKey(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, pathErr("read", b.markKey(), err)
	}
	var markRev int64
	if len(resp.Kvs) > 0 {
		markRev = resp.Kvs[0].CreateRevision
	} else {
		// Marked only if nothing but the fence epoch (left by an aborted
		// copy) is under the prefix: a compare over a range holds when
		// every key in it does, and an empty range has none.
		below, above := b.aroundEpoch()
		txn, err := b.cli.Txn(rctx).If(below, above).Then(clientv3.OpPut(b.markKey(), "")).Commit()
		if err != nil {
			return nil, pathErr("copy into", b.prefix, err)
		}
		if !txn.Succeeded {
			return nil, pathErr("copy into", b.prefix, fmt.Errorf("%w: keys exist under the prefix; copy into an empty prefix", storage.ErrNotEmpty))
		}
		markRev = txn.Header.Revision // the put's: the mark's CreateRevision
	}
	sb := &Backend{cli: b.cli, root: b.root, prefix: b.prefix, timeout: b.timeout, resolve: b.resolve, pageSize: b.pageSize, staging: true, markRev: markRev, fence: fenceID{id: newFenceID()}}
	return &staged{Backend: sb}, nil
}

// staged is the backend a copy writes with: the same prefix, not refused
// for its mark.
type staged struct{ *Backend }

// Commit deletes the mark: the root is then a root.
func (s *staged) Commit(ctx context.Context) error {
	rctx, cancel := s.ctx(ctx)
	defer cancel()
	if _, err := s.cli.Delete(rctx, s.markKey()); err != nil {
		return pathErr("finish copy", s.markKey(), err)
	}
	return nil
}

// Unstage implements storage.Stager: if the prefix is marked unfinished,
// everything under it goes but the fence epoch, which moves, in one
// transaction guarded on the mark (see the top of this file for why).
func (b *Backend) Unstage(ctx context.Context) error {
	rctx, cancel := b.ctx(ctx)
	defer cancel()
	epoch := b.epochKey()
	txn, err := b.cli.Txn(rctx).If(clientv3.Compare(clientv3.CreateRevision(b.markKey()), ">", 0)).
		Then(clientv3.OpDelete(b.prefix+"/", clientv3.WithRange(epoch)),
			clientv3.OpDelete(epoch+"\x00", clientv3.WithRange(clientv3.GetPrefixRangeEnd(b.prefix+"/"))),
			clientv3.OpPut(epoch, epochValue)).Commit()
	if err != nil {
		return pathErr("remove unfinished copy", b.prefix, err)
	}
	if !txn.Succeeded {
		return pathErr("remove unfinished copy", b.prefix, storage.ErrNothingStaged)
	}
	return nil
}

// aroundEpoch returns the compares that hold when nothing under the prefix
// but the fence epoch key exists: one over the keys sorted before it, one
// over those after.
func (b *Backend) aroundEpoch() (below, above clientv3.Cmp) {
	epoch := b.epochKey()
	below = clientv3.Compare(clientv3.CreateRevision(b.prefix+"/"), "=", 0).WithRange(epoch)
	above = clientv3.Compare(clientv3.CreateRevision(epoch+"\x00"), "=", 0).WithRange(clientv3.GetPrefixRangeEnd(b.prefix + "/"))
	return below, above
}

// checkMark fails when the mark this staged backend writes under is gone,
// or is another copy's (made again after an Unstage): the copy was
// aborted while it ran, and writes no more.
func (b *Backend) checkMark(ctx context.Context) error {
	rctx, cancel := b.ctx(ctx)
	defer cancel()
	resp, err := b.cli.Get(rctx, b.markKey(), clientv3.WithKeysOnly())
	if err != nil {
		return b.reqErr(ctx, "read", b.markKey(), err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != b.markRev {
		return pathErr("copy into", b.prefix, fmt.Errorf("%w: its mark %s was removed (claimctl copy --abort) after this copy began; nothing more was written; run the copy again to start over", storage.ErrCopyAborted, b.markKey()))
	}
	return nil
}
