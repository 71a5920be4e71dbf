package claimstore

import (
	"context"
	"errors"
	"github.com/claimstore/claimstore/hostid/hostidtest"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/etcdbackend"
	"github.com/claimstore/claimstore/claimstore/storage"
)

// A classify --all walk's record: written with the walk's summary and
// outcome, this machine's and boot's ids and the two times, read back by
// any store of this machine on the root, replaced by the next walk's; a
// store of another machine reads its own (none here). On both backends.
func TestRecordClassifyAll(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		root := newRoot(t)
		open := func(host *hostidtest.Host, now func() time.Time) *Store {
			return openWith(t, func(o *TOpts) (*Store, error) { o.Backend = backendFor(t, root); return OpenRoot(root, o) }, &TOpts{Host: host, Now: now})
		}
		started := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
		end := started.Add(1500 * time.Millisecond)
		s := open(liveHost(), func() time.Time { return end })
		if got, err := s.LastClassifyAll(ctx); got != nil || err != nil {
			t.Fatalf("LastClassifyAll before any walk: %+v, %v", got, err)
		}
		// The store needs a root to record in: a walk of a root made by
		// an acquire.
		claim4100(t, s, seatKey(t, "s"), sessionKey(t, "x"))
		for _, tc := range []struct {
			sum     *Summary
			walkErr error
			want    ClassifyAllOutcome
			why     string
		}{
			{&Summary{Pairs: 3, Free: 2, Stopped: 1, Idle: 4, Uncertain: map[string]int{}, Refused: map[Code]int{}}, nil, ClassifyAllClean, ""},
			{&Summary{Pairs: 4, Free: 1, Uncertain: map[string]int{"a": 1, "b": 2}, Refused: map[Code]int{AlreadyActive: 1}, Orphans: 1}, nil, ClassifyAllHeld, ""},
			{&Summary{Pairs: 2, Owned: 1, Uncertain: map[string]int{}, Refused: map[Code]int{}}, nil, ClassifyAllHeld, ""},
			{&Summary{Pairs: 2, Errors: 2, Uncertain: map[string]int{}, Refused: map[Code]int{}}, nil, ClassifyAllError, "2 pairs could not be classified"},
			{nil, errors.New("listing seat: boom"), ClassifyAllError, "listing seat: boom"},
		} {
			got, err := s.RecordClassifyAll(ctx, tc.sum, tc.walkErr, started)
			if err != nil {
				t.Fatal(err)
			}
			sum := tc.sum
			if sum == nil {
				sum = &Summary{}
			}
			want := &ClassifyAllStatus{MachineID: testMachine, BootID: bootA, StartedAt: started, FinishedAt: end, Duration: 1500 * time.Millisecond,
				Outcome: tc.want, Error: tc.why, Pairs: sum.Pairs, Free: sum.Free, Stopped: sum.Stopped, Owned: sum.Owned, Errors: sum.Errors, Orphans: sum.Orphans, Idle: sum.Idle}
			for _, n := range sum.Uncertain {
				want.Uncertain += n
			}
			for _, n := range sum.Refused {
				want.Refused += n
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("recorded (-want +got):\n%s", diff)
			}
			read, err := open(liveHost(), nil).LastClassifyAll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, read); diff != "" {
				t.Errorf("read back by another store (-want +got):\n%s", diff)
			}
		}
		other := open(&hostidtest.Host{Machine: otherMachine, Boot: bootA, Procs: map[int]string{}}, nil)
		if got, err := other.LastClassifyAll(ctx); got != nil || err != nil {
			t.Errorf("another machine's store reads %+v, %v; want its own record, none", got, err)
		}
		if _, err := other.RecordClassifyAll(ctx, &Summary{}, nil, started); err != nil {
			t.Fatal(err)
		}
		if got, err := s.LastClassifyAll(ctx); err != nil || got.Outcome != ClassifyAllError || got.MachineID != testMachine {
			t.Errorf("after another machine's walk, this one's record is %+v, %v", got, err)
		}
	})
}

// A record that does not read as one — not JSON, another kind or version,
// an unknown outcome, no end, a negative duration, another machine's under
// this machine's name — is an error naming it, damaged, never a walk.
func TestLastClassifyAllDamaged(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		root := newRoot(t)
		s := openOn(t, root, liveHost())
		claim4100(t, s, seatKey(t, "s"), sessionKey(t, "x"))
		good := `{"version":1,"kind":"classify-all-status","machineId":"` + testMachine + `","bootId":"b","startedAt":"2025-01-01T00:00:00Z","finishedAt":"2025-01-01T00:00:01Z","durationNanoseconds":5,"outcome":"clean"}`
		put := func(data string) {
			t.Helper()
			name := "classify-all-" + testMachine
			if be, ok := s.be.(*etcdbackend.Backend); ok {
				if _, err := be.Client().Put(ctx, be.StatusKey(name), data); err != nil {
					t.Fatal(err)
				}
				return
			}
			dir := filepath.Join(root, storage.StatusDir)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, name+".json")
			_ = os.Remove(p)
			if err := os.WriteFile(p, []byte(data), 0o400); err != nil {
				t.Fatal(err)
			}
		}
		put(good)
		if got, err := s.LastClassifyAll(ctx); err != nil || got.Outcome != ClassifyAllClean || got.Duration != 5 {
			t.Fatalf("a good record reads %+v, %v", got, err)
		}
		for _, tc := range []struct{ data, want string }{
			{"{not json", "not a status record"},
			{strings.Replace(good, `"kind":"classify-all-status"`, `"kind":"writer-claim"`, 1), `kind "writer-claim" version 1`},
			{strings.Replace(good, `"version":1`, `"version":2`, 1), "version 2"},
			{strings.Replace(good, `"outcome":"clean"`, `"outcome":"fine"`, 1), `outcome "fine"`},
			{strings.Replace(good, `"finishedAt":"2025-01-01T00:00:01Z",`, ``, 1), "no finishedAt"},
			{strings.Replace(good, `"durationNanoseconds":5`, `"durationNanoseconds":-5`, 1), "negative duration"},
			{strings.Replace(good, testMachine, otherMachine, 1), "names machine"},
		} {
			put(tc.data)
			got, err := s.LastClassifyAll(ctx)
			var dmg *DamageError
			var pe *fs.PathError
			if !errors.As(err, &dmg) || !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(pe.Path, "status/classify-all-"+testMachine+".json") {
				t.Errorf("record %s: %+v, %v; want a damage error naming the record and saying %q", tc.data, got, err, tc.want)
			}
		}
	})
}

// A backend without status records: nothing recorded reads as none, and
// recording says why it cannot.
func TestRecordClassifyAllWithoutStatusKeeper(t *testing.T) {
	s, err := New(noStatus{openStore(t, newRoot(t), nil).be}, &Options{Host: liveHost()})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.LastClassifyAll(context.Background()); got != nil || err != nil {
		t.Errorf("LastClassifyAll: %+v, %v", got, err)
	}
	if _, err := s.RecordClassifyAll(context.Background(), &Summary{}, nil, time.Now()); !errors.Is(err, ErrNoStatus) {
		t.Errorf("RecordClassifyAll: %v, want ErrNoStatus", err)
	}
}

// noStatus is a backend with only the storage.Backend methods.
type noStatus struct{ Backend }
