package dirbackend

import (
	"context"
	"errors"
	"io/fs"
	"sync"
	"sync/atomic"

	"github.com/claimstore/claimstore/claimstore/storage"
)

var _ storage.BatchPublisher = (*Backend)(nil)

// stageWorkers is how many temporaries PublishBatch writes at once: each
// is a create, a write and a look at its name, system calls that
// different directories serve side by side.
const stageWorkers = 8

// PublishBatch implements storage.BatchPublisher: every request is staged
// (its temporary written, its name checked free), then every temporary is
// made durable by one syncfs(2) of the root's filesystem, then each is
// linked — a guarded one after checking, under the prune lock held
// shared, that revision n-1 still holds exactly its Prev, as
// guarded.Commit does — and then every link is made durable by a second
// syncfs. Where the platform has no syncfs, the temporaries are fsynced
// all at once (syncBatch) and the directories after the links all at once
// (fsyncDirs).
//
// Why: prune publishes a tombstone above each of thousands of keys, and
// one at a time each costs two fsyncs, each a journal commit on a
// journaling filesystem; two syncfs calls commit the whole batch twice.
// Nothing is reordered that the protocol orders (docs/PROTOCOL.md,
// "Prune against a publish"): each temporary is durable before its link,
// each link is durable before PublishBatch reports it published, and a
// crash in between leaves any subset of the links, each over a durable
// temporary — what a crash of as many single publishes leaves. A syncfs
// syncs the root's whole filesystem (the root is one: the store never
// crosses a mount point below it), so another writer's data on it is
// written too; its failure, whatever file it came from, fails the batch
// and the backend, as a failed fsync does.
//
// Each staged temporary holds a descriptor until its link, so a batch
// larger than a quarter of the process's descriptor limit is published a
// part at a time (publishPart; openTempBudget).
func (b *Backend) PublishBatch(ctx context.Context, reqs []storage.PrepareRequest) ([]error, error) {
	errs := make([]error, len(reqs))
	part := tempBudget()
	for start := 0; start < len(reqs); start += part {
		end := min(start+part, len(reqs))
		if err := b.publishPart(ctx, reqs[start:end], errs[start:end]); err != nil {
			return nil, err
		}
	}
	return errs, nil
}

// tempBudget is openTempBudget, or a test's.
var tempBudget = openTempBudget

// publishPart is PublishBatch for reqs, its outcomes in errs.
func (b *Backend) publishPart(ctx context.Context, reqs []storage.PrepareRequest, errs []error) error {
	staged := make([]*prepared, len(reqs))
	defer func() {
		for _, p := range staged {
			if p != nil {
				p.Abort()
			}
		}
	}()
	workers := stageWorkers
	if b.sequential {
		workers = 1
	}
	// The root and the kind directories are made and checked once for
	// the batch, as one publish checks them once at its start.
	if err := ctx.Err(); err != nil {
		return err
	}
	above := b.aboveKeys(reqs)
	eachAtOnce(len(reqs), workers, func(i int) {
		staged[i], errs[i] = b.stageRequest(ctx, reqs[i], above)
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	failFenced(staged, errs, callFences(reqs))
	if err := b.syncStaged(staged, errs); err != nil {
		return err
	}
	done := make([]*prepared, len(reqs))
	defer func() {
		for _, p := range done {
			if p != nil {
				p.closeLinked()
			}
		}
	}()
	// The links, each guarded as guarded.Commit guards one: the lock is
	// held over every check and its link, so that no removal falls
	// between them. The checks are reads, made workers at once before the
	// first link; each still holds at its link, under the same hold.
	var linked []int
	unlock, err := b.lockPrune(false)
	if err != nil {
		return err
	}
	eachAtOnce(len(reqs), workers, func(i int) {
		if r := reqs[i]; staged[i] != nil && r.Prev != nil && r.N > 1 {
			errs[i] = staged[i].checkPrev(r.Prev)
		}
	})
	for i, p := range staged {
		if p == nil {
			continue
		}
		staged[i] = nil
		if errs[i] != nil {
			p.Abort()
			continue
		}
		if err := p.link(ctx); err != nil {
			errs[i] = err
			continue
		}
		linked = append(linked, i)
		done[i] = p
	}
	unlock()
	if len(linked) == 0 {
		return nil
	}
	for _, i := range linked {
		// As in finish: a hook's error after the link is the request's
		// own; its revision is published, and made durable below with
		// the others.
		errs[i] = done[i].hook(storage.BarrierLinked)
	}
	if err := b.syncLinked(done); err != nil {
		return err
	}
	for _, i := range linked {
		if errs[i] == nil {
			errs[i] = done[i].hook(storage.BarrierDirSynced)
		}
	}
	return nil
}

// syncStaged makes the staged temporaries durable, and the parents their
// directories owe, for PublishBatch: one syncfs, or without it the
// temporaries' fsyncs at once (syncBatch). A temporary that cannot be
// made durable is discarded with its error in errs.
func (b *Backend) syncStaged(staged []*prepared, errs []error) error {
	var needs []parentSync
	n := 0
	for _, p := range staged {
		if p != nil {
			n++
			needs = append(needs, p.needs...)
		}
	}
	if n == 0 {
		return nil
	}
	parents, _, start := b.owedParents(nil, needs, true)
	ok, err := b.syncFS()
	if err != nil {
		return err
	}
	if !ok {
		return b.syncBatch(staged, errs, nil)
	}
	b.recordSynced(parents, start, needs)
	tempsSynced(staged, errs)
	return nil
}

// syncLinked makes the links of PublishBatch durable (the non-nil entries
// of linked) — one syncfs, or without it every directory's fsync at
// once — and records them as finish does.
func (b *Backend) syncLinked(linked []*prepared) error {
	var dirs []string
	var needs []parentSync
	for _, p := range linked {
		if p == nil {
			continue
		}
		dirs = append(dirs, p.dir)
		needs = append(needs, p.needs...)
	}
	parents, _, start := b.owedParents(dirs, needs, true)
	ok, err := b.syncFS()
	if err != nil {
		return err
	}
	if !ok {
		var links []*prepared
		for _, p := range linked {
			if p != nil {
				links = append(links, p.linkSyncs()...)
			}
		}
		if err := b.fsyncOwed(dirs, needs, links, true); err != nil {
			return err
		}
	} else {
		b.recordSynced(parents, start, needs)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range linked {
		if p == nil {
			continue
		}
		if b.hints[p.loc] < p.n {
			b.hints[p.loc] = p.n
		}
		if b.synced[p.loc] < p.n {
			b.synced[p.loc] = p.n
		}
	}
	return nil
}

// syncFS is one syncfs(2) of the root's filesystem, counted as an fsync
// of this store: a failure fails the store (checkFailed), and an fsync
// that was in flight when it began is waited for and its failure
// reported too (settle). ok is false, and nothing is synced, where the
// platform has none.
func (b *Backend) syncFS() (ok bool, err error) {
	before := b.running()
	unsupported := false
	err = b.sync(func() error {
		err := b.fs.SyncFS(b.root)
		if errors.Is(err, errors.ErrUnsupported) {
			unsupported = true
			return nil
		}
		return err
	})
	if unsupported {
		return false, nil
	}
	if err != nil {
		return false, &fs.PathError{Op: "syncfs", Path: b.root, Err: err}
	}
	if err := b.settle(before); err != nil {
		return false, err
	}
	return true, nil
}

// eachAtOnce calls f(i) for i in [0, n), on workers goroutines (on the
// caller's alone when workers is 1, so that the calls' order is fixed).
func eachAtOnce(n, workers int, f func(i int)) {
	if workers <= 1 || n <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(i)
			}
		})
	}
	wg.Wait()
}
