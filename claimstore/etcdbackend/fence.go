package etcdbackend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/claimstore/claimstore/claimstore/storage"
)

// Fences and their collection (docs/PROTOCOL.md, "Collecting fence keys").
//
// A fence is what a lost request is stopped by: every publishing
// transaction requires CreateRevision(its fence key) == 0 and
// ModRevision(<prefix>/fences/epoch) == the epoch it was sent under, and
// its fence key lies under that epoch: <prefix>/fences/e<epoch>/<id>. The
// epoch is the epoch key's ModRevision (0 while it is absent), a value the
// key never takes again once it has moved: a put gives it a revision no key
// ever had, and it is never deleted. So a request sent under epoch E can
// only apply while the epoch is still E; once it has moved, the fences of E
// stop nothing that the epoch does not stop already, and are removed.
//
// Collection (prune) removes the fence keys of every epoch older than the
// current one, each epoch in one transaction guarded by
// ModRevision(epoch) > E — the cluster itself checks, when it applies the
// delete, that no request of E can apply any more — and, when the current
// epoch holds fences, moves the epoch and removes them in one transaction
// guarded on the epoch read. Deleting is delete-only and works under the
// NOSPACE alarm; moving the epoch is a put, which the alarm refuses: the
// current epoch's fences then wait for the next prune.
//
// Fence keys of an older claimstore lie directly under <prefix>/fences/
// (24 hex digits, no epoch); their requests compare no epoch, so nothing
// but the fence stops them, and they are never collected.

// epochName is the epoch key's name under fenceDir.
const epochName = "epoch"

// epochDigits is the width of an epoch in a fence directory's name: every
// etcd revision (an int64) fits, and the names sort as the numbers do.
const epochDigits = 19

// epochValue is what the epoch key holds, for an operator who lists the
// prefix: nothing reads it.
const epochValue = "claimstore fence epoch: never delete this key (docs/ETCD.md)\n"

// maxEpochMoves bounds how often one publish is tried again because the
// epoch moved under it: a prune moves it once a run, so one move is usual
// and a second rare; a publish that meets more is refused rather than
// looping.
const maxEpochMoves = 8

// fenceID is the fence a transaction is sent under: the epoch it compares
// and the id of its fence key in that epoch.
type fenceID struct {
	epoch int64
	id    string
}

func newFenceID() string {
	var r [12]byte
	if _, err := rand.Read(r[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(r[:])
}

func (b *Backend) epochKey() string { return b.prefix + "/" + fenceDir + "/" + epochName }

// epochDir returns the key prefix, with a trailing "/", of epoch's fences.
func (b *Backend) epochDir(epoch int64) string {
	return fmt.Sprintf("%s/%s/e%0*d/", b.prefix, fenceDir, epochDigits, epoch)
}

func (b *Backend) fenceKey(f fenceID) string { return b.epochDir(f.epoch) + f.id }

// parseEpochDir returns the epoch a name under fenceDir's first component
// names (e0000000000000000042), or false: the epoch key, an older
// claimstore's fence (24 hex digits) or anything else is no epoch.
func parseEpochDir(name string) (int64, bool) {
	digits, ok := strings.CutPrefix(name, "e")
	if !ok || len(digits) != epochDigits {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	return n, err == nil
}

func (b *Backend) currentFence() fenceID {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fence
}

// rotateFence replaces a fence that has been put, so that later
// transactions are not fenced off by it.
func (b *Backend) rotateFence(old fenceID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fence == old {
		b.fence.id = newFenceID()
	}
}

// learnEpoch takes epoch as the one to send transactions under, as read at
// cluster revision at. A reply older than what the backend learned last
// (a transaction that ran before another's) does not set it back.
func (b *Backend) learnEpoch(epoch, at int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if at < b.epochAt {
		return
	}
	b.epochAt = at
	b.fence.epoch = epoch
}

// epochOf returns the epoch a range response over the epoch key shows.
func epochOf(rr *clientv3.GetResponse) int64 {
	if rr == nil || len(rr.Kvs) == 0 {
		return 0
	}
	return rr.Kvs[0].ModRevision
}

// readEpoch reads the current epoch, linearizably.
func (b *Backend) readEpoch(ctx context.Context) (int64, error) {
	rctx, cancel := b.ctx(ctx)
	defer cancel()
	resp, err := b.cli.Get(rctx, b.epochKey(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, err
	}
	b.learnEpoch(epochOf(resp), resp.Header.Revision)
	return epochOf(resp), nil
}

var _ storage.FenceCollector = (*Backend)(nil)

// fenceCensus is what is under <prefix>/fences/: the fence keys of each
// epoch, and those of an older claimstore.
type fenceCensus struct {
	epochs map[int64]int
	flat   int
}

// isFlatFence reports whether name, directly under <prefix>/fences/, is an
// older claimstore's fence key: 24 lowercase hex digits.
func isFlatFence(name string) bool {
	if len(name) != 24 {
		return false
	}
	for _, c := range name {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func (b *Backend) fenceCensus(ctx context.Context) (fenceCensus, error) {
	c := fenceCensus{epochs: map[int64]int{}}
	err := b.keys(ctx, b.prefix+"/"+fenceDir+"/", func(rest string) string {
		name, _, sub := strings.Cut(rest, "/")
		if e, ok := parseEpochDir(name); ok && sub {
			c.epochs[e]++
			return ""
		}
		if !sub && isFlatFence(name) {
			c.flat++
		}
		return ""
	})
	return c, err
}

// CollectFences implements storage.FenceCollector (see the top of this
// file): it removes the fence keys no lost request can still need.
func (b *Backend) CollectFences(ctx context.Context, dryRun bool) (storage.FenceReport, error) {
	var rep storage.FenceReport
	if err := b.checkCopy(ctx); err != nil {
		return rep, err
	}
	epoch, err := b.readEpoch(ctx)
	if err != nil {
		return rep, b.reqErr(ctx, "read", b.epochKey(), err)
	}
	c, err := b.fenceCensus(ctx)
	if err != nil {
		return rep, err
	}
	var why []string
	if c.flat > 0 {
		rep.Kept += c.flat
		why = append(why, fmt.Sprintf("an older claimstore's fence keys (%d, directly under %s/%s/) are never collected: their requests compare no epoch, so only the fence stops them (docs/ETCD.md, \"Upgrading\")", c.flat, b.prefix, fenceDir))
	}
	var old []int64
	for e := range c.epochs {
		if e < epoch {
			old = append(old, e)
		}
	}
	sort.Slice(old, func(i, j int) bool { return old[i] < old[j] })
	if dryRun {
		for _, n := range c.epochs {
			rep.Collected += n
		}
		rep.Why = strings.Join(why, "; ")
		return rep, nil
	}
	for _, e := range old {
		n, err := b.deleteEpoch(ctx, e)
		if err != nil {
			return rep, err
		}
		rep.Collected += n
	}
	if cur := c.epochs[epoch]; cur > 0 {
		n, kept, err := b.closeEpoch(ctx, epoch)
		if err != nil {
			return rep, err
		}
		rep.Collected += n
		if kept != "" {
			rep.Kept += cur
			why = append(why, fmt.Sprintf("the current epoch's fence keys (%d): %s", cur, kept))
		}
	}
	rep.Why = strings.Join(why, "; ")
	return rep, nil
}

// deleteEpoch removes epoch's fence keys, guarded by ModRevision(epoch
// key) > epoch: applied only once the epoch has moved past it, whenever
// the request lands (a lost reply's request too). It returns how many it
// removed.
func (b *Backend) deleteEpoch(ctx context.Context, epoch int64) (int, error) {
	dir := b.epochDir(epoch)
	deadline := time.Now().Add(b.resolve)
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		rctx, cancel := b.ctx(ctx)
		resp, err := b.cli.Txn(rctx).If(clientv3.Compare(clientv3.ModRevision(b.epochKey()), ">", epoch)).
			Then(clientv3.OpDelete(dir, clientv3.WithPrefix())).Commit()
		cancel()
		if err == nil {
			if !resp.Succeeded {
				// Only a caller that read the epoch past this one
				// deletes, and the epoch never goes back — unless its
				// key was deleted by hand (docs/ETCD.md): then nothing
				// is proven, and nothing is removed.
				return 0, pathErr("collect fences", dir, fmt.Errorf("the fence epoch %s is not past %d (a deleted epoch key reads 0): the fences of that epoch may still stop a request, and were not removed; the epoch key must never be deleted", b.epochKey(), epoch))
			}
			return int(resp.Responses[0].GetResponseDeleteRange().Deleted), nil
		}
		if isAccess(err) || ctx.Err() != nil {
			return 0, b.reqErr(ctx, "collect fences", dir, err)
		}
		// A lost reply: the delete is guarded and idempotent, so it is
		// sent again until ResolveTimeout; one that lands late removes
		// what is still there, safely, or nothing.
		if !b.backOff(ctx, deadline, delay) {
			return 0, b.reqErr(ctx, "collect fences", dir, err)
		}
	}
}

// backOff waits delay before a request is sent again, and reports whether
// it may be: not past deadline, and ctx not done.
func (b *Backend) backOff(ctx context.Context, deadline time.Time, delay time.Duration) bool {
	if time.Now().Add(delay).After(deadline) {
		return false
	}
	select {
	case <-time.After(delay):
		return true
	case <-ctx.Done():
		return false
	}
}

// closeEpoch moves the epoch away from epoch and removes its fence keys,
// in one transaction guarded on the epoch read: once it applies, no
// request sent under epoch can. A cluster out of space refuses the put:
// kept says why, and nothing changed. A lost reply is decided by reading
// the epoch back; the transaction is sent again while it reads unmoved,
// until ResolveTimeout (its guard lets at most one copy apply, and a copy
// that lands late after another moved the epoch fails it).
func (b *Backend) closeEpoch(ctx context.Context, epoch int64) (collected int, kept string, err error) {
	key := b.epochKey()
	deadline := time.Now().Add(b.resolve)
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		rctx, cancel := b.ctx(ctx)
		resp, err := b.cli.Txn(rctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", epoch)).
			Then(clientv3.OpPut(key, epochValue), clientv3.OpDelete(b.epochDir(epoch), clientv3.WithPrefix())).Commit()
		cancel()
		switch {
		case err != nil && isNoSpace(err):
			// etcd may apply a put and then answer NOSPACE (see
			// decideRefusedForSpace): the epoch read back tells; moved,
			// its fences go by the guarded delete, which the alarm lets
			// through.
			if now, rerr := b.readEpoch(ctx); rerr == nil && now != epoch {
				n, derr := b.deleteEpoch(ctx, epoch)
				return n, "", derr
			}
			return 0, "the cluster is out of space (NOSPACE alarm), and moving the fence epoch is a put, which it refuses; they are collected by the first prune after the alarm is disarmed", nil
		case err != nil && (isAccess(err) || ctx.Err() != nil):
			return 0, "", b.reqErr(ctx, "collect fences", key, err)
		case err != nil:
			now, rerr := b.readEpoch(ctx)
			if rerr == nil && now != epoch {
				// Moved, by this transaction or another prune's: what
				// is left of the epoch's fences goes by the guarded
				// delete (those this one removed are not counted).
				n, derr := b.deleteEpoch(ctx, epoch)
				return n, "", derr
			}
			// Unmoved, or unread: sent again until ResolveTimeout.
			if !b.backOff(ctx, deadline, delay) {
				return 0, "", b.reqErr(ctx, "collect fences", key, errors.Join(err, rerr))
			}
			continue
		case !resp.Succeeded:
			// Another prune moved it first; its fences may be gone
			// already.
			n, derr := b.deleteEpoch(ctx, epoch)
			return n, "", derr
		}
		b.learnEpoch(resp.Header.Revision, resp.Header.Revision)
		return int(resp.Responses[1].GetResponseDeleteRange().Deleted), "", nil
	}
}
