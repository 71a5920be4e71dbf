package claimstore_test

import (
	"context"
	"errors"
	"path"
	"syscall"
	"testing"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// faultCase runs setup without faults, then op on a store whose filesystem
// injects rules, then checks op's answer and every crash state after it.
type faultCase struct {
	name  string
	setup []step
	rules func(w *world) []*errorfs.Rule
	op    func(w *world) error
	check func(t *testing.T, w *world, err error)
}

func keyDir(k claimstore.Key) string { return path.Join(root, string(k.Kind), k.Hash()) }

func isRefusal(err error, code claimstore.Code) bool {
	var r *claimstore.Refusal
	return errors.As(err, &r) && (code == "" || r.Code == code)
}

// wantSticky checks that the store acknowledges nothing more after a
// failed fsync.
func wantSticky(t *testing.T, w *world, err error) {
	t.Helper()
	if !errors.Is(err, claimstore.ErrSyncFailed) {
		t.Fatalf("got %v, want an error wrapping ErrSyncFailed", err)
	}
	seat, session := mustKeys(t, 9)
	_, err = w.store.Acquire(context.Background(), seat, session, claimstore.AcquireFields{ClaimID: claimID('9'), Owner: claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}})
	if !errors.Is(err, claimstore.ErrSyncFailed) {
		t.Errorf("an acquire on the same store after a failed fsync: %v, want ErrSyncFailed", err)
	}
}

func opAcquire(name string, keyN int, id byte) func(w *world) error {
	return acquire(name, keyN, id).run
}

func TestFaults(t *testing.T) {
	seat1, session1 := mustKeys(t, 1)
	rev := func(k claimstore.Key, n uint64) func(string) bool {
		return func(p string) bool { return p == revPath(k, n) }
	}
	cases := []faultCase{{
		name:  "fsync EIO on the seat temporary",
		rules: func(w *world) []*errorfs.Rule { return []*errorfs.Rule{{Op: errorfs.OpSync, Kind: errorfs.Fail}} },
		op:    opAcquire("a", 1, 'a'),
		check: wantSticky,
	}, {
		name: "fsync EIO on the session temporary, seat already published",
		rules: func(w *world) []*errorfs.Rule {
			return []*errorfs.Rule{{Op: errorfs.OpSync, Path: errorfs.Contains(session1.Hash()), Kind: errorfs.Fail}}
		},
		op:    opAcquire("a", 1, 'a'),
		check: wantSticky,
	}, {
		name: "directory fsync EIO after the link",
		rules: func(w *world) []*errorfs.Rule {
			return []*errorfs.Rule{{Op: errorfs.OpSyncDir, Path: errorfs.Suffix(seat1.Hash()), Kind: errorfs.Fail}}
		},
		op:    opAcquire("a", 1, 'a'),
		check: wantSticky,
	}, {
		name: "directory fsync EIO that wrote back anyway",
		rules: func(w *world) []*errorfs.Rule {
			return []*errorfs.Rule{{Op: errorfs.OpSyncDir, Path: errorfs.Suffix(session1.Hash()), Kind: errorfs.FailAfter}}
		},
		op:    opAcquire("a", 1, 'a'),
		check: wantSticky,
	}, {
		name:  "advance: directory fsync EIO on the session key",
		setup: []step{acquire("a", 1, 'a')},
		rules: func(w *world) []*errorfs.Rule {
			return []*errorfs.Rule{{Op: errorfs.OpSyncDir, Path: errorfs.Suffix(session1.Hash()), Kind: errorfs.Fail}}
		},
		op: advance("a", active()).run,
		check: func(t *testing.T, w *world, err error) {
			wantSticky(t, w, err)
			if err := w.store.Release(context.Background(), w.claims["a"], claimstore.NewProof(claimstore.ProofCohort, "x")); !errors.Is(err, claimstore.ErrSyncFailed) {
				t.Errorf("release after a failed fsync: %v, want ErrSyncFailed", err)
			}
		},
	}, {
		name: "ENOSPC part-way through the revision",
		rules: func(w *world) []*errorfs.Rule {
			return []*errorfs.Rule{{Op: errorfs.OpWrite, Kind: errorfs.Torn, Err: syscall.ENOSPC}}
		},
		op: opAcquire("a", 1, 'a'),
		check: func(t *testing.T, w *world, err error) {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("got %v, want ENOSPC", err)
			}
			if n := len(w.fs.Files(keyDir(seat1))); n != 0 {
				t.Errorf("the seat directory holds %d files after a failed write, want none", n)
			}
		},
	}, {
		name:  "advance: ENOSPC writing the session revision publishes neither",
		setup: []step{acquire("a", 1, 'a')},
		rules: func(w *world) []*errorfs.Rule {
			return []*errorfs.Rule{{Op: errorfs.OpWrite, Path: errorfs.Contains(session1.Hash()), Kind: errorfs.Fail, Err: syscall.ENOSPC, Times: 1}}
		},
		op: advance("a", active()).run,
		check: func(t *testing.T, w *world, err error) {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("got %v, want ENOSPC", err)
			}
			// Both revisions are prepared before either is linked: a step
			// that cannot prepare its session revision is not cut between
			// its keys.
			for _, k := range []claimstore.Key{seat1, session1} {
				if _, ok := w.fs.Files(keyDir(k))[revPath(k, 2)]; ok {
					t.Errorf("%v revision 2 was published by a step that failed before its link", k)
				}
			}
			if err := w.store.Advance(context.Background(), w.claims["a"], active()); err != nil {
				t.Errorf("the step again, once there is space: %v", err)
			}
		},
	}, {
		name: "EIO from link is an error, not a lost race",
		rules: func(w *world) []*errorfs.Rule {
			return []*errorfs.Rule{{Op: errorfs.OpLink, Kind: errorfs.Fail, Times: 1}}
		},
		op: opAcquire("a", 1, 'a'),
		check: func(t *testing.T, w *world, err error) {
			// A link that failed for another reason than an existing name
			// lost no race: re-reading and publishing again would hide an
			// I/O error behind a retry.
			if !errors.Is(err, syscall.EIO) || isRefusal(err, "") {
				t.Fatalf("got %v, want EIO", err)
			}
		},
	}, {
		name: "a spurious EEXIST from link, once",
		rules: func(w *world) []*errorfs.Rule {
			return []*errorfs.Rule{{Op: errorfs.OpLink, Kind: errorfs.Fail, Err: syscall.EEXIST, Times: 1}}
		},
		op: opAcquire("a", 1, 'a'),
		check: func(t *testing.T, w *world, err error) {
			if err != nil {
				t.Fatalf("acquire after one lost link race: %v, want it to re-read and win", err)
			}
		},
	}, {
		name: "a spurious EEXIST from link, always",
		rules: func(w *world) []*errorfs.Rule {
			return []*errorfs.Rule{{Op: errorfs.OpLink, Kind: errorfs.Fail, Err: syscall.EEXIST}}
		},
		op: opAcquire("a", 1, 'a'),
		check: func(t *testing.T, w *world, err error) {
			if !isRefusal(err, claimstore.UnsafeReplacement) {
				t.Fatalf("got %v, want an unsafe-replacement refusal after the retries", err)
			}
		},
	}, {
		name: "link done but its reply lost (EEXIST)",
		rules: func(w *world) []*errorfs.Rule {
			return []*errorfs.Rule{{Op: errorfs.OpLink, Kind: errorfs.FailAfter, Err: syscall.EEXIST}}
		},
		op: opAcquire("a", 1, 'a'),
		check: func(t *testing.T, w *world, err error) {
			if err != nil {
				t.Fatalf("got %v, want the writer to find its own file under the name", err)
			}
		},
	}, {
		name: "a competing writer wins the seat revision between fsync and link",
		op: func(w *world) error {
			// The rival is the plain store (no faults); it runs from the
			// barrier after the temporary's fsync.
			rivalDone := false
			s := w.open(w.fs, w.host, func(p claimstore.Point) error {
				if p.Barrier != claimstore.BarrierTempSynced || rivalDone {
					return nil
				}
				rivalDone = true
				return acquire("rival", 1, 'f').run(w)
			})
			_, err := s.Acquire(context.Background(), seat1, session1, claimstore.AcquireFields{ClaimID: claimID('a'), Owner: claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}})
			w.keys["a"] = [2]claimstore.Key{seat1, session1}
			return err
		},
		check: func(t *testing.T, w *world, err error) {
			if !isRefusal(err, claimstore.AlreadyActive) {
				t.Fatalf("got %v, want already-active: the rival holds the pair", err)
			}
		},
	}, {
		name:  "the head revision is unreadable (EACCES)",
		setup: []step{acquire("a", 1, 'a'), advance("a", active()), ownerDies()},
		rules: func(w *world) []*errorfs.Rule {
			return []*errorfs.Rule{{Op: errorfs.OpReadFile, Path: rev(seat1, 2), Kind: errorfs.Fail, Err: syscall.EACCES}}
		},
		op: func(w *world) error {
			if err := w.store.Advance(context.Background(), w.claims["a"], stopping()); !isRefusal(err, claimstore.UnsafeReplacement) {
				w.t.Errorf("advance over an unreadable head: %v, want unsafe-replacement", err)
			}
			_, err := w.store.Acquire(context.Background(), seat1, session1, claimstore.AcquireFields{ClaimID: claimID('b'), Owner: claimstore.Owner{PID: 1, Start: "1"}})
			if !isRefusal(err, claimstore.UnsafeReplacement) {
				w.t.Errorf("acquire over an unreadable head: %v, want unsafe-replacement", err)
			}
			res, err := w.store.Classify(context.Background(), seat1, session1, &claimstore.ClassifyOptions{Units: absentUnits{}})
			if err != nil {
				return err
			}
			if res.Outcome != claimstore.OutcomeUncertain || !res.Damaged || len(res.Published) != 0 {
				w.t.Errorf("classify over an unreadable head: %s damaged=%v published %v; want uncertain, damaged, nothing published", res.Outcome, res.Damaged, res.Published)
			}
			return nil
		},
		check: func(t *testing.T, w *world, err error) {
			if err != nil {
				t.Fatal(err)
			}
		},
	}, {
		name:  "a torn head revision",
		setup: []step{acquire("a", 1, 'a')},
		op: func(w *world) error {
			data := w.acked[revPath(seat1, 1)]
			if err := w.fs.WriteFile(revPath(seat1, 2), data[:len(data)/2], 0o400); err != nil {
				return err
			}
			if err := w.store.Advance(context.Background(), w.claims["a"], active()); !isRefusal(err, claimstore.UnsafeReplacement) {
				w.t.Errorf("advance over a torn head: %v, want unsafe-replacement", err)
			}
			_, err := w.store.Acquire(context.Background(), seat1, session1, claimstore.AcquireFields{ClaimID: claimID('b'), Owner: claimstore.Owner{PID: 1, Start: "1"}})
			if !isRefusal(err, claimstore.UnsafeReplacement) {
				w.t.Errorf("acquire over a torn head: %v, want unsafe-replacement", err)
			}
			return nil
		},
		check: func(t *testing.T, w *world, err error) {
			if err != nil {
				t.Fatal(err)
			}
		},
	}, {
		name:  "a lost directory entry: revision 1 of both keys cannot be seen",
		setup: []step{acquire("a", 1, 'a'), advance("a", active())},
		rules: func(w *world) []*errorfs.Rule {
			r1 := func(p string) bool { return p == revPath(seat1, 1) || p == revPath(session1, 1) }
			return []*errorfs.Rule{{Op: errorfs.OpLstat, Path: r1, Kind: errorfs.Hide}, {Op: errorfs.OpIs, Path: r1, Kind: errorfs.Hide}}
		},
		op: func(w *world) error {
			_, err := w.store.Acquire(context.Background(), seat1, session1, claimstore.AcquireFields{ClaimID: claimID('b'), Owner: claimstore.Owner{PID: 1, Start: "1"}})
			return err
		},
		check: func(t *testing.T, w *world, err error) {
			if !isRefusal(err, "") {
				t.Fatalf("acquire with a hidden revision 1: %v, want a refusal", err)
			}
		},
	}, {
		name:  "classify: fsync EIO on the boot proof",
		setup: []step{acquire("a", 1, 'a'), advance("a", active()), reboot()},
		rules: func(w *world) []*errorfs.Rule {
			return []*errorfs.Rule{{Op: errorfs.OpSync, Path: errorfs.Contains("/" + claimstore.ProofDir + "/"), Kind: errorfs.Fail}}
		},
		op: func(w *world) error {
			_, err := w.store.Classify(context.Background(), seat1, session1, &claimstore.ClassifyOptions{Units: absentUnits{}})
			return err
		},
		check: func(t *testing.T, w *world, err error) {
			if !errors.Is(err, claimstore.ErrSyncFailed) {
				t.Fatalf("got %v, want ErrSyncFailed", err)
			}
			p, err := w.store.Pair(context.Background(), seat1, session1)
			if err != nil {
				t.Fatal(err)
			}
			if !p.Held() {
				t.Errorf("the pair reads free after classify failed to make its proof durable")
			}
		},
	}, {
		name:  "a lost directory entry: revision 1 gone, revision 2 held",
		setup: []step{acquire("a", 1, 'a'), advance("a", active())},
		op: func(w *world) error {
			// Revision 1 of each key is lost (an fsck that moved a damaged
			// entry to lost+found, an operator's slip); revision 2 of
			// each, claim a active, is intact.
			for _, k := range []claimstore.Key{seat1, session1} {
				if err := w.fs.Remove(revPath(k, 1)); err != nil {
					return err
				}
				if err := w.fs.SyncDir(keyDir(k)); err != nil {
					return err
				}
				delete(w.acked, revPath(k, 1))
			}
			s := w.open(w.fs, w.host, nil)
			_, err := s.Acquire(context.Background(), seat1, session1, claimstore.AcquireFields{ClaimID: claimID('b'), Owner: claimstore.Owner{PID: 1, Start: "1"}})
			return err
		},
		check: func(t *testing.T, w *world, err error) {
			if !isRefusal(err, "") {
				t.Fatalf("acquire of a pair whose seat revision 2 is held by an active claim: %v, want a refusal", err)
			}
		},
	}, {
		name: "a short write reported as success",
		rules: func(w *world) []*errorfs.Rule {
			return []*errorfs.Rule{{Op: errorfs.OpWrite, Kind: errorfs.ShortWrite, Times: 1}}
		},
		op: opAcquire("a", 1, 'a'),
		check: func(t *testing.T, w *world, err error) {
			if err == nil {
				t.Fatalf("acquire acknowledged a revision whose write was short")
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, nil)
			for _, s := range tc.setup {
				if err := s.run(w); err != nil {
					t.Fatalf("setup %s: %v", s.name, err)
				}
			}
			var efs *errorfs.FS
			if tc.rules != nil {
				efs = errorfs.Wrap(w.fs, tc.rules(w)...)
				w.store = w.open(efs, w.host, nil)
			}
			err := tc.op(w)
			if efs != nil && len(efs.Injected()) == 0 {
				t.Fatalf("no fault was injected (op returned %v)", err)
			}
			tc.check(t, w, err)
			// Whatever the fault did, every crash now leaves the invariants
			// and a state that classify resolves.
			cs := checkAllCrashes(t, w, tc.name)
			t.Logf("op: %v; injected %v; %d crash states", err, injected(efs), cs.Distinct)
		})
	}
}

func injected(efs *errorfs.FS) []string {
	if efs == nil {
		return nil
	}
	var out []string
	for _, i := range efs.Injected() {
		out = append(out, i.String())
	}
	return out
}
