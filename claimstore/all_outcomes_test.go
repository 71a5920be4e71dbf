package claimstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"path"
	"sort"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/hostid/hostidtest"
	"github.com/claimstore/claimstore/internal/crashfs"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// outcomesRoot writes a root in which a ClassifyAll walk meets every kind
// of result its Summary counts, each once or twice, and returns the store
// to classify it with (boot B, pid 4100 alive), its filesystem (errors
// injected for pair 7) and the summary a walk must report.
func outcomesRoot(t *testing.T) (*world, *errorfs.FS, claimstore.UnitLookup, claimstore.Summary) {
	t.Helper()
	w := newWorld(t, &crashfs.Options{})
	bootBHost := &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{ownerPID: ownerStart}}
	inA := w.store                      // writers of boot A: every owner gone now
	inB := w.open(w.fs, bootBHost, nil) // writers of this boot
	foreign := w.open(w.fs, &hostidtest.Host{Machine: "fedcba9876543210fedcba9876543210", Boot: bootB, Procs: map[int]string{}}, nil)
	own := func(pid int, boot string) claimstore.AcquireFields {
		return claimstore.AcquireFields{Owner: claimstore.Owner{PID: pid, Start: ownerStart, Boot: boot}}
	}
	acq := func(s *claimstore.Store, n int, f claimstore.AcquireFields) *claimstore.Claim {
		t.Helper()
		seat, session := mustKeys(t, n)
		c, err := s.Acquire(context.Background(), seat, session, f)
		if err != nil {
			t.Fatalf("acquire pair %d: %v", n, err)
		}
		return c
	}
	adv := func(s *claimstore.Store, c *claimstore.Claim, p claimstore.Patch) {
		t.Helper()
		if err := s.Advance(context.Background(), c, p); err != nil {
			t.Fatalf("advance %s to %s: %v", c.ID, p.State, err)
		}
	}
	marked := claimstore.Patch{State: claimstore.Active, Fields: map[string]any{"spawnMarker": true}}

	// 1: released: free.
	c1 := acq(inA, 1, own(ownerPID, bootA))
	if err := inA.Release(context.Background(), c1, claimstore.NewProof(claimstore.ProofCohort, "cohort-1")); err != nil {
		t.Fatal(err)
	}
	// 2: active in boot A: stopped with a boot proof.
	adv(inA, acq(inA, 2, own(ownerPID, bootA)), marked)
	// 3: owned by a live process of this boot.
	adv(inB, acq(inB, 3, own(ownerPID, bootB)), marked)
	// 4: owner of this boot gone after marking its spawn; its unit
	// cannot be observed: uncertain.
	c4 := acq(inB, 4, own(4200, bootB))
	adv(inB, c4, marked)
	// 5: an owner gone while stopping its writer, whose unit is still
	// there: a stop in flight.
	c5 := acq(inB, 5, own(4200, bootB))
	adv(inB, c5, marked)
	adv(inB, c5, stopping())
	// 11: owner gone, its unit still there: uncertain.
	adv(inB, acq(inB, 11, own(4200, bootB)), marked)
	// 6: another machine's claim: refused, foreign-host.
	acq(foreign, 6, own(ownerPID, bootB))
	// 7: a claim whose seat directory cannot be examined: the seat is an
	// orphan of the walk (unreadable), and the pair, found through the
	// session's pair member, an error.
	c7 := acq(inB, 7, own(ownerPID, bootB))
	// 8: a torn only revision: no readable key, an orphan.
	seat8, _ := mustKeys(t, 8)
	if err := w.fs.MkdirAll(path.Dir(revPath(seat8, 1)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := w.fs.WriteFile(revPath(seat8, 1), []byte("{torn"), 0o444); err != nil {
		t.Fatal(err)
	}
	// 9 and 10: a released seat whose session went on to another claim
	// (on seat 10): the seat is idle, the other claim owned.
	c9 := acq(inB, 9, own(ownerPID, bootB))
	if err := inB.Release(context.Background(), c9, claimstore.NewProof(claimstore.ProofCohort, "cohort-9")); err != nil {
		t.Fatal(err)
	}
	seat10, _ := mustKeys(t, 10)
	if _, err := inB.Acquire(context.Background(), seat10, c9.Session, own(ownerPID, bootB)); err != nil {
		t.Fatal(err)
	}

	// 12 and 13: a released claim on pair 12, then an acquire of seat 13
	// with session 12 cut between the keys: seat 13 names session 12,
	// whose head is still the released claim; both pairs are classified.
	c12 := acq(inB, 12, own(ownerPID, bootB))
	if err := inB.Release(context.Background(), c12, claimstore.NewProof(claimstore.ProofCohort, "cohort-12")); err != nil {
		t.Fatal(err)
	}
	seat13, _ := mustKeys(t, 13)
	cut := errors.New("cut")
	cutter := w.open(w.fs, bootBHost, func(p claimstore.Point) error {
		if p.Barrier == claimstore.BarrierBetweenKeys {
			return cut
		}
		return nil
	})
	if _, err := cutter.Acquire(context.Background(), seat13, c12.Session, own(ownerPID, bootB)); !errors.Is(err, cut) {
		t.Fatalf("cut acquire: %v", err)
	}
	// 15: a session held by a claim written without a pair member (as the
	// reference writes), whose seat has no readable revision: the seat
	// and the session are orphans.
	c15 := acq(inB, 15, own(ownerPID, bootB))
	rec15 := revPath(c15.Session, 1)
	var members map[string]json.RawMessage
	if err := json.Unmarshal(w.fs.Files(path.Dir(rec15))[rec15], &members); err != nil {
		t.Fatal(err)
	}
	delete(members, "pair")
	noPair, err := json.Marshal(members)
	if err != nil {
		t.Fatal(err)
	}
	for p, data := range map[string][]byte{rec15: noPair, revPath(c15.Seat, 1): []byte("{torn")} {
		if err := w.fs.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := w.fs.WriteFile(p, data, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	// 16: a release cut between the keys (seat stopped, session held),
	// after which another claim took the seat with session 17: the walk
	// completes the release on session 16, and leaves the seat to its
	// new claim, which it names (unsafe-replacement).
	c16 := acq(inB, 16, own(4200, bootB))
	if err := cutter.Release(context.Background(), c16, claimstore.NewProof(claimstore.ProofCohort, "cohort-16")); !errors.Is(err, cut) {
		t.Fatalf("cut release: %v", err)
	}
	_, session17 := mustKeys(t, 17)
	if _, err := inB.Acquire(context.Background(), c16.Seat, session17, own(ownerPID, bootB)); err != nil {
		t.Fatal(err)
	}
	// 18: a released pair whose seat's first revision the walk's first
	// listing misses (a listing is not atomic): listed again, it is free.
	c18 := acq(inB, 18, own(ownerPID, bootB))
	if err := inB.Release(context.Background(), c18, claimstore.NewProof(claimstore.ProofCohort, "cohort-18")); err != nil {
		t.Fatal(err)
	}

	// 19, 20, 21: pairs whose seat's newest revision cannot be used — it
	// cannot be read, is not JSON, or is JSON but no record — over a
	// readable one: each is paired by the claim below it, and held
	// (damaged).
	var unreadable string
	for n, top := range map[int]string{19: "", 20: "{torn", 21: ""} {
		c := acq(inB, n, own(ownerPID, bootB))
		adv(inB, c, marked)
		p := revPath(c.Seat, 3)
		switch {
		case n == 19:
			unreadable, top = p, "{}"
		case n == 21:
			top = `{"key":` + string(c.Seat.JSON()) + `}`
		}
		if err := w.fs.WriteFile(p, []byte(top), 0o444); err != nil {
			t.Fatal(err)
		}
	}

	// 22 and 23: a claim of boot A stopped on a boot proof by this boot's
	// classifier, its session then taken with seat 23; the proof is then
	// lost. Seat 22 reads free by its record but held by its head (a boot
	// proof that cannot be read): it is paired and held, not idle.
	c22 := acq(inA, 22, own(ownerPID, bootA))
	res22, err := inB.Classify(context.Background(), c22.Seat, c22.Session, &claimstore.ClassifyOptions{Units: absentUnits{}})
	if err != nil || res22.BootProof == nil {
		t.Fatalf("classify pair 22 after the reboot: %+v, %v", res22, err)
	}
	seat23, _ := mustKeys(t, 23)
	if _, err := inB.Acquire(context.Background(), seat23, c22.Session, own(ownerPID, bootB)); err != nil {
		t.Fatal(err)
	}
	if err := w.fs.Remove(path.Join(root, claimstore.ProofDir, res22.BootProof.ID+".json")); err != nil {
		t.Fatal(err)
	}

	// 24–26 with 27–29: released pairs whose seats went on with other
	// sessions: sessions 24–26 are idle (held keys of their kind, such as
	// session 15, are still counted after them, whatever the order).
	for n := 24; n <= 26; n++ {
		c := acq(inB, n, own(ownerPID, bootB))
		if err := inB.Release(context.Background(), c, claimstore.NewProof(claimstore.ProofCohort, "cohort")); err != nil {
			t.Fatal(err)
		}
		_, next := mustKeys(t, n+3)
		if _, err := inB.Acquire(context.Background(), c.Seat, next, own(ownerPID, bootB)); err != nil {
			t.Fatal(err)
		}
	}

	efs := errorfs.Wrap(w.fs,
		&errorfs.Rule{Op: errorfs.OpReadFile, Path: func(p string) bool { return p == unreadable }},
		&errorfs.Rule{Op: errorfs.OpLstat, Path: errorfs.Contains(c7.Seat.Hash())},
		&errorfs.Rule{Op: errorfs.OpReadDir, Kind: errorfs.Hide, Times: 1, Path: errorfs.Suffix(c18.Seat.Hash() + "/" + claimstore.RevisionName(1))},
		// The idle seat 9 likewise: listed again, it is idle, not held.
		&errorfs.Rule{Op: errorfs.OpReadDir, Kind: errorfs.Hide, Times: 1, Path: errorfs.Suffix(c9.Seat.Hash() + "/" + claimstore.RevisionName(1))})
	want := claimstore.Summary{
		Pairs:     22,
		Free:      3, // 1, 12, 18
		Stopped:   1,
		Uncertain: map[string]int{"unit unknown": 1, "unit present": 1, "stop in flight": 1, "damaged head": 4},
		// Held by their live owners (3, 10, 13, and 16's seat with 17):
		// the walk leaves them; and pair 16, completed, names the seat's
		// new claim.
		Refused: map[claimstore.Code]int{claimstore.ForeignHost: 1, claimstore.AlreadyActive: 8, claimstore.UnsafeReplacement: 1},
		Errors:  1,
		Idle:    4, // seat 9, sessions 24-26
		Orphans: 4, // 7's seat, 8's seat, 15's seat and session
	}
	units := aliveExcept(claimstore.UnitNameFor(c4.ID))
	return w, efs, units, want
}

// TestClassifyAllEveryOutcome: the walk's summary counts each result in
// its own place, pairs are reported in the order of their keys' hashes
// whatever the number of workers, and each pair is reported once.
func TestClassifyAllEveryOutcome(t *testing.T) {
	w, efs, units, want := outcomesRoot(t)
	type entry struct {
		Seat, Session string
		Outcome       claimstore.Outcome
		Err, Orphan   bool
	}
	walk := func(workers int, dry bool) ([]entry, *claimstore.Summary) {
		t.Helper()
		s := w.open(efs, &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{ownerPID: ownerStart}}, nil)
		var got []entry
		sum, err := s.ClassifyAll(context.Background(), &claimstore.ClassifyOptions{Units: units, Workers: workers, DryRun: dry}, func(r *claimstore.PairResult) {
			e := entry{Err: r.Err != nil, Orphan: r.Orphan != ""}
			if r.Seat != nil {
				e.Seat = r.Seat.Hash()
			}
			if r.Session != nil {
				e.Session = r.Session.Hash()
			}
			if r.Result != nil {
				e.Outcome = r.Result.Outcome
			}
			got = append(got, e)
		})
		if err != nil {
			t.Fatalf("ClassifyAll (workers %d): %v", workers, err)
		}
		return got, sum
	}
	first, _ := walk(1, true)
	var pairs []entry
	for _, e := range first {
		if !e.Orphan {
			pairs = append(pairs, e)
		}
	}
	if len(pairs) != want.Pairs {
		t.Fatalf("dry walk reported %d pairs, want %d: %+v", len(pairs), want.Pairs, first)
	}
	if !sort.SliceIsSorted(pairs, func(i, j int) bool { return pairs[i].Seat+pairs[i].Session < pairs[j].Seat+pairs[j].Session }) {
		t.Errorf("pairs not reported in the order of their hashes: %+v", pairs)
	}
	for _, workers := range []int{2, 3, 16} {
		got, _ := walk(workers, true)
		if diff := cmp.Diff(first, got); diff != "" {
			t.Errorf("dry walk with %d workers differs from one worker (-1 +%d):\n%s", workers, workers, diff)
		}
	}
	// Adopting as the owner pairs 2, 3, 10, 13, 16-17, 23-22 and 24-27 to
	// 26-29 record: those are
	// owned (as in the reference, the pid and incarnation decide; pair 2's
	// owner, of boot A, has no incarnation either).
	adopter := w.open(efs, &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{ownerPID: ownerStart}}, nil)
	adopt := &claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootB}
	if sum, err := adopter.ClassifyAll(context.Background(), &claimstore.ClassifyOptions{Units: units, DryRun: true, Adopt: adopt}, nil); err != nil || sum.Owned != 9 || sum.Refused[claimstore.AlreadyActive] != 0 {
		t.Errorf("dry walk adopting %+v: %+v, %v; want 9 owned, none already active", adopt, sum, err)
	}
	orphans := 0
	for _, e := range first {
		if e.Orphan {
			orphans++
		}
	}
	if orphans != want.Orphans {
		t.Errorf("dry walk reported %d orphans, want %d: %+v", orphans, want.Orphans, first)
	}
	// Seat 7's directory cannot be examined: its orphan report says why.
	withErr := 0
	for _, e := range first {
		if e.Orphan && e.Err {
			withErr++
		}
	}
	if withErr != 1 {
		t.Errorf("dry walk reported %d orphans with an error, want 1 (seat 7): %+v", withErr, first)
	}
	// A dry run writes nothing, and makes nothing durable either.
	syncs := countSyncCalls(w, func() { walk(2, true) })
	if len(syncs) != 0 {
		t.Errorf("a dry walk synced %v", syncs)
	}
	_, sum := walk(3, false)
	if diff := cmp.Diff(want, *sum); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	if sum.Clean() {
		t.Errorf("summary %+v reads clean", sum)
	}
}

// aliveExcept says every unit is active but the one it names, which the
// manager cannot answer for.
type aliveExcept string

func (u aliveExcept) LookupUnit(_ context.Context, name string) claimstore.UnitObservation {
	if name == string(u) {
		return claimstore.UnitObservation{Name: name, State: claimstore.UnitUnknown, Detail: "test: no answer"}
	}
	return claimstore.UnitObservation{Name: name, State: claimstore.UnitPresent, Detail: "test: running"}
}

// TestClassifyAllCanceledEndsItsWorkers: a walk canceled while its workers
// classify returns the context's error, and no classification touches the
// filesystem after it returned.
func TestClassifyAllCanceledEndsItsWorkers(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	for n := 1; n <= 24; n++ {
		seat, session := mustKeys(t, n)
		if _, err := w.store.Acquire(context.Background(), seat, session, claimstore.AcquireFields{Owner: claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}}); err != nil {
			t.Fatal(err)
		}
	}
	var returned, late atomic.Bool
	w.fs.SetHook(func(c crashfs.Call) error {
		if returned.Load() {
			late.Store(true)
		}
		time.Sleep(100 * time.Microsecond) // let the walk be canceled mid-classification
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := w.open(w.fs, &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{}}, nil)
	reported := 0
	_, err := s.ClassifyAll(ctx, &claimstore.ClassifyOptions{Units: absentUnits{}, Workers: 4}, func(r *claimstore.PairResult) {
		reported++
		if reported == 2 {
			cancel()
		}
	})
	returned.Store(true)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled walk returned %v, want context.Canceled", err)
	}
	if reported != 2 {
		t.Errorf("canceled walk reported %d pairs after the cancel at the second", reported)
	}
	time.Sleep(50 * time.Millisecond)
	w.fs.SetHook(nil)
	if late.Load() {
		t.Error("a worker touched the filesystem after ClassifyAll returned")
	}
}

// cancelingUnits cancels the walk on the first lookup, and answers only
// after the walk's context is done (and a while more): no pair has a
// result when the walk sees the cancellation.
type cancelingUnits struct{ cancel context.CancelFunc }

func (u cancelingUnits) LookupUnit(ctx context.Context, name string) claimstore.UnitObservation {
	u.cancel()
	<-ctx.Done()
	time.Sleep(20 * time.Millisecond)
	return claimstore.UnitObservation{Name: name, State: claimstore.UnitUnknown, Detail: "test: canceled"}
}

// A walk canceled before any pair has a result reports none and returns
// the context's error.
func TestClassifyAllCanceledBeforeAnyResult(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	for n := 1; n <= 3; n++ {
		seat, session := mustKeys(t, n)
		c, err := w.store.Acquire(context.Background(), seat, session, claimstore.AcquireFields{Owner: claimstore.Owner{PID: 4200, Start: ownerStart, Boot: bootA}})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.store.Advance(context.Background(), c, claimstore.Patch{State: claimstore.Active, Fields: map[string]any{"spawnMarker": true}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := w.open(w.fs, liveHost(), nil) // boot A: pid 4200 is gone, the units are asked
	reported := 0
	_, err := s.ClassifyAll(ctx, &claimstore.ClassifyOptions{Units: cancelingUnits{cancel}, Workers: 2}, func(*claimstore.PairResult) { reported++ })
	if !errors.Is(err, context.Canceled) || reported != 0 {
		t.Errorf("walk canceled before any result: %v, %d reported; want context.Canceled, none", err, reported)
	}
}

// A walk that cannot list the keys says so, and reports nothing.
func TestClassifyAllListingFails(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	seat, session := mustKeys(t, 1)
	if _, err := w.store.Acquire(context.Background(), seat, session, claimstore.AcquireFields{Owner: claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}}); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []claimstore.Kind{claimstore.KindSeat, claimstore.KindSession} {
		efs := errorfs.Wrap(w.fs, &errorfs.Rule{Op: errorfs.OpReadDir, Path: errorfs.Suffix("/claims/" + string(kind))})
		s := w.open(efs, liveHost(), nil)
		reported := 0
		_, err := s.ClassifyAll(context.Background(), nil, func(*claimstore.PairResult) { reported++ })
		if !errors.Is(err, syscall.EIO) || reported != 0 {
			t.Errorf("walk whose %s directory cannot be listed: %v, %d reported; want EIO, none", kind, err, reported)
		}
	}
}

// A walk over a root that does not exist finds nothing and makes nothing:
// not the root, not a kind directory.
func TestClassifyAllMissingRootMakesNothing(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	sum, err := w.store.ClassifyAll(context.Background(), nil, nil)
	if err != nil || sum.Pairs != 0 || sum.Orphans != 0 || sum.Idle != 0 {
		t.Errorf("walk of a missing root = %+v, %v", sum, err)
	}
	if _, err := w.fs.Lstat(root); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("walk of a missing root: Lstat(%s) = %v, want it still missing", root, err)
	}
}

// A free head is confirmed by listing the key (nothing above it, no gap
// below): when that listing fails, the answer is the error, not "free".
func TestFreeHeadUnconfirmedIsAnError(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	seat, session := mustKeys(t, 1)
	c, err := w.store.Acquire(context.Background(), seat, session, claimstore.AcquireFields{Owner: claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.store.Release(context.Background(), c, claimstore.NewProof(claimstore.ProofCohort, "cohort-1")); err != nil {
		t.Fatal(err)
	}
	efs := errorfs.Wrap(w.fs, &errorfs.Rule{Op: errorfs.OpReadDir, Path: errorfs.Suffix(seat.Hash())})
	s := w.open(efs, liveHost(), nil)
	if h, err := s.Head(context.Background(), seat); !errors.Is(err, syscall.EIO) {
		t.Errorf("Head of a free key whose listing fails = %+v, %v; want EIO", h, err)
	}
	if _, err := s.Acquire(context.Background(), seat, session, claimstore.AcquireFields{Owner: claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}}); err == nil {
		t.Error("acquire on a free key whose listing fails succeeded")
	}
}

// A walk canceled from its own report, with one worker (the next pair
// often not yet handed to it), returns the context's error, every time.
func TestClassifyAllCanceledBetweenPairsReturns(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	for n := 1; n <= 4; n++ {
		seat, session := mustKeys(t, n)
		if _, err := w.store.Acquire(context.Background(), seat, session, claimstore.AcquireFields{Owner: claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}}); err != nil {
			t.Fatal(err)
		}
	}
	s := w.open(w.fs, liveHost(), nil) // every owner alive: nothing is published
	for round := range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := s.ClassifyAll(ctx, &claimstore.ClassifyOptions{DryRun: true, Workers: 1}, func(*claimstore.PairResult) { cancel() })
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("round %d: canceled walk returned %v", round, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: a walk canceled between pairs did not return in 10s", round)
		}
		cancel()
	}
}

// The walk looks for a key's identity in its 16 newest revisions: a key
// whose 15 newest are damaged is still paired by the 16th.
func TestClassifyAllLooksSixteenDeep(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	seat, session := mustKeys(t, 1)
	if _, err := w.store.Acquire(context.Background(), seat, session, claimstore.AcquireFields{Owner: claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}}); err != nil {
		t.Fatal(err)
	}
	for n := uint64(2); n <= 16; n++ {
		if err := w.fs.WriteFile(revPath(seat, n), []byte("{torn"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := w.store.ClassifyAll(context.Background(), &claimstore.ClassifyOptions{DryRun: true}, nil)
	if err != nil || sum.Pairs != 1 || sum.Orphans != 0 {
		t.Errorf("walk = %+v, %v; want the pair found through revision 1 under 15 damaged ones", sum, err)
	}
	if err := w.fs.WriteFile(revPath(seat, 17), []byte("{torn"), 0o444); err != nil {
		t.Fatal(err)
	}
	sum, err = w.store.ClassifyAll(context.Background(), &claimstore.ClassifyOptions{DryRun: true}, nil)
	if err != nil || sum.Pairs != 1 || sum.Orphans != 1 {
		// The session still names the pair; the seat, 16 deep in damage,
		// is reported as well.
		t.Errorf("walk = %+v, %v; want the seat an orphan (16 damaged revisions), the pair found through the session", sum, err)
	}
}
