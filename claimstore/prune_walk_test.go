package claimstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// Prune's walk (pruneWalk) reads the seats, then the sessions a chunk at a
// time, and pairs only the sessions that could pair; every other session
// it keeps as a plainSession. On any root, its pairs and orphans are a
// whole walk's, and a whole walk's idle keys are its idle keys, its plain
// sessions and the empty session directories it skips: so prune decides
// on every key as it did over a whole walk. The roots are built by real
// lifecycles (released, held, cut between the keys, at two ages), then
// changed by hand as other implementations, operators and disks change
// them: a pair member dropped (the reference's records), a session's claim
// set to another key's (an id reused), a seat removed, a head damaged,
// every revision of a key damaged, an empty session directory.
func TestPruneWalkDecidesAsAWholeWalk(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		root := newRoot(t)
		clk := newClock()
		s := openStore(t, root, &TOpts{Now: clk.now})
		seat := func(i int) Key { return seatKey(t, fmt.Sprintf("s%d", i)) }
		session := func(j int) Key { return sessionKey(t, fmt.Sprintf("x%d", j)) }
		anyKey := func(rt *rapid.T, label string) Key {
			if rapid.Bool().Draw(rt, label+"-seat") {
				return seat(rapid.IntRange(0, 2).Draw(rt, label+"-i"))
			}
			return session(rapid.IntRange(0, 7).Draw(rt, label+"-j"))
		}
		// headOf reads k's head record's members, or nil when k has no
		// readable head.
		headOf := func(k Key) (uint64, map[string]json.RawMessage) {
			h, err := openStore(t, root, nil).Head(ctx, k)
			if err != nil || h.N == 0 || h.Record == nil {
				return 0, nil
			}
			var m map[string]json.RawMessage
			if json.Unmarshal(readRev(t, s, k, h.N), &m) != nil {
				return 0, nil
			}
			return h.N, m
		}
		rewrite := func(k Key, n uint64, m map[string]json.RawMessage) {
			data, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			replaceRevByHand(t, s, k, n, append(data, '\n'))
		}
		steps := rapid.IntRange(1, 14).Draw(rt, "steps")
		for range steps {
			i, j := rapid.IntRange(0, 2).Draw(rt, "seat"), rapid.IntRange(0, 7).Draw(rt, "session")
			switch rapid.IntRange(0, 10).Draw(rt, "action") {
			case 0, 1, 2:
				// A whole lifecycle, where both keys are free.
				if c, err := s.Acquire(ctx, seat(i), session(j), fields(t, s)); err == nil {
					if err := s.Release(ctx, c, NewProof(ProofCohort, "done")); err != nil {
						t.Fatal(err)
					}
				}
			case 3:
				s.Acquire(ctx, seat(i), session(j), fields(t, s)) // held, or refused
			case 4:
				cut := errors.New("cut")
				cs := openStore(t, root, &TOpts{Now: clk.now, Barrier: func(pt Point) error {
					if pt.Barrier == BarrierBetweenKeys {
						return cut
					}
					return nil
				}})
				cs.Acquire(ctx, seat(i), session(j), fields(t, cs))
			case 5:
				k := anyKey(rt, "strip")
				if n, m := headOf(k); m != nil {
					delete(m, "pair")
					rewrite(k, n, m)
				}
			case 6:
				from, to := anyKey(rt, "from"), session(j)
				_, fm := headOf(from)
				n, tm := headOf(to)
				if fm != nil && tm != nil {
					tm["claimId"] = fm["claimId"]
					rewrite(to, n, tm)
				}
			case 7:
				if rapid.Bool().Draw(rt, "remove-seat") {
					os.RemoveAll(s.KeyDir(seat(i)))
				} else if err := os.MkdirAll(s.KeyDir(session(j)), 0o700); err != nil {
					t.Fatal(err)
				}
			case 8:
				k := anyKey(rt, "damage")
				if n, m := headOf(k); m != nil {
					replaceRevByHand(t, s, k, n, []byte("{torn"))
				}
			case 9:
				clk.add(40 * day)
			case 10:
				// Every revision damaged: no readable one names the key.
				k := anyKey(rt, "wreck")
				if h, err := openStore(t, root, nil).Head(ctx, k); err == nil {
					for n := uint64(1); n <= h.N; n++ {
						replaceRevByHand(t, s, k, n, []byte("{torn"))
					}
				}
			}
		}
		clk.add(40 * day)
		checkPruneWalk(rt, t, root, clk)
	})
}

// A free key with no history among the walk's free keys (a seat whose free
// head names a session directory left empty) is passed over, and every key
// after it is still decided: the pair that sorts first here is that seat's,
// so a prune that stopped at its empty session would compact no other seat
// and remove no other session.
func TestPruneGoesOnPastAKeyWithNoHistory(t *testing.T) {
	root := newRoot(t)
	clk := newClock()
	s := openStore(t, root, &TOpts{Now: clk.now})
	var seats, sessions []Key
	for i := range 4 {
		seats = append(seats, seatKey(t, fmt.Sprintf("s%d", i)))
		sessions = append(sessions, sessionKey(t, fmt.Sprintf("x%d", i)))
		runLifecycle(t, s, seats[i], sessions[i])
	}
	// The first pair in the walk's order: the lowest seat hash.
	first := 0
	for i := range seats {
		if seats[i].Hash()+sessions[i].Hash() < seats[first].Hash()+sessions[first].Hash() {
			first = i
		}
	}
	dir := s.KeyDir(sessions[first])
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range dirNames(t, s, sessions[first]) {
		if err := os.Remove(dir + "/" + name); err != nil {
			t.Fatal(err)
		}
	}
	clk.add(40 * day)
	rep, _, got := mustPrune(t, openStore(t, root, &TOpts{Now: clk.now}), &PruneOptions{OlderThan: 30 * day})
	var want []string
	for i := range seats {
		want = append(want, "compacted "+seats[i].String()+" 1-3")
		if i != first {
			want = append(want, "removed "+sessions[i].String()+" 1-5")
		}
	}
	if d := cmp.Diff(sortedLines(want...), got); d != "" {
		t.Errorf("actions (-want +got):\n%s", d)
	}
	if rep.Compacted != 4 || rep.Removed != 3 {
		t.Errorf("report %+v; want 4 seats compacted, 3 sessions removed", rep)
	}
}

// failer is what checkPruneWalk reports failures to: a *testing.T, or a
// *rapid.T so that rapid can shrink.
type failer interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// checkPruneWalk compares prune's walk of root with a whole walk (see
// TestPruneWalkDecidesAsAWholeWalk), 30 days of retention at clk's time.
func checkPruneWalk(rt failer, t *testing.T, root string, clk *clock) {
	rt.Helper()
	ctx := context.Background()
	cutoff := clk.now().Add(-30 * day)
	whole, err := openStore(t, root, &TOpts{Now: clk.now}).Walk(ctx, &WalkOptions{KeepIdle: true, slim: slimForPrune})
	if err != nil {
		rt.Fatal(err)
	}
	got, plain, err := openStore(t, root, &TOpts{Now: clk.now}).pruneWalk(ctx, cutoff, clk.now(), nil)
	if err != nil {
		rt.Fatal(err)
	}
	w, g := summarizeWalk(whole), summarizeWalk(got)
	if d := cmp.Diff(w.Pairs, g.Pairs); d != "" {
		rt.Fatalf("pairs (-whole +prune's):\n%s", d)
	}
	if d := cmp.Diff(w.Orphans, g.Orphans); d != "" {
		rt.Fatalf("orphans (-whole +prune's):\n%s", d)
	}
	if whole.Keys != got.Keys || whole.Revisions != got.Revisions {
		rt.Fatalf("keys %d, revisions %d; the whole walk's %d, %d", got.Keys, got.Revisions, whole.Keys, whole.Revisions)
	}
	var wantIdle, gotIdle []string
	for _, in := range whole.IdleKeys {
		wantIdle = append(wantIdle, in.Loc.String())
		if in.Loc.Kind == KindSession && in.Key != nil && in.Head != nil && in.Head.Record != nil {
			// A plain session keeps what its decision needs: check it
			// against the whole walk's key wherever it is one.
			for _, p := range plain {
				if p.key().Loc() == in.Loc {
					want := plainOf(in, cutoff, clk.now())
					if d := cmp.Diff(want, p, cmp.AllowUnexported(plainSession{})); d != "" {
						rt.Fatalf("%s as a plain session (-whole +prune's):\n%s", in.Key, d)
					}
				}
			}
		}
	}
	for _, in := range got.IdleKeys {
		gotIdle = append(gotIdle, in.Loc.String())
	}
	for _, p := range plain {
		gotIdle = append(gotIdle, p.key().Loc().String())
	}
	for _, in := range whole.IdleKeys {
		if in.Loc.Kind == KindSession && in.Key == nil && in.Err == nil && in.Top == 0 {
			gotIdle = append(gotIdle, in.Loc.String()) // skipped: nothing to remove
		}
	}
	sort.Strings(wantIdle)
	sort.Strings(gotIdle)
	if d := cmp.Diff(wantIdle, gotIdle); d != "" {
		rt.Fatalf("idle keys (-whole +prune's, plain sessions and empty directories):\n%s", d)
	}
}

// Every shape of session that prune's walk must pair, on one root, checked
// as TestPruneWalkDecidesAsAWholeWalk checks its random roots (which find
// some of them only after hundreds of runs): sessions left idle by their
// seat going on, with and without a pair member; one naming a removed seat;
// one naming a seat whose every revision is damaged; one whose claim a seat
// carries, though the seat names another session (an id reused); one held;
// one a held seat names, cut before its first revision; one a free seat
// names, wrecked since; one wrecked that nothing names; empty directories,
// named and not.
func TestPruneWalkEveryShape(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	clk := newClock()
	s := openStore(t, root, &TOpts{Now: clk.now})
	seat := func(name string) Key { return seatKey(t, name) }
	session := func(name string) Key { return sessionKey(t, name) }
	headRecord := func(k Key) (uint64, map[string]json.RawMessage) {
		t.Helper()
		h, err := s.Head(ctx, k)
		if err != nil || h.N == 0 {
			t.Fatalf("Head(%s): %v", k, err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(readRev(t, s, k, h.N), &m); err != nil {
			t.Fatal(err)
		}
		return h.N, m
	}
	rewrite := func(k Key, n uint64, m map[string]json.RawMessage) {
		t.Helper()
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		replaceRevByHand(t, s, k, n, append(data, '\n'))
	}
	wreck := func(k Key) {
		t.Helper()
		h, err := s.Head(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		for n := uint64(1); n <= h.N; n++ {
			replaceRevByHand(t, s, k, n, []byte("{torn"))
		}
	}
	cutAcquire := func(seat, session Key) {
		t.Helper()
		cut := errors.New("cut")
		cs := openStore(t, root, &TOpts{Now: clk.now, Barrier: func(pt Point) error {
			if pt.Barrier == BarrierBetweenKeys {
				return cut
			}
			return nil
		}})
		if _, err := cs.Acquire(ctx, seat, session, fields(t, cs)); !errors.Is(err, cut) {
			t.Fatalf("cut Acquire: %v", err)
		}
	}
	// Idle: the seat went on to the next claim.
	runLifecycle(t, s, seat("a"), session("idle"))
	runLifecycle(t, s, seat("a"), session("idle-nopair"))
	n, m := headRecord(session("idle-nopair"))
	delete(m, "pair")
	rewrite(session("idle-nopair"), n, m)
	runLifecycle(t, s, seat("a"), session("a-last"))
	// Naming a seat that is gone, and one whose every revision is damaged.
	runLifecycle(t, s, seat("gone"), session("names-gone"))
	n, m = headRecord(session("names-gone"))
	delete(m, "pair")
	m["pair"] = json.RawMessage(pairJSON(seat("gone"), session("names-gone")))
	rewrite(session("names-gone"), n, m)
	if err := os.RemoveAll(s.KeyDir(seat("gone"))); err != nil {
		t.Fatal(err)
	}
	cutAcquire(seat("wrecked"), session("cut-wrecked"))
	runLifecycle(t, s, seat("w2"), session("names-wrecked"))
	runLifecycle(t, s, seat("w2"), session("w2-last"))
	n, m = headRecord(session("names-wrecked"))
	m["pair"] = json.RawMessage(pairJSON(seat("wrecked"), session("names-wrecked")))
	rewrite(session("names-wrecked"), n, m)
	wreck(seat("wrecked"))
	// A seat without a pair member (the reference's), paired by claim.
	runLifecycle(t, s, seat("ref"), session("ref-last"))
	n, m = headRecord(seat("ref"))
	delete(m, "pair")
	rewrite(seat("ref"), n, m)
	// A session an acquire on another seat names, cut before it: the
	// session's own claim and seat are long gone on.
	runLifecycle(t, s, seat("p"), session("reacquired"))
	runLifecycle(t, s, seat("p"), session("p-last"))
	cutAcquire(seat("x"), session("reacquired"))
	// A held session whose seat is gone, without a pair member.
	mustAcquire(t, s, seat("rm"), session("orphan-held"))
	n, m = headRecord(session("orphan-held"))
	delete(m, "pair")
	rewrite(session("orphan-held"), n, m)
	if err := os.RemoveAll(s.KeyDir(seat("rm"))); err != nil {
		t.Fatal(err)
	}
	// A claim a seat carries, on a session the seat does not name.
	runLifecycle(t, s, seat("b"), session("b-last"))
	runLifecycle(t, s, seat("c"), session("reused"))
	runLifecycle(t, s, seat("c"), session("c-last"))
	_, bm := headRecord(seat("b"))
	n, m = headRecord(session("reused"))
	m["claimId"] = bm["claimId"]
	delete(m, "pair")
	rewrite(session("reused"), n, m)
	// Held; named by a held seat and cut before its first revision.
	mustAcquire(t, s, seat("held"), session("held"))
	cutAcquire(seat("cut"), session("cut"))
	// Named by a free seat, then wrecked; wrecked and named by none.
	runLifecycle(t, s, seat("d"), session("d-wrecked"))
	wreck(session("d-wrecked"))
	runLifecycle(t, s, seat("e"), session("e-idle"))
	runLifecycle(t, s, seat("e"), session("e-last"))
	wreck(session("e-idle"))
	// A session whose directory cannot be listed: a symlink to a copy of it.
	runLifecycle(t, s, seat("sl"), session("symlinked"))
	runLifecycle(t, s, seat("sl"), session("sl-last"))
	dir := s.KeyDir(session("symlinked"))
	if err := os.Rename(dir, dir+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir+".real", dir); err != nil {
		t.Fatal(err)
	}
	// Empty directories: the cut acquire's session (named), and one more.
	if err := os.MkdirAll(s.KeyDir(session("cut")), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(s.KeyDir(session("empty")), 0o700); err != nil {
		t.Fatal(err)
	}
	clk.add(40 * day)
	checkPruneWalk(t, t, root, clk)
}

// A kind that cannot be listed, and a cancellation while the seats or the
// sessions are read, stop prune with that error, before it acts on any key.
func TestPruneWalkErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kind    Kind // listing it fails, when set
		cancel  int  // cancel once this many keys were read, when > 0
		noSessn bool // a root without sessions
	}{
		{name: "seats unlistable", kind: KindSeat},
		{name: "seats unlistable, no sessions", kind: KindSeat, noSessn: true},
		{name: "sessions unlistable", kind: KindSession},
		{name: "canceled in the seats", cancel: 1, noSessn: true},
		{name: "canceled in the sessions", cancel: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, clk, seats, sessions := twoSessions(t)
			if tc.noSessn {
				for _, k := range sessions {
					if err := os.RemoveAll(openStore(t, root, nil).KeyDir(k)); err != nil {
						t.Fatal(err)
					}
				}
				sessions = nil
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			refused := errors.New("refused")
			s := openHooked(t, root, clk, func(h *hookedBackend) {
				h.locs = func(ctx context.Context, kind Kind) ([]Loc, error) {
					if kind == tc.kind {
						return nil, refused
					}
					return h.Backend.Locs(ctx, kind)
				}
			})
			var got []string
			rep, err := s.Prune(ctx, &PruneOptions{OlderThan: 30 * day, Progress: func(phase string, done, _ int) {
				if phase == "read" && done == tc.cancel {
					cancel()
				}
			}, Each: func(a PruneAction) { got = append(got, fmt.Sprintf("%s %s", a.Action, a.Key)) }})
			want := refused
			if tc.cancel > 0 {
				want = context.Canceled
			}
			if !errors.Is(err, want) {
				t.Fatalf("Prune: %v; want %v", err, want)
			}
			if len(got) != 0 || rep.Removed+rep.Compacted != 0 {
				t.Errorf("actions %q, report %+v; want none", got, rep)
			}
			want2 := map[string]prunedKey{}
			keys := append(append([]Key{}, seats...), sessions...)
			for _, k := range keys {
				want2[k.String()] = prunedKey{4, 1}
			}
			if d := cmp.Diff(want2, statesOf(t, openStore(t, root, &TOpts{Now: clk.now}), keys...)); d != "" {
				t.Errorf("keys after the error (-want +got):\n%s", d)
			}
		})
	}
}
