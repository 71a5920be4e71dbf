package claimstore

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/claimstore/claimstore/claimstore/etcdbackend"
	"github.com/claimstore/claimstore/internal/etcdtest"
)

// tableEtcdSlices: the etcd run of the decision table checks one case in
// this many of the product (by the same name hash as tableSlice), plus the
// supervisor family; TABLE_FULL=1 checks all of it.
const tableEtcdSlices = 600

// TestDecisionTableEtcd runs the decision table over the etcd backend: the
// same cases, written as a root in the reference's format by the same
// builder, copied into etcd byte for byte (Copy), classified there by a
// store on the etcd backend, and checked against the same model
// (modelClassify) and invariants (checkInvariants) as TestDecisionTable
// checks the directory backend.
func TestDecisionTableEtcd(t *testing.T) {
	if why := etcdLeftOut(); why != "" {
		t.Skip(why)
	}
	w := newTableWorld()
	var cases []*tcase
	full := testingFullTable()
	for _, c := range tableCases() {
		h := fnv.New32a()
		h.Write([]byte(c.name()))
		if full || c.family == "supervisor" || h.Sum32()%tableEtcdSlices == 0 {
			cases = append(cases, c)
		}
	}
	dir := filepath.Join(tableBase(t), "here")
	if err := w.build(dir, cases); err != nil {
		t.Fatal(err)
	}
	src, err := OpenRoot(dir, &TOpts{Host: tableHost(w.cur), Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	c := etcdtest.Start(t, 1)
	eb, err := etcdbackend.New(c.Client(t), etcdtest.Prefix(t), testEtcdOptions)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Copy(context.Background(), eb, src.Backend())
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenRoot("etcd://"+c.Hosts()[0]+eb.Prefix(), &TOpts{Host: tableHost(w.cur), Now: fixedNow, Backend: eb})
	if err != nil {
		t.Fatal(err)
	}
	failures := 0
	steps := map[string]int{}
	for _, tc := range cases {
		m := w.modelClassify(tc)
		steps[m.step]++
		seat, session := tableKeys(tc.idx)
		opts := &ClassifyOptions{Units: mapUnits{UnitNameFor(tc.claimID('A')): string(tc.unit), UnitNameFor(tc.claimID('B')): string(tc.unit)}}
		if tc.owner == ownAdoptLive {
			opts.Adopt = &Owner{PID: 4100, Incarnation: json.RawMessage("3")}
		}
		res, err := s.Classify(context.Background(), seat, session, opts)
		var why []string
		if err != nil {
			why = append(why, fmt.Sprintf("Classify: %v", err))
		} else {
			got := gotHere(res)
			if got != m.want {
				why = append(why, fmt.Sprintf("etcd %+v, the model %+v (step %s)", got, m.want, m.step))
			}
			if g := groupNamed(tc, m, res); g != "" {
				why = append(why, g)
			}
			for _, inv := range w.checkInvariants(tc, got) {
				why = append(why, "invariant: "+inv)
			}
		}
		for _, y := range why {
			if failures++; failures <= 40 {
				t.Errorf("case %d %s: %s", tc.idx, tc.name(), y)
			}
		}
	}
	var names []string
	for k, n := range steps {
		names = append(names, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(names)
	t.Logf("%d cases (%d keys, %d revisions, %d proofs copied to etcd); steps: %s", len(cases), rep.Keys, rep.Revisions, rep.Proofs, strings.Join(names, " "))
}

func testingFullTable() bool { return os.Getenv("TABLE_FULL") != "" }
