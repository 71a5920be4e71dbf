package claimstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/claimstore/claimstore/hostid/hostidtest"
)

// pruneFixture is a root with one old, free pair (seat s, session x: a
// whole lifecycle 40 days ago) on the test clock.
func pruneFixture(t *testing.T, newRoot func(testing.TB) string) (root string, clk *clock, seat, session Key) {
	t.Helper()
	clk = newClock()
	root = newRoot(t)
	s := openStore(t, root, &TOpts{Now: clk.now})
	seat, session = seatKey(t, "s"), sessionKey(t, "x")
	runLifecycle(t, s, seat, session)
	clk.add(40 * day)
	return root, clk, seat, session
}

// pointsOf counts the barrier points an operation meets, by running it
// once on a fresh fixture with a hook that records them.
func pointsOf(t *testing.T, newRoot func(testing.TB) string, run func(s *Store) error) []Point {
	t.Helper()
	root, clk, _, _ := pruneFixture(t, newRoot)
	var mu sync.Mutex
	var pts []Point
	s := openStore(t, root, &TOpts{Now: clk.now, Sequential: true, Barrier: func(p Point) error {
		mu.Lock()
		pts = append(pts, p)
		mu.Unlock()
		return nil
	}})
	if err := run(s); err != nil {
		t.Fatal(err)
	}
	return pts
}

// acquireOutcome checks what a racing acquire left: if it won, both its
// revisions are the heads, held by its claim, as a fresh store reads them;
// whatever happened, the root checks clean. Nothing acknowledged is lost.
func acquireOutcome(t *testing.T, root string, clk *clock, c *Claim, err error, at string) {
	t.Helper()
	ctx := context.Background()
	fresh := openStore(t, root, &TOpts{Now: clk.now})
	if err != nil {
		if !errors.As(err, new(*Refusal)) {
			t.Errorf("%s: acquire: %v, want a win or a refusal", at, err)
		}
	} else {
		for _, kn := range []struct {
			k Key
			n uint64
		}{{c.Seat, c.SeatRev}, {c.Session, c.SessionRev}} {
			h, herr := fresh.Head(ctx, kn.k)
			if herr != nil || h.N != kn.n || h.Record == nil || h.Record.ClaimID != c.ID || !h.Held() {
				t.Errorf("%s: acquired %s r%d, but a fresh store reads head %d (%v, damage %v): an acknowledged revision is lost", at, kn.k, kn.n, h.N, herr, h.Damage)
			}
		}
	}
	rep, cerr := fresh.Check(ctx, nil)
	if cerr != nil {
		t.Fatalf("%s: Check: %v", at, cerr)
	}
	for _, f := range rep.Findings {
		if f.Severity == SeverityError {
			t.Errorf("%s: fsck: %s: %s", at, f.Path, f.Message)
		}
	}
}

// An acquire of the old pair's session, at every barrier point of a prune
// that removes it: exactly one of them takes effect (the acquire wins and
// the session is kept, or the prune removes it and the acquire then
// starts the key over), and nothing either acknowledged is lost.
func TestPruneRacesAcquireAtEveryPrunePoint(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		prune := func(s *Store) error {
			_, err := s.Prune(context.Background(), &PruneOptions{OlderThan: 30 * day, NoArchive: true})
			return err
		}
		pts := pointsOf(t, newRoot, prune)
		if len(pts) < 3 {
			t.Fatalf("prune met %d barrier points; want its tombstone's, tombstoned and before-remove", len(pts))
		}
		for i, at := range pts {
			for _, otherSeat := range []bool{false, true} {
				name := fmt.Sprintf("%d-%s-%s-otherSeat=%v", i, at.Barrier, at.Key.Kind, otherSeat)
				t.Run(name, func(t *testing.T) {
					ctx := context.Background()
					root, clk, seat, session := pruneFixture(t, newRoot)
					if otherSeat {
						seat = seatKey(t, "other")
					}
					acq := openStore(t, root, &TOpts{Now: clk.now})
					var c *Claim
					var aerr error
					n := 0
					p := openStore(t, root, &TOpts{Now: clk.now, Sequential: true, Barrier: func(pt Point) error {
						n++
						if n == i+1 {
							c, aerr = acq.Acquire(ctx, seat, session, fields(t, acq))
						}
						return nil
					}})
					if _, err := p.Prune(ctx, &PruneOptions{OlderThan: 30 * day, NoArchive: true}); err != nil {
						t.Fatalf("Prune: %v", err)
					}
					acquireOutcome(t, root, clk, c, aerr, name)
					if aerr == nil && c.SessionRev == 1 {
						// The prune removed the session first: the acquire
						// started it over, and it is held.
						return
					}
					if aerr == nil {
						h, _ := acq.Head(ctx, session)
						if h.N != c.SessionRev {
							t.Errorf("session head r%d after the race, want the acquire's r%d", h.N, c.SessionRev)
						}
					}
				})
			}
		}
	})
}

// A prune at every barrier point of an acquire of the old pair's session
// (on its own seat and on another): the acquire's revisions survive
// whatever the prune does, or the acquire is refused and leaves nothing
// held.
func TestPruneAtEveryAcquirePoint(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		for _, otherSeat := range []bool{false, true} {
			pts := pointsOf(t, newRoot, func(s *Store) error {
				seat := seatKey(t, "s")
				if otherSeat {
					seat = seatKey(t, "other")
				}
				_, err := s.Acquire(context.Background(), seat, sessionKey(t, "x"), fields(t, s))
				return err
			})
			for i, at := range pts {
				name := fmt.Sprintf("otherSeat=%v-%d-%s-%s", otherSeat, i, at.Barrier, at.Key.Kind)
				t.Run(name, func(t *testing.T) {
					ctx := context.Background()
					root, clk, seat, session := pruneFixture(t, newRoot)
					if otherSeat {
						seat = seatKey(t, "other")
					}
					pr := openStore(t, root, &TOpts{Now: clk.now})
					var rep *PruneReport
					var perr error
					n := 0
					acq := openStore(t, root, &TOpts{Now: clk.now, Sequential: true, Barrier: func(pt Point) error {
						n++
						if n == i+1 {
							o := &PruneOptions{OlderThan: 30 * day, NoArchive: true}
							rep, perr = pr.Prune(ctx, o)
						}
						return nil
					}})
					c, err := acq.Acquire(ctx, seat, session, fields(t, acq))
					if perr != nil {
						t.Fatalf("Prune: %v", perr)
					}
					acquireOutcome(t, root, clk, c, err, name)
					if rep == nil {
						t.Fatal("the prune never ran")
					}
				})
			}
		}
	})
}

// refPruneFixture is a root the reference implementation shares (the
// compatibility tests' host), with the session "old" claimed on seat "a"
// and released 40 days ago on the clock it returns.
func refPruneFixture(t *testing.T) (root string, s *Store, clk *clock, old Key) {
	t.Helper()
	root = filepath.Join(t.TempDir(), "root")
	host := &hostidtest.Host{Machine: compatMachine, Boot: compatBoot, Procs: map[int]string{4100: "88001"}}
	clk = newClock()
	s, err := OpenRoot(root, &TOpts{Host: host, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	owner := Owner{PID: 4100, Start: "88001", PIDNS: initialPIDNS}
	old, _ = SessionKey("old")
	seatA, _ := SeatKey("a", "p", "/w")
	c, err := s.Acquire(context.Background(), seatA, old, AcquireFields{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(context.Background(), c, NewProof(ProofCohort, "done")); err != nil {
		t.Fatal(err)
	}
	clk.add(40 * day)
	return root, s, clk, old
}

// The reference implementation, stopped between its two keys (its seat
// revision published, its session's not: a record without a pair member),
// keeps every session from removal: prune cannot tell which session it is
// about to link. Once its acquire is complete, the next prune goes on.
func TestPruneWaitsForReferenceBetweenKeys(t *testing.T) {
	ctx := context.Background()
	root, s, _, old := refPruneFixture(t)
	// The reference crashes between its keys, on another seat, acquiring
	// the old session again.
	res := refDriver(t, compatRequest(root,
		map[string]any{"op": "stopAt", "barrier": "between-keys"},
		map[string]any{"op": "acquire", "seat": map[string]string{"seat": "b", "project": "p", "workspace": "/w"}, "session": "old",
			"fields": map[string]any{"claimId": "c0123456789abcdef01234567", "owner": map[string]any{"pid": 4100, "start": "88001", "incarnation": 1}}}))
	if res[1]["ok"] != false {
		t.Fatalf("the reference's acquire was to stop between its keys: %v", res[1])
	}
	rep, err := s.Prune(ctx, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Removed != 0 || rep.Blocked == "" {
		t.Fatalf("prune with the reference between its keys: %+v; want no session removed, and why", rep)
	}
	if h, _ := s.Head(ctx, old); h.N != 2 {
		t.Fatalf("old session head %d, want 2 (kept)", h.N)
	}
	// The reference's acquire completes (its session revision, as it
	// writes it: its seat's record under the session's key).
	seatB, _ := SeatKey("b", "p", "/w")
	sh, err := s.Head(ctx, seatB)
	if err != nil || sh.Record == nil {
		t.Fatalf("the reference's seat revision: %v", err)
	}
	rec := sh.Record.clone()
	rec.Key, rec.Revision, rec.WrittenAt = old, 3, sh.Record.WrittenAt
	data, err := rec.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	res = refDriver(t, compatRequest(root, map[string]any{"op": "write", "path": filepath.Join("session", old.Hash(), RevisionName(3)), "content": string(data)}))
	if res[0]["ok"] != true {
		t.Fatal(res[0])
	}
	if h, _ := s.Head(ctx, old); h.N != 3 || !h.Held() {
		t.Fatalf("the reference's session revision: head %d held=%v", h.N, h.Held())
	}
	mustCheckClean(t, s)
}

// The reference implementation races a prune: it read the old session's
// head before the tombstone and links above it after. Its link loses
// (the tombstone has the number), it closes its seat revision and
// refuses, and the prune then removes the session: one outcome, and the
// root checks clean.
func TestPruneBeatsReferenceLink(t *testing.T) {
	ctx := context.Background()
	root, s, clk, old := refPruneFixture(t)
	head, err := s.Head(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	// The tombstone prune would publish, written at the reference's
	// session temporary (its second temp-written: the seat's is first),
	// after the reference read the head.
	t2 := head.Record.clone()
	t2.Tombstone, t2.State, t2.Proof = true, Stopped, NewProof(ProofPruned, "")
	t2.Key, t2.Revision, t2.WrittenAt = old, head.N+1, timestamp(clk.now())
	tomb, err := t2.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	res := refDriver(t, compatRequest(root,
		map[string]any{"op": "interleave", "barrier": "temp-written", "nth": 2, "ops": []map[string]any{
			{"op": "write", "path": filepath.Join("session", old.Hash(), RevisionName(head.N+1)), "content": string(tomb)},
		}},
		map[string]any{"op": "acquire", "seat": map[string]string{"seat": "b", "project": "p", "workspace": "/w"}, "session": "old",
			"fields": map[string]any{"claimId": "c0123456789abcdef01234567", "owner": map[string]any{"pid": 4100, "start": "88001", "incarnation": 1}}}))
	if res[1]["ok"] != false {
		t.Fatalf("the reference's acquire linked above a tombstone: %v", res[1])
	}
	seatB, _ := SeatKey("b", "p", "/w")
	if h, _ := s.Head(ctx, seatB); h.Held() {
		t.Fatalf("the reference left its seat held: head %d", h.N)
	}
	rep, err := s.Prune(ctx, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := s.Head(ctx, old); h.N != 0 || rep.Removed < 1 {
		t.Fatalf("after the prune: old session head %d, report %+v; want it removed", h.N, rep)
	}
	mustCheckClean(t, s)
}
