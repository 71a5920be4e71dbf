package claimstore

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/hostid/hostidtest"
)

// goneSameBoot is the test machine in the claims' boot with no process
// running: every owner is gone, nothing is proven about the writer.
func goneSameBoot() *hostidtest.Host {
	return &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{}}
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
			if err := s.Advance(context.Background(), c, Patch{State: tc.state, Fields: tc.fields}); err != nil {
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
	active4100(t, s, seat, session, nil)
	g := openOn(t, root, goneSameBoot())
	before, _ := g.Head(context.Background(), seat)
	res, err := g.Classify(context.Background(), seat, session, &ClassifyOptions{Adopt: &Owner{PID: 9000, Start: "700", Incarnation: json.RawMessage("{bad")}})
	if err == nil {
		t.Fatalf("classify adopting with a malformed incarnation = %+v, nil; want an error", res)
	}
	if after, _ := g.Head(context.Background(), seat); after.N != before.N {
		t.Errorf("seat went from revision %d to %d", before.N, after.N)
	}
}

// A release cut between the keys (the seat's stopped revision published,
// the session's not) is completed on the session, and the pair reads free.
func TestClassifyCompletesCutRelease(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	cut := errors.New("cut")
	armed := false
	s := openStore(t, root, &TOpts{Host: liveHost(), Barrier: func(p Point) error {
		if armed && p.Barrier == BarrierBetweenKeys {
			return cut
		}
		return nil
	}})
	seat, session := testKeys(t)
	c := claim4100(t, s, seat, session)
	armed = true
	if err := s.Release(context.Background(), c, NewProof(ProofCohort, "done")); !errors.Is(err, cut) {
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
	if p, err := g.Pair(context.Background(), seat, session); err != nil || p.Held() {
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
	c := active4100(t, s, seat, session, nil)
	rival := openOn(t, root, liveHost())
	raced := false
	g := openStore(t, root, &TOpts{Host: goneSameBoot(), Barrier: func(p Point) error {
		if !raced && p.Key == session && p.Barrier == BarrierTempWritten {
			raced = true
			// Another classifier, which judged otherwise, links the
			// same number first.
			rec := refRecord(session, p.Revision, c.ID, "active").bytes()
			return rival.Backend().Publish(context.Background(), session.Loc(), p.Revision, rec, nil)
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
		h, err := g.Backend().Read(context.Background(), pub.Key.Loc(), pub.Revision)
		if err != nil {
			t.Fatal(err)
		}
		rec, derr := DecodeRecord(h, pub.Key, pub.Revision)
		if derr != nil || rec.State != pub.State {
			t.Errorf("reported %s revision %d as %s; on disk it is %+v (%v)", pub.Key, pub.Revision, pub.State, rec, derr)
		}
	}
}

// A moved release (the claim's release reached the seat, which another
// claim has since taken, but not the session) is completed on the session
// with the same proof, carrying the claim's spawn marker.
func TestMovedReleaseCarriesSpawnMarker(t *testing.T) {
	_, _, s, seat, session := movedRelease(t, func(s *Store, x *Claim) {
		if err := s.Advance(context.Background(), x, Patch{State: Active, Fields: map[string]any{"spawnMarker": true}}); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := s.Classify(context.Background(), seat, session, nil); err != nil {
		t.Fatal(err)
	}
	h, err := s.Head(context.Background(), session)
	if err != nil || h.Held() || h.Record == nil {
		t.Fatalf("session after the completion = %+v, %v; want free", h, err)
	}
	if !h.Record.SpawnMarker() || h.Record.Proof == nil || h.Record.Proof.Ref != "x" {
		t.Errorf("the completed session revision: marker %v, proof %+v; want the marker and the release's proof", h.Record.SpawnMarker(), h.Record.Proof)
	}
}

// A boot id that is not a boot id is no evidence, in a dry run as in a real
// one: the dry run must not promise a boot proof it would never issue.
func TestMalformedBootNoEvidenceInDryRun(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	s := openOn(t, root, liveHost())
	seat, session := testKeys(t)
	// The owner records its own boot, so that it is judged gone (another
	// boot) and the record's host boot id is what is judged next.
	if _, err := s.Acquire(context.Background(), seat, session, AcquireFields{Owner: Owner{PID: 4100, Start: "500", Boot: bootA}}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []Key{seat, session} {
		data := readRev(t, s, k, 1)
		data = []byte(strings.Replace(string(data), `"bootId":"`+bootA+`"`, `"bootId":"not-a-boot-id"`, 1))
		path := filepath.Join(s.KeyDir(k), RevisionName(1))
		if err := os.Chmod(path, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	g := openOn(t, root, &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{}})
	for _, dry := range []bool{true, false} {
		res, err := g.Classify(context.Background(), seat, session, &ClassifyOptions{DryRun: dry})
		if err != nil || res.Free() || res.Refusal == nil || !strings.Contains(res.Refusal.Reason, "is not a boot id") {
			t.Errorf("dry=%v: classify of a claim with a malformed boot id = %+v, %v; want held, saying it is not a boot id", dry, res, err)
		}
	}
}

// A claim id on a seat whose record names no pair (the reference's form)
// pairs that seat with the session of the same claim only if the session
// does not name another seat: a reused id must not pair keys of different
// claims (the session would then be classified in two pairs).
func TestClassifyAllReusedIDPairsOnce(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	s := openOn(t, root, liveHost())
	b, session := testKeys(t)
	c := claim4100(t, s, b, session)
	a, err := SeatKey("seat-a", "proj", "/ws")
	if err != nil {
		t.Fatal(err)
	}
	writeRev(t, s, a, 1, refRecord(a, 1, c.ID, "active").bytes())
	var pairs [][2]Key
	var orphans []Loc
	if _, err := s.ClassifyAll(context.Background(), &ClassifyOptions{DryRun: true}, func(pr *PairResult) {
		if pr.Orphan != "" {
			orphans = append(orphans, pr.Loc)
			return
		}
		if pr.Seat != nil && pr.Session != nil {
			pairs = append(pairs, [2]Key{*pr.Seat, *pr.Session})
		}
	}); err != nil {
		t.Fatal(err)
	}
	if len(pairs) != 1 || pairs[0] != [2]Key{b, session} {
		t.Errorf("pairs %v, want only (%v, %v)", pairs, b, session)
	}
	if len(orphans) != 1 || orphans[0] != a.Loc() {
		t.Errorf("orphans %v, want the seat %v", orphans, a)
	}
}

// A moved release's completion that loses its publish to another
// classifier (which completed it first) re-reads the pair and reports what
// is there now, as a classification started afterwards would, not a
// judgement of the heads it read before.
func TestMovedReleaseCompletionRaced(t *testing.T) {
	root, host, _, seat, session := movedRelease(t, nil)
	rival := openOn(t, root, host)
	raced := false
	c := openStore(t, root, &TOpts{Host: host, Barrier: func(p Point) error {
		if !raced && p.Key == session && p.Barrier == BarrierTempWritten {
			raced = true
			res, err := rival.Classify(context.Background(), seat, session, nil)
			if err != nil || !res.Completed {
				t.Errorf("rival classify = %+v, %v; want the completion", res, err)
			}
		}
		return nil
	}})
	res, err := c.Classify(context.Background(), seat, session, nil)
	if !raced {
		t.Fatal("the rival never ran")
	}
	if err != nil {
		t.Fatal(err)
	}
	after, err := openOn(t, root, host).Classify(context.Background(), seat, session, &ClassifyOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	code := func(r *Result) Code {
		if r.Refusal == nil {
			return ""
		}
		return r.Refusal.Code
	}
	if res.Outcome != after.Outcome || code(res) != code(after) {
		t.Errorf("raced classification reported %s (%s); the pair now classifies %s (%s)", res.Outcome, code(res), after.Outcome, code(after))
	}
}

// A dry run reports every revision the real run would publish, on both
// keys, and writes nothing.
func TestClassifyDryRunListsBothKeys(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	s := openOn(t, root, liveHost())
	seat, session := testKeys(t)
	claim4100(t, s, seat, session)
	before := rootPaths(t, root)
	g := openOn(t, root, &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{}})
	res, err := g.Classify(context.Background(), seat, session, &ClassifyOptions{DryRun: true})
	if err != nil || res.Outcome != OutcomeStopped {
		t.Fatalf("dry run after a reboot = %+v, %v; want stopped", res, err)
	}
	want := []Published{{Key: seat, Revision: 2, State: Stopped}, {Key: session, Revision: 2, State: Stopped}}
	if len(res.Published) != 2 || res.Published[0] != want[0] || res.Published[1] != want[1] {
		t.Errorf("dry run published %+v, want %+v", res.Published, want)
	}
	if diff := cmp.Diff(before, rootPaths(t, root)); diff != "" {
		t.Errorf("the dry run changed the root (-before +after):\n%s", diff)
	}
}

// The claim handed back to an adopter carries each key's own revision,
// when the keys' histories differ in length (the session had an earlier
// claim).
func TestAdoptedClaimRevisionsPerKey(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	s := openOn(t, root, liveHost())
	seat, session := testKeys(t)
	earlier, _ := SeatKey("seat-0", "proj", "/ws")
	c0 := claim4100(t, s, earlier, session)
	if err := s.Release(context.Background(), c0, NewProof(ProofCohort, "done")); err != nil {
		t.Fatal(err)
	}
	c := active4100(t, s, seat, session, nil)
	if c.SeatRev != 2 || c.SessionRev != 4 {
		t.Fatalf("claim at seat r%d, session r%d; want r2, r4", c.SeatRev, c.SessionRev)
	}
	res, err := openOn(t, root, goneSameBoot()).Classify(context.Background(), seat, session, &ClassifyOptions{Adopt: &Owner{PID: 9000, Start: "700"}})
	if err != nil || res.Claim == nil {
		t.Fatalf("classify adopting = %+v, %v; want the claim handed back", res, err)
	}
	if res.Claim.SeatRev != 3 || res.Claim.SessionRev != 5 {
		t.Errorf("adopted claim at seat r%d, session r%d; want r3, r5", res.Claim.SeatRev, res.Claim.SessionRev)
	}
}
