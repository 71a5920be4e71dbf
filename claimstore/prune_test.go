package claimstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/etcdbackend"
	"github.com/claimstore/claimstore/internal/etcdtest"
)

// clock is a test's clock that it moves by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: fixedNow()} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const day = 24 * time.Hour

// runLifecycle runs one whole plain lifecycle on seat and session: acquire,
// active, stopping, stopped with a cohort proof.
func runLifecycle(t testing.TB, s *Store, seat, session Key) *Claim {
	t.Helper()
	ctx := context.Background()
	c := mustAcquire(t, s, seat, session)
	for _, st := range []State{Active, Stopping} {
		if err := s.Advance(ctx, c, Patch{State: st}); err != nil {
			t.Fatalf("Advance %s: %v", st, err)
		}
	}
	if err := s.Release(ctx, c, NewProof(ProofCohort, "done")); err != nil {
		t.Fatalf("Release: %v", err)
	}
	return c
}

// pruneOpts are a test's prune options: a 30-day retention, each action
// recorded, the archive where the backend keeps it (an etcd root's in a
// temporary directory).
func pruneOpts(t testing.TB, s *Store, got *[]string) *PruneOptions {
	t.Helper()
	o := &PruneOptions{OlderThan: 30 * day, Each: func(a PruneAction) {
		line := fmt.Sprintf("%s %s", a.Action, a.Key)
		if a.Action == PruneKept {
			line += ": " + a.Reason
		} else {
			line += fmt.Sprintf(" %d-%d", a.From, a.To)
		}
		*got = append(*got, line)
	}}
	if onEtcd(s) {
		o.ArchiveDir = filepath.Join(t.TempDir(), "archive")
	}
	return o
}

func mustCheckClean(t testing.TB, s *Store) {
	t.Helper()
	rep, err := s.Check(context.Background(), nil)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	for _, f := range rep.Findings {
		t.Errorf("fsck after prune: %s %s: %s", f.Severity, f.Path, f.Message)
	}
}

func TestPruneRemovesOldSessionsAndCompactsSeats(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		clk := newClock()
		root := newRoot(t)
		s := openStore(t, root, &TOpts{Now: clk.now})
		seat := seatKey(t, "s")
		old := []Key{sessionKey(t, "old1"), sessionKey(t, "old2")}
		for _, k := range old {
			runLifecycle(t, s, seat, k)
		}
		clk.add(20 * day)
		young := sessionKey(t, "young")
		runLifecycle(t, s, seat, young)
		// Held: never touched, nor its seat's history.
		heldSeat, held := seatKey(t, "h"), sessionKey(t, "held")
		runLifecycle(t, s, heldSeat, sessionKey(t, "before-held"))
		clk.add(-20 * day) // the first lifecycle on h is old too
		clk.add(20 * day)
		mustAcquire(t, s, heldSeat, held)
		clk.add(20 * day) // old1, old2 are 40 days old, young 20

		before, err := s.Head(ctx, seat)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		rep, err := s.Prune(ctx, pruneOpts(t, s, &got))
		if err != nil {
			t.Fatalf("Prune: %v", err)
		}
		sort.Strings(got)
		want := []string{
			"compacted " + seat.String() + " 1-7",
			"removed " + old[0].String() + " 1-5",
			"removed " + old[1].String() + " 1-5",
		}
		if onEtcd(s) {
			// No tombstone on etcd: the removal is one guarded
			// transaction on the head itself.
			want[1], want[2] = "removed "+old[0].String()+" 1-4", "removed "+old[1].String()+" 1-4"
		}
		sort.Strings(want)
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("actions (-want +got):\n%s", d)
		}
		if rep.Removed != 2 || rep.Compacted != 1 {
			t.Errorf("report %+v", rep)
		}
		// The seat reads as it did: the same head, free, and its next
		// number follows it.
		after, err := s.Head(ctx, seat)
		if err != nil {
			t.Fatal(err)
		}
		if after.N != before.N || after.Held() || after.Damage != nil {
			t.Fatalf("seat head after prune: n=%d held=%v damage=%v; before n=%d", after.N, after.Held(), after.Damage, before.N)
		}
		for _, k := range old {
			h, err := s.Head(ctx, k)
			if err != nil || h.N != 0 {
				t.Fatalf("pruned session %s: head %d, %v", k, h.N, err)
			}
		}
		if h, _ := s.Head(ctx, young); h.N != 4 {
			t.Errorf("young session head %d, want 4 (kept)", h.N)
		}
		if h, _ := s.Head(ctx, held); h.N != 1 || !h.Held() {
			t.Errorf("held session head %d held=%v", h.N, h.Held())
		}
		mustCheckClean(t, s)
		// The seat and a pruned session are claimed again: the seat goes
		// on from its number, the session starts over.
		c := mustAcquire(t, s, seat, old[0])
		if c.SeatRev != before.N+1 || c.SessionRev != 1 {
			t.Errorf("acquire after prune: seat r%d session r%d, want r%d and r1", c.SeatRev, c.SessionRev, before.N+1)
		}
		// A fresh store reads the same.
		s2 := openStore(t, root, &TOpts{Now: clk.now})
		if h, err := s2.Head(ctx, seat); err != nil || h.N != before.N+1 || !h.Held() {
			t.Errorf("fresh store: seat head %d held=%v %v", h.N, h.Held(), err)
		}
		mustCheckClean(t, s2)
		// The archive holds what was removed.
		dir := pruneArchiveDir(s, rep)
		revs, err := ArchivedRevisions(dir, old[1])
		if err != nil {
			t.Fatal(err)
		}
		if len(revs) < 4 || revs[0].N != 1 || revs[3].Record == nil || revs[3].Record.State != Stopped {
			t.Errorf("archived history of %s: %d revisions", old[1], len(revs))
		}
		seatRevs, err := ArchivedRevisions(dir, seat)
		if err != nil || len(seatRevs) != 7 {
			t.Errorf("archived seat history: %d revisions, %v", len(seatRevs), err)
		}
	})
}

func pruneArchiveDir(s *Store, rep *PruneReport) string {
	if len(rep.Archives) == 0 {
		return ""
	}
	return filepath.Dir(rep.Archives[0])
}

// What prune keeps, each with its reason: a held pair, a key younger than
// the retention, a key dated in the future, a damaged key, and a free key
// whose claim another key still holds.
func TestPruneKeeps(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		clk := newClock()
		root := newRoot(t)
		s := openStore(t, root, &TOpts{Now: clk.now})
		seat := seatKey(t, "s")
		// Dated in the future: written by a clock 400 days ahead.
		clk.add(400 * day)
		future := sessionKey(t, "future")
		runLifecycle(t, s, seat, future)
		clk.add(-400 * day)
		damaged := sessionKey(t, "damaged")
		runLifecycle(t, s, seatKey(t, "d"), damaged)
		replaceRev(t, s, damaged, 4, []byte("{not json"))
		clk.add(60 * day)

		var got []string
		rep, err := s.Prune(ctx, pruneOpts(t, s, &got))
		if err != nil {
			t.Fatalf("Prune: %v", err)
		}
		joined := strings.Join(got, "\n")
		if !strings.Contains(joined, "kept "+future.String()+": its head is dated") {
			t.Errorf("future-dated session not kept with its reason:\n%s", joined)
		}
		if strings.Contains(joined, damaged.String()) && !strings.Contains(joined, "kept "+damaged.String()) {
			t.Errorf("damaged session acted on:\n%s", joined)
		}
		if h, _ := s.Head(ctx, damaged); h.N != 4 {
			t.Errorf("damaged session head %d, want 4", h.N)
		}
		if h, _ := s.Head(ctx, future); h.N != 4 {
			t.Errorf("future session head %d, want 4", h.N)
		}
		if rep.Removed != 0 {
			t.Errorf("removed %d keys, want none: %s", rep.Removed, joined)
		}
	})
}

// A dry run decides and reports, and changes nothing.
func TestPruneDryRun(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	root := newRoot(t)
	s := openStore(t, root, &TOpts{Now: clk.now})
	runLifecycle(t, s, seatKey(t, "s"), sessionKey(t, "x"))
	clk.add(40 * day)
	before := rootPaths(t, root)
	var got []string
	o := pruneOpts(t, s, &got)
	o.DryRun = true
	rep, err := s.Prune(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Removed != 1 || rep.Compacted != 1 || len(got) != 2 {
		t.Errorf("dry run report %+v, actions %q", rep, got)
	}
	if d := cmp.Diff(before, rootPaths(t, root)); d != "" {
		t.Errorf("a dry run changed the root (-before +after):\n%s", d)
	}
}

// An etcd root has no archive of its own: prune asks for one, or for the
// explicit choice of none, and removes nothing.
func TestPruneNeedsArchive(t *testing.T) {
	s := openStore(t, newRoot(t), nil)
	s.be = noArchiveBackend{s.be}
	if _, err := s.Prune(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "--no-archive") {
		t.Fatalf("Prune without an archive: %v", err)
	}
}

type noArchiveBackend struct{ Backend }

var _ = os.Getpid

// A pruned root copies as it reads: each compacted seat from its base,
// compacted to the same base in the copy, which then reads the same and
// checks clean.
func TestCopyPrunedRoot(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		clk := newClock()
		src := openStore(t, filepath.Join(t.TempDir(), "src"), &TOpts{Now: clk.now})
		seat := seatKey(t, "s")
		for _, name := range []string{"a", "b", "c"} {
			runLifecycle(t, src, seat, sessionKey(t, name))
		}
		clk.add(40 * day)
		if rep, err := src.Prune(ctx, &PruneOptions{OlderThan: 30 * day, NoArchive: true}); err != nil || rep.Compacted != 1 {
			t.Fatalf("prune: %+v %v", rep, err)
		}
		dst := openStore(t, newRoot(t), &TOpts{Now: clk.now})
		if _, err := Copy(ctx, dst.Backend(), src.Backend()); err != nil {
			t.Fatalf("Copy: %v", err)
		}
		dst = openStore(t, dst.Root(), &TOpts{Now: clk.now})
		want, _ := src.Head(ctx, seat)
		got, err := dst.Head(ctx, seat)
		if err != nil || got.N != want.N || got.Held() || got.Damage != nil {
			t.Fatalf("copied seat head: n=%d held=%v damage=%v %v; want n=%d free", got.N, got.Held(), got.Damage, err, want.N)
		}
		if base, err := dst.Backend().(interface {
			Base(context.Context, Loc) (uint64, error)
		}).Base(ctx, seat.Loc()); err != nil || base != want.N {
			t.Errorf("copied seat base %d, %v; want %d", base, err, want.N)
		}
		mustCheckClean(t, dst)
	})
}

// On an etcd cluster out of space (its NOSPACE alarm raised), prune still
// removes old sessions: each removal is a transaction without a put,
// which etcd applies under the alarm. A seat's compaction puts its base
// pointer, so it waits, kept with why, until the operator has freed space
// and disarmed the alarm; the next prune compacts it.
func TestPruneUnderNoSpace(t *testing.T) {
	if why := etcdLeftOut(); why != "" {
		t.Skip(why)
	}
	c := etcdtest.StartQuota(t, 4<<20)
	cli := c.Client(t)
	ctx := context.Background()
	be, err := etcdbackend.New(cli, etcdtest.Prefix(t), testEtcdOptions)
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	s := openStore(t, "etcd://"+strings.Join(c.Hosts(), ",")+"/x", &TOpts{Backend: be, Now: clk.now})
	seat := seatKey(t, "s")
	var sessions []Key
	for _, name := range []string{"a", "b", "c"} {
		k := sessionKey(t, name)
		sessions = append(sessions, k)
		runLifecycle(t, s, seat, k)
	}
	clk.add(40 * day)
	// The fence of a lost reply (the epoch key is absent: epoch 0):
	// collecting it moves the epoch, a put, which the alarm refuses.
	fence := be.Prefix() + "/fences/e0000000000000000000/0123456789abcdef01234567"
	if _, err := cli.Put(ctx, fence, ""); err != nil {
		t.Fatal(err)
	}
	c.Fill(t)
	var got []string
	o := pruneOpts(t, s, &got)
	rep, err := s.Prune(ctx, o)
	if err != nil {
		t.Fatalf("Prune under NOSPACE: %v", err)
	}
	if rep.Removed != 3 || rep.Compacted != 0 {
		t.Fatalf("under NOSPACE: %+v; want the 3 sessions removed and the seat not compacted\n%s", rep, strings.Join(got, "\n"))
	}
	if rep.FencesCollected != 0 || rep.FencesKept != 1 || !strings.Contains(rep.FencesKeptWhy, "out of space") {
		t.Errorf("under NOSPACE: fences collected %d, kept %d (%q); want the fence kept, saying why", rep.FencesCollected, rep.FencesKept, rep.FencesKeptWhy)
	}
	if j := strings.Join(got, "\n"); !strings.Contains(j, "kept "+seat.String()+": not compacted now") || !strings.Contains(j, "out of space") {
		t.Errorf("the seat's compaction is not kept with why:\n%s", j)
	}
	for _, k := range sessions {
		if h, err := s.Head(ctx, k); err != nil || h.N != 0 {
			t.Errorf("%s under NOSPACE: head %d, %v; want removed", k, h.N, err)
		}
	}
	c.Free(t)
	got = nil
	if rep, err = s.Prune(ctx, pruneOpts(t, s, &got)); err != nil || rep.Compacted != 1 || rep.FencesCollected != 1 || rep.FencesKept != 0 {
		t.Fatalf("after the alarm is disarmed: %+v, %v; want the seat compacted and the fence collected", rep, err)
	}
	if resp, err := cli.Get(ctx, fence); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("the fence is still there after it was reported collected (%v)", err)
	}
	if h, err := s.Head(ctx, seat); err != nil || h.N != 12 || h.Held() {
		t.Errorf("compacted seat head %d held=%v %v; want r12 free", h.N, h.Held(), err)
	}
	mustCheckClean(t, s)
}

// A long-lived store that wrote a session before another store pruned it
// claims the session again: the directory it had made durable is gone,
// and it makes it again (found by the state machine's prune action).
func TestLongLivedStoreClaimsAPrunedSession(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		clk := newClock()
		root := newRoot(t)
		long := openStore(t, root, &TOpts{Now: clk.now})
		seat, x := seatKey(t, "s"), sessionKey(t, "x")
		runLifecycle(t, long, seat, x)
		clk.add(40 * day)
		o := &PruneOptions{OlderThan: 30 * day, NoArchive: true}
		if rep, err := openStore(t, root, &TOpts{Now: clk.now}).Prune(ctx, o); err != nil || rep.Removed != 1 {
			t.Fatalf("prune: %+v %v", rep, err)
		}
		c, err := long.Acquire(ctx, seatKey(t, "other"), x, fields(t, long))
		if err != nil {
			t.Fatalf("the long-lived store's acquire of the pruned session: %v", err)
		}
		if c.SessionRev != 1 {
			t.Errorf("session r%d, want r1", c.SessionRev)
		}
		mustCheckClean(t, openStore(t, root, &TOpts{Now: clk.now}))
	})
}
