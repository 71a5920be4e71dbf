package claimstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A walk pairs keys as their records name them: a cut acquire is the pair
// its seat's record names, with a session that has no revisions; an empty
// key directory is idle, not an orphan; a key no readable revision names
// is an orphan, held.
func TestWalkPairs(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	s := openStore(t, root, nil)
	live := mustAcquire(t, s, seatKey(t, "s1"), sessionKey(t, "x1"))
	done := mustAcquire(t, s, seatKey(t, "s2"), sessionKey(t, "x2"))
	if err := s.Release(ctx, done, NewProof(ProofCohort, "done")); err != nil {
		t.Fatal(err)
	}
	cut := errors.New("cut")
	cs := openStore(t, root, &TOpts{Barrier: func(pt Point) error {
		if pt.Barrier == BarrierBetweenKeys {
			return cut
		}
		return nil
	}})
	if _, err := cs.Acquire(ctx, seatKey(t, "s3"), sessionKey(t, "x3"), fields(t, cs)); !errors.Is(err, cut) {
		t.Fatalf("cut Acquire: %v", err)
	}
	empty := sessionKey(t, "empty")
	if err := os.MkdirAll(s.KeyDir(empty), 0o700); err != nil {
		t.Fatal(err)
	}
	damaged := sessionKey(t, "damaged")
	mustAcquire(t, s, seatKey(t, "s4"), damaged)
	if err := os.Chmod(s.KeyDir(damaged), 0o700); err != nil {
		t.Fatal(err)
	}
	p := s.RevisionPath(damaged, 1)
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("{not json"), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(s.KeyDir(damaged), 0o500); err != nil {
		t.Fatal(err)
	}

	w, err := openStore(t, root, nil).Walk(ctx, &WalkOptions{KeepIdle: true})
	if err != nil {
		t.Fatal(err)
	}
	pairs := map[string]WalkPair{}
	for _, p := range w.Pairs {
		pairs[p.Seat.Seat+"+"+p.Session.Session] = p
	}
	if p, ok := pairs["s1+x1"]; !ok || !p.SeatInfo.Held() || !p.SessionInfo.Held() || p.SeatInfo.ClaimID != live.ID {
		t.Errorf("the live claim's pair: %+v, %v", p, ok)
	}
	if p, ok := pairs["s2+x2"]; !ok || p.SeatInfo.Held() || p.SessionInfo.Held() {
		t.Errorf("the released pair: %+v, %v; want a free pair", p, ok)
	}
	if p, ok := pairs["s3+x3"]; !ok || !p.SeatInfo.Held() || p.SessionInfo.Held() || p.SessionInfo.Head == nil || p.SessionInfo.Head.N != 0 {
		t.Errorf("the cut acquire: %+v, %v; want its seat held, paired with a session without revisions", p, ok)
	}
	if _, ok := pairs["s4+damaged"]; !ok {
		t.Errorf("the pair whose session is damaged is paired by its seat's record")
	}
	if len(w.Orphans) != 0 {
		for _, o := range w.Orphans {
			t.Errorf("orphan %s: %s", filepath.Base(s.Path(string(o.Info.Loc.Kind), o.Info.Loc.Hash)), o.Reason)
		}
	}
	if w.Idle != 1 || len(w.IdleKeys) != 1 || w.IdleKeys[0].Loc != empty.Loc() {
		t.Errorf("idle: %d %v; want the empty key directory alone", w.Idle, w.IdleKeys)
	}
	if w.Keys != 9 {
		t.Errorf("Keys = %d, want 9", w.Keys)
	}

	// Without its seat, the damaged key is an orphan, held.
	s4 := s.KeyDir(seatKey(t, "s4"))
	if err := os.Chmod(s4, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(s4); err != nil {
		t.Fatal(err)
	}
	w, err = openStore(t, root, nil).Walk(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Orphans) != 1 || w.Orphans[0].Info.Loc != damaged.Loc() || !w.Orphans[0].Info.Held() {
		t.Errorf("orphans %+v; want the damaged session alone, held", w.Orphans)
	}
}
