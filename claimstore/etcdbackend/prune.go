package etcdbackend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/claimstore/claimstore/claimstore/storage"
)

// Retention on etcd (ARCHITECTURE.md, "Retention: prune"). Every change is
// one transaction that etcd orders against every publish:
//
//   - A key is removed whole by If(Value(rN) == head ∧ CreateRevision(rN+1)
//     == 0) Then DeleteRange(key/): a publish of rN+1 and the removal
//     cannot both commit. A publish over a free head (PrepareOver) also
//     requires Value(rN-1) == what it read, so that a key removed and
//     written again from r1 is never built on (ABA). The removal has no
//     put, so etcd applies it while its NOSPACE alarm is raised.
//   - A key is compacted by If(the base key is as read ∧ rBase exists)
//     Then Put(base key) and DeleteRange(r1 .. rBase-1): one step, so a
//     reader sees the old history or the new, never a gap. It puts, so it
//     waits for the alarm to be disarmed.

// baseName is the name, under a key's prefix, of its base pointer.
const baseName = "base"

// basePointer is what a base key holds, as the directory backend's file.
type basePointer struct {
	Version   int    `json:"version"`
	Kind      string `json:"kind"`
	Key       string `json:"key"`
	Base      uint64 `json:"base"`
	WrittenAt string `json:"writtenAt"`
}

const baseKind = "claimstore-base"

var (
	_ storage.Compacter        = (*Backend)(nil)
	_ storage.KeyRemover       = (*Backend)(nil)
	_ storage.GuardedPublisher = (*Backend)(nil)
)

func (b *Backend) baseKey(loc storage.Loc) string { return b.KeyDir(loc) + baseName }

// readBase returns loc's base (1 without a base key) and the base key's
// value as read (nil when absent).
func (b *Backend) readBase(ctx context.Context, loc storage.Loc) (uint64, []byte, error) {
	key := b.baseKey(loc)
	rctx, cancel := b.ctx(ctx)
	defer cancel()
	resp, err := b.cli.Get(rctx, key)
	if err != nil {
		return 0, nil, pathErr("read base pointer", key, err)
	}
	return b.parseBase(loc, resp.Kvs)
}

// parseBase is readBase's answer from what a read of the base pointer's
// key returned (kvs: none, or the pointer).
func (b *Backend) parseBase(loc storage.Loc, kvs []*mvccpb.KeyValue) (uint64, []byte, error) {
	if len(kvs) == 0 {
		return 1, nil, nil
	}
	v := kvs[0].Value
	var p basePointer
	if err := json.Unmarshal(v, &p); err != nil || p.Version != 1 || p.Kind != baseKind || p.Key != loc.String() || p.Base < 1 || p.Base > storage.MaxRevision {
		return 0, nil, pathErr("read base pointer", b.baseKey(loc), &storage.DamageError{Reason: fmt.Sprintf("not a base pointer of %s; the key reads as held; run claimctl fsck", loc)})
	}
	return p.Base, v, nil
}

// Base implements storage.Compacter.
func (b *Backend) Base(ctx context.Context, loc storage.Loc) (uint64, error) {
	if err := b.checkCopy(ctx); err != nil {
		return 0, err
	}
	n, _, err := b.readBase(ctx, loc)
	return n, err
}

// ListFrom implements storage.Compacter (storage.ListFromBase).
func (b *Backend) ListFrom(ctx context.Context, loc storage.Loc) (uint64, []uint64, []string, error) {
	return storage.ListFromBase(func() (uint64, error) { return b.Base(ctx, loc) },
		func() ([]uint64, []string, error) { return b.List(ctx, loc) }, baseName)
}

// Compact implements storage.Compacter: one transaction (see above).
func (b *Backend) Compact(ctx context.Context, loc storage.Loc, base uint64) error {
	if err := b.checkCopy(ctx); err != nil {
		return err
	}
	for attempt := 0; attempt < 3; attempt++ {
		cur, raw, err := b.readBase(ctx, loc)
		if err != nil {
			return err
		}
		if base <= cur {
			return nil
		}
		v, err := json.Marshal(basePointer{Version: 1, Kind: baseKind, Key: loc.String(), Base: base, WrittenAt: time.Now().UTC().Format("2006-01-02T15:04:05.000Z")})
		if err != nil {
			return err
		}
		key := b.baseKey(loc)
		cmpBase := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		if raw != nil {
			cmpBase = clientv3.Compare(clientv3.Value(key), "=", string(raw))
		}
		dir := b.KeyDir(loc)
		rctx, cancel := b.ctx(ctx)
		resp, err := b.cli.Txn(rctx).If(cmpBase, clientv3.Compare(clientv3.CreateRevision(b.RevisionKey(loc, base)), ">", 0)).
			Then(clientv3.OpPut(key, string(v)), clientv3.OpDelete(dir+storage.RevisionName(1), clientv3.WithRange(dir+storage.RevisionName(base)))).Commit()
		cancel()
		if err != nil && (isNoSpace(err) || isAccess(err)) {
			// Refused: a quota refusal may still have been applied (etcd
			// applies, then reports the quota), so the base read back
			// decides; a refused permission never applies.
			if now, _, rerr := b.readBase(ctx, loc); rerr == nil && now >= base {
				return nil
			}
			return b.reqErr(ctx, "compact", key, err)
		}
		if err != nil {
			// A lost reply: the base read again decides (it is ours, or
			// the compaction did not apply and is tried again).
			continue
		}
		if !resp.Succeeded {
			continue // another prune moved the base; read it again
		}
		return nil
	}
	cur, _, err := b.readBase(ctx, loc)
	if err != nil {
		return err
	}
	if cur >= base {
		return nil
	}
	return pathErr("compact", b.KeyDir(loc), errors.New("the base pointer changed during every attempt; run claimctl prune again"))
}

// RemoveKey implements storage.KeyRemover: one transaction (see above); a
// lost reply is decided by reading the head back.
func (b *Backend) RemoveKey(ctx context.Context, loc storage.Loc, n uint64, head []byte) error {
	if err := b.checkCopy(ctx); err != nil {
		return err
	}
	dir := b.KeyDir(loc)
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		rctx, cancel := b.ctx(ctx)
		resp, err := b.cli.Txn(rctx).If(
			clientv3.Compare(clientv3.Value(b.RevisionKey(loc, n)), "=", string(head)),
			clientv3.Compare(clientv3.CreateRevision(b.RevisionKey(loc, n+1)), "=", 0),
		).Then(clientv3.OpDelete(dir, clientv3.WithPrefix())).Commit()
		cancel()
		if err == nil {
			if resp.Succeeded {
				return nil
			}
			if last != nil {
				// An earlier attempt's reply was lost and its read-back
				// failed too: that attempt may be what made this one's
				// guard fail. The head decides, as after a lost reply.
				if got, _, gerr := b.Head(ctx, loc); gerr == nil && got == 0 {
					return nil
				}
			}
			return pathErr("remove key", dir, fmt.Errorf("%w: revision %d is no longer the head read", storage.ErrHeadMoved, n))
		}
		if isAccess(err) {
			return b.reqErr(ctx, "remove key", dir, err)
		}
		last = err
		// The reply was lost: the head read back decides. Gone whole
		// means removed (by this transaction, or by another prune's
		// equal one); the same head means not applied.
		got, _, gerr := b.Head(ctx, loc)
		if gerr != nil {
			last = gerr
			continue
		}
		if got == 0 {
			return nil
		}
		if got != n {
			return pathErr("remove key", dir, fmt.Errorf("%w: the head is revision %d, not %d", storage.ErrHeadMoved, got, n))
		}
	}
	return pathErr("remove key", dir, fmt.Errorf("the removal could not be decided: %w", last))
}

// PrepareOver implements storage.GuardedPublisher: the publishing
// transaction also requires Value(r(n-1)) == prev.
func (b *Backend) PrepareOver(ctx context.Context, loc storage.Loc, n uint64, data, prev []byte, hook func(storage.Barrier) error) (storage.Prepared, error) {
	p, err := b.Prepare(ctx, loc, n, data, hook)
	if err != nil || n == 1 {
		return p, err
	}
	pp := p.(*prepared)
	pp.guard = &prevGuard{key: b.RevisionKey(loc, n-1), value: bytes.Clone(prev)}
	return pp, nil
}

// prevGuard is what a guarded publish requires of the revision it follows.
type prevGuard struct {
	key   string
	value []byte
}

// moved reports whether a failed publishing transaction failed on the
// guard: its second else-branch read shows the revision gone or changed.
func (g *prevGuard) moved(resp *clientv3.TxnResponse) bool {
	if len(resp.Responses) < 2 {
		return false
	}
	rr := resp.Responses[1].GetResponseRange()
	return rr == nil || len(rr.Kvs) == 0 || !bytes.Equal(rr.Kvs[0].Value, g.value)
}

var _ storage.Censuser = (*Backend)(nil)

// Census implements storage.Censuser with counted: two requests of a few
// keys each whatever the history's length, where a listing cost ~20 µs a
// revision kept (a compacted seat keeps its retention window's:
// thousands), so that a free head's confirming census costs what a fresh
// key's does. A count its top does not vouch for (a gap, a name put there
// by hand, revisions left below the base) takes the listing, which tells
// them apart.
func (b *Backend) Census(ctx context.Context, loc storage.Loc) (top uint64, count int, base uint64, err error) {
	if err := b.checkCopy(ctx); err != nil {
		return 0, 0, 0, err
	}
	c, err := b.counted(ctx, loc, "census", 1, false)
	if err == nil {
		err = c.baseErr
	}
	if err != nil {
		return 0, 0, 0, err
	}
	if cen := c.census(); cen != nil {
		return cen.Top, cen.Count, cen.Base, nil
	}
	base, revs, _, err := b.ListFrom(ctx, loc)
	if err != nil {
		return 0, 0, 0, err
	}
	revs = storage.DropBelow(revs, base)
	if len(revs) == 0 {
		return 0, 0, base, nil
	}
	return revs[len(revs)-1], len(revs), base, nil
}
