package claimstore

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
)

// goneSameBoot is the test machine in the claims' boot with no process
// running: every owner is gone, nothing is proven about the writer.
func goneSameBoot() *fakeHost {
	return &fakeHost{machine: testMachine, boot: bootA, procs: map[int]string{}}
}

// Step 10, anything that may still run: the pair is published uncertain,
// or stopping when a stop request was in flight (and only then: a stopping
// record without one, or a stop request on an active record, is
// uncertain). The claim is handed back to whoever can continue it: the
// adopter, or the one resuming the stop; nobody else.
func TestClassifyMayStillRun(t *testing.T) {
	for _, tc := range []struct {
		name       string
		state      State
		fields     map[string]any
		adopt      bool
		want       Outcome
		wantClaim  bool
		wantResume bool
	}{
		{name: "active", state: Active, want: OutcomeUncertain},
		{name: "stopping-requested", state: Stopping, fields: map[string]any{"stop": map[string]any{"signal": "TERM"}}, want: OutcomeStopping, wantClaim: true, wantResume: true},
		{name: "stopping-unrequested", state: Stopping, want: OutcomeUncertain},
		{name: "active-with-stop-member", state: Active, fields: map[string]any{"stop": map[string]any{"signal": "TERM"}}, want: OutcomeUncertain},
		{name: "active-adopted", state: Active, adopt: true, want: OutcomeUncertain, wantClaim: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "root")
			s := openOn(t, root, liveHost())
			seat, session := testKeys(t)
			c := claim4100(t, s, seat, session)
			if err := s.Advance(c, Patch{State: tc.state, Fields: tc.fields}); err != nil {
				t.Fatal(err)
			}
			opts := &ClassifyOptions{}
			if tc.adopt {
				opts.Adopt = &Owner{PID: 9000, Start: "700"}
			}
			res, err := openOn(t, root, goneSameBoot()).Classify(context.Background(), seat, session, opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != tc.want {
				t.Errorf("outcome %s, want %s", res.Outcome, tc.want)
			}
			if (res.Claim != nil) != tc.wantClaim {
				t.Errorf("claim handed back: %v, want %v", res.Claim != nil, tc.wantClaim)
			}
			// The claim is at the pair's heads: r3 once the outcome was
			// published, r2 when the pair was at it already (stopping).
			want := uint64(3)
			if tc.want == OutcomeStopping {
				want = 2
			}
			if res.Claim != nil && (res.Claim.SeatRev != want || res.Claim.SessionRev != want) {
				t.Errorf("claim handed back at seat r%d, session r%d; want r%d, r%d", res.Claim.SeatRev, res.Claim.SessionRev, want, want)
			}
			if (res.ResumeStop != nil) != tc.wantResume {
				t.Errorf("stop request handed back: %s, want one: %v", res.ResumeStop, tc.wantResume)
			}
		})
	}
}

// An adopter whose owner cannot be written as JSON (a malformed
// incarnation) fails the classification before anything is published.
func TestClassifyAdoptUnencodable(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	s := openOn(t, root, liveHost())
	seat, session := testKeys(t)
	c := claim4100(t, s, seat, session)
	if err := s.Advance(c, Patch{State: Active}); err != nil {
		t.Fatal(err)
	}
	g := openOn(t, root, goneSameBoot())
	before, _ := g.Head(seat)
	res, err := g.Classify(context.Background(), seat, session, &ClassifyOptions{Adopt: &Owner{PID: 9000, Start: "700", Incarnation: json.RawMessage("{bad")}})
	if err == nil {
		t.Fatalf("classify adopting with a malformed incarnation = %+v, nil; want an error", res)
	}
	if after, _ := g.Head(seat); after.N != before.N {
		t.Errorf("seat went from revision %d to %d", before.N, after.N)
	}
}

// A release cut between the keys (the seat's stopped revision published,
// the session's not) is completed on the session, and the pair reads free.
func TestClassifyCompletesCutRelease(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	cut := errors.New("cut")
	armed := false
	s := openStore(t, root, &Options{Host: liveHost(), Barrier: func(p Point) error {
		if armed && p.Barrier == BarrierBetweenKeys {
			return cut
		}
		return nil
	}})
	seat, session := testKeys(t)
	c := claim4100(t, s, seat, session)
	armed = true
	if err := s.Release(c, NewProof(ProofCohort, "done")); !errors.Is(err, cut) {
		t.Fatalf("release cut between the keys: %v", err)
	}
	g := openOn(t, root, goneSameBoot())
	res, err := g.Classify(context.Background(), seat, session, nil)
	if err != nil || res.Outcome != OutcomeStopped || !res.Completed {
		t.Fatalf("classify of a cut release = %+v, %v; want stopped, completed", res, err)
	}
	if len(res.Published) != 1 || res.Published[0].Key != session || res.Published[0].Revision != 2 {
		t.Errorf("published %+v, want session revision 2 only", res.Published)
	}
	if p, err := g.Pair(seat, session); err != nil || p.Held() {
		t.Errorf("pair after the completion = %+v, %v; want free", p, err)
	}
}

// What a classification reports as published is on disk as reported: a
// classification that loses a publish to another writer re-decides,
// rather than reporting the revision the other writer put there as its
// own.
func TestClassifyReportsOnlyItsOwnRevisions(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	s := openOn(t, root, liveHost())
	seat, session := testKeys(t)
	c := claim4100(t, s, seat, session)
	if err := s.Advance(c, Patch{State: Active}); err != nil {
		t.Fatal(err)
	}
	rival := openOn(t, root, liveHost())
	raced := false
	g := openStore(t, root, &Options{Host: goneSameBoot(), Barrier: func(p Point) error {
		if !raced && p.Key == session && p.Barrier == BarrierTempWritten {
			raced = true
			// Another classifier, which judged otherwise, links the
			// same number first.
			rec := refRecord(session, p.Revision, c.ID, "active").bytes()
			return rival.Backend().Publish(session.Loc(), p.Revision, rec, nil)
		}
		return nil
	}})
	res, err := g.Classify(context.Background(), seat, session, nil)
	if !raced {
		t.Fatal("the rival never ran")
	}
	if err != nil {
		return // refusing to decide is honest too
	}
	for _, pub := range res.Published {
		h, err := g.Backend().Read(pub.Key.Loc(), pub.Revision)
		if err != nil {
			t.Fatal(err)
		}
		rec, derr := DecodeRecord(h, pub.Key, pub.Revision)
		if derr != nil || rec.State != pub.State {
			t.Errorf("reported %s revision %d as %s; on disk it is %+v (%v)", pub.Key, pub.Revision, pub.State, rec, derr)
		}
	}
}
