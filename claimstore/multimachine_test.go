package claimstore

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/etcdbackend"
	"github.com/claimstore/claimstore/hostid/hostidtest"
)

// TestTwoMachinesOneStore: supervisors on two machines share one root (a
// directory both mount, or one etcd prefix). Machine A's claim records A's
// machine id; on machine B it is foreign-host: B cannot acquire over it,
// step it, or classify it free, whatever A's processes look like from B
// (B cannot see them; no time passing frees it either). Only A, after its
// own reboot, frees it, with a boot proof that names A.
func TestTwoMachinesOneStore(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		root := newRoot(t)
		hostA := &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{4100: "500"}}
		hostB := &hostidtest.Host{Machine: otherMachine, Boot: bootA, Procs: map[int]string{}}
		a, b := openOn(t, root, hostA), openOn(t, root, hostB)
		seat, session := testKeys(t)
		c := claim4100(t, a, seat, session)
		if c.Record.Host.MachineID != testMachine {
			t.Fatalf("the record carries machine %q, want A's %q", c.Record.Host.MachineID, testMachine)
		}

		p, err := b.Pair(context.Background(), seat, session)
		if err != nil {
			t.Fatal(err)
		}
		if r := b.Refusal(p); r.Code != ForeignHost || !p.Held() {
			t.Errorf("on machine B the pair reads %s, refusal %+v; want held, %s", p.State(), r, ForeignHost)
		}
		if _, err := b.Acquire(context.Background(), seat, session, AcquireFields{Owner: owner4100}); !isRefusal(err, ForeignHost) {
			t.Errorf("B's acquire over A's claim: %v, want %s", err, ForeignHost)
		}
		if err := b.Release(context.Background(), &Claim{ID: c.ID, Seat: seat, Session: session, SeatRev: c.SeatRev, SessionRev: c.SessionRev, Record: c.Record}, NewProof(ProofCohort, "from-b")); !isRefusal(err, ForeignHost) {
			t.Errorf("B's release of A's claim: %v, want %s", err, ForeignHost)
		}
		// B's classifier, after B's own reboot, judges nothing of A's.
		hostB.Boot = bootB
		res, err := b.Classify(context.Background(), seat, session, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Free() || res.Refusal == nil || res.Refusal.Code != ForeignHost || len(res.Published) != 0 {
			t.Errorf("B classifies A's claim as %+v; want uncertain, %s, nothing published", res, ForeignHost)
		}
		sum, err := b.ClassifyAll(context.Background(), nil, func(*PairResult) {})
		if err != nil || sum.Free != 0 {
			t.Errorf("B's ClassifyAll: %+v, %v; want nothing free", sum, err)
		}

		// A reboots: its own classifier frees the claim on a boot proof
		// naming A.
		hostA2 := &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{}}
		a2 := openOn(t, root, hostA2)
		res, err = a2.Classify(context.Background(), seat, session, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Free() || res.BootProof == nil || res.BootProof.MachineID != testMachine {
			t.Fatalf("A after its reboot: %+v; want free on a boot proof naming A", res)
		}
		// Now B may take the pair.
		if _, err := b.Acquire(context.Background(), seat, session, AcquireFields{Owner: owner4100}); err != nil {
			t.Errorf("B's acquire after A freed the pair: %v", err)
		}
	})
}

// TestCheckGapAndDamageBothBackends: fsck's record checks read the same on
// both backends: a gap (a revision removed by hand), a damaged revision
// (written by hand), and a name under a key that is not a revision.
func TestCheckGapAndDamageBothBackends(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		s := openStore(t, newRoot(t), nil)
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		c := mustAcquire(t, s, seat, session)
		if err := s.Advance(context.Background(), c, Patch{State: Active}); err != nil {
			t.Fatal(err)
		}
		removeRev(t, s, seat, 1)
		writeRev(t, s, session, 3, []byte("{torn"))
		if be, ok := s.be.(*etcdbackend.Backend); ok {
			if _, err := be.Client().Put(context.Background(), be.KeyDir(session.Loc())+"notes.txt", "x"); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(filepath.Join(s.KeyDir(session), "notes.txt"), []byte("x"), 0o400); err != nil {
			t.Fatal(err)
		}
		rep, err := s.Check(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, f := range rep.Findings {
			got[f.Kind] = f.Path
		}
		want := map[string]string{
			FindingGap:     s.RevisionPath(seat, 2),
			FindingDamaged: s.RevisionPath(session, 3),
			FindingForeign: s.Path(string(session.Kind), session.Hash(), "notes.txt"),
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("findings (-want +got):\n%s\n%+v", diff, rep.Findings)
		}
		if rep.Keys != 2 || rep.Revisions != 4 {
			t.Errorf("report %+v; want 2 keys, 4 revisions", rep)
		}
		// Both heads read held.
		for _, k := range []Key{seat, session} {
			if h, err := s.Head(context.Background(), k); err != nil || !h.Held() {
				t.Errorf("%v: head %+v, %v; want held", k, h, err)
			}
		}
	})
}
