package claimstore

import (
	"context"
	"errors"
	"io/fs"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/claimstore/claimstore/claimstore/dirbackend"
	"github.com/claimstore/claimstore/claimstore/storage"
)

// countedBackend is the directory backend with storage.CountedHeader, for
// the store's side of that capability on any machine (etcd's CountedHead
// is tested in its package): CountedHead answers with the head and the
// census count returns for it, or fails with err. Lists counts the
// listings the store takes itself (the directory backend's Census is not
// promoted: a store reading through this backend confirms a free head by
// the count it is given, or by a listing).
type countedBackend struct {
	storage.Backend
	count func(dirCensus *storage.Count) *storage.Count
	err   error
	lists *atomic.Int32
}

func (b countedBackend) CountedHead(ctx context.Context, loc Loc) (uint64, []byte, *storage.Count, error) {
	if b.err != nil {
		return 0, nil, nil, b.err
	}
	n, data, err := b.Backend.Head(ctx, loc)
	if err != nil {
		return n, data, nil, err
	}
	top, count, base, err := b.Backend.(storage.Censuser).Census(ctx, loc)
	if err != nil {
		return 0, nil, nil, err
	}
	return n, data, b.count(&storage.Count{Top: top, Count: count, Base: base}), nil
}

func (b countedBackend) List(ctx context.Context, loc Loc) ([]uint64, []string, error) {
	b.lists.Add(1)
	return b.Backend.List(ctx, loc)
}

func (b countedBackend) ListFrom(ctx context.Context, loc Loc) (uint64, []uint64, []string, error) {
	b.lists.Add(1)
	return b.Backend.(storage.Compacter).ListFrom(ctx, loc)
}

// A head read with its census (storage.CountedHeader) is confirmed free by
// that census, with no listing of its own; without one, the store lists.
// A census that counts a revision missing makes the head damaged, not
// free; a failed CountedHead is Head's error.
func TestHeadWithItsCensus(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	seat := seatKey(t, "s")
	runLifecycle(t, openStore(t, root, nil), seat, sessionKey(t, "x"))

	whole := func(c *storage.Count) *storage.Count { return c }
	for _, tc := range []struct {
		name      string
		count     func(*storage.Count) *storage.Count
		err       error
		wantFree  bool
		wantLists bool
	}{
		{"counted", whole, nil, true, false},
		{"not counted", func(*storage.Count) *storage.Count { return nil }, nil, true, true},
		{"a revision counted missing", func(c *storage.Count) *storage.Count {
			return &storage.Count{Top: c.Top, Count: c.Count - 1, Base: c.Base}
		}, nil, false, true},
		{"failed", whole, &fs.PathError{Op: "read head", Path: "seat", Err: syscall.EIO}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lists := new(atomic.Int32)
			be := countedBackend{Backend: dirbackend.New(root, nil), count: tc.count, err: tc.err, lists: lists}
			s := openStore(t, root, &TOpts{Backend: be})
			h, err := s.Head(ctx, seat)
			if tc.err != nil {
				if !errors.Is(err, syscall.EIO) || h != nil {
					t.Fatalf("Head when CountedHead fails: %+v, %v; want its error", h, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Held() == tc.wantFree || h.N != 4 {
				t.Errorf("Head: r%d held %v (damage %v); want r4 free %v", h.N, h.Held(), h.Damage, tc.wantFree)
			}
			if !tc.wantFree && h.Damage == nil {
				t.Errorf("a head whose census counts a revision missing is held without damage")
			}
			if got := lists.Load() > 0; got != tc.wantLists {
				t.Errorf("the store listed the key %d times; want a listing %v", lists.Load(), tc.wantLists)
			}
		})
	}
}
