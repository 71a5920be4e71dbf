package claimstore

// Regression tests for what the crash harness and reviews found: each names
// the failure it pins down. They build the exact on-disk states by hand
// (lost revisions, malformed boot ids, keys taken between the steps of a
// release) that the protocol itself never writes.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/claimstore/claimstore/claimstore/dirbackend"
	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/hostid/hostidtest"
)

// TestClassifyMalformedBootIsNoEvidence: a record whose host boot id is not
// a boot id, or disagrees with its owner's recorded boot, proves no earlier
// boot: the pair stays held, nothing is published, no proof is issued.
func TestClassifyMalformedBootIsNoEvidence(t *testing.T) {
	for _, tc := range []struct{ name, from, to string }{
		{"malformed", `"bootId":"` + bootA + `"`, `"bootId":"garbage"`},
		{"owner disagrees", `"bootId":"` + bootA + `"}`, `"bootId":"` + bootB[:len(bootB)-1] + `3"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "root")
			w := openOn(t, root, &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{4100: "500"}})
			seat, session := testKeys(t)
			c, err := w.Acquire(context.Background(), seat, session, AcquireFields{Owner: Owner{PID: 4100, Start: "500", Boot: bootA}})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Advance(context.Background(), c, Patch{State: Active, Fields: map[string]any{"spawnMarker": true}}); err != nil {
				t.Fatal(err)
			}
			// Rewrite the heads by hand (as a buggy writer would have).
			for _, k := range []Key{seat, session} {
				p := filepath.Join(w.KeyDir(k), RevisionName(2))
				data, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				bad := strings.Replace(string(data), tc.from, tc.to, 1)
				if bad == string(data) {
					t.Fatalf("no %s in %s", tc.from, data)
				}
				os.Remove(p)
				if err := os.WriteFile(p, []byte(bad), 0o400); err != nil {
					t.Fatal(err)
				}
			}
			// This boot's classifier; the owner's pid is gone.
			s := openOn(t, root, &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{}})
			res, err := s.Classify(context.Background(), seat, session, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != OutcomeUncertain || res.Refusal == nil || len(res.Published) != 0 || res.BootProof != nil {
				t.Fatalf("classify = %s (%v), published %v, proof %v; want uncertain, nothing published", res.Outcome, res.Refusal, res.Published, res.BootProof)
			}
			if ids, _ := s.Backend().Proofs(context.Background()); len(ids) != 0 {
				t.Errorf("proofs issued: %v", ids)
			}
		})
	}
}

// racingListFS publishes a competing revision while the store lists a key
// directory, as a writer racing the free-head confirmation would.
type racingListFS struct {
	vfs.OSFS
	once sync.Once
	race func()
}

func (f *racingListFS) ReadDir(name string) ([]string, error) {
	f.once.Do(f.race)
	return f.OSFS.ReadDir(name)
}

func (f *racingListFS) ScanDir(name string, each func([]byte)) error {
	f.once.Do(f.race)
	return f.OSFS.ScanDir(name, each)
}

// TestFreeHeadRacingWriterIsNotDamage: a revision published between the
// probe and the listing is a newer head, not a gap.
func TestFreeHeadRacingWriterIsNotDamage(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	host := liveHost()
	other := openOn(t, root, host)
	seat, session := testKeys(t)
	owner := Owner{PID: 4100, Start: "500"}
	// A released claim first: the keys read free, so Head lists them.
	c, err := other.Acquire(context.Background(), seat, session, AcquireFields{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Release(context.Background(), c, NewProof(ProofCohort, "x")); err != nil {
		t.Fatal(err)
	}
	fsys := &racingListFS{}
	fsys.race = func() {
		if _, err := other.Acquire(context.Background(), seat, session, AcquireFields{Owner: owner}); err != nil {
			t.Errorf("competing acquire: %v", err)
		}
	}
	s, err := OpenRoot(root, &TOpts{Host: host, FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Acquire(context.Background(), seat, session, AcquireFields{Owner: owner})
	var r *Refusal
	if !errors.As(err, &r) || r.Code != AlreadyActive {
		t.Fatalf("acquire racing a writer: %v, want %s", err, AlreadyActive)
	}
	var ran bool
	fsys.once.Do(func() { ran = true })
	if ran {
		t.Fatal("the race never ran: Head did not list the directory")
	}
}

// TestReleaseVerifiesBootProofs: a release with a boot proof that does not
// exist (or is not this claim's) frees nothing.
func TestReleaseVerifiesBootProofs(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	s := openOn(t, root, liveHost())
	seat, session := testKeys(t)
	c := claim4100(t, s, seat, session)
	for _, ref := range []string{"boot-000000000000000000000000", "bp-1", ""} {
		if err := s.Release(context.Background(), c, NewProof(ProofBoot, ref)); !errors.Is(err, ErrBadPatch) {
			t.Errorf("release with boot proof %q: %v, want ErrBadPatch", ref, err)
		}
	}
	if p, _ := s.Pair(context.Background(), seat, session); !p.Held() || p.Seat.N != 1 {
		t.Errorf("pair after refused releases: held %v, seat r%d", p.Held(), p.Seat.N)
	}
}

// TestOwnerPIDMustBeANumber: a pid written as a string is an invalid
// owner, as the reference's Number.isInteger says.
func TestOwnerPIDMustBeANumber(t *testing.T) {
	r := &Record{}
	r.Fields.Set(fieldOwner, []byte(`{"pid":"4100","start":"500"}`))
	if _, err := r.Owner(); err == nil {
		t.Error(`owner {"pid":"4100"} decoded`)
	}
	r.Fields.Set(fieldOwner, []byte(`{"pid":4100,"start":"500"}`))
	if o, err := r.Owner(); err != nil || o.PID != 4100 {
		t.Errorf("owner = %+v, %v", o, err)
	}
}

// TestClassifyCompletesReleaseAfterKeyMovedOn: a release cut between the
// keys, after which another claim took the freed seat, leaves the session
// held by the old claim; classify finishes the old claim's release on the
// session alone (its owner gone) and never touches the seat.
func TestClassifyCompletesReleaseAfterKeyMovedOn(t *testing.T) {
	for _, goneY := range []bool{false, true} {
		t.Run(fmt.Sprintf("other claim's owner gone=%v", goneY), func(t *testing.T) { testMovedRelease(t, goneY) })
	}
}

func testMovedRelease(t *testing.T, goneY bool) {
	root := filepath.Join(t.TempDir(), "root")
	host := &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{4100: "500", 4200: "600"}}
	s := openOn(t, root, host)
	seat, session := testKeys(t)
	x := claim4100(t, s, seat, session)
	if err := s.Advance(context.Background(), x, Patch{State: Active, Fields: map[string]any{"spawnMarker": true}}); err != nil {
		t.Fatal(err)
	}
	cutAt(s, BarrierBetweenKeys)
	if err := s.Release(context.Background(), x, NewProof(ProofCohort, "cohort-x")); !errors.Is(err, errCrash) {
		t.Fatal(err)
	}
	s.barrier = nil
	delete(host.Procs, 4100) // X's supervisor died with the crash
	// Y takes the freed seat with another session.
	other, _ := SessionKey("sess-2")
	y, err := s.Acquire(context.Background(), seat, other, AcquireFields{Owner: Owner{PID: 4200, Start: "600"}})
	if err != nil {
		t.Fatal(err)
	}
	if goneY {
		// Y's supervisor died too: still, classifying X's pair must not
		// judge Y here and spread it onto X's session.
		delete(host.Procs, 4200)
	}
	seatBefore, _ := s.Head(context.Background(), seat)

	if p, err := s.Pair(context.Background(), seat, session); err != nil {
		t.Fatal(err)
	} else if ex, err := s.Explain(context.Background(), p); err != nil || ex.Row != "3a" || !ex.Result.Completed {
		t.Fatalf("Explain = %+v, %v; want row 3a completing the release", ex, err)
	}
	dry, err := s.Classify(context.Background(), seat, session, &ClassifyOptions{DryRun: true})
	if err != nil || !dry.Completed || len(dry.Published) != 1 || dry.Published[0].Key != session {
		t.Fatalf("dry run = %+v, %v", dry, err)
	}
	res, err := s.Classify(context.Background(), seat, session, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Completed || len(res.Published) != 1 || res.Published[0].Key != session {
		t.Fatalf("classify = outcome %s, completed %v, claim %s, published %v", res.Outcome, res.Completed, res.ClaimID, res.Published)
	}
	// The seat still belongs to Y: the pair reads held by Y alone, and
	// classify points at Y's own pair rather than judging Y here.
	if res.Outcome != OutcomeReserved || res.Refusal == nil || res.Refusal.Code != UnsafeReplacement || res.ClaimID != x.ID || res.Refusal.ClaimID != y.ID {
		t.Errorf("after completion: %s, claim %s, %v; want reserved, pointing at Y", res.Outcome, res.ClaimID, res.Refusal)
	}
	h, _ := s.Head(context.Background(), session)
	if h.Held() || h.Record.ClaimID != x.ID || h.Record.Proof.Ref != "cohort-x" || !h.Record.SpawnMarker() {
		t.Errorf("session after: held %v, claim %s, proof %v, marker %v", h.Held(), h.Record.ClaimID, h.Record.Proof, h.Record.SpawnMarker())
	}
	if after, _ := s.Head(context.Background(), seat); after.N != seatBefore.N || after.Record.ClaimID != y.ID {
		t.Errorf("the seat changed: r%d claim %s", after.N, after.Record.ClaimID)
	}
	if h.N != 3 {
		t.Errorf("session at revision %d after classify, want 3 (X's completion only)", h.N)
	}
	// The session is free again for a new claim; the seat is still Y's.
	if _, err := s.Acquire(context.Background(), seat, session, AcquireFields{Owner: Owner{PID: 4200, Start: "600"}}); err == nil {
		t.Error("acquire over Y's seat succeeded")
	}
	seat3, _ := SeatKey("seat-3", "proj", "/ws")
	if _, err := s.Acquire(context.Background(), seat3, session, AcquireFields{Owner: Owner{PID: 4200, Start: "600"}}); err != nil {
		t.Errorf("acquire of the freed session: %v", err)
	}
}

// TestAdvanceToStoppedChecksTheProof: Advance cannot free a claim on a
// proof that Release would refuse.
func TestAdvanceToStoppedChecksTheProof(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	s := openOn(t, root, liveHost())
	seat, session := testKeys(t)
	c := active4100(t, s, seat, session, map[string]any{"spawnMarker": true})
	for _, p := range []*Proof{NewProof(ProofBoot, "bogus"), NewProof(ProofBoot, "boot-000000000000000000000000"), NewProof(ProofNoUnit, "")} {
		if err := s.Advance(context.Background(), c, Patch{State: Stopped, Proof: p}); !errors.Is(err, ErrBadPatch) {
			t.Errorf("Advance to stopped with a %s proof %q: %v, want ErrBadPatch", p.Kind, p.Ref, err)
		}
	}
	if p, _ := s.Pair(context.Background(), seat, session); !p.Held() || p.Seat.N != 2 {
		t.Errorf("pair after refused steps: held %v, seat r%d", p.Held(), p.Seat.N)
	}
}

// TestGapAboveHeldHead: with revision 2 of three lost, the probe stops at a
// held r1; nothing that publishes may trust it. Classify reads the key as
// damaged and publishes nothing; a step of the claim refuses; fsck names
// the gap.
func TestGapAboveHeldHead(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	host := liveHost()
	w := openOn(t, root, host)
	seat, session := testKeys(t)
	c := claim4100(t, w, seat, session)
	if err := w.Advance(context.Background(), c, Patch{State: Active}); err != nil {
		t.Fatal(err)
	}
	if err := w.Advance(context.Background(), c, Patch{Fields: map[string]any{"spawnMarker": true}}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(w.KeyDir(seat), RevisionName(2))); err != nil {
		t.Fatal(err)
	}
	delete(host.Procs, 4100)
	s := openOn(t, root, host)
	res, err := s.Classify(context.Background(), seat, session, &ClassifyOptions{Units: mapUnits{}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != OutcomeUncertain || !res.Damaged || len(res.Published) != 0 {
		t.Fatalf("classify over a gap = %s, damaged %v, published %v", res.Outcome, res.Damaged, res.Published)
	}
	if !strings.Contains(res.Refusal.Error(), "revision 2 is missing") {
		t.Errorf("refusal does not name the gap: %v", res.Refusal)
	}
	if _, err := os.Lstat(filepath.Join(s.KeyDir(seat), RevisionName(2))); !os.IsNotExist(err) {
		t.Fatalf("revision 2 was published into the gap: %v", err)
	}
	// The claim itself cannot step over the gap either.
	c2 := *c
	if err := s.Advance(context.Background(), &c2, Patch{State: Stopping}); !isRefusal(err, UnsafeReplacement) {
		t.Errorf("Advance over a gap: %v, want unsafe-replacement", err)
	}
	rep, err := s.Check(context.Background(), nil)
	if err != nil || rep.Errors() == 0 {
		t.Errorf("fsck: %+v, %v; want the gap reported", rep, err)
	}
}

// TestGapBelowFreeHead: a released key with a revision lost below its head
// does not read free: its history was tampered with, and free is never
// answered on a history that lost revisions.
func TestGapBelowFreeHead(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	host := liveHost()
	w := openOn(t, root, host)
	seat, session := testKeys(t)
	c := claim4100(t, w, seat, session)
	for _, st := range []State{Active, Stopping, Active, Stopping, Active} {
		if err := w.Advance(context.Background(), c, Patch{State: st}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Release(context.Background(), c, NewProof(ProofCohort, "x")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(w.KeyDir(seat), RevisionName(3))); err != nil {
		t.Fatal(err)
	}
	s := openOn(t, root, host)
	h, err := s.Head(context.Background(), seat)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Held() || h.Damage == nil || h.N != 7 || !strings.Contains(h.Damage.Error(), "revision 3 is missing") {
		t.Fatalf("head over a gap below a free head: N %d, held %v, damage %v", h.N, h.Held(), h.Damage)
	}
	if _, err := s.Acquire(context.Background(), seat, session, AcquireFields{Owner: Owner{PID: 4100, Start: "500"}}); !isRefusal(err, UnsafeReplacement) {
		t.Errorf("acquire over the gap: %v, want unsafe-replacement", err)
	}
	sum, err := s.ClassifyAll(context.Background(), nil, nil)
	if err != nil || sum.Free != 0 || sum.Pairs != 1 {
		t.Errorf("ClassifyAll: %+v, %v; want the pair classified, not free", sum, err)
	}
}

// movedRelease builds a moved release: claim x (owner 4100, gone) released
// with cohortProof "x", cut between the keys (the seat stopped, the session
// not), then the seat taken by another claim (owner 4200, alive) with
// another session. before, if not nil, steps x first.
func movedRelease(t *testing.T, before func(s *Store, x *Claim)) (root string, host *hostidtest.Host, s *Store, seat, session Key) {
	t.Helper()
	root = filepath.Join(t.TempDir(), "root")
	host = &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{4100: "500", 4200: "600"}}
	s = openOn(t, root, host)
	seat, session = testKeys(t)
	x := claim4100(t, s, seat, session)
	if before != nil {
		before(s, x)
	}
	cutAt(s, BarrierBetweenKeys)
	if err := s.Release(context.Background(), x, NewProof(ProofCohort, "x")); !errors.Is(err, errCrash) {
		t.Fatal(err)
	}
	s.barrier = nil
	delete(host.Procs, 4100)
	other, _ := SessionKey("sess-2")
	if _, err := s.Acquire(context.Background(), seat, other, AcquireFields{Owner: Owner{PID: 4200, Start: "600"}}); err != nil {
		t.Fatal(err)
	}
	return root, host, s, seat, session
}

// TestMovedReleaseDryRunMatchesRun: the dry run of a moved-release
// completion reports what the real run then reports.
func TestMovedReleaseDryRunMatchesRun(t *testing.T) {
	_, _, s, seat, session := movedRelease(t, nil)
	summary := func(r *Result) string {
		code := Code("")
		if r.Refusal != nil {
			code = r.Refusal.Code
		}
		return fmt.Sprintf("%s %s completed=%v published=%d free=%v", r.Outcome, code, r.Completed, len(r.Published), r.Free())
	}
	dry, err := s.Classify(context.Background(), seat, session, &ClassifyOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	real, err := s.Classify(context.Background(), seat, session, nil)
	if err != nil {
		t.Fatal(err)
	}
	if summary(dry) != summary(real) || real.Free() {
		t.Errorf("dry run %q, real run %q", summary(dry), summary(real))
	}
}

// TestNoUnitWithMarkerInOneStep: a step that both sets the spawn marker
// and frees the claim with a no-unit proof is refused.
func TestNoUnitWithMarkerInOneStep(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	s := openOn(t, root, liveHost())
	seat, session := testKeys(t)
	c := claim4100(t, s, seat, session)
	err := s.Advance(context.Background(), c, Patch{State: Stopped, Proof: NewProof(ProofNoUnit, ""), Fields: map[string]any{"spawnMarker": true}})
	if !errors.Is(err, ErrBadPatch) {
		t.Fatalf("stopped + no-unit + spawn marker in one step: %v, want ErrBadPatch", err)
	}
}

// faultyBackend is a backend whose Revisions listing (List) of one key and
// whose publications on another fail, with EIO.
type faultyBackend struct {
	Backend
	failList, failPublish Loc
}

// Census is the directory backend's: a head's confirming listing is not
// the listing of a claim's history that fails here.
func (b faultyBackend) Census(ctx context.Context, loc Loc) (uint64, int, uint64, error) {
	return b.Backend.(storage.Censuser).Census(ctx, loc)
}

func (b faultyBackend) List(ctx context.Context, loc Loc) ([]uint64, []string, error) {
	if loc == b.failList {
		return nil, nil, &fs.PathError{Op: "readdir", Path: loc.String(), Err: syscall.EIO}
	}
	return b.Backend.List(ctx, loc)
}

func (b faultyBackend) Prepare(ctx context.Context, loc Loc, n uint64, data []byte, hook func(Barrier) error) (Prepared, error) {
	if loc == b.failPublish {
		return nil, &fs.PathError{Op: "write", Path: loc.String(), Err: syscall.EIO}
	}
	return b.Backend.Prepare(ctx, loc, n, data, hook)
}

func (b faultyBackend) Publish(ctx context.Context, loc Loc, n uint64, data []byte, hook func(Barrier) error) error {
	if loc == b.failPublish {
		return &fs.PathError{Op: "write", Path: loc.String(), Err: syscall.EIO}
	}
	return b.Backend.Publish(ctx, loc, n, data, hook)
}

// A moved release that cannot be completed — the history it rests on
// cannot be listed, or the completing revision cannot be published — is an
// error of the classification, said as such: not "uncertain", not a race
// to retry, and nothing is published.
func TestMovedReleaseFailuresAreErrors(t *testing.T) {
	for _, which := range []string{"history unreadable", "publish fails"} {
		t.Run(which, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "root")
			host := &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{4100: "500", 4200: "600"}}
			s := openOn(t, root, host)
			seat, session := testKeys(t)
			x := claim4100(t, s, seat, session)
			cutAt(s, BarrierBetweenKeys)
			if err := s.Release(context.Background(), x, NewProof(ProofCohort, "cohort-x")); !errors.Is(err, errCrash) {
				t.Fatal(err)
			}
			s.barrier = nil
			delete(host.Procs, 4100)
			other, _ := SessionKey("sess-2")
			if _, err := s.Acquire(context.Background(), seat, other, AcquireFields{Owner: Owner{PID: 4200, Start: "600"}}); err != nil {
				t.Fatal(err)
			}
			fb := faultyBackend{Backend: dirbackend.New(root, nil)}
			if which == "history unreadable" {
				fb.failList = seat.Loc()
			} else {
				fb.failPublish = session.Loc()
			}
			c, err := OpenRoot(root, &TOpts{Host: host, Backend: fb})
			if err != nil {
				t.Fatal(err)
			}
			before, _ := s.Head(context.Background(), session)
			res, err := c.Classify(context.Background(), seat, session, nil)
			if !errors.Is(err, syscall.EIO) {
				t.Errorf("classify = %+v, %v; want the EIO", res, err)
			}
			if after, _ := s.Head(context.Background(), session); after.N != before.N {
				t.Errorf("session went from revision %d to %d", before.N, after.N)
			}
		})
	}
}
