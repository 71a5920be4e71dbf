package claimstore

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/hostid/hostidtest"
	"github.com/google/go-cmp/cmp"
)

// namedOnlyFS is the OS filesystem without O_TMPFILE: every temporary has a
// name, as on filesystems that lack unnamed files.
type namedOnlyFS struct{ vfs.OSFS }

func (namedOnlyFS) CreateTemp(dir string, perm fs.FileMode) (vfs.TempFile, error) {
	return vfs.CreateNamed(dir, perm)
}

func TestNamedTemporariesArePublishedAndDropped(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	s, err := OpenRoot(root, &TOpts{FS: namedOnlyFS{}})
	if err != nil {
		t.Fatal(err)
	}
	seat, session := testKeys(t)
	var seen []string
	var mu sync.Mutex // the barrier is called from the step's goroutines
	s.barrier = func(p Point) error {
		mu.Lock()
		defer mu.Unlock()
		if p.Barrier == BarrierTempSynced {
			names, _ := os.ReadDir(s.KeyDir(p.Key))
			for _, n := range names {
				if _, ok := vfs.TempOwner(n.Name()); ok {
					seen = append(seen, n.Name())
				}
			}
		}
		return nil
	}
	o, err := s.Self(1)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Acquire(context.Background(), seat, session, AcquireFields{Owner: o})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(context.Background(), c, NewProof(ProofCohort, "x")); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 4 {
		t.Errorf("saw %d named temporaries carrying this writer's identity, want 4: %v", len(seen), seen)
	}
	rep, err := s.Check(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 0 {
		t.Errorf("findings on a clean root: %+v", rep.Findings)
	}
	if rep.Keys != 2 || rep.Revisions != 4 {
		t.Errorf("checked %d keys, %d revisions; want 2, 4", rep.Keys, rep.Revisions)
	}
}

func TestCheckFindingsAndRepair(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	host := liveHost()
	s := openOn(t, root, host)
	seat, session := testKeys(t)
	active4100(t, s, seat, session, nil)
	sd, xd := s.KeyDir(seat), s.KeyDir(session)
	write := func(p, content string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(content), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	dead := filepath.Join(sd, ".tmp-999999.1."+bootA+".00")
	live := filepath.Join(sd, ".tmp-4100.500."+bootA+".01")
	ref := filepath.Join(xd, ".tmp-0123456789abcdef")
	// With the PID namespace: one of this namespace whose writer is gone,
	// one of another namespace whose pid means nothing here.
	deadNS := filepath.Join(sd, ".tmp-999998.1."+bootA+".4:4026531836.02")
	otherNS := filepath.Join(sd, ".tmp-999997.1."+bootA+".4:4026532999.03")
	write(dead, "x")
	write(live, "x")
	write(ref, "x")
	write(deadNS, "x")
	write(otherNS, "x")
	write(filepath.Join(sd, "notes.txt"), "x")
	write(filepath.Join(xd, RevisionName(4)), "{}\n") // a gap at 3, and damaged
	write(filepath.Join(root, "stray"), "x")

	rep, err := s.Check(context.Background(), &CheckOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		Path     string
		Kind     string
		Severity Severity
		Repaired bool
	}
	var gs []got
	for _, f := range rep.Findings {
		rel, _ := filepath.Rel(root, f.Path)
		gs = append(gs, got{rel, f.Kind, f.Severity, f.Repaired})
	}
	rel := func(p string) string { r, _ := filepath.Rel(root, p); return r }
	want := []got{
		{"stray", FindingForeign, SeverityWarning, false},
		{rel(filepath.Join(sd, ".tmp-4100.500."+bootA+".01")), FindingTemporary, SeverityWarning, false},
		{rel(dead), FindingTemporary, SeverityWarning, true},
		{rel(deadNS), FindingTemporary, SeverityWarning, true},
		{rel(otherNS), FindingTemporary, SeverityWarning, false},
		{rel(filepath.Join(sd, "notes.txt")), FindingForeign, SeverityWarning, false},
		{rel(filepath.Join(xd, RevisionName(4))), FindingGap, SeverityError, false},
		{rel(filepath.Join(xd, RevisionName(4))), FindingDamaged, SeverityError, false},
		{rel(ref), FindingTemporary, SeverityWarning, false},
	}
	less := func(a, b got) bool { return a.Path+a.Kind < b.Path+b.Kind }
	sort.Slice(want, func(i, j int) bool { return less(want[i], want[j]) })
	sort.Slice(gs, func(i, j int) bool { return less(gs[i], gs[j]) })
	if diff := cmp.Diff(want, gs); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
	if _, err := os.Lstat(dead); !os.IsNotExist(err) {
		t.Errorf("dead writer's temporary still there: %v", err)
	}
	for _, p := range []string{live, ref, otherNS} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("repair removed %s, whose writer is not proven gone", p)
		}
	}
}

// TestCheckReportsInKeyOrder: Check checks keys several at once, yet
// reports every key's findings in the order it lists the keys, counts every
// revision once, and notes every boot proof a revision names (no proof is
// reported unused), the same from one run to the next.
func TestCheckReportsInKeyOrder(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	s := openStore(t, root, nil)
	var seats []Key
	for i := range 3*walkReaders + 5 {
		seat := seatKey(t, fmt.Sprintf("s%02d", i))
		seats = append(seats, seat)
		mustAcquire(t, s, seat, sessionKey(t, fmt.Sprintf("x%02d", i)))
		if err := os.WriteFile(filepath.Join(s.KeyDir(seat), "stray"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Proofs named by revisions of keys checked at once.
	rebooted := openStore(t, root, &TOpts{Host: &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{}}})
	if _, err := rebooted.ClassifyAll(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	all, err := s.keyLocs(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, loc := range all {
		if loc.Kind == KindSeat {
			want = append(want, s.Path(string(loc.Kind), loc.Hash, "stray"))
		}
	}
	for range 3 {
		rep, err := openStore(t, root, nil).Check(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range rep.Findings {
			got = append(got, f.Path)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("findings (-want +got):\n%s", diff)
		}
		if rep.Keys != 2*len(seats) || rep.Revisions != 2*2*len(seats) || rep.Proofs == 0 {
			t.Fatalf("checked %d keys, %d revisions, %d proofs; want %d, %d and a proof", rep.Keys, rep.Revisions, rep.Proofs, 2*len(seats), 4*len(seats))
		}
	}
}
