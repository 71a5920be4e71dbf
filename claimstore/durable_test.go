package claimstore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/hostid/hostidtest"
	"github.com/claimstore/claimstore/internal/crashfs"
	"github.com/claimstore/claimstore/internal/errorfs"
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
		// run classifies after the killed release, with the reader's k-th
		// filesystem call failing once (0: none), and checks every power
		// cut after a classification that freed or stopped the pair. It
		// returns how many calls the reader made.
		run := func(t *testing.T, k int) int {
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
			if err := releaser.Release(context.Background(), c, claimstore.NewProof(claimstore.ProofCohort, "cohort-1")); !errors.Is(err, killed) {
				t.Fatalf("release: %v, want it killed", err)
			}
			if len(w.fs.Pending()) == 0 {
				t.Fatal("the killed release left nothing pending: the test would prove nothing")
			}
			delete(w.host.Procs, ownerPID) // the supervisor died with it

			// A new process on the same page cache.
			calls := 0
			efs := errorfs.Wrap(w.fs, &errorfs.Rule{Kind: errorfs.Fail, Times: 1, Path: func(string) bool {
				calls++
				return calls == k
			}})
			reader := w.open(efs, w.host, nil)
			seat, session := c.Seat, c.Session
			res, err := reader.Classify(context.Background(), seat, session, &claimstore.ClassifyOptions{Units: absentUnits{}})
			where := "classify"
			if k > 0 {
				where = fmt.Sprintf("classify with call %d (%v) failed once", k, efs.Injected())
			}
			if k == 0 && err != nil {
				t.Fatal(err)
			}
			if k == 0 && res.Outcome != tc.want {
				t.Fatalf("classify = %s (%v), want %s", res.Outcome, res.Refusal, tc.want)
			}
			if err != nil || res.Outcome != claimstore.OutcomeFree && res.Outcome != claimstore.OutcomeStopped {
				return calls // it said nothing that a power cut could take back
			}
			states, _, err := w.fs.CrashStates(crashfs.ModelSubset, 0)
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range states {
				s := w.open(st, liveHost(), nil)
				p, err := s.Pair(context.Background(), seat, session)
				if err != nil {
					t.Fatal(err)
				}
				if p.Held() {
					t.Errorf("%s: power cut state %d/%d after classify said %s: the pair reads %s again (seat %d %s, session %d %s)",
						where, i+1, len(states), res.Outcome, p.State(), p.Seat.N, p.Seat.State(), p.Session.N, p.Session.State())
				}
			}
			return calls
		}
		t.Run(tc.name, func(t *testing.T) {
			calls := run(t, 0)
			// The same with each call of the classification failing once:
			// a failure swallowed where a decision rests on it (the fsync
			// that makes a head durable, or the directory it needs made)
			// shows up as a power cut that takes the decision back.
			for k := 1; k <= calls; k++ {
				run(t, k)
			}
		})
	}
}

// proofLinkedNotDurable acquires claim "a", activates it and reboots; a
// first classifier then dies right after linking the claim's boot proof
// (the hook sees the proof's directory fsync as the first SyncDir of
// proofs/), so the proof is linked and not durable.
func proofLinkedNotDurable(t *testing.T) (*world, *claimstore.Claim) {
	t.Helper()
	w := newWorld(t, &crashfs.Options{})
	for _, st := range []step{acquire("a", 1, 'a'), advance("a", active()), reboot()} {
		if err := st.run(w); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
	}
	c := w.claims["a"]
	killed := errors.New("killed")
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
	return w, c
}

// The same for a boot proof that another classifier linked and did not
// make durable: a classifier that finds it under the derived id and
// relies on it makes it durable first.
func TestReusedBootProofIsDurable(t *testing.T) {
	w, c := proofLinkedNotDurable(t)
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
		p, err := s.Pair(context.Background(), c.Seat, c.Session)
		if err != nil {
			t.Fatal(err)
		}
		if p.Held() {
			t.Errorf("power cut state %d/%d after classify said stopped: %s", i+1, len(states), fmt.Sprint(p.Seat.Damage, p.Session.Damage))
		}
	}
}

// A proof another classifier linked is relied on only once it is durable:
// when making proofs/ durable fails (its Mkdir, its fsync, or an fsync
// that loses it), the second classifier fails, and no power cut leaves a
// stopped revision naming a proof that is gone.
func TestReusedBootProofNotDurableFails(t *testing.T) {
	for _, rule := range []*errorfs.Rule{
		// The second Mkdir: the first is the proof's own write, which finds it
		// linked already.
		{Op: errorfs.OpMkdir, Path: errorfs.Suffix("/" + claimstore.ProofDir), Nth: 2},
		{Op: errorfs.OpSyncDir, Path: errorfs.Suffix("/" + claimstore.ProofDir)},
		{Op: errorfs.OpSyncDir, Path: errorfs.Suffix("/" + claimstore.ProofDir), Kind: errorfs.Lose, Times: 1},
	} {
		t.Run(fmt.Sprintf("%s-%s", rule.Kind, rule.Op), func(t *testing.T) {
			w, c := proofLinkedNotDurable(t)
			heads := func() [2]uint64 {
				t.Helper()
				var out [2]uint64
				s := w.open(w.fs, w.host, nil)
				for i, k := range []claimstore.Key{c.Seat, c.Session} {
					h, err := s.Head(context.Background(), k)
					if err != nil {
						t.Fatal(err)
					}
					out[i] = h.N
				}
				return out
			}
			before := heads()
			second := w.open(errorfs.Wrap(w.fs, rule), w.host, nil)
			res, err := second.Classify(context.Background(), c.Seat, c.Session, nil)
			if err == nil {
				t.Fatalf("second classify = %+v, nil; want the failure to make the proof durable", res)
			}
			// Nothing rests on the proof: no revision was even linked.
			if after := heads(); after != before {
				t.Errorf("heads (seat, session) went from %v to %v after the proof could not be made durable", before, after)
			}
			states, _, err := w.fs.CrashStates(crashfs.ModelSubset, 0)
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range states {
				s := w.open(st, w.host, nil)
				for _, k := range []claimstore.Key{c.Seat, c.Session} {
					h, err := s.Head(context.Background(), k)
					if err != nil {
						t.Fatal(err)
					}
					if !h.Held() {
						t.Errorf("power cut state %d/%d: %v reads free", i+1, len(states), k)
					}
				}
			}
		})
	}
}

// killedReleases acquires pairs pairs, then releases each with a releaser
// killed after linking its session revision, before the directory fsync:
// every pair reads free from the page cache only.
func killedReleases(t *testing.T, w *world, pairs int) []*claimstore.Claim {
	t.Helper()
	var claims []*claimstore.Claim
	for i := range pairs {
		st := acquire(fmt.Sprint("a", i), 10+i, byte('a'+i))
		if err := st.run(w); err != nil {
			t.Fatal(err)
		}
		claims = append(claims, w.claims[fmt.Sprint("a", i)])
	}
	killed := errors.New("killed")
	for _, c := range claims {
		tr := &tempTracker{FS: w.fs}
		releaser := w.open(tr, w.host, func(p claimstore.Point) error {
			if p.Barrier == claimstore.BarrierLinked && p.Key.Kind == claimstore.KindSession {
				return killed
			}
			return nil
		})
		if err := releaser.Release(context.Background(), c, claimstore.NewProof(claimstore.ProofCohort, "cohort-1")); !errors.Is(err, killed) {
			t.Fatalf("release: %v, want it killed", err)
		}
		// A barrier that stops the publish after its link still closes the
		// temporary (what the process would leave to the kernel if killed).
		if n := tr.open.Load(); n != 0 {
			t.Errorf("release stopped after its link left %d temporaries open", n)
		}
	}
	return claims
}

// countSyncCalls counts the fsyncs w's filesystem sees while f runs.
func countSyncCalls(w *world, f func()) map[string]int {
	var mu sync.Mutex
	syncs := map[string]int{}
	w.fs.SetHook(func(c crashfs.Call) error {
		if c.Op == "syncdir" || c.Op == "syncfs" || c.Op == "sync" {
			mu.Lock()
			syncs[c.Op]++
			mu.Unlock()
		}
		return nil
	})
	defer w.fs.SetHook(nil)
	f()
	return syncs
}

// checkFreeAfterEveryCut checks that each claim's pair reads free in every
// power-cut state of w's filesystem.
func checkFreeAfterEveryCut(t *testing.T, w *world, claims []*claimstore.Claim) {
	t.Helper()
	states, _, err := w.fs.CrashStates(crashfs.ModelSubset, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range states {
		s := w.open(st, liveHost(), nil)
		for _, c := range claims {
			p, err := s.Pair(context.Background(), c.Seat, c.Session)
			if err != nil {
				t.Fatal(err)
			}
			if p.Held() {
				t.Errorf("power cut state %d/%d after classify --all said free: %v + %v reads %s", i+1, len(states), c.Seat, c.Session, p.State())
			}
		}
	}
}

// ClassifyAll reports every released pair free: the heads it read are made
// durable first, with one syncfs for the whole walk rather than a
// directory fsync per key.
func TestClassifyAllFreeHeadsDurable(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	const pairs = 6
	claims := killedReleases(t, w, pairs)
	reader := w.open(w.fs, w.host, nil)
	var sum *claimstore.Summary
	var err error
	syncs := countSyncCalls(w, func() {
		sum, err = reader.ClassifyAll(context.Background(), &claimstore.ClassifyOptions{Units: absentUnits{}}, nil)
	})
	if err != nil || sum.Free != pairs {
		t.Fatalf("classify --all = %+v, %v; want %d free pairs", sum, err, pairs)
	}
	if syncs["syncfs"] != 1 || syncs["syncdir"] > 1 || syncs["sync"] != 0 {
		t.Errorf("classify --all over %d free pairs synced %v; want one syncfs (and at most the root's parent)", pairs, syncs)
	}
	checkFreeAfterEveryCut(t, w, claims)
}

// noSyncFS is a filesystem on a platform without syncfs(2).
type noSyncFS struct{ vfs.FS }

func (noSyncFS) SyncFS(name string) error {
	return &fs.PathError{Op: "syncfs", Path: name, Err: errors.ErrUnsupported}
}

// Without syncfs (a platform without the call), each decision makes its
// own key durable (Sync): the same durability, for a few directory fsyncs
// per key instead of one syncfs.
func TestClassifyAllFreeHeadsDurableWithoutSyncFS(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	const pairs = 6
	claims := killedReleases(t, w, pairs)
	reader := w.open(noSyncFS{w.fs}, w.host, nil)
	var sum *claimstore.Summary
	var err error
	// One worker: pairs classified together share parent fsyncs in an
	// order that varies from run to run.
	syncs := countSyncCalls(w, func() {
		sum, err = reader.ClassifyAll(context.Background(), &claimstore.ClassifyOptions{Units: absentUnits{}, Workers: 1}, nil)
	})
	if err != nil || sum.Free != pairs {
		t.Fatalf("classify --all = %+v, %v; want %d free pairs", sum, err, pairs)
	}
	// A new store's first use of the root: the root's entry in its parent,
	// the kind directories' entries in the root; then for each key its
	// entry in the kind directory, and its own (this store runs its fsyncs
	// one after another: Options.Sequential).
	if want := map[string]int{"syncdir": 3 + 4*pairs}; !cmp.Equal(want, syncs) {
		t.Errorf("classify --all over %d free pairs without syncfs synced %v; want %v", pairs, syncs, want)
	}
	checkFreeAfterEveryCut(t, w, claims)
}

// A walk that cannot make what it read durable reports nothing free and
// publishes nothing: neither when its syncfs fails, nor when an fsync of
// the same store failed before (the failure is sticky: the kernel may have
// dropped what it did not write, and reports that once).
func TestClassifyAllSyncFailureFreesNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules []*errorfs.Rule
		// before runs on the classifying store first, failing an fsync.
		before bool
		// want is the error the walk returns (nil: ErrSyncFailed).
		want error
	}{
		{name: "syncfs fails", rules: []*errorfs.Rule{{Op: errorfs.OpSyncFS}}},
		{name: "syncfs loses", rules: []*errorfs.Rule{{Op: errorfs.OpSyncFS, Kind: errorfs.Lose, Times: 1}}},
		{name: "an earlier fsync failed", rules: []*errorfs.Rule{{Op: errorfs.OpSyncDir, Times: 1}}, before: true},
		// The root cannot be checked when the walk makes it durable.
		{name: "the root cannot be checked", rules: []*errorfs.Rule{{Op: errorfs.OpLstat, Path: func(p string) bool { return p == root }}}, want: syscall.EIO},
		// A new store's walk makes the root's entry in its parent durable
		// too (the parent may be another filesystem): that fsync fails.
		{name: "the root's parent fsync fails", rules: []*errorfs.Rule{{Op: errorfs.OpSyncDir, Path: func(p string) bool { return p == path.Dir(root) }}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, &crashfs.Options{})
			killedReleases(t, w, 3)
			efs := errorfs.Wrap(w.fs, tc.rules...)
			reader := w.open(efs, w.host, nil)
			if tc.before {
				seat, session := mustKeys(t, 99)
				if _, err := reader.Acquire(context.Background(), seat, session, claimstore.AcquireFields{Owner: claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}}); !errors.Is(err, claimstore.ErrSyncFailed) {
					t.Fatalf("acquire with a failing directory fsync: %v, want ErrSyncFailed", err)
				}
			}
			before := w.fs.Files(root)
			var reported []*claimstore.PairResult
			sum, err := reader.ClassifyAll(context.Background(), &claimstore.ClassifyOptions{Units: absentUnits{}}, func(r *claimstore.PairResult) { reported = append(reported, r) })
			want := tc.want
			if want == nil {
				want = claimstore.ErrSyncFailed
			}
			if !errors.Is(err, want) {
				t.Errorf("ClassifyAll = %v, want %v", err, want)
			}
			if sum != nil && sum.Free != 0 || len(reported) != 0 {
				t.Errorf("ClassifyAll reported %+v and %d results after its fsync failed; want nothing", sum, len(reported))
			}
			if diff := cmp.Diff(before, w.fs.Files(root)); diff != "" {
				t.Errorf("ClassifyAll published after its fsync failed (-before +after):\n%s", diff)
			}
		})
	}
}

// A proof another classifier linked, in a proofs/ directory it made and
// did not live to fsync into the root: the classifier that loses the
// exclusive write to it relies on it, so it must make the proof durable
// and proofs/ itself, even when this store has long made the root durable
// for its own keys.
func TestLosingProofWriterMakesProofsDirDurable(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	if err := acquire("a", 1, 'a').run(w); err != nil {
		t.Fatal(err)
	}
	c := w.claims["a"]
	later := &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{}}
	// Y: a long-lived store on the next boot, which has already made the
	// root and both kind directories durable (another pair's acquire).
	y := w.open(w.fs, later, nil)
	s2, x2 := mustKeys(t, 2)
	if _, err := y.Acquire(context.Background(), s2, x2, claimstore.AcquireFields{ClaimID: claimID('b'), Owner: claimstore.Owner{PID: 9, Start: "1", Boot: bootB}}); err != nil {
		t.Fatal(err)
	}
	// X: another classifier that makes proofs/, links the proof, and dies
	// before any directory fsync.
	rec, err := claimstore.DecodeRecord(w.fs.Files(path.Dir(revPath(c.Seat, 1)))[revPath(c.Seat, 1)], c.Seat, 1)
	if err != nil {
		t.Fatal(err)
	}
	killed := errors.New("killed")
	w.fs.SetHook(func(call crashfs.Call) error {
		if call.Op == "syncdir" {
			return killed
		}
		return nil
	})
	x := w.open(w.fs, later, nil)
	if _, err := x.IssueBootProof(context.Background(), rec); !errors.Is(err, killed) {
		t.Fatalf("X's proof: %v, want it killed", err)
	}
	w.fs.Resume()
	p, err := y.IssueBootProof(context.Background(), rec)
	if err != nil {
		t.Fatalf("Y's proof: %v", err)
	}
	proof := path.Join(root, claimstore.ProofDir, p.ID+".json")
	states, _, err := w.fs.CrashStates(crashfs.ModelSubset, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range states {
		if _, ok := st.Files(root)[proof]; !ok {
			t.Errorf("power cut state %d/%d after Y relied on the proof: %s is lost", i+1, len(states), proof)
		}
	}
}

// A directory fsync that failed in one goroutine may have lost entries
// another goroutine's later fsync of the same directory will not write
// (the kernel reports the loss once). A store acknowledges nothing after
// it, even an operation that was already under way.
func TestNoAcknowledgementAfterAConcurrentFsyncFailure(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	efs := errorfs.Wrap(w.fs, &errorfs.Rule{Op: errorfs.OpSyncDir, Path: errorfs.Suffix("/claims/session"), Kind: errorfs.Lose, Times: 1})
	g2AtLink := make(chan struct{})
	g1Done := make(chan struct{})
	s1, x1 := mustKeys(t, 1)
	s2, x2 := mustKeys(t, 2)
	s, err := claimstore.OpenRoot(root, &claimstore.TOpts{FS: efs, Host: w.host, Now: fixedNow, Barrier: func(p claimstore.Point) error {
		switch {
		case p.ClaimID == claimID('b') && p.Barrier == claimstore.BarrierLinked && p.Key == x2:
			close(g2AtLink) // G2 linked its session revision; its fsyncs wait for G1
			<-g1Done
		case p.ClaimID == claimID('a') && p.Barrier == claimstore.BarrierBetweenKeys:
			<-g2AtLink // G2's session key directory exists, not yet durable
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	owner := claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}
	errs := make(chan error, 1)
	go func() {
		_, err := s.Acquire(context.Background(), s2, x2, claimstore.AcquireFields{ClaimID: claimID('b'), Owner: owner})
		errs <- err
	}()
	_, err1 := s.Acquire(context.Background(), s1, x1, claimstore.AcquireFields{ClaimID: claimID('a'), Owner: owner})
	close(g1Done)
	err2 := <-errs
	if !errors.Is(err1, claimstore.ErrSyncFailed) {
		t.Fatalf("G1, whose fsync failed: %v, want ErrSyncFailed", err1)
	}
	if !errors.Is(err2, claimstore.ErrSyncFailed) {
		t.Fatalf("G2, whose fsync ran after G1's failed: %v, want ErrSyncFailed (its key directory's entry may be lost)", err2)
	}
}
