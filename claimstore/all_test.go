package claimstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/hostid/hostidtest"
)

// TestClassifyAll walks a root after a reboot: pairs are found by claim id
// (or by the pair member of a half-done acquire), each is classified once,
// and keys whose partner cannot be found are reported and left alone.
func TestClassifyAll(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		root := newRoot(t)
		w := openOn(t, root, liveHost())
		owner := Owner{PID: 4100, Start: "500", Boot: bootA}
		key := func(seat, session string) (Key, Key) {
			s, _ := SeatKey(seat, "p", "w")
			x, _ := SessionKey(session)
			return s, x
		}
		// a: active with a spawn marker.
		sa, xa := key("a", "a")
		ca, err := w.Acquire(context.Background(), sa, xa, AcquireFields{Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Advance(context.Background(), ca, Patch{State: Active, Fields: map[string]any{"spawnMarker": true}}); err != nil {
			t.Fatal(err)
		}
		// b: released.
		sb, xb := key("b", "b")
		cb, err := w.Acquire(context.Background(), sb, xb, AcquireFields{Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Release(context.Background(), cb, NewProof(ProofCohort, "x")); err != nil {
			t.Fatal(err)
		}
		// c: an acquire cut between the keys; its record names both keys.
		sc, xc := key("c", "c")
		cutAt(w, BarrierBetweenKeys)
		if _, err := w.Acquire(context.Background(), sc, xc, AcquireFields{Owner: owner}); !errors.Is(err, errCrash) {
			t.Fatal(err)
		}
		w.barrier = nil
		// d: the same, written the reference's way, with no pair member: the
		// session cannot be found.
		sd, _ := key("d", "d")
		rec, err := w.newRecord(AcquireFields{Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.publish(context.Background(), sd, 1, rec); err != nil {
			t.Fatal(err)
		}
		// e: a session key whose only revision is torn.
		_, xe := key("e", "e")
		if !onEtcd(w) {
			if err := os.MkdirAll(w.KeyDir(xe), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		writeRaw(t, w, xe, 1, "{torn")

		s := openOn(t, root, &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{}})
		type entry struct {
			Seat, Session string
			Outcome       Outcome
			Orphan        bool
		}
		walk := func(opts *ClassifyOptions) ([]entry, *Summary) {
			t.Helper()
			var got []entry
			sum, err := s.ClassifyAll(context.Background(), opts, func(r *PairResult) {
				e := entry{Orphan: r.Orphan != ""}
				if r.Seat != nil {
					e.Seat = r.Seat.Seat
				}
				if r.Session != nil {
					e.Session = r.Session.Session
				}
				if r.Result != nil {
					e.Outcome = r.Result.Outcome
				}
				got = append(got, e)
			})
			if err != nil {
				t.Fatal(err)
			}
			return got, sum
		}
		dry, drySum := walk(&ClassifyOptions{DryRun: true})
		if drySum.Stopped != 2 {
			t.Errorf("dry run: %d would stop, want 2 (%+v)", drySum.Stopped, drySum)
		}
		if ps, _ := s.be.Proofs(context.Background()); len(ps) != 0 {
			t.Errorf("dry run issued proofs %v", ps)
		}
		got, sum := walk(nil)
		want := []entry{
			{Seat: "d", Orphan: true},
			{Orphan: true}, // e: no readable revision names its key
			{Seat: "a", Session: "a", Outcome: OutcomeStopped},
			{Seat: "b", Session: "b", Outcome: OutcomeFree},
			{Seat: "c", Session: "c", Outcome: OutcomeStopped},
		}
		sortEntries := cmp.Transformer("sort", func(in []entry) map[entry]int {
			m := map[entry]int{}
			for _, e := range in {
				m[e]++
			}
			return m
		})
		if diff := cmp.Diff(want, got, sortEntries); diff != "" {
			t.Errorf("walk (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(want, dry, sortEntries); diff != "" {
			t.Errorf("dry walk (-want +got):\n%s", diff)
		}
		if sum.Pairs != 3 || sum.Stopped != 2 || sum.Free != 1 || sum.Orphans != 2 || sum.Clean() {
			t.Errorf("summary %+v", sum)
		}
		// The walk finished the half-done acquire on both keys, and a second
		// walk publishes nothing.
		if h, _ := s.Head(context.Background(), xc); h.N != 1 || h.Held() {
			t.Errorf("session c after the walk: revision %d, held %v", h.N, h.Held())
		}
		again, sum2 := walk(nil)
		if diff := cmp.Diff(want[:2], again[:2], sortEntries); diff != "" || sum2.Stopped != 0 || sum2.Free != 3 {
			t.Errorf("second walk: %+v, %+v", again, sum2)
		}
	})
}

// TestClassifyAllGapReportedOnce: a seat whose r1 is lost is paired by the
// claim it can still read and classified (damaged: held), not reported a
// second time as an orphan.
func TestClassifyAllGapReportedOnce(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		root := newRoot(t)
		host := &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{}}
		s := openOn(t, root, host)
		seat, session := testKeys(t)
		active4100(t, s, seat, session, nil)
		removeRev(t, s, seat, 1)
		// A new process, as after the crash that lost it.
		s = openOn(t, root, host)
		var results []*PairResult
		sum, err := s.ClassifyAll(context.Background(), nil, func(r *PairResult) { results = append(results, r) })
		if err != nil {
			t.Fatal(err)
		}
		if sum.Orphans != 0 || sum.Pairs != 1 || len(results) != 1 {
			t.Fatalf("summary %+v, %d results; want one pair, no orphan", sum, len(results))
		}
		if r := results[0].Result; r == nil || r.Outcome != OutcomeUncertain || !r.Damaged || len(r.Published) != 0 {
			t.Errorf("result %+v", results[0].Result)
		}
	})
}

// A claim id reused on two pairs (claimctl acquire --claim-id X twice) is
// paired as each record's pair member says: two pairs, and no phantom pair
// of one's seat and the other's session.
func TestClassifyAllPairsByPairMember(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		root := newRoot(t)
		w := openOn(t, root, liveHost())
		owner := Owner{PID: 4100, Start: "500", Boot: bootA}
		const id = "c00000000000000000000abcd"
		var want [][2]string
		for _, name := range []string{"a", "b", "c"} {
			seat, _ := SeatKey(name, "p", "w")
			session, _ := SessionKey(name)
			if _, err := w.Acquire(context.Background(), seat, session, AcquireFields{ClaimID: id, Owner: owner}); err != nil {
				t.Fatal(err)
			}
			want = append(want, [2]string{seat.String(), session.String()})
		}
		var got [][2]string
		_, err := w.ClassifyAll(context.Background(), &ClassifyOptions{DryRun: true}, func(pr *PairResult) {
			if pr.Seat == nil || pr.Session == nil {
				t.Errorf("not a pair: %+v", pr)
				return
			}
			got = append(got, [2]string{pr.Seat.String(), pr.Session.String()})
		})
		if err != nil {
			t.Fatal(err)
		}
		sort.Slice(got, func(i, j int) bool { return got[i][0] < got[j][0] })
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("pairs %v, want %v", got, want)
		}
	})
}

// Records the reference writes carry no pair member: ClassifyAll pairs
// their keys by claim id, and a session whose own record names another
// seat is not paired with this one.
func TestClassifyAllPairsReferenceRecordsByClaimID(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		root := newRoot(t)
		s := openStore(t, root, nil)
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		for _, k := range []Key{seat, session} {
			writeRev(t, s, k, 1, refRecord(k, 1, testClaimID, "reserved").bytes())
		}
		var got []*PairResult
		sum, err := s.ClassifyAll(context.Background(), &ClassifyOptions{DryRun: true}, func(r *PairResult) { got = append(got, r) })
		if err != nil {
			t.Fatal(err)
		}
		if sum.Pairs != 1 || sum.Orphans != 0 || len(got) != 1 || got[0].Seat == nil || *got[0].Seat != seat || got[0].Session == nil || *got[0].Session != session {
			t.Fatalf("ClassifyAll over reference records = %+v, results %+v; want the one pair, by claim id", sum, got)
		}
	})
}
