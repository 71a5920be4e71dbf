package claimstore

import (
	"context"
	"github.com/claimstore/claimstore/hostid/hostidtest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// statsRoot builds a root in which a walk meets every count Stats keeps,
// on the backend of root, and returns the stats it must read. The clock
// steps a second per record, so that which held claim is the oldest is
// decided by the records, not by the order of the walk.
func statsRoot(t *testing.T, root string) (*Store, *Stats) {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex // a step calls the clock from two goroutines
	tick := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		tick = tick.Add(time.Second)
		return tick
	}
	host := liveHost() // owner4100 runs; pid 4200 does not
	s := openWith(t, func(o *TOpts) (*Store, error) { o.Backend = backendFor(t, root); return OpenRoot(root, o) }, &TOpts{Host: host, Now: now})
	pair := func(n string) (Key, Key) { return seatKey(t, "seat-"+n), sessionKey(t, "sess-"+n) }
	acquire := func(n string, owner Owner) *Claim {
		seat, session := pair(n)
		c, err := s.Acquire(ctx, seat, session, AcquireFields{Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	advance := func(c *Claim, st State) {
		if err := s.Advance(ctx, c, Patch{State: st}); err != nil {
			t.Fatal(err)
		}
	}
	// a: active, owner live. b: reserved, owner gone.
	advance(acquire("a", owner4100), Active)
	acquire("b", Owner{PID: 4200, Start: "1"})
	// c: left uncertain (the writer may run), owner live.
	advance(acquire("c", owner4100), Uncertain)
	// d: released with a cohort proof: free.
	if err := s.Release(ctx, acquire("d", owner4100), NewProof(ProofCohort, "done")); err != nil {
		t.Fatal(err)
	}
	// e: the session's head damaged; the seat's record names the live owner.
	acquire("e", owner4100)
	_, sessE := pair("e")
	replaceRev(t, s, sessE, 1, []byte("{not json\n"))
	// f: reserved by another machine.
	fs := openWith(t, func(o *TOpts) (*Store, error) { o.Backend = backendFor(t, root); return OpenRoot(root, o) },
		&TOpts{Host: &hostidtest.Host{Machine: otherMachine, Boot: bootA, Procs: map[int]string{4100: "500"}}, Now: now})
	seatF, sessF := pair("f")
	if _, err := fs.Acquire(ctx, seatF, sessF, AcquireFields{Owner: owner4100}); err != nil {
		t.Fatal(err)
	}
	// g: the reference's records, stopped without a proof, written in an
	// earlier boot (so the owner is gone), and the oldest held record.
	ref := func(k Key, id, state, at string) obj {
		return refRecord(k, 1, id, state).set("host", `{"machineId":"`+testMachine+`","bootId":"`+bootB+`"}`).
			set("owner", `{"pid":4242,"start":"123456","boot":"`+bootB+`","incarnation":3}`).set("writtenAt", strconv.Quote(at))
	}
	seatG, sessG := pair("g")
	idG, idH, idO := "c"+strings.Repeat("0", 22)+"a7", "c"+strings.Repeat("0", 22)+"a8", "c"+strings.Repeat("0", 22)+"a9"
	writeRev(t, s, seatG, 1, ref(seatG, idG, "stopped", "2024-01-01T00:00:01.000Z").bytes())
	writeRev(t, s, sessG, 1, ref(sessG, idG, "stopped", "2024-01-01T00:00:02.000Z").bytes())
	// h: an owner that is not an owner (a pid of -1): invalid.
	seatH, sessH := pair("h")
	for _, k := range []Key{seatH, sessH} {
		writeRev(t, s, k, 1, ref(k, idH, "reserved", "2024-06-01T00:00:00.000Z").set("owner", `{"pid":-1,"start":"1"}`).bytes())
	}
	// i: both heads damaged above readable first revisions: no record
	// names the owner.
	advance(acquire("i", owner4100), Active)
	seatI, sessI := pair("i")
	replaceRev(t, s, seatI, 2, []byte("torn"))
	replaceRev(t, s, sessI, 2, []byte("torn"))
	// j: classified after a reboot: stopped on a boot proof, free.
	acquire("j", owner4100)
	rebooted := openWith(t, func(o *TOpts) (*Store, error) { o.Backend = backendFor(t, root); return OpenRoot(root, o) },
		&TOpts{Host: &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{}}, Now: now})
	seatJ, sessJ := pair("j")
	if res, err := rebooted.Classify(ctx, seatJ, sessJ, nil); err != nil || res.Outcome != OutcomeStopped {
		t.Fatalf("classify j after a reboot: %v, %v", res, err)
	}
	// k: released, then the seat's head torn: held (damaged); the owner
	// is the one the free session's record names, which a walk that keeps
	// free heads slim reads again.
	ck := acquire("k", owner4100)
	if err := s.Release(ctx, ck, NewProof(ProofCohort, "done")); err != nil {
		t.Fatal(err)
	}
	seatK, _ := pair("k")
	replaceRev(t, s, seatK, 2, []byte("torn"))
	// An orphan seat: the reference's record (no pair member), no session
	// of its claim.
	orphan := seatKey(t, "orphan")
	writeRev(t, s, orphan, 1, ref(orphan, idO, "reserved", "2024-09-01T00:00:00.000Z").bytes())

	return s, &Stats{
		Keys:      23,
		Revisions: 4 + 2 + 4 + 4 + 2 + 2 + 2 + 2 + 4 + 4 + 4 + 1,
		Proofs:    1,
		Pairs:     map[State]int{Uncertain: 5, Stopping: 0, Active: 1, Reserved: 3, Stopped: 2},
		Uncertain: map[UncertainCause]int{UncertainDamaged: 3, UncertainUnproven: 1, UncertainMayRun: 1},
		HeldByOwner: map[OwnerClass]int{OwnerLive: 4, OwnerGone: 2, OwnerUnknown: 0, OwnerInvalid: 1, OwnerForeign: 1,
			OwnerUnreadable: 1},
		Orphans:         map[Kind]int{KindSeat: 1, KindSession: 0},
		Idle:            0,
		OldestHeld:      time.Date(2024, 1, 1, 0, 0, 1, 0, time.UTC),
		OldestHeldClaim: idG,
	}
}

// Stats reads a root whole: keys, revisions (a gap's missing ones not
// counted) and proofs; pairs by state; uncertain pairs by cause; held pairs
// by their owner judged now; orphans by kind; the oldest held record. On
// both backends, and the same from a store that wrote nothing.
func TestStats(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		root := newRoot(t)
		s, want := statsRoot(t, root)
		for _, st := range []*Store{s, openOn(t, root, liveHost())} {
			got, err := st.Stats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Stats (-want +got):\n%s", diff)
			}
		}
	})
}

// An empty root (none at all) has every count, at zero; nothing held has
// no oldest record.
func TestStatsEmpty(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		got, err := openOn(t, newRoot(t), liveHost()).Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		want := &Stats{
			Pairs:       map[State]int{Uncertain: 0, Stopping: 0, Active: 0, Reserved: 0, Stopped: 0},
			Uncertain:   map[UncertainCause]int{UncertainDamaged: 0, UncertainUnproven: 0, UncertainMayRun: 0},
			HeldByOwner: map[OwnerClass]int{OwnerLive: 0, OwnerGone: 0, OwnerUnknown: 0, OwnerInvalid: 0, OwnerForeign: 0, OwnerUnreadable: 0},
			Orphans:     map[Kind]int{KindSeat: 0, KindSession: 0},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Stats of an empty root (-want +got):\n%s", diff)
		}
	})
}

// Counts of part of a root would read as a root with less held: a root
// whose kinds or proofs cannot be listed is an error, not a smaller count.
func TestStatsUnreadableRoot(t *testing.T) {
	for _, dir := range []string{"session", "proofs"} {
		root := newRoot(t)
		s := openStore(t, root, nil)
		mustAcquire(t, s, seatKey(t, "s"), sessionKey(t, "x"))
		elsewhere := t.TempDir()
		if err := os.RemoveAll(filepath.Join(root, dir)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(elsewhere, filepath.Join(root, dir)); err != nil {
			t.Fatal(err)
		}
		if st, err := openStore(t, root, nil).Stats(context.Background()); err == nil {
			t.Errorf("%s/ a symlink: Stats = %+v, want an error", dir, st)
		}
	}
}

// A walk counts the revisions it listed: a key with a gap counts those
// there are, not its top revision's number.
func TestWalkCountsRevisions(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	s := openStore(t, root, nil)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	c := mustAcquire(t, s, seat, session)
	for _, st := range []State{Active, Stopping} {
		if err := s.Advance(ctx, c, Patch{State: st}); err != nil {
			t.Fatal(err)
		}
	}
	removeRev(t, s, seat, 2)
	w, err := openStore(t, root, nil).Walk(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w.Keys != 2 || w.Revisions != 5 || len(w.Pairs) != 1 {
		t.Fatalf("walk: %d keys, %d revisions, %d pairs; want 2, 5, 1", w.Keys, w.Revisions, len(w.Pairs))
	}
	p := w.Pairs[0]
	if p.SeatInfo.Top != 3 || p.SeatInfo.Revisions != 2 || p.SessionInfo.Top != 3 || p.SessionInfo.Revisions != 3 {
		t.Errorf("seat top %d revisions %d, session top %d revisions %d; want 3 2 3 3", p.SeatInfo.Top, p.SeatInfo.Revisions, p.SessionInfo.Top, p.SessionInfo.Revisions)
	}
}
