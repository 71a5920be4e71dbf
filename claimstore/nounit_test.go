package claimstore

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/claimstore/claimstore/hostid/hostidtest"
)

// A claim that names no unit (NoUnit) is freed by decision step 9 when it
// is reserved, unmarked and its owner is gone, on the marker alone: its
// supervisor publishes the spawn marker before it starts anything, so
// nothing ran. No unit is looked up (there is none), and the observation
// says so. Marked, the same claim stays held: its process group is not
// known to be gone.
func TestNoUnitReservedClaim(t *testing.T) {
	for _, marked := range []bool{false, true} {
		host := &hostidtest.Host{Machine: compatMachine, Boot: compatBoot, Procs: map[int]string{4100: "88001"}}
		s, err := OpenRoot(filepath.Join(t.TempDir(), "root"), &TOpts{Host: host})
		if err != nil {
			t.Fatal(err)
		}
		seat, _ := SeatKey("s", "p", "/w")
		session, _ := SessionKey("nounit-reserved")
		owner := Owner{PID: 4100, Start: "77", PIDNS: initialPIDNS} // another start: gone
		c, err := s.Acquire(context.Background(), seat, session, AcquireFields{Owner: owner, NoUnit: true})
		if err != nil {
			t.Fatal(err)
		}
		if marked {
			if err := s.Advance(context.Background(), c, Patch{Fields: map[string]any{"spawnMarker": true}}); err != nil {
				t.Fatal(err)
			}
		}
		looked := false
		got, err := s.Classify(context.Background(), seat, session, &ClassifyOptions{Units: lookupFunc(func(name string) UnitObservation {
			looked = true
			return UnitObservation{Name: name, State: UnitAbsent}
		})})
		if err != nil {
			t.Fatal(err)
		}
		if looked {
			t.Errorf("marked %v: a unit was looked up for a claim that names none", marked)
		}
		if got.Unit == nil || got.Unit.Name != "" || got.Unit.State != UnitUnknown || got.Unit.Detail != "the record names no unit" {
			t.Errorf("marked %v: unit observation %+v; want unknown: the record names no unit", marked, got.Unit)
		}
		p, err := s.Pair(context.Background(), seat, session)
		if err != nil {
			t.Fatal(err)
		}
		if marked {
			if got.Outcome != OutcomeUncertain || got.Refusal == nil || got.Proof != nil || !p.Held() {
				t.Errorf("marked: classify = %s (proof %v, refusal %v), held %v; want uncertain and held", got.Outcome, got.Proof, got.Refusal, p.Held())
			}
			continue
		}
		if got.Outcome != OutcomeStopped || got.Proof == nil || got.Proof.Kind != ProofNoUnit || p.Held() {
			t.Errorf("unmarked: classify = %s (proof %v, refusal %v), held %v; want stopped with a no-unit proof", got.Outcome, got.Proof, got.Refusal, p.Held())
		}
	}
}

// lookupFunc answers unit lookups with a function.
type lookupFunc func(name string) UnitObservation

func (f lookupFunc) LookupUnit(_ context.Context, name string) UnitObservation { return f(name) }
