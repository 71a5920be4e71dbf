package claimstore

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/hostid"
	"github.com/claimstore/claimstore/hostid/hostidtest"
)

const (
	hostPIDNS      = initialPIDNS   // the supervisor's namespace in these tests
	containerPIDNS = "4:4026532301" // where a second classify runs
)

// TestOwnerPIDNSRecord: the owner's pidns is written after the members the
// reference knows (whose bytes do not change), decoded as an optional
// string, and passed to hostid.
func TestOwnerPIDNSRecord(t *testing.T) {
	for _, tt := range []struct {
		owner Owner
		want  string
	}{
		{Owner{PID: 4100, Start: "500", Boot: bootA, Incarnation: json.RawMessage("7")},
			`{"pid":4100,"start":"500","boot":"` + bootA + `","incarnation":7}`},
		{Owner{PID: 4100, Start: "500", Boot: bootA, Incarnation: json.RawMessage("7"), PIDNS: hostPIDNS},
			`{"pid":4100,"start":"500","boot":"` + bootA + `","incarnation":7,"pidns":"` + hostPIDNS + `"}`},
	} {
		raw, err := jsJSON(tt.owner)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, string(raw)); diff != "" {
			t.Errorf("owner bytes (-want +got):\n%s", diff)
		}
		r := &Record{}
		r.Fields.Set(fieldOwner, raw)
		got, err := r.Owner()
		if err != nil {
			t.Fatalf("Owner(%s): %v", raw, err)
		}
		if diff := cmp.Diff(tt.owner, got); diff != "" {
			t.Errorf("Owner(%s) (-want +got):\n%s", raw, diff)
		}
		if id := got.Identity(); id.PIDNS != tt.owner.PIDNS {
			t.Errorf("Identity().PIDNS = %q, want %q", id.PIDNS, tt.owner.PIDNS)
		}
	}
	for _, bad := range []string{`1`, `true`, `{"dev":4}`, `["4:1"]`} {
		r := &Record{}
		r.Fields.Set(fieldOwner, []byte(`{"pid":4100,"start":"500","pidns":`+bad+`}`))
		if o, err := r.Owner(); err == nil || !strings.Contains(err.Error(), "pidns") {
			t.Errorf("owner with pidns %s = %+v, %v: want an error naming pidns", bad, o, err)
		}
	}
	r := &Record{}
	r.Fields.Set(fieldOwner, []byte(`{"pid":4100,"start":"500","pidns":null}`))
	if o, err := r.Owner(); err != nil || o.PIDNS != "" {
		t.Errorf("owner with pidns null = %+v, %v: want none recorded", o, err)
	}
}

// TestSelfRecordsPIDNS: Store.Self records the namespace hostid reads.
func TestSelfRecordsPIDNS(t *testing.T) {
	s := openOn(t, filepath.Join(t.TempDir(), "root"), hostid.Override{Host: hostid.System, PIDNS: containerPIDNS})
	o, err := s.Self(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.PIDNS != containerPIDNS {
		t.Errorf("Self().PIDNS = %q, want %q", o.PIDNS, containerPIDNS)
	}
}

// TestClassifyOwnerInAnotherPIDNamespace is issue 9: a reserved claim with
// no spawn marker, whose unit lookup says absent, is freed only once its
// owner is proven gone. Classified from another PID namespace, where the
// owner's pid does not exist, the owner is not gone: the claim stays held
// and nothing is published.
func TestClassifyOwnerInAnotherPIDNamespace(t *testing.T) {
	ctx := context.Background()
	owner := Owner{PID: 4100, Start: "500", Boot: bootA, PIDNS: hostPIDNS}
	for _, tt := range []struct {
		name   string
		owner  Owner
		judge  string // the classifying host's namespace
		reason string
	}{
		{"recorded in another namespace", owner, containerPIDNS, "another PID namespace"},
		{"recorded without a namespace, judged from a container", Owner{PID: 4100, Start: "500", Boot: bootA}, containerPIDNS, "recorded without a PID namespace"},
		{"recorded in a container, judged from the host", Owner{PID: 4100, Start: "500", Boot: bootA, PIDNS: containerPIDNS}, "", "another PID namespace"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "root")
			w := openOn(t, root, liveHost())
			seat, session := testKeys(t)
			if _, err := w.Acquire(context.Background(), seat, session, AcquireFields{Owner: tt.owner}); err != nil {
				t.Fatal(err)
			}
			// Pid 4100 does not exist where classify runs.
			s := openOn(t, root, &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{}, PIDNS: tt.judge})
			res, err := s.Classify(ctx, seat, session, &ClassifyOptions{Units: mapUnits{}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Owner != hostid.Unknown || !strings.Contains(res.OwnerReason, tt.reason) {
				t.Errorf("owner %s (%s), want unknown saying %q", res.Owner, res.OwnerReason, tt.reason)
			}
			if res.Outcome != OutcomeReserved || res.Refusal == nil || res.Refusal.Code != AlreadyActive {
				t.Errorf("outcome %s, refusal %+v: want reserved, already-active", res.Outcome, res.Refusal)
			}
			if len(res.Published) != 0 {
				t.Errorf("published %v over a claim whose owner cannot be judged", res.Published)
			}
			p, err := s.Pair(context.Background(), seat, session)
			if err != nil {
				t.Fatal(err)
			}
			if !p.Held() || p.Seat.N != 1 || p.Session.N != 1 {
				t.Errorf("pair after classify: held %v, r%d/r%d; want held at r1/r1", p.Held(), p.Seat.N, p.Session.N)
			}
		})
	}
	// Control: judged from the owner's own namespace, the same claim is
	// proven over (owner gone, no marker, no unit) and freed.
	t.Run("same namespace frees it", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "root")
		w := openOn(t, root, liveHost())
		seat, session := testKeys(t)
		if _, err := w.Acquire(context.Background(), seat, session, AcquireFields{Owner: owner}); err != nil {
			t.Fatal(err)
		}
		s := openOn(t, root, &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{}, PIDNS: hostPIDNS})
		res, err := s.Classify(ctx, seat, session, &ClassifyOptions{Units: mapUnits{}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != OutcomeStopped || res.Proof == nil || res.Proof.Kind != ProofNoUnit {
			t.Errorf("outcome %s, proof %+v: want stopped with a no-unit proof", res.Outcome, res.Proof)
		}
	})
}

// TestClassifyZombieOwner: an owner that exited but was not reaped holds
// its claim.
func TestClassifyZombieOwner(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	w := openOn(t, root, liveHost())
	seat, session := testKeys(t)
	claim4100(t, w, seat, session)
	h := liveHost()
	h.Zombies = map[int]bool{4100: true}
	res, err := openOn(t, root, h).Classify(context.Background(), seat, session, &ClassifyOptions{Units: mapUnits{}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Owner == hostid.Gone || !strings.Contains(res.OwnerReason, "not yet reaped") || len(res.Published) != 0 {
		t.Errorf("owner %s (%s), published %v: want held, not yet reaped, nothing published", res.Owner, res.OwnerReason, res.Published)
	}
}
