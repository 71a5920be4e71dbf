package claimstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"sync/atomic"
	"testing"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/crashfs"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// TestEveryCallFailsOnce fails every filesystem call of every scenario
// operation in turn, once (EIO), the calls after it succeeding: the
// operation must either fail, or succeed having acknowledged exactly what
// a run without the fault acknowledges (a read it retried, a check it made
// again another way); and every power cut afterwards must keep the
// invariants. An error swallowed where it matters — an fsync, a link, a
// directory made, a check skipped — shows up as an acknowledgement that a
// power cut takes back, or as a different outcome.
func TestEveryCallFailsOnce(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for i, st := range sc.steps {
				if st.name == "owner dies" || st.name == "reboot" {
					continue
				}
				want, calls := faultFree(t, sc.steps[:i], st)
				for k := 1; k <= calls; k++ {
					failCallOnce(t, sc.steps[:i], st, k, want)
				}
				t.Logf("%-36s calls=%d, each failed once in turn", st.name, calls)
			}
		})
	}
}

// faultFree runs op after setup without faults: what it acknowledges, and
// how many calls it makes.
func faultFree(t *testing.T, setup []step, op step) (map[string][]byte, int) {
	t.Helper()
	w := newWorld(t, &crashfs.Options{})
	for _, s := range setup {
		if err := s.run(w); err != nil {
			t.Fatalf("setup %s: %v", s.name, err)
		}
	}
	n := 0
	efs := errorfs.Wrap(w.fs, &errorfs.Rule{Kind: errorfs.Fail, Nth: 1 << 30, Path: func(string) bool { n++; return true }})
	tr := &tempTracker{FS: efs}
	w.vfs, w.store = tr, w.open(tr, w.host, nil)
	before := copyAcked(w.acked)
	if err := op.run(w); err != nil {
		t.Fatalf("%s without faults: %v", op.name, err)
	}
	// Lost races included: every temporary is closed.
	if k := tr.open.Load(); k != 0 {
		t.Errorf("%s without faults: %d temporaries left open", op.name, k)
	}
	return newAcks(before, w.acked), n
}

func copyAcked(m map[string][]byte) map[string][]byte {
	out := map[string][]byte{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// newAcks are the acknowledgements in after that before lacks.
func newAcks(before, after map[string][]byte) map[string][]byte {
	out := map[string][]byte{}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			out[k] = v
		}
	}
	return out
}

func failCallOnce(t *testing.T, setup []step, op step, k int, want map[string][]byte) {
	t.Helper()
	w := newWorld(t, &crashfs.Options{})
	for _, s := range setup {
		if err := s.run(w); err != nil {
			t.Fatalf("setup %s: %v", s.name, err)
		}
	}
	seen := 0
	efs := errorfs.Wrap(w.fs, &errorfs.Rule{Kind: errorfs.Fail, Times: 1, Path: func(string) bool {
		seen++
		return seen == k
	}})
	tr := &tempTracker{FS: efs}
	w.vfs, w.store = tr, w.open(tr, w.host, nil)
	before := copyAcked(w.acked)
	err := op.run(w)
	inj := efs.Injected()
	if len(inj) == 0 {
		return // the run took another path and made fewer calls
	}
	where := fmt.Sprintf("%s with call %d (%s) failed once", op.name, k, inj[0])
	if n := tr.open.Load(); n != 0 {
		t.Errorf("%s: %d temporaries left open", where, n)
	}

	if err == nil && inj[0].Op != errorfs.OpClose {
		// A strict operation acknowledges all or nothing; the others (a
		// classification, which reads an unreadable head as damaged and
		// holds) may acknowledge less, never anything else.
		got := newAcks(before, w.acked)
		if op.strict && !sameAcks(want, got) || !op.strict && !subsetAcks(got, want) {
			t.Errorf("%s: succeeded, acknowledging %v; a run without the fault acknowledges %v", where, keysOf(got), keysOf(want))
		}
	}
	checkAllCrashes(t, w, where)
}

// tempTracker counts the temporaries a store created and has not closed
// (whatever Close returned: a store must call it once on each, on every
// path, or leak a descriptor per failed publish).
type tempTracker struct {
	vfs.FS
	open atomic.Int32
}

func (f *tempTracker) CreateTemp(dir string, perm fs.FileMode) (vfs.TempFile, error) {
	t, err := f.FS.CreateTemp(dir, perm)
	if err != nil {
		return nil, err
	}
	f.open.Add(1)
	return &trackedTemp{TempFile: t, f: f}, nil
}

type trackedTemp struct {
	vfs.TempFile
	f      *tempTracker
	closed atomic.Bool
}

func (t *trackedTemp) Close() error {
	if !t.closed.Swap(true) {
		t.f.open.Add(-1)
	}
	return t.TempFile.Close()
}

// subsetAcks reports whether every acknowledgement in a is in b, the same.
func subsetAcks(a, b map[string][]byte) bool {
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

func sameAcks(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

func keysOf(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// A publish stopped at any barrier (a crash test's stop, a supervisor's
// hook failing) closes its temporary: an acquire stopped at each barrier of
// each key in turn leaves no descriptor open.
func TestBarrierStopClosesTemporaries(t *testing.T) {
	for _, kind := range []claimstore.Kind{claimstore.KindSeat, claimstore.KindSession} {
		for _, b := range claimstore.Barriers {
			if b == claimstore.BarrierBetweenKeys && kind == claimstore.KindSession {
				continue // met after the seat's revision only
			}
			t.Run(fmt.Sprintf("%s-%s", kind, b), func(t *testing.T) {
				w := newWorld(t, &crashfs.Options{})
				tr := &tempTracker{FS: w.fs}
				stop := errors.New("stopped")
				stopped := false
				s := w.open(tr, w.host, func(p claimstore.Point) error {
					if p.Barrier == b && p.Key.Kind == kind {
						stopped = true
						return stop
					}
					return nil
				})
				seat, session := pairKeys(t)
				_, err := s.Acquire(context.Background(), seat, session, claimstore.AcquireFields{Owner: claimstore.Owner{PID: 4100, Start: "500"}})
				if !stopped {
					t.Fatalf("the acquire met no %s barrier on the %s key (err %v)", b, kind, err)
				}
				if !errors.Is(err, stop) {
					t.Fatalf("acquire stopped at %s of the %s key: %v, want the stop", b, kind, err)
				}
				if n := tr.open.Load(); n != 0 {
					t.Errorf("%d temporaries left open", n)
				}
			})
		}
	}
}

// A writer that finds its number taken after writing its temporary (a
// rival linked it meanwhile) closes the temporary, without an fsync.
func TestLostRaceClosesTemporary(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	seat, session := pairKeys(t)
	fields := claimstore.AcquireFields{Owner: claimstore.Owner{PID: 4100, Start: "500"}}
	rival := w.open(w.fs, w.host, nil)
	tr := &tempTracker{FS: w.fs}
	raced := false
	s := w.open(tr, w.host, func(p claimstore.Point) error {
		if p.Barrier == claimstore.BarrierTempWritten && p.Key.Kind == claimstore.KindSeat && !raced {
			raced = true
			if _, err := rival.Acquire(context.Background(), seat, session, fields); err != nil {
				t.Errorf("rival acquire: %v", err)
			}
		}
		return nil
	})
	if _, err := s.Acquire(context.Background(), seat, session, fields); err == nil {
		t.Fatal("an acquire whose seat revision a rival linked first succeeded")
	}
	if !raced {
		t.Fatal("the rival never ran")
	}
	if n := tr.open.Load(); n != 0 {
		t.Errorf("%d temporaries left open by the losing writer", n)
	}
}

// pairKeys returns a seat key and a session key for one pair.
func pairKeys(t *testing.T) (claimstore.Key, claimstore.Key) {
	t.Helper()
	seat, err := claimstore.SeatKey("s", "p", "/w")
	if err != nil {
		t.Fatal(err)
	}
	session, err := claimstore.SessionKey("x")
	if err != nil {
		t.Fatal(err)
	}
	return seat, session
}
