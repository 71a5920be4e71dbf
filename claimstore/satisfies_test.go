package claimstore

import (
	"encoding/json"
	"testing"
)

// A patch with a proof (a release) is satisfied only by a stopped record
// carrying that proof: a held record is not released, whatever proof it
// carries, and a stopped record without a proof recorded none. Fields must
// be there with the patch's values.
func TestRecordSatisfies(t *testing.T) {
	done := NewProof(ProofCohort, "done")
	withGen := Fields{}
	withGen.Set("generation", json.RawMessage(` 2 `))
	for _, tc := range []struct {
		name string
		rec  Record
		p    Patch
		want bool
	}{
		{"the release it recorded", Record{State: Stopped, Proof: done}, Patch{State: Stopped, Proof: done}, true},
		{"the release's proof alone", Record{State: Stopped, Proof: done}, Patch{Proof: NewProof(ProofCohort, "done")}, true},
		{"a held record with the proof", Record{State: Active, Proof: done}, Patch{Proof: done}, false},
		{"an uncertain record with the proof", Record{State: Uncertain, Proof: done}, Patch{Proof: done}, false},
		{"stopped without a proof", Record{State: Stopped}, Patch{Proof: done}, false},
		{"another ref", Record{State: Stopped, Proof: done}, Patch{Proof: NewProof(ProofCohort, "other")}, false},
		{"another kind", Record{State: Stopped, Proof: done}, Patch{Proof: NewProof(ProofPruned, "done")}, false},
		{"a step after a release", Record{State: Stopped, Proof: done}, Patch{State: Active}, false},
		{"the state", Record{State: Active}, Patch{State: Active}, true},
		{"another state", Record{State: Active}, Patch{State: Uncertain}, false},
		{"the field, compacted", Record{State: Active, Fields: withGen}, Patch{Fields: map[string]any{"generation": 2}}, true},
		{"another value", Record{State: Active, Fields: withGen}, Patch{Fields: map[string]any{"generation": 3}}, false},
		{"a missing field", Record{State: Active, Fields: withGen}, Patch{Fields: map[string]any{"leaf": "x"}}, false},
		{"a value that cannot be encoded", Record{State: Active, Fields: withGen}, Patch{Fields: map[string]any{"generation": func() {}}}, false},
	} {
		if got := tc.rec.Satisfies(tc.p); got != tc.want {
			t.Errorf("%s: %+v satisfies %+v = %v, want %v", tc.name, tc.rec, tc.p, got, tc.want)
		}
	}
}
