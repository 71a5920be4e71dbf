package etcdbackend

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/internal/etcdtest"
)

// TestHeadAndCensusOfALongHistory: a history of at least countedHeadMin
// revisions is read by counting (countedHead, Census), and every shape the
// count cannot vouch for — a gap, a name put there by hand, revisions left
// below the base, a base pointer that is not one — gets the answer the
// sorted range and the listing give: the highest revision name, and the
// revisions from the base up.
func TestHeadAndCensusOfALongHistory(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	ctx := context.Background()
	b, err := New(cli, etcdtest.Prefix(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key, v string) {
		t.Helper()
		if _, err := cli.Put(ctx, key, v); err != nil {
			t.Fatal(err)
		}
	}
	del := func(key string) {
		t.Helper()
		if _, err := cli.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	const top = countedHeadMin + 8
	type want struct {
		head        uint64
		counted     bool // answered by countedHead
		ctop, cbase uint64
		ccount      int
	}
	for i, tc := range []struct {
		name  string
		shape func(loc storage.Loc)
		want  want
	}{
		{"dense", func(storage.Loc) {}, want{top, true, top, 1, top}},
		{"short", func(loc storage.Loc) {
			for n := uint64(countedHeadMin); n <= top; n++ {
				del(b.RevisionKey(loc, n))
			}
		}, want{countedHeadMin - 1, false, countedHeadMin - 1, 1, countedHeadMin - 1}},
		{"a gap", func(loc storage.Loc) { del(b.RevisionKey(loc, top-3)) }, want{top, false, top, 1, top - 1}},
		// The counted top is missing, the one name past it alone.
		{"a gap just below the top", func(loc storage.Loc) { del(b.RevisionKey(loc, top-1)) }, want{top, false, top, 1, top - 1}},
		{"a name put by hand", func(loc storage.Loc) { put(b.KeyDir(loc)+storage.RevisionName(7)+".bak", "x") }, want{top, false, top, 1, top}},
		{"a name put by hand past the top", func(loc storage.Loc) { put(b.KeyDir(loc)+storage.RevisionName(top)+".bak", "x") }, want{top, false, top, 1, top}},
		{"compacted", func(loc storage.Loc) {
			for n := uint64(1); n < 6; n++ {
				del(b.RevisionKey(loc, n))
			}
			v, _ := json.Marshal(basePointer{Version: 1, Kind: baseKind, Key: loc.String(), Base: 6})
			put(b.baseKey(loc), string(v))
		}, want{top, true, top, 6, top - 5}},
		{"revisions left below the base", func(loc storage.Loc) {
			v, _ := json.Marshal(basePointer{Version: 1, Kind: baseKind, Key: loc.String(), Base: 6})
			put(b.baseKey(loc), string(v))
		}, want{top, false, top, 6, top - 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loc := storage.Loc{Kind: storage.KindSeat, Hash: fmt.Sprintf("%032x", i+1)}
			for n := uint64(1); n <= top; n++ {
				put(b.RevisionKey(loc, n), fmt.Sprintf("r%d\n", n))
			}
			tc.shape(loc)
			_, _, _, counted, err := b.countedHead(ctx, loc)
			if err != nil || counted != tc.want.counted {
				t.Errorf("countedHead answered %v (%v), want %v", counted, err, tc.want.counted)
			}
			n, data, err := b.Head(ctx, loc)
			if err != nil || n != tc.want.head || string(data) != fmt.Sprintf("r%d\n", tc.want.head) {
				t.Errorf("Head = %d %q %v, want %d", n, data, err, tc.want.head)
			}
			ct, cn, cb, err := b.Census(ctx, loc)
			if err != nil || ct != tc.want.ctop || cn != tc.want.ccount || cb != tc.want.cbase {
				t.Errorf("Census = top %d count %d base %d %v, want %d %d %d", ct, cn, cb, err, tc.want.ctop, tc.want.ccount, tc.want.cbase)
			}
			// The census taken with the head is the Census, where the head
			// was counted; none where it was not.
			var wantCount *storage.Count
			if tc.want.counted {
				wantCount = &storage.Count{Top: tc.want.ctop, Count: tc.want.ccount, Base: tc.want.cbase}
			}
			n, data, count, err := b.CountedHead(ctx, loc)
			if err != nil || n != tc.want.head || string(data) != fmt.Sprintf("r%d\n", tc.want.head) {
				t.Errorf("CountedHead = %d %q %v, want %d", n, data, err, tc.want.head)
			}
			if d := cmp.Diff(wantCount, count); d != "" {
				t.Errorf("CountedHead's count (-want +got):\n%s", d)
			}
		})
	}
	// A key with no history: no revision, base 1, by the count alone.
	loc := storage.Loc{Kind: storage.KindSeat, Hash: fmt.Sprintf("%032x", 99)}
	if n, _, err := b.Head(ctx, loc); n != 0 || err != nil {
		t.Errorf("Head of an empty key = %d, %v", n, err)
	}
	if ct, cn, cb, err := b.Census(ctx, loc); ct != 0 || cn != 0 || cb != 1 || err != nil {
		t.Errorf("Census of an empty key = %d %d %d %v", ct, cn, cb, err)
	}
	if n, _, count, err := b.CountedHead(ctx, loc); n != 0 || err != nil || cmp.Diff(&storage.Count{Base: 1}, count) != "" {
		t.Errorf("CountedHead of an empty key = %d, %+v, %v; want 0, base 1", n, count, err)
	}
	// An empty key under a base pointer that is not one: its head is
	// free by the count, its census no one's to give but Census's, which
	// reports the damage.
	put(b.baseKey(loc), "{not a base pointer")
	if n, _, count, err := b.CountedHead(ctx, loc); n != 0 || err != nil || count != nil {
		t.Errorf("CountedHead of an empty key under a damaged base pointer = %d, %+v, %v; want 0, no count", n, count, err)
	}
	if _, _, _, err := b.Census(ctx, loc); err == nil {
		t.Errorf("Census of an empty key under a damaged base pointer reported no damage")
	}
}
