package claimstore

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/claimstore/claimstore/hostid/hostidtest"
)

// A claim that names no unit (NoUnit) is never freed by decision step 9,
// even reserved, unmarked and with its owner gone: the step frees on an
// absent unit, and a claim that names none has no unit to look up. Its
// observation is unknown ("the record names no unit"), the lookup is not
// asked, and the pair is left uncertain, held.
func TestNoUnitReservedClaimStaysHeld(t *testing.T) {
	host := &hostidtest.Host{Machine: compatMachine, Boot: compatBoot, Procs: map[int]string{4100: "88001"}}
	s, err := OpenRoot(filepath.Join(t.TempDir(), "root"), &TOpts{Host: host})
	if err != nil {
		t.Fatal(err)
	}
	seat, _ := SeatKey("s", "p", "/w")
	session, _ := SessionKey("nounit-reserved")
	owner := Owner{PID: 4100, Start: "77", PIDNS: initialPIDNS} // another start: gone
	if _, err := s.Acquire(context.Background(), seat, session, AcquireFields{Owner: owner, NoUnit: true}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Classify(context.Background(), seat, session, &ClassifyOptions{Units: absentUnits{}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Outcome != OutcomeUncertain || got.Refusal == nil || got.Proof != nil {
		t.Fatalf("classify = %s (proof %v, refusal %v); want uncertain and held", got.Outcome, got.Proof, got.Refusal)
	}
	if got.Unit == nil || got.Unit.Name != "" || got.Unit.State != UnitUnknown || got.Unit.Detail != "the record names no unit" {
		t.Errorf("unit observation %+v; want unknown: the record names no unit", got.Unit)
	}
	p, err := s.Pair(context.Background(), seat, session)
	if err != nil || !p.Held() {
		t.Fatalf("pair after classify: held %v, %v; want held", p != nil && p.Held(), err)
	}
}
