package claimstore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/hostid"
)

// The helper process's protocol, one line each on the pipe (fd 3):
//
//	barrier <n> <barrier> <kind> <revision>   paused at the n-th barrier point; kill me
//	ack <op> <seat revision> <session revision>  op acknowledged
//	done
//	error <message>
const (
	helperEnv     = "CLAIMSTORE_SIGKILL_HELPER"
	helperRootEnv = "CLAIMSTORE_SIGKILL_ROOT"
	helperAtEnv   = "CLAIMSTORE_SIGKILL_AT"
)

// TestSigkillHelper is the child of TestSigkill, not a test: it runs only
// with the environment gate set. It acquires, advances to active with the
// spawn marker, and releases, on a real directory, pausing forever at the
// barrier point numbered $CLAIMSTORE_SIGKILL_AT.
func TestSigkillHelper(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper process for TestSigkill")
	}
	pipe := os.NewFile(3, "pipe")
	say := func(format string, args ...any) {
		// Each line is written whole before the next step, so the parent
		// knows everything acknowledged before it kills.
		if _, err := fmt.Fprintf(pipe, format+"\n", args...); err != nil {
			os.Exit(3)
		}
	}
	at, _ := strconv.Atoi(os.Getenv(helperAtEnv))
	n := 0
	// Sequential: the child counts barriers to stop at the at-th; a store
	// that overlaps meets them in an order that varies.
	s, err := claimstore.OpenRoot(os.Getenv(helperRootEnv), &claimstore.TOpts{Sequential: true, Barrier: func(p claimstore.Point) error {
		n++
		if n == at {
			say("barrier %d %s %s %d", n, p.Barrier, p.Key.Kind, p.Revision)
			select {} // wait for SIGKILL
		}
		return nil
	}})
	if err != nil {
		say("error %v", err)
		return
	}
	seat, session := mustKeys(t, 1)
	owner, err := s.Self(1)
	if err != nil {
		say("error %v", err)
		return
	}
	c, err := s.Acquire(context.Background(), seat, session, claimstore.AcquireFields{ClaimID: claimID('a'), Owner: owner})
	if err != nil {
		say("error acquire: %v", err)
		return
	}
	say("ack acquire %d %d", c.SeatRev, c.SessionRev)
	if err := s.Advance(context.Background(), c, claimstore.Patch{State: claimstore.Active, Fields: map[string]any{"spawnMarker": true}}); err != nil {
		say("error advance: %v", err)
		return
	}
	say("ack advance %d %d", c.SeatRev, c.SessionRev)
	if err := s.Release(context.Background(), c, claimstore.NewProof(claimstore.ProofCohort, "cohort-1")); err != nil {
		say("error release: %v", err)
		return
	}
	say("ack release %d %d", c.SeatRev, c.SessionRev)
	say("done")
}

type sigkillAck struct {
	op               string
	seatRev, sessRev uint64
}

// TestSigkill kills a real helper process with SIGKILL at every barrier
// point of acquire, advance and release, then reopens the root and checks
// the invariants and classification. A process crash keeps the page cache,
// so everything the child wrote before the kill is there; what is checked
// is that every state between two barriers is consistent and resolvable.
func TestSigkill(t *testing.T) {
	if _, err := hostid.Self(hostid.System); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set, and this machine cannot identify processes: %v", err)
		}
		t.Skipf("this machine cannot identify processes (%v): the helper's owner could not be judged", err)
	}
	runs, temps := 0, 0
	for at := 1; ; at++ {
		root := filepath.Join(t.TempDir(), "claims")
		acks, paused, done := runHelper(t, root, at)
		runs++
		where := fmt.Sprintf("killed at barrier %d (%s)", at, paused)
		if done {
			where = "ran to the end"
		}
		temps += checkRealRoot(t, root, acks, where)
		if done || t.Failed() {
			break
		}
	}
	t.Logf("SIGKILL runs: %d (%d barrier points); temporaries left behind: %d", runs, runs-1, temps)
	if runs < 27 {
		t.Errorf("only %d runs: expected at least 27 barrier points (9 per step, 3 steps)", runs)
	}
}

// runHelper starts the helper, kills it at barrier at, and returns what it
// acknowledged first.
func runHelper(t *testing.T, root string, at int) (acks []sigkillAck, paused string, done bool) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSigkillHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1", helperRootEnv+"="+root, helperAtEnv+"="+strconv.Itoa(at))
	cmd.ExtraFiles = []*os.File{w}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	timer := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 0:
		case f[0] == "barrier":
			paused = strings.Join(f[2:], " ")
			if err := cmd.Process.Kill(); err != nil { // SIGKILL
				t.Fatal(err)
			}
		case f[0] == "ack" && len(f) == 4:
			a := sigkillAck{op: f[1]}
			a.seatRev, _ = strconv.ParseUint(f[2], 10, 64)
			a.sessRev, _ = strconv.ParseUint(f[3], 10, 64)
			acks = append(acks, a)
		case f[0] == "done":
			done = true
		case f[0] == "error":
			t.Errorf("helper at barrier %d: %s", at, sc.Text())
		}
	}
	err = cmd.Wait()
	if !done && paused == "" {
		t.Fatalf("helper at barrier %d ended without pausing or finishing: %v\n%s", at, err, out.String())
	}
	if done && err != nil {
		t.Fatalf("helper failed: %v\n%s", err, out.String())
	}
	return acks, paused, done
}

// checkRealRoot checks the invariants on a real root the helper left, and
// classifies it. It returns the number of temporaries left behind.
func checkRealRoot(t *testing.T, root string, acks []sigkillAck, where string) int {
	t.Helper()
	seat, session := mustKeys(t, 1)
	s, err := claimstore.OpenRoot(root, nil)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	wantState := map[string]claimstore.State{"acquire": claimstore.Reserved, "advance": claimstore.Active, "release": claimstore.Stopped}
	marked := map[string]bool{}
	for _, a := range acks {
		for _, kr := range []struct {
			k claimstore.Key
			n uint64
		}{{seat, a.seatRev}, {session, a.sessRev}} {
			data, err := os.ReadFile(filepath.Join(s.KeyDir(kr.k), claimstore.RevisionName(kr.n)))
			if err != nil {
				t.Errorf("%s: acknowledged %s revision %d of %s: %v", where, a.op, kr.n, kr.k, err)
				continue
			}
			rec, err := claimstore.DecodeRecord(data, kr.k, kr.n)
			if err != nil {
				t.Errorf("%s: acknowledged %s revision %d of %s is damaged: %v", where, a.op, kr.n, kr.k, err)
				continue
			}
			if rec.ClaimID != claimID('a') || rec.State != wantState[a.op] {
				t.Errorf("%s: acknowledged %s revision %d of %s is claim %s in state %s", where, a.op, kr.n, kr.k, rec.ClaimID, rec.State)
			}
		}
		if a.op == "advance" {
			marked[claimID('a')] = true
		}
	}
	temps := 0
	p, err := s.Pair(context.Background(), seat, session)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	for _, h := range []*claimstore.Head{p.Seat, p.Session} {
		revs, err := s.Revisions(context.Background(), h.Key)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		files := map[uint64][]byte{}
		for _, r := range revs {
			if r.Damage != nil {
				t.Errorf("%s: %s revision %d is damaged: %v", where, h.Key, r.N, r.Damage)
			}
			files[r.N] = r.Data
		}
		if n := uint64(len(revs)); h.N != n {
			t.Errorf("%s: %s: Head says %d, the history has %d revisions", where, h.Key, h.N, n)
		}
		if rank(p.State()) > rank(h.State()) {
			t.Errorf("%s: the pair reads %s, less conservative than %s's %s", where, p.State(), h.Key, h.State())
		}
		checkMarker(t, where, h.Key, files)
		_, other, err := s.Backend().List(context.Background(), h.Key.Loc())
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range other {
			if strings.HasPrefix(name, vfs.TempPrefix) {
				temps++
			}
		}
	}
	// The helper is dead, on this boot: classify judges its owner gone.
	checkClassify(t, s, seat, session, marked, where+": classify")
	return temps
}
