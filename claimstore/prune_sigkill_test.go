package claimstore_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimstore/claimstore/claimstore"
)

const pruneHelperEnv = "CLAIMSTORE_SIGKILL_PRUNE"

// TestSigkillPruneHelper is the child of TestSigkillPrune, not a test: it
// prunes the root $CLAIMSTORE_SIGKILL_ROOT, 40 days after it was written,
// until it is killed.
func TestSigkillPruneHelper(t *testing.T) {
	if os.Getenv(pruneHelperEnv) != "1" {
		t.Skip("helper process for TestSigkillPrune")
	}
	pipe := os.NewFile(3, "pipe")
	// Each barrier point is told to the parent, which kills this process
	// after the k-th: the kill lands wherever the prune has got to by then.
	s, err := claimstore.OpenRoot(os.Getenv(helperRootEnv), &claimstore.TOpts{Now: later, Barrier: func(p claimstore.Point) error {
		fmt.Fprintf(pipe, "point %s\n", p.Barrier)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(context.Background(), &claimstore.PruneOptions{OlderThan: 30 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(pipe, "done\n")
}

// TestSigkillPrune kills a real prune process (SIGKILL) at random points of
// its run on a real directory root of 60 old sessions over 3 seats and one
// held pair: after each kill the held pair reads as it did, every seat
// keeps its head, every session reads free, fsck finds no error, and a
// prune run again finishes (fsck then clean) and the pairs can be claimed
// again.
func TestSigkillPrune(t *testing.T) {
	ctx := context.Background()
	owner := claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	killed := 0
	defer func() {
		t.Logf("%d of 6 rounds killed the prune before it finished", killed)
		if killed == 0 {
			t.Errorf("no round killed the prune before it finished")
		}
	}()
	for round := range 6 {
		root := filepath.Join(t.TempDir(), "claims")
		s, err := claimstore.OpenRoot(root, &claimstore.TOpts{Now: fixedNow})
		if err != nil {
			t.Fatal(err)
		}
		var seats []claimstore.Key
		for i := range 3 {
			k, _ := claimstore.SeatKey(fmt.Sprintf("seat-%d", i), "proj", "/ws")
			seats = append(seats, k)
		}
		for i := range 60 {
			session, _ := claimstore.SessionKey(fmt.Sprintf("s-%d", i))
			c, err := s.Acquire(ctx, seats[i%3], session, claimstore.AcquireFields{Owner: owner})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Release(ctx, c, claimstore.NewProof(claimstore.ProofCohort, "done")); err != nil {
				t.Fatal(err)
			}
		}
		heldSeat, heldSession := mustKeys(t, 9)
		self, err := s.Self(1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, heldSeat, heldSession, claimstore.AcquireFields{Owner: self}); err != nil {
			t.Fatal(err)
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestSigkillPruneHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), pruneHelperEnv+"=1", helperRootEnv+"="+root)
		cmd.ExtraFiles = []*os.File{pw}
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pw.Close()
		// A prune of this root meets about 300 points (each tombstone's
		// four, the seat read, each removal's); kill after a random one
		// of the first 250, so that every round is cut short.
		k := 1 + r.IntN(250)
		seen, finished := 0, false
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if sc.Text() == "done" {
				finished = true
				break
			}
			if seen++; seen == k {
				_ = cmd.Process.Kill() // SIGKILL
				break
			}
		}
		_ = cmd.Wait()
		pr.Close()
		if !finished {
			killed++
		}
		where := fmt.Sprintf("round %d, killed after point %d", round, k)
		if finished {
			where = fmt.Sprintf("round %d, finished before point %d", round, k)
		}

		after, err := claimstore.OpenRoot(root, &claimstore.TOpts{Now: later})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []claimstore.Key{heldSeat, heldSession} {
			if h, err := after.Head(ctx, k); err != nil || h.N != 1 || !h.Held() {
				t.Errorf("%s: held %s reads head %d held=%v %v", where, k, h.N, h.Held(), err)
			}
		}
		for _, k := range seats {
			if h, err := after.Head(ctx, k); err != nil || h.N != 40 || h.Held() || h.Damage != nil {
				t.Errorf("%s: seat %s reads head %d held=%v damage=%v %v; want r40, free", where, k, h.N, h.Held(), h.Damage, err)
			}
		}
		for i := range 60 {
			k, _ := claimstore.SessionKey(fmt.Sprintf("s-%d", i))
			if h, err := after.Head(ctx, k); err != nil || h.Held() || h.Damage != nil {
				t.Errorf("%s: session %s reads head %d held=%v damage=%v %v; want free or gone", where, k, h.N, h.Held(), h.Damage, err)
			}
		}
		rep, err := after.Check(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range rep.Findings {
			if f.Severity == claimstore.SeverityError {
				t.Errorf("%s: fsck: %s %s: %s", where, f.Kind, f.Path, f.Message)
			}
		}
		if _, err := after.Prune(ctx, &claimstore.PruneOptions{OlderThan: 30 * 24 * time.Hour}); err != nil {
			t.Fatalf("%s: prune again: %v", where, err)
		}
		rep, err = after.Check(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range rep.Findings {
			t.Errorf("%s, pruned again: fsck: %s %s %s: %s", where, f.Severity, f.Kind, f.Path, f.Message)
		}
		if rep.Keys != 5 {
			t.Errorf("%s, pruned again: %d keys left, want the 3 seats and the held pair", where, rep.Keys)
		}
		s0, _ := claimstore.SessionKey("s-0")
		if c, err := after.Acquire(ctx, seats[0], s0, claimstore.AcquireFields{Owner: owner}); err != nil || c.SeatRev != 41 || c.SessionRev != 1 {
			t.Errorf("%s: acquire after prune: %+v %v; want seat r41, session r1", where, c, err)
		}
		if t.Failed() {
			t.Logf("%s: the helper printed %q", where, strings.TrimSpace(out.String()))
			return
		}
	}
}
