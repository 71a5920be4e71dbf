package claimstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// walkSummary is a walk in a form cmp can compare: each pair's keys and
// what was read of each, each orphan's location and reason, the idle keys.
type walkSummary struct {
	Pairs     []string
	Orphans   []string
	Idle      int
	IdleKeys  []string
	Keys      int
	Revisions int
}

func summarizeWalk(w *Walk) walkSummary {
	info := func(in *KeyInfo) string {
		s := fmt.Sprintf("%s/%s top=%d revs=%d claim=%s held=%v key=%v pair=%v err=%v", in.Loc.Kind, in.Loc.Hash, in.Top, in.Revisions, in.ClaimID, in.Held(), in.Key != nil, in.Pair != nil, in.Err)
		if in.Head != nil {
			s += fmt.Sprintf(" head=%d record=%v damage=%v", in.Head.N, in.Head.Record != nil, in.Head.Damage)
		}
		return s
	}
	out := walkSummary{Idle: w.Idle, Keys: w.Keys, Revisions: w.Revisions}
	for _, p := range w.Pairs {
		out.Pairs = append(out.Pairs, p.Seat.Seat+"+"+p.Session.Session+": "+info(p.SeatInfo)+" | "+info(p.SessionInfo))
	}
	for _, o := range w.Orphans {
		out.Orphans = append(out.Orphans, info(o.Info)+": "+o.Reason)
	}
	for _, in := range w.IdleKeys {
		out.IdleKeys = append(out.IdleKeys, info(in))
	}
	return out
}

// TestWalkReadersPairAsOne: a walk reading sixteen keys at once pairs,
// orphans and counts exactly as one reading a key at a time, over a root
// with live, released, cut and damaged pairs, an empty key directory, a
// revision replaced by a FIFO, a key directory replaced by a symlink and
// one by a regular file, and a key with a gap; its progress counts every
// key once, in order.
func TestWalkReadersPairAsOne(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	s := openStore(t, root, nil)
	for i := range 40 {
		c := mustAcquire(t, s, seatKey(t, fmt.Sprintf("live%d", i)), sessionKey(t, fmt.Sprintf("lx%d", i)))
		if i%3 == 0 {
			if err := s.Release(ctx, c, NewProof(ProofCohort, "done")); err != nil {
				t.Fatal(err)
			}
		}
	}
	cut := errors.New("cut")
	cs := openStore(t, root, &TOpts{Barrier: func(pt Point) error {
		if pt.Barrier == BarrierBetweenKeys {
			return cut
		}
		return nil
	}})
	if _, err := cs.Acquire(ctx, seatKey(t, "cut"), sessionKey(t, "cutx"), fields(t, cs)); !errors.Is(err, cut) {
		t.Fatalf("cut Acquire: %v", err)
	}
	if err := os.MkdirAll(s.KeyDir(sessionKey(t, "empty")), 0o700); err != nil {
		t.Fatal(err)
	}
	// plant replaces what f names with what put makes, in a key directory
	// made writable for it.
	plant := func(k Key, put func(dir string) error) {
		t.Helper()
		dir := s.KeyDir(k)
		if err := os.Chmod(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := put(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o500); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	damaged := sessionKey(t, "damaged")
	mustAcquire(t, s, seatKey(t, "sd"), damaged)
	plant(damaged, func(dir string) error {
		p := filepath.Join(dir, RevisionName(1))
		os.Chmod(p, 0o600)
		return os.WriteFile(p, []byte("{not json"), 0o400)
	})
	fifo := sessionKey(t, "fifo")
	mustAcquire(t, s, seatKey(t, "sf"), fifo)
	plant(fifo, func(dir string) error {
		p := filepath.Join(dir, RevisionName(1))
		os.Remove(p)
		return syscall.Mkfifo(p, 0o400)
	})
	gap := sessionKey(t, "gap")
	c := mustAcquire(t, s, seatKey(t, "sg"), gap)
	if err := s.Advance(ctx, c, Patch{State: Active}); err != nil {
		t.Fatal(err)
	}
	plant(gap, func(dir string) error { return os.Remove(filepath.Join(dir, RevisionName(1))) })
	// A key directory that is a symlink to another, and one that is a
	// regular file.
	linked := sessionKey(t, "linked")
	if err := os.Symlink(s.KeyDir(sessionKey(t, "lx1")), s.KeyDir(linked)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.KeyDir(sessionKey(t, "file")), []byte("planted"), 0o400); err != nil {
		t.Fatal(err)
	}

	one, err := openStore(t, root, nil).Walk(ctx, &WalkOptions{KeepIdle: true, readers: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := summarizeWalk(one)
	if len(want.Pairs) < 40 || len(want.Orphans) < 2 {
		t.Fatalf("the root is not what the test means: %d pairs, orphans %q", len(want.Pairs), want.Orphans)
	}
	for round := range 5 {
		var seen []int
		w, err := openStore(t, root, nil).Walk(ctx, &WalkOptions{KeepIdle: true, Progress: func(done, total int) {
			if total != want.Keys {
				t.Errorf("progress total %d, want %d", total, want.Keys)
			}
			seen = append(seen, done)
		}})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, summarizeWalk(w)); diff != "" {
			t.Fatalf("round %d: 16 readers walk otherwise than one (-one +16):\n%s", round, diff)
		}
		for i, d := range seen {
			if d != i+1 {
				t.Fatalf("progress %v: want 1 to %d in order", seen, want.Keys)
			}
		}
		if len(seen) != want.Keys {
			t.Fatalf("progress called %d times, want %d", len(seen), want.Keys)
		}
	}
}

// TestWalkCanceledReturnsNoWalk: a walk canceled while its readers run
// returns the cancellation, never a walk with keys left unread.
func TestWalkCanceledReturnsNoWalk(t *testing.T) {
	root := newRoot(t)
	s := openStore(t, root, nil)
	for i := range 40 {
		mustAcquire(t, s, seatKey(t, fmt.Sprintf("s%d", i)), sessionKey(t, fmt.Sprintf("x%d", i)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	last, total := 0, 0
	w, err := openStore(t, root, nil).Walk(ctx, &WalkOptions{Progress: func(done, n int) {
		last, total = done, n
		if done == 5 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) || w != nil {
		t.Fatalf("canceled walk = %v, %v; want no walk and context.Canceled", w, err)
	}
	// The readers stop at the cancellation: each ends the key it was
	// reading, none begins another.
	if last > 5+walkReaders {
		t.Errorf("the walk read %d of %d keys after it was canceled at 5; want at most %d", last, total, 5+walkReaders)
	}
}

// slimRoot is a root of released, reserved and active pairs and one
// damaged session, for the slim walks' tests.
func slimRoot(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	root := newRoot(t)
	s := openStore(t, root, nil)
	for i := range 12 {
		c := mustAcquire(t, s, seatKey(t, fmt.Sprintf("s%d", i)), sessionKey(t, fmt.Sprintf("x%d", i)))
		switch i % 3 {
		case 0:
			if err := s.Release(ctx, c, NewProof(ProofCohort, "done")); err != nil {
				t.Fatal(err)
			}
		case 1:
			if err := s.Advance(ctx, c, Patch{State: Active}); err != nil {
				t.Fatal(err)
			}
		}
	}
	damaged := sessionKey(t, "damaged")
	mustAcquire(t, s, seatKey(t, "sd"), damaged)
	if err := os.Chmod(s.KeyDir(damaged), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(s.RevisionPath(damaged, 1), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.RevisionPath(damaged, 1), []byte("{not json"), 0o400); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestWalkSlimFree: a walk with SlimFree pairs, orphans and holds exactly as
// a full walk does, keeps every held head whole, and of a free head its key
// and number over the one shared stand-in record.
func TestWalkSlimFree(t *testing.T) {
	ctx := context.Background()
	root := slimRoot(t)
	full, err := openStore(t, root, nil).Walk(ctx, &WalkOptions{KeepIdle: true})
	if err != nil {
		t.Fatal(err)
	}
	slim, err := openStore(t, root, nil).Walk(ctx, &WalkOptions{KeepIdle: true, SlimFree: true})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(summarizeWalk(full), summarizeWalk(slim)); diff != "" {
		t.Fatalf("the SlimFree walk pairs otherwise (-full +slim):\n%s", diff)
	}
	free, held := 0, 0
	for i, p := range slim.Pairs {
		fp := full.Pairs[i]
		for j, in := range []*KeyInfo{p.SeatInfo, p.SessionInfo} {
			h, fh := in.Head, []*KeyInfo{fp.SeatInfo, fp.SessionInfo}[j].Head
			switch {
			case h.Held():
				held++
				if h.N != fh.N || !bytes.Equal(h.raw, fh.raw) || (h.Record == nil) != (fh.Record == nil) || h.Record == slimHeld {
					t.Errorf("%s: a held head was not kept whole", in.Loc.Hash)
				}
			default:
				free++
				if h.Record != slimFree || h.raw != nil || h.Key != fh.Key || h.N != fh.N {
					t.Errorf("%s: a free head kept more than its key and number: %+v", in.Loc.Hash, h)
				}
			}
		}
	}
	if free == 0 || held == 0 {
		t.Fatalf("the root has %d free and %d held paired keys; want both", free, held)
	}
	// Without SlimFree, a free head is kept whole.
	for _, p := range full.Pairs {
		for _, in := range []*KeyInfo{p.SeatInfo, p.SessionInfo} {
			if h := in.Head; !h.Held() && (h.Record == slimFree || h.raw == nil) {
				t.Errorf("%s: a walk without SlimFree kept a free head slim", in.Loc.Hash)
			}
		}
	}
}

// TestClassifyAllWalkSlim: ClassifyAll's walk (the one that collects tops)
// keeps of each key only what pairing needs, and pairs, orphans and holds
// exactly as a full walk does; a slim head holds when the full one does.
func TestClassifyAllWalkSlim(t *testing.T) {
	ctx := context.Background()
	root := slimRoot(t)
	full, err := openStore(t, root, nil).Walk(ctx, &WalkOptions{KeepIdle: true})
	if err != nil {
		t.Fatal(err)
	}
	slim, err := openStore(t, root, nil).Walk(ctx, &WalkOptions{KeepIdle: true, tops: map[Loc]uint64{}, slim: slimKeyInfo})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(summarizeWalk(full), summarizeWalk(slim)); diff != "" {
		t.Fatalf("the slim walk pairs otherwise (-full +slim):\n%s", diff)
	}
	for _, p := range slim.Pairs {
		for _, in := range []*KeyInfo{p.SeatInfo, p.SessionInfo} {
			if h := in.Head; h != nil && (h.raw != nil || h.Record != nil && h.Record != slimHeld && h.Record != slimFree) {
				t.Errorf("%s: the slim walk kept the head's record or bytes", in.Loc.Hash)
			}
		}
	}
	if slimHeld.held() != true || slimFree.held() != false {
		t.Error("the slim records do not hold as they stand for")
	}
}
