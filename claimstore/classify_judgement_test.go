package claimstore

// What the decision table's rows hand back beyond the outcome (the record
// judged, a refusal's reason), finish's size check in a dry run and at the
// widest revision number, and what ClassifyAll promises around its
// callback and a failed SyncWalk.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/dirbackend"
	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/hostid/hostidtest"
)

// goneHost is the test machine in bootA with no process running: owner4100
// is proven gone, and a claim of this boot is judged by rows 8 to 10.
func goneHost() *hostidtest.Host {
	return &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{}}
}

// judgedHeads returns the heads of seat and session as a fresh read sees
// them.
func judgedHeads(t *testing.T, s *Store, seat, session Key) (*Head, *Head) {
	t.Helper()
	hs, err := s.Head(context.Background(), seat)
	if err != nil {
		t.Fatal(err)
	}
	hx, err := s.Head(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	return hs, hx
}

// marshalled is r as stored, for comparing two records.
func marshalled(t *testing.T, r *Record) string {
	t.Helper()
	if r == nil {
		return "<nil>"
	}
	b, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Result.Record is the claim's latest record as judged (the seat's head,
// which every step reaches first), whatever row decided.
func TestClassifyReportsTheRecordJudged(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		root := newRoot(t)
		w := openOn(t, root, liveHost())
		seat, session := testKeys(t)
		active4100(t, w, seat, session, nil)
		hs, _ := judgedHeads(t, w, seat, session)
		for _, tc := range []struct {
			name string
			s    *Store
			want Outcome
		}{
			{"6 owner live", w, OutcomeActive},
			{"10 owner gone, dry run", openOn(t, root, goneHost()), OutcomeUncertain},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res, err := tc.s.Classify(context.Background(), seat, session, &ClassifyOptions{DryRun: true})
				if err != nil {
					t.Fatal(err)
				}
				if res.Outcome != tc.want {
					t.Fatalf("outcome %s, want %s", res.Outcome, tc.want)
				}
				if diff := cmp.Diff(marshalled(t, hs.Record), marshalled(t, res.Record)); diff != "" {
					t.Errorf("Result.Record is not the seat's head record (-want +got):\n%s", diff)
				}
			})
		}
	})
}

// Row 10 says which writer may still run: the process group a supervisor
// without a service manager recorded (a positive processGroup member), or
// else the unit observation.
func TestMayRunRefusalNamesTheWriter(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		for _, tc := range []struct {
			name   string
			fields map[string]any
			writer string
		}{
			{"process group", map[string]any{"processGroup": 4242}, "process group 4242, run without a service manager"},
			{"no process group", nil, "unit unknown: no unit lookup configured"},
			{"process group zero", map[string]any{"processGroup": 0}, "unit unknown: no unit lookup configured"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				root := newRoot(t)
				seat, session := testKeys(t)
				c := active4100(t, openOn(t, root, liveHost()), seat, session, tc.fields)
				res, err := openOn(t, root, goneHost()).Classify(context.Background(), seat, session, nil)
				if err != nil {
					t.Fatal(err)
				}
				if res.Outcome != OutcomeUncertain || res.Refusal == nil || res.Refusal.Code != UnsafeReplacement {
					t.Fatalf("outcome %s, refusal %v; want uncertain, refused %s", res.Outcome, res.Refusal, UnsafeReplacement)
				}
				want := fmt.Sprintf("claim %s's owner is gone, but its writer may still run (%s)", c.ID, tc.writer)
				if diff := cmp.Diff(want, res.Refusal.Reason); diff != "" {
					t.Errorf("refusal reason (-want +got):\n%s", diff)
				}
			})
		}
	})
}

// stoppedNoUnit is the revision row 9 publishes for the claim whose head
// is h, with a pad member of n bytes among the caller's stopped fields.
func stoppedNoUnit(t *testing.T, h *Head, n int) *Record {
	t.Helper()
	next := h.Record.clone()
	next.State, next.Proof = Stopped, NewProof(ProofNoUnit, "")
	if err := applyFields(&next.Fields, map[string]any{"pad": strings.Repeat("p", n)}); err != nil {
		t.Fatal(err)
	}
	return next
}

// A stopped revision too large for either key at the widest revision
// number is refused before anything is published, as every step's record
// is: in a dry run too (which publishes nothing, so only this check can
// say so), and when it would fit at the revision numbers the keys are at,
// so that the answer does not depend on them.
func TestClassifyRefusesAnOversizeStoppedRevision(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		root := newRoot(t)
		seat, session := testKeys(t)
		claim4100(t, openOn(t, root, liveHost()), seat, session)
		s := openOn(t, root, goneHost())
		hs, hx := judgedHeads(t, s, seat, session)

		// The smallest pad refused at the widest number.
		lo, hi := 0, MaxFileSize
		for lo < hi {
			mid := (lo + hi) / 2
			if s.checkSize(stoppedNoUnit(t, hs, mid), seat, session) != nil {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		pad := lo
		// It fits at the numbers the keys would publish (revision 2).
		for _, h := range []*Head{hs, hx} {
			r := stoppedNoUnit(t, hs, pad)
			r.Key, r.Revision, r.WrittenAt = h.Key, h.N+1, timestamp(s.now())
			data, err := r.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if err := sizeOK(h.Key, h.N+1, len(data)); err != nil {
				t.Fatalf("the calibrated record does not fit %v at revision %d: %v", h.Key, h.N+1, err)
			}
		}

		for _, tc := range []struct {
			name string
			pad  int
			dry  bool
		}{
			{"dry run, 1 MiB member", MaxFileSize, true},
			{"dry run, at the widest number", pad, true},
			{"at the widest number", pad, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				opts := &ClassifyOptions{DryRun: tc.dry, Units: mapUnits{}, StoppedFields: map[string]any{"pad": strings.Repeat("p", tc.pad)}}
				res, err := s.Classify(context.Background(), seat, session, opts)
				if !errors.Is(err, ErrRecordTooLarge) {
					t.Fatalf("Classify: %+v, %v; want ErrRecordTooLarge", res, err)
				}
				gs, gx := judgedHeads(t, s, seat, session)
				if diff := cmp.Diff([]uint64{hs.N, hx.N}, []uint64{gs.N, gx.N}); diff != "" {
					t.Errorf("heads moved (-want +got):\n%s", diff)
				}
			})
		}
		// Without the pad the same claim is stopped (row 9).
		res, err := s.Classify(context.Background(), seat, session, &ClassifyOptions{Units: mapUnits{}})
		if err != nil || res.Outcome != OutcomeStopped {
			t.Fatalf("Classify without the pad: %+v, %v; want stopped", res, err)
		}
	})
}

// failingWalkSync is the directory backend with a SyncWalk that fails.
type failingWalkSync struct {
	*dirbackend.Backend
	err error
}

func (f failingWalkSync) SyncWalk(context.Context, map[storage.Loc]uint64) error { return f.err }

// A ClassifyAll whose walk's heads cannot be made durable judges nothing:
// the summary it returns with the error counts nothing, not even the idle
// keys its listing saw.
func TestClassifyAllFailedWalkSyncCountsNothing(t *testing.T) {
	// A released pair whose session was claimed again: its seat is idle.
	root, w, _, session := releasedPair(t)
	mustAcquire(t, w, seatKey(t, "held"), session)
	be, err := dirbackend.Open(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("sync walk failed")
	s := openStore(t, root, &TOpts{Backend: failingWalkSync{be, boom}})
	var seen []*PairResult
	sum, err := s.ClassifyAll(context.Background(), nil, func(pr *PairResult) { seen = append(seen, pr) })
	if !errors.Is(err, boom) {
		t.Fatalf("ClassifyAll: %v, want %v", err, boom)
	}
	if diff := cmp.Diff(&Summary{Uncertain: map[string]int{}, Refused: map[Code]int{}}, sum); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	if len(seen) != 0 {
		t.Errorf("each called with %d results", len(seen))
	}
	// The same root with the backend's own SyncWalk counts them.
	sum, err = openStore(t, root, &TOpts{Backend: be}).ClassifyAll(context.Background(), &ClassifyOptions{DryRun: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Idle != 1 || sum.Pairs != 1 {
		t.Errorf("dry run: idle %d, pairs %d; want 1, 1", sum.Idle, sum.Pairs)
	}
}

// The summary counts each result as classified, whatever each then does
// with the PairResult it is handed (a caller recycling it included).
func TestClassifyAllCountsBeforeEach(t *testing.T) {
	root := newRoot(t)
	w := openOn(t, root, liveHost())
	for i := range 3 {
		claim4100(t, w, seatKey(t, fmt.Sprint("s", i)), sessionKey(t, fmt.Sprint("x", i)))
	}
	s := openOn(t, root, liveHost())
	sum, err := s.ClassifyAll(context.Background(), &ClassifyOptions{Workers: 1}, func(pr *PairResult) { *pr = PairResult{} })
	if err != nil {
		t.Fatal(err)
	}
	want := &Summary{Pairs: 3, Uncertain: map[string]int{}, Refused: map[Code]int{AlreadyActive: 3}}
	if diff := cmp.Diff(want, sum); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
}

// A callback that panics ends the walk as a cancellation does: the workers
// finish the pair in hand and start no other, and the panic reaches the
// caller only after they ended.
func TestClassifyAllEachPanicStopsTheWalk(t *testing.T) {
	const n = 6
	root := newRoot(t)
	w := openOn(t, root, liveHost())
	var seats []Key
	for i := range n {
		seats = append(seats, seatKey(t, fmt.Sprint("s", i)))
		claim4100(t, w, seats[i], sessionKey(t, fmt.Sprint("x", i)))
	}
	s := openOn(t, root, goneHost())
	// The second pair's classification, if it gets to its first publish
	// before the walk is stopped, waits between its keys until a while
	// after the first pair's callback panicked.
	release := make(chan struct{})
	var between atomic.Int32
	s.barrier = func(p Point) error {
		if p.Barrier == BarrierBetweenKeys && between.Add(1) == 2 {
			<-release
		}
		return nil
	}
	var calls atomic.Int32
	each := func(*PairResult) {
		if calls.Add(1) == 1 {
			go func() {
				time.Sleep(200 * time.Millisecond)
				close(release)
			}()
			panic("each gives up")
		}
	}
	got := func() (r any) {
		defer func() { r = recover() }()
		_, _ = s.ClassifyAll(context.Background(), &ClassifyOptions{Workers: 1}, each)
		return nil
	}()
	if got != "each gives up" {
		t.Fatalf("recovered %v, want each's panic", got)
	}
	if c := calls.Load(); c != 1 {
		t.Errorf("each called %d times, want 1", c)
	}
	classified := 0
	for _, k := range seats {
		h, err := s.Head(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if h.N > 1 {
			classified++
		}
	}
	// The pair in hand may have seen the walk's cancellation before its
	// first publish.
	if classified < 1 || classified > 2 {
		t.Errorf("%d pairs classified, want 1 or 2 (the one reported and the one in hand)", classified)
	}
}
