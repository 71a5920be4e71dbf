package claimstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/etcdbackend"
	"github.com/claimstore/claimstore/hostid"
)

// thirdMachine is a machine that is neither this one nor otherMachine.
const thirdMachine = "00112233445566778899aabbccddeeff"

// bootLater is a boot of otherMachine the store sees only after it was
// decommissioned.
const bootLater = "cccccccc-0000-4000-8000-000000000003"

func pairKeys(t testing.TB, name string) (Key, Key) {
	return seatKey(t, "seat-"+name), sessionKey(t, "sess-"+name)
}

// foreignRecord is revision n of k, claim id, as a writer on machine
// otherMachine in boot wrote it (the reference, which knows no
// quarantine).
func foreignRecord(k Key, n uint64, id, boot, state string) []byte {
	return refRecord(k, n, id, state).
		set("host", `{"machineId":"`+otherMachine+`","bootId":"`+boot+`"}`).
		set("owner", `{"pid":4242,"start":"123456","boot":"`+boot+`","incarnation":3}`).bytes()
}

// TestDecommission is issue 23's "a machine that will not come back", over
// every backend: an operator on this machine decommissions otherMachine;
// classify here then frees exactly otherMachine's claims of the boots the
// record names — never a later boot's, never this machine's, never another
// machine's —; otherMachine is quarantined (Acquire refuses, naming the
// lift), its supervisor's next step fails on the moved head (fencing), and
// a lift ends the quarantine and the freeing.
func TestDecommission(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		root := newRoot(t)
		here := openStore(t, root, nil) // the operator's machine
		dead := openStore(t, root, &TOpts{Host: foreignHost})
		deadEarlier := openStore(t, root, &TOpts{Host: hostid.Override{Host: hostid.System, Machine: otherMachine, Boot: bootA}})
		third := openStore(t, root, &TOpts{Host: hostid.Override{Host: hostid.System, Machine: thirdMachine, Boot: testBoot}})

		// otherMachine: a reserved claim and an active one in its last
		// boot (testBoot), one from an earlier boot (bootA).
		s1, x1 := pairKeys(t, "reserved")
		s2, x2 := pairKeys(t, "active")
		s3, x3 := pairKeys(t, "earlier")
		mustAcquire(t, dead, s1, x1)
		c2 := mustAcquire(t, dead, s2, x2)
		if err := dead.Advance(ctx, c2, Patch{State: Active, Fields: map[string]any{"spawnMarker": true}}); err != nil {
			t.Fatal(err)
		}
		mustAcquire(t, deadEarlier, s3, x3)
		// A third machine's claim, and this machine's own (live: this
		// test process is its owner).
		s4, x4 := pairKeys(t, "third")
		mustAcquire(t, third, s4, x4)
		s5, x5 := pairKeys(t, "mine")
		mustAcquire(t, here, s5, x5)

		// Refusals, each writing nothing.
		for _, tc := range []struct {
			name string
			opts DecommissionOptions
			want error
		}{
			{"own machine", DecommissionOptions{Machine: testMachine, Evidence: EvidencePoweredOff, Reason: "r"}, ErrOwnMachine},
			{"unknown machine", DecommissionOptions{Machine: "abcdefabcdefabcdefabcdefabcdefab", Evidence: EvidencePoweredOff, Reason: "r"}, ErrUnknownMachine},
			{"malformed machine", DecommissionOptions{Machine: "host1", Evidence: EvidencePoweredOff, Reason: "r"}, ErrBadDecommission},
			{"bad evidence", DecommissionOptions{Machine: otherMachine, Evidence: "rebooted", Reason: "r"}, ErrBadDecommission},
			{"empty reason", DecommissionOptions{Machine: otherMachine, Evidence: EvidenceWiped, Reason: "  "}, ErrBadDecommission},
		} {
			if _, err := here.Decommission(ctx, tc.opts); !errors.Is(err, tc.want) {
				t.Errorf("%s: Decommission = %v, want %v", tc.name, err, tc.want)
			}
		}
		if ids, err := here.be.Proofs(ctx); err != nil || len(ids) != 0 {
			t.Fatalf("refused decommissions wrote proofs: %v, %v", ids, err)
		}
		if _, err := here.LiftDecommission(ctx, otherMachine, "r", nil); !errors.As(err, new(*DecommissionStateError)) {
			t.Errorf("lift of a machine never decommissioned: %v, want a *DecommissionStateError", err)
		}

		rec, err := here.Decommission(ctx, DecommissionOptions{Machine: otherMachine, Evidence: EvidencePoweredOff, Reason: "PDU port 7 off, ticket OPS-1"})
		_ = err
		if err != nil {
			t.Fatal(err)
		}
		me, _ := os.Hostname()
		want := &DecommissionRecord{Version: 1, Kind: DecommissionKind, ID: DecommissionID(otherMachine, 1), MachineID: otherMachine, Seq: 1,
			LastBootID: rec.LastBootID, BootIDs: []string{testBoot, bootA}, HeldClaims: 3, Evidence: EvidencePoweredOff, Reason: "PDU port 7 off, ticket OPS-1",
			AssertedBy: Asserter{UID: os.Getuid(), User: rec.AssertedBy.User, Hostname: me, MachineID: testMachine}, AssertedAt: timestamp(fixedNow())}
		if diff := cmp.Diff(want, rec); diff != "" {
			t.Errorf("record (-want +got):\n%s", diff)
		}
		if rec.LastBootID != bootA && rec.LastBootID != testBoot {
			t.Errorf("last boot %q is not one of the machine's boots", rec.LastBootID)
		}
		if got, err := here.ReadDecommission(ctx, rec.ID); err != nil || !cmp.Equal(got, rec) {
			t.Errorf("ReadDecommission = %+v, %v; want the record written", got, err)
		}
		var st *DecommissionStateError
		if _, err := here.Decommission(ctx, DecommissionOptions{Machine: otherMachine, Evidence: EvidenceWiped, Reason: "again"}); !errors.As(err, &st) || st.Current.ID != rec.ID || !strings.Contains(err.Error(), "already decommissioned by record "+rec.ID) {
			t.Errorf("second decommission: %v; want a *DecommissionStateError naming %s", err, rec.ID)
		}

		// Quarantine: otherMachine takes no claim, and is told how to lift.
		sq, xq := pairKeys(t, "quarantined")
		_, err = dead.Acquire(ctx, sq, xq, fields(t, dead))
		var q *QuarantinedError
		if !errors.As(err, &q) || !errors.Is(err, ErrQuarantined) || q.Record.ID != rec.ID || !strings.Contains(err.Error(), LiftCommand(otherMachine)) {
			t.Fatalf("Acquire on the decommissioned machine: %v; want a *QuarantinedError naming %s and %q", err, rec.ID, LiftCommand(otherMachine))
		}
		if h, _ := here.Head(ctx, sq); h.N != 0 {
			t.Errorf("a quarantined acquire published r%d", h.N)
		}
		// A request no revision could hold is refused as that first,
		// whatever the machine's state: an input error (claimctl's usage
		// error) before any decision about the machine.
		big := fields(t, dead)
		big.Fields = map[string]any{"note": strings.Repeat("x", MaxFileSize)}
		if _, err := dead.Acquire(ctx, sq, xq, big); !errors.Is(err, ErrRecordTooLarge) || errors.Is(err, ErrQuarantined) {
			t.Errorf("an oversize acquire on the decommissioned machine: %v; want ErrRecordTooLarge, not the quarantine", err)
		}
		// Other machines still acquire.
		sn, xn := pairKeys(t, "new-here")
		mustAcquire(t, here, sn, xn)

		// A claim of a boot the record does not name: written by the
		// machine after the record (the reference knows no quarantine).
		s6, x6 := pairKeys(t, "later")
		const laterID = "c00000000000000000000a006"
		writeRev(t, here, s6, 1, foreignRecord(s6, 1, laterID, bootLater, "active"))
		writeRev(t, here, x6, 1, foreignRecord(x6, 1, laterID, bootLater, "active"))

		// Classify, here: exactly the covered claims are freed.
		for _, p := range [][2]Key{{s1, x1}, {s2, x2}, {s3, x3}} {
			res, err := here.Classify(ctx, p[0], p[1], nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != OutcomeStopped || res.Proof == nil || res.Proof.Kind != ProofDecommissioned || res.Proof.Ref != rec.ID || res.Decommission == nil || res.Decommission.ID != rec.ID || len(res.Published) != 2 {
				t.Errorf("classify %v: %+v (proof %+v); want stopped on %s, both keys published", p, res, res.Proof, rec.ID)
			}
			for _, k := range p {
				h, err := here.Head(ctx, k)
				if err != nil || h.Held() || h.Record.Proof.Kind != ProofDecommissioned {
					t.Errorf("%v after classify: %+v, %v; want free on the decommission record", k, h, err)
				}
			}
			if p[0] == s2 && !mustHead(t, here, s2).Record.SpawnMarker() {
				t.Error("the spawn marker was dropped")
			}
			// A second classification publishes nothing.
			if res, err := here.Classify(ctx, p[0], p[1], nil); err != nil || len(res.Published) != 0 || !res.Free() {
				t.Errorf("second classify %v: %+v, %v", p, res, err)
			}
		}
		for _, tc := range []struct {
			name       string
			seat, sess Key
			code       Code
			reason     string
		}{
			{"a later boot", s6, x6, ForeignHost, "which the record does not name"},
			{"another machine", s4, x4, ForeignHost, ""},
			{"this machine", s5, x5, AlreadyActive, ""},
		} {
			res, err := here.Classify(ctx, tc.seat, tc.sess, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Free() || res.Refusal == nil || res.Refusal.Code != tc.code || len(res.Published) != 0 || res.Decommission != nil || !strings.Contains(res.Refusal.Reason, tc.reason) {
				t.Errorf("%s: %+v (refusal %+v); want held (%s), nothing published", tc.name, res, res.Refusal, tc.code)
			}
		}

		// Fencing: the decommissioned machine's supervisor, still holding
		// c2, tries its next steps; the heads moved under it.
		if err := dead.Advance(ctx, c2, Patch{Fields: map[string]any{"leaf": "next"}}); err == nil {
			t.Error("Advance by the decommissioned machine's supervisor succeeded after classify freed its claim")
		} else if ref := new(Refusal); !errors.As(err, &ref) && !errors.Is(err, ErrReleased) {
			t.Errorf("Advance: %v; want a refusal or ErrReleased", err)
		}
		if err := dead.Release(ctx, c2, NewProof(ProofCohort, "x")); err == nil {
			t.Error("Release by the decommissioned machine's supervisor succeeded after classify freed its claim")
		}
		// Only classify frees on a decommission record.
		cn := mustAcquire(t, here, seatKey(t, "release-decom"), sessionKey(t, "release-decom"))
		if err := here.Release(ctx, cn, NewProof(ProofDecommissioned, rec.ID)); !errors.Is(err, ErrBadPatch) {
			t.Errorf("Release with a decommissioned proof: %v; want ErrBadPatch", err)
		}

		// fsck: the record is whole, the stopped revisions verify.
		rep, err := here.Check(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range rep.Findings {
			if f.Severity == SeverityError || strings.Contains(f.Path, "decommission-") {
				t.Errorf("fsck: %+v", f)
			}
		}

		// The lift: the machine takes claims again; classify frees nothing
		// more on the lifted record; the revisions freed on it stay free.
		lift, err := dead.LiftDecommission(ctx, otherMachine, "repaired, back in service, OPS-2", nil)
		if err != nil {
			t.Fatal(err)
		}
		if lift.ID != DecommissionID(otherMachine, 2) || !lift.Lift() || lift.Lifts != rec.ID || lift.AssertedBy.MachineID != otherMachine {
			t.Errorf("lift record %+v", lift)
		}
		if _, err := here.LiftDecommission(ctx, otherMachine, "again", nil); !errors.As(err, &st) || st.Current.ID != lift.ID {
			t.Errorf("second lift: %v", err)
		}
		if cur, err := here.Decommissioned(ctx, otherMachine); err != nil || cur.ID != lift.ID {
			t.Errorf("Decommissioned = %+v, %v; want the lift", cur, err)
		}
		mustAcquire(t, dead, sq, xq)
		res, err := here.Classify(ctx, sq, xq, nil)
		if err != nil || res.Free() || res.Refusal == nil || res.Refusal.Code != ForeignHost || !strings.Contains(res.Refusal.Reason, "lifted by record "+lift.ID) {
			t.Errorf("classify after the lift: %+v, %v; want foreign-host naming the lift", res, err)
		}
		if h := mustHead(t, here, s1); h.Held() {
			t.Errorf("a key freed on the lifted record reads held: %+v", h)
		}
		// Decommissioned again: a new record, covering what is seen now.
		rec3, err := here.Decommission(ctx, DecommissionOptions{Machine: otherMachine, Evidence: EvidenceInstanceDeleted, Reason: "gone for good"})
		if err != nil {
			t.Fatal(err)
		}
		if rec3.Seq != 3 || !rec3.Covers(otherMachine, bootLater) {
			t.Errorf("third record %+v", rec3)
		}
		if res, err := here.Classify(ctx, s6, x6, nil); err != nil || res.Outcome != OutcomeStopped || res.Proof.Ref != rec3.ID {
			t.Errorf("the later boot after a new decommission: %+v, %v", res, err)
		}
	})
}

func mustHead(t testing.TB, s *Store, k Key) *Head {
	t.Helper()
	h, err := s.Head(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestDecommissionRecordVerified: a stopped head names a decommission
// record, which must exist and cover it; one that is missing, lifted in
// its place or covering another boot reads as damaged (held), never free.
func TestDecommissionRecordVerified(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		root := newRoot(t)
		here := openStore(t, root, nil)
		dead := openStore(t, root, &TOpts{Host: foreignHost})
		seat, session := pairKeys(t, "v")
		mustAcquire(t, dead, seat, session)
		rec, err := here.Decommission(ctx, DecommissionOptions{Machine: otherMachine, Evidence: EvidenceWiped, Reason: "disks shredded"})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := here.Classify(ctx, seat, session, nil); err != nil || res.Outcome != OutcomeStopped {
			t.Fatalf("classify: %+v, %v", res, err)
		}
		data, err := here.be.ReadProof(ctx, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name    string
			replace func()
		}{
			{"missing", func() { removeProof(t, here, rec.ID) }},
			{"another boot", func() {
				r := *rec
				r.BootIDs = []string{bootLater}
				putProofData(t, here, rec.ID, &r)
			}},
			{"a lift", func() {
				r := *rec
				r.Kind, r.Lifts = DecommissionLiftKind, "x"
				putProofData(t, here, rec.ID, &r)
			}},
		} {
			tc.replace()
			h := mustHead(t, here, seat)
			if !h.Held() || h.Damage == nil || !strings.Contains(h.Damage.Error(), "decommission record") {
				t.Errorf("%s: head %+v (damage %v); want damaged, naming the record", tc.name, h, h.Damage)
			}
			rep, err := here.Check(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			errs := 0
			for _, f := range rep.Findings {
				if f.Severity == SeverityError {
					errs++
				}
			}
			if errs == 0 {
				t.Errorf("%s: fsck found no error: %+v", tc.name, rep.Findings)
			}
			removeProof(t, here, rec.ID)
			if err := here.be.WriteProof(ctx, rec.ID, data); err != nil {
				t.Fatal(err)
			}
			if h := mustHead(t, here, seat); h.Held() {
				t.Fatalf("%s: restored record, head still held: %+v", tc.name, h)
			}
		}
	})
}

// removeProof removes a proof by hand (a restored root that lost it).
func removeProof(t testing.TB, s *Store, id string) {
	t.Helper()
	if be, ok := s.be.(*etcdbackend.Backend); ok {
		if _, err := be.Client().Delete(context.Background(), be.ProofKey(id)); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := os.Remove(filepath.Join(s.Root(), ProofDir, id+".json")); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

func putProofData(t testing.TB, s *Store, id string, r *DecommissionRecord) {
	t.Helper()
	removeProof(t, s, id)
	data := fmt.Appendf(nil, `{"version":%d,"kind":%q,"id":%q,"machineId":%q,"seq":%d,"bootIds":["%s"],"heldClaims":0,"evidence":%q,"reason":%q,"lifts":%q,"assertedBy":{"uid":0,"user":"","hostname":"","machineId":""},"assertedAt":""}`+"\n",
		r.Version, r.Kind, r.ID, r.MachineID, r.Seq, strings.Join(r.BootIDs, `","`), r.Evidence, r.Reason, r.Lifts)
	if err := s.be.WriteProof(context.Background(), id, data); err != nil {
		t.Fatal(err)
	}
}

// TestDecommissionRace: operators racing to decommission one machine, and
// to lift it: exactly one record is written per number, and every loser is
// told the state the winner left.
func TestDecommissionRace(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		root := newRoot(t)
		dead := openStore(t, root, &TOpts{Host: foreignHost})
		mustAcquire(t, dead, seatKey(t, "r"), sessionKey(t, "r"))
		for round, lift := range []bool{false, true} {
			const n = 4
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s := openStore(t, root, nil)
					if lift {
						_, errs[i] = s.LiftDecommission(ctx, otherMachine, fmt.Sprintf("lift %d", i), nil)
					} else {
						_, errs[i] = s.Decommission(ctx, DecommissionOptions{Machine: otherMachine, Evidence: EvidencePoweredOff, Reason: fmt.Sprintf("op %d", i)})
					}
				}()
			}
			wg.Wait()
			won := 0
			for _, err := range errs {
				var st *DecommissionStateError
				switch {
				case err == nil:
					won++
				case !errors.As(err, &st) || st.Current == nil || st.Current.Seq != uint64(round+1):
					t.Errorf("round %d: a loser got %v; want the winner's state", round, err)
				}
			}
			if won != 1 {
				t.Errorf("round %d: %d operators won; want exactly 1", round, won)
			}
		}
	})
}
