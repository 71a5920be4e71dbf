package claimstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/hostid/hostidtest"
	"github.com/claimstore/claimstore/internal/crashfs"
)

// pruneWorld is a root with an old released pair (pair 1: a seat with a
// history to compact and a session to remove), a second old session on
// the same seat, and a held pair (pair 2), on a crash-simulating
// filesystem.
func pruneWorld(t *testing.T, opts crashfs.Options) *world {
	t.Helper()
	w := newWorld(t, &opts)
	ctx := context.Background()
	owner := claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}
	seat1, session1 := mustKeys(t, 1)
	_, session3 := mustKeys(t, 3)
	for i, session := range []claimstore.Key{session1, session3} {
		c, err := w.store.Acquire(ctx, seat1, session, claimstore.AcquireFields{ClaimID: claimID(byte('a' + i)), Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.store.Release(ctx, c, claimstore.NewProof(claimstore.ProofCohort, "cohort-1")); err != nil {
			t.Fatal(err)
		}
	}
	seat2, session2 := mustKeys(t, 2)
	c, err := w.store.Acquire(ctx, seat2, session2, claimstore.AcquireFields{ClaimID: claimID('d'), Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	w.holders[c.ID] = [2]claimstore.Key{seat2, session2}
	w.ackClaim(c)
	return w
}

func later() time.Time { return fixedNow().Add(40 * 24 * time.Hour) }

// TestPruneCrashEnumeration stops a prune after each of its filesystem
// calls in turn and checks every state a power cut there can leave, and a
// process crash: the held pair reads as it did, the seat keeps its head
// and numbering, the session reads free (its head, a tombstone, or no
// history), fsck finds no error, and a prune run again finishes the job
// (fsck then finds nothing at all) after which the pair can be claimed
// again.
func TestPruneCrashEnumeration(t *testing.T) {
	variants := []struct {
		name string
		opts crashfs.Options
	}{{"unnamed-temps", crashfs.Options{}}, {"named-temps-torn", crashfs.Options{NamedTemps: true, TornWrites: true}}}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			points, states := 0, 0
			for k := 0; ; k++ {
				w := pruneWorld(t, v.opts)
				s, err := claimstore.OpenRoot(root, &claimstore.TOpts{FS: w.fs, Host: w.host, Now: later, Sequential: true})
				if err != nil {
					t.Fatal(err)
				}
				w.fs.StopAfter(k)
				_, perr := s.Prune(context.Background(), &claimstore.PruneOptions{OlderThan: 30 * 24 * time.Hour, NoArchive: true})
				stopped := w.fs.Stopped()
				if !stopped && perr != nil {
					t.Fatalf("prune without a crash: %v", perr)
				}
				where := fmt.Sprintf("prune stopped after %d calls", k)
				if !stopped {
					where = "prune completed"
				}
				crashStates, _, err := w.fs.CrashStates(crashfs.ModelSubset, 0)
				if err != nil {
					t.Fatal(err)
				}
				for i, st := range crashStates {
					checkPruneCrash(t, w, st, fmt.Sprintf("%s, power cut state %d/%d", where, i+1, len(crashStates)), bootB)
				}
				checkPruneCrash(t, w, w.fs.Fork(), where+", process crash", bootA)
				points++
				states += len(crashStates) + 1
				if !stopped || t.Failed() {
					break
				}
			}
			t.Logf("%s: %d stop points, %d crash states", v.name, points, states)
		})
	}
}

func checkPruneCrash(t *testing.T, w *world, st *crashfs.FS, where string, boot string) {
	t.Helper()
	ctx := context.Background()
	procs := map[int]string{}
	if boot == bootA {
		procs[ownerPID] = ownerStart // a process crash: the held pair's owner lives on
	}
	h := &hostidtest.Host{Machine: testMachine, Boot: boot, Procs: procs}
	s, err := claimstore.OpenRoot(root, &claimstore.TOpts{FS: st, Host: h, Now: later, Sequential: true})
	if err != nil {
		t.Fatal(err)
	}
	seat1, session1 := mustKeys(t, 1)
	_, session3 := mustKeys(t, 3)
	seat2, session2 := mustKeys(t, 2)
	for _, k := range []claimstore.Key{seat2, session2} {
		hd, err := s.Head(ctx, k)
		if err != nil || hd.N != 1 || !hd.Held() || hd.Damage != nil {
			t.Errorf("%s: held %s reads head %d held=%v damage=%v %v", where, k, hd.N, hd.Held(), hd.Damage, err)
		}
	}
	if hd, err := s.Head(ctx, seat1); err != nil || hd.N != 4 || hd.Held() || hd.Damage != nil {
		t.Errorf("%s: the compacted seat reads head %d held=%v damage=%v %v; want r4, free", where, hd.N, hd.Held(), hd.Damage, err)
	}
	for _, k := range []claimstore.Key{session1, session3} {
		hd, err := s.Head(ctx, k)
		if err != nil || hd.Held() || hd.Damage != nil || hd.N > 3 {
			t.Errorf("%s: pruned session %s reads head %d held=%v damage=%v %v; want free (r2, its tombstone r3, or none)", where, k, hd.N, hd.Held(), hd.Damage, err)
		}
	}
	rep, err := s.Check(ctx, nil)
	if err != nil {
		t.Fatalf("%s: fsck: %v", where, err)
	}
	for _, f := range rep.Findings {
		if f.Severity == claimstore.SeverityError {
			t.Errorf("%s: fsck: %s %s: %s", where, f.Kind, f.Path, f.Message)
		}
	}
	// A prune run again finishes what the crash cut short.
	if _, err := s.Prune(ctx, &claimstore.PruneOptions{OlderThan: 30 * 24 * time.Hour, NoArchive: true}); err != nil {
		t.Errorf("%s: prune again: %v", where, err)
		return
	}
	rep, err = s.Check(ctx, nil)
	if err != nil {
		t.Fatalf("%s: fsck: %v", where, err)
	}
	for _, f := range rep.Findings {
		// A temporary the crash left is fsck --repair's (its writer is
		// gone), as after a crash of any publish; anything else is left
		// undone by the second prune.
		if f.Kind == claimstore.FindingTemporary {
			continue
		}
		t.Errorf("%s, pruned again: fsck: %s %s %s: %s", where, f.Severity, f.Kind, f.Path, f.Message)
	}
	for _, k := range []claimstore.Key{session1, session3} {
		if hd, _ := s.Head(ctx, k); hd.N != 0 {
			t.Errorf("%s, pruned again: %s still has r%d", where, k, hd.N)
		}
	}
	c, err := s.Acquire(ctx, seat1, session1, claimstore.AcquireFields{ClaimID: claimID('e'), Owner: claimstore.Owner{PID: 9, Start: "1", Boot: boot}})
	if err != nil {
		t.Errorf("%s: acquire after prune: %v", where, err)
	} else if c.SeatRev != 5 || c.SessionRev != 1 {
		t.Errorf("%s: acquire after prune took seat r%d session r%d, want r5 and r1", where, c.SeatRev, c.SessionRev)
	}
}
