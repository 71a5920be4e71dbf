package claimstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claimstore/claimstore/hostid"
	"github.com/claimstore/claimstore/hostid/hostidtest"
)

// Refusals say what an operator needs to act on: the owner's pid of an
// active claim, both machines of a foreign one, and whether a key moved
// under a claim or its own revision is damaged.
func TestRefusalReasons(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	s := openOn(t, root, liveHost())
	seat, session := testKeys(t)
	c := claim4100(t, s, seat, session)

	_, err := s.Acquire(context.Background(), seat, session, AcquireFields{Owner: Owner{PID: 4200, Start: "1"}})
	var ref *Refusal
	if !errors.As(err, &ref) || ref.Code != AlreadyActive || !strings.Contains(ref.Reason, "(owner pid 4100)") {
		t.Errorf("acquire over an active claim: %v; want already-active naming owner pid 4100", err)
	}

	other := openOn(t, root, &hostidtest.Host{Machine: otherMachine, Boot: bootA, Procs: map[int]string{4100: "500"}})
	err = other.Advance(context.Background(), c, Patch{State: Active})
	if !errors.As(err, &ref) || ref.Code != ForeignHost || !strings.Contains(ref.Reason, fmt.Sprintf("taken on machine %q, not on this machine %s", testMachine, otherMachine)) {
		t.Errorf("advance from another machine: %v; want foreign-host naming both machines", err)
	}

	// The claim's own head revision, damaged in place.
	writeRaw(t, s, seat, c.SeatRev+1, "{torn")
	err = s.Advance(context.Background(), c, Patch{State: Active})
	if !errors.As(err, &ref) || ref.Code != UnsafeReplacement || !strings.Contains(ref.Reason, fmt.Sprintf("its head is revision %d, not this claim's revision %d", c.SeatRev+1, c.SeatRev)) {
		t.Errorf("advance after a revision was put above the claim's: %v", err)
	}

	// The claim's own revision, damaged in place.
	seat2, _ := SeatKey("seat-2", "p", "/w")
	session2, _ := SessionKey("session-2")
	c2 := claim4100(t, s, seat2, session2)
	p := filepath.Join(s.KeyDir(seat2), RevisionName(c2.SeatRev))
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("{torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = s.Advance(context.Background(), c2, Patch{State: Active})
	if !errors.As(err, &ref) || ref.Code != UnsafeReplacement || !strings.Contains(ref.Reason, fmt.Sprintf("its head revision %d is damaged", c2.SeatRev)) {
		t.Errorf("advance after the claim's revision was damaged in place: %v", err)
	}
}

// StoppedFields that cannot be recorded (a member of the store's own, or a
// value with no JSON form) fail the classification with ErrBadPatch
// before anything is published, on every path that would stop the claim.
func TestClassifyBadStoppedFields(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fields map[string]any
	}{
		{"reserved member", map[string]any{"claimId": "x"}},
		{"no JSON form", map[string]any{"leaf": func() {}}},
	} {
		for _, path := range []string{"boot proof", "no unit"} {
			t.Run(tc.name+"/"+path, func(t *testing.T) {
				root := filepath.Join(t.TempDir(), "root")
				s := openOn(t, root, liveHost())
				seat, session := testKeys(t)
				claim4100(t, s, seat, session)
				host := &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{}}
				var units UnitLookup
				if path == "no unit" {
					host.Boot = bootA // same boot, owner gone, never spawned, no unit
					units = absentLookup{}
				}
				c := openOn(t, root, host)
				before, _ := c.Head(context.Background(), seat)
				res, err := c.Classify(context.Background(), seat, session, &ClassifyOptions{Units: units, StoppedFields: tc.fields})
				if !errors.Is(err, ErrBadPatch) {
					t.Errorf("classify = %+v, %v; want ErrBadPatch", res, err)
				}
				if after, _ := c.Head(context.Background(), seat); after.N != before.N {
					t.Errorf("seat went from revision %d to %d", before.N, after.N)
				}
			})
		}
	}
}

type absentLookup struct{}

func (absentLookup) LookupUnit(_ context.Context, name string) UnitObservation {
	return UnitObservation{Name: name, State: UnitAbsent, Detail: "test: absent"}
}

// Fencing is on claim ids as well as numbers: a claim naming the current
// head revision under another claim's id is refused, whichever store
// published that head (the store's own fast path included).
func TestFenceRefusesSameRevisionOtherClaim(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	s := openOn(t, root, liveHost())
	seat, session := testKeys(t)
	c := claim4100(t, s, seat, session)
	forged := *c
	forged.ID = "c" + strings.Repeat("f", 24)
	forged.Record = c.Record.clone()
	forged.Record.ClaimID = forged.ID
	for _, st := range []*Store{s, openOn(t, root, liveHost())} {
		var ref *Refusal
		if err := st.Advance(context.Background(), &forged, Patch{State: Active}); !errors.As(err, &ref) || ref.Code != UnsafeReplacement {
			t.Errorf("advance of claim %s at claim %s's head revision: %v; want unsafe-replacement", forged.ID, c.ID, err)
		}
	}
	if h, _ := s.Head(context.Background(), seat); h.N != c.SeatRev || h.Record.ClaimID != c.ID {
		t.Errorf("seat head after the refusals: revision %d of claim %s", h.N, h.Record.ClaimID)
	}
}

// A classification's stopped revision carries the claim's spawn marker
// whatever the caller's StoppedFields say: what may have run is the
// store's record, not the caller's (as Advance refuses to clear it).
func TestClassifyStoppedKeepsSpawnMarker(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	s := openOn(t, root, liveHost())
	seat, session := testKeys(t)
	active4100(t, s, seat, session, map[string]any{"spawnMarker": true})
	later := openOn(t, root, &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{}})
	res, err := later.Classify(context.Background(), seat, session, &ClassifyOptions{StoppedFields: map[string]any{"spawnMarker": false, "leaf": "x"}})
	if err != nil || res.Outcome != OutcomeStopped {
		t.Fatalf("classify after a reboot = %+v, %v; want stopped", res, err)
	}
	for _, k := range []Key{seat, session} {
		h, err := later.Head(context.Background(), k)
		if err != nil || h.Record == nil {
			t.Fatalf("Head(%v) = %+v, %v", k, h, err)
		}
		if !h.Record.SpawnMarker() {
			t.Errorf("%v: the stopped revision lost the spawn marker", k)
		}
		if leaf, _ := h.Record.Fields.Get("leaf"); string(leaf) != `"x"` {
			t.Errorf("%v: StoppedFields' leaf = %s, want \"x\"", k, leaf)
		}
	}
}

// lateBootFailHost reads its boot id once (the owner's judgement), then
// fails: a boot id that became unreadable during a classification.
type lateBootFailHost struct {
	hostid.Host
	reads *int
}

func (h lateBootFailHost) BootID() (string, error) {
	*h.reads++
	if *h.reads > 1 {
		return "", errors.New("no boot id")
	}
	return h.Host.BootID()
}

// A classification that cannot read this boot's id when it comes to judge
// the claim's boot judges nothing: an error, nothing published. (An owner
// judged without it is unknown, and holds, before that.)
func TestClassifyWithoutBootID(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	s := openOn(t, root, liveHost())
	seat, session := testKeys(t)
	claim4100(t, s, seat, session)
	host := &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{}}
	c := openOn(t, root, lateBootFailHost{Host: host, reads: new(int)})
	before, _ := c.Head(context.Background(), seat)
	res, err := c.Classify(context.Background(), seat, session, nil)
	if err == nil || !strings.Contains(err.Error(), "cannot read this boot's id") {
		t.Fatalf("classify without a boot id = %+v, %v; want an error saying so", res, err)
	}
	if after, _ := c.Head(context.Background(), seat); after.N != before.N {
		t.Errorf("seat went from revision %d to %d", before.N, after.N)
	}
}
