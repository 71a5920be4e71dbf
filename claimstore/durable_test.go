package claimstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/internal/crashfs"
)

// A reader decides only on durable state. A releaser is killed after it
// linked a stopped revision and before the directory fsync that makes it
// durable: every later reader sees the revision (it is in the page cache),
// and a power cut can still take it away. A classifier that then completes
// the release, or reports the pair free, on the strength of that revision
// must make it durable first: after any power cut that follows its report,
// the pair must still read free.
func TestDecisionsOnlyOnDurableHeads(t *testing.T) {
	for _, tc := range []struct {
		name string
		// killAt is the barrier of the key at which the releaser dies.
		killAt  claimstore.Barrier
		killKey claimstore.Kind
		want    claimstore.Outcome
	}{
		// The seat is stopped (linked, not durable), the session still
		// active: classify completes the release on the session key.
		{"completes-release", claimstore.BarrierLinked, claimstore.KindSeat, claimstore.OutcomeStopped},
		// Both are stopped, the session's revision not durable: classify
		// reports the pair free.
		{"reports-free", claimstore.BarrierLinked, claimstore.KindSession, claimstore.OutcomeFree},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, &crashfs.Options{})
			for _, st := range []step{acquire("a", 1, 'a'), advance("a", active())} {
				if err := st.run(w); err != nil {
					t.Fatalf("%s: %v", st.name, err)
				}
			}
			c := w.claims["a"]
			killed := errors.New("killed")
			releaser := w.open(w.fs, w.host, func(p claimstore.Point) error {
				if p.Barrier == tc.killAt && p.Key.Kind == tc.killKey {
					return killed
				}
				return nil
			})
			if err := releaser.Release(c, claimstore.NewProof(claimstore.ProofCohort, "cohort-1")); !errors.Is(err, killed) {
				t.Fatalf("release: %v, want it killed", err)
			}
			if len(w.fs.Pending()) == 0 {
				t.Fatal("the killed release left nothing pending: the test would prove nothing")
			}
			delete(w.host.procs, ownerPID) // the supervisor died with it

			// A new process on the same page cache.
			reader := w.open(w.fs, w.host, nil)
			seat, session := c.Seat, c.Session
			res, err := reader.Classify(context.Background(), seat, session, &claimstore.ClassifyOptions{Units: absentUnits{}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != tc.want {
				t.Fatalf("classify = %s (%v), want %s", res.Outcome, res.Refusal, tc.want)
			}
			states, _, err := w.fs.CrashStates(crashfs.ModelSubset, 0)
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range states {
				s := w.open(st, liveHost(), nil)
				p, err := s.Pair(seat, session)
				if err != nil {
					t.Fatal(err)
				}
				if p.Held() {
					t.Errorf("power cut state %d/%d after classify said %s: the pair reads %s again (seat %d %s, session %d %s)",
						i+1, len(states), res.Outcome, p.State(), p.Seat.N, p.Seat.State(), p.Session.N, p.Session.State())
				}
			}
		})
	}
}

// The same for a boot proof that another classifier linked and did not
// make durable: a classifier that finds it under the derived id and
// relies on it makes it durable first.
func TestReusedBootProofIsDurable(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	for _, st := range []step{acquire("a", 1, 'a'), advance("a", active()), reboot()} {
		if err := st.run(w); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
	}
	c := w.claims["a"]
	killed := errors.New("killed")
	// The first classifier dies right after linking its proof: the hook
	// sees the proof's directory fsync as the first SyncDir of proofs/.
	first := w.open(w.fs, w.host, nil)
	w.fs.SetHook(func(call crashfs.Call) error {
		if call.Op == "syncdir" && call.Path == root+"/"+claimstore.ProofDir {
			return killed
		}
		return nil
	})
	if _, err := first.Classify(context.Background(), c.Seat, c.Session, nil); !errors.Is(err, killed) {
		t.Fatalf("first classify: %v, want it killed", err)
	}
	w.fs.Resume()
	second := w.open(w.fs, w.host, nil)
	res, err := second.Classify(context.Background(), c.Seat, c.Session, nil)
	if err != nil || res.Outcome != claimstore.OutcomeStopped {
		t.Fatalf("second classify = %+v, %v; want stopped", res, err)
	}
	states, _, err := w.fs.CrashStates(crashfs.ModelSubset, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range states {
		s := w.open(st, w.host, nil)
		p, err := s.Pair(c.Seat, c.Session)
		if err != nil {
			t.Fatal(err)
		}
		if p.Held() {
			t.Errorf("power cut state %d/%d after classify said stopped: %s", i+1, len(states), fmt.Sprint(p.Seat.Damage, p.Session.Damage))
		}
	}
}

// ClassifyAll reports every released pair free: the heads it read are made
// durable first, with one syncfs for the whole walk rather than a
// directory fsync per key.
func TestClassifyAllFreeHeadsDurable(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	const pairs = 6
	var claims []*claimstore.Claim
	for i := range pairs {
		st := acquire(fmt.Sprint("a", i), 10+i, byte('a'+i))
		if err := st.run(w); err != nil {
			t.Fatal(err)
		}
		claims = append(claims, w.claims[fmt.Sprint("a", i)])
	}
	// Each releaser is killed after linking its session revision, before
	// the directory fsync: every pair reads free from the page cache.
	killed := errors.New("killed")
	for _, c := range claims {
		releaser := w.open(w.fs, w.host, func(p claimstore.Point) error {
			if p.Barrier == claimstore.BarrierLinked && p.Key.Kind == claimstore.KindSession {
				return killed
			}
			return nil
		})
		if err := releaser.Release(c, claimstore.NewProof(claimstore.ProofCohort, "cohort-1")); !errors.Is(err, killed) {
			t.Fatalf("release: %v, want it killed", err)
		}
	}
	syncs := map[string]int{}
	w.fs.SetHook(func(c crashfs.Call) error {
		if c.Op == "syncdir" || c.Op == "syncfs" || c.Op == "sync" {
			syncs[c.Op]++
		}
		return nil
	})
	reader := w.open(w.fs, w.host, nil)
	sum, err := reader.ClassifyAll(context.Background(), &claimstore.ClassifyOptions{Units: absentUnits{}}, nil)
	if err != nil || sum.Free != pairs {
		t.Fatalf("classify --all = %+v, %v; want %d free pairs", sum, err, pairs)
	}
	w.fs.SetHook(nil)
	if syncs["syncfs"] != 1 || syncs["syncdir"] > 1 || syncs["sync"] != 0 {
		t.Errorf("classify --all over %d free pairs synced %v; want one syncfs (and at most the root's parent)", pairs, syncs)
	}
	states, _, err := w.fs.CrashStates(crashfs.ModelSubset, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range states {
		s := w.open(st, liveHost(), nil)
		for _, c := range claims {
			p, err := s.Pair(c.Seat, c.Session)
			if err != nil {
				t.Fatal(err)
			}
			if p.Held() {
				t.Errorf("power cut state %d/%d after classify --all said free: %v + %v reads %s", i+1, len(states), c.Seat, c.Session, p.State())
			}
		}
	}
}
