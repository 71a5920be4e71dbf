package claimstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/hostid/hostidtest"
)

// TestKeyHashVectors checks Key.JSON and Key.Hash against vectors the
// reference implementation computed with JSON.stringify and SHA-256.
func TestKeyHashVectors(t *testing.T) {
	data, err := os.ReadFile("../testdata/keyhash.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors []struct {
		Name string            `json:"name"`
		Key  map[string]string `json:"key"`
		JSON string            `json:"json"`
		Hash string            `json:"hash"`
	}
	if err := json.Unmarshal(data, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors) < 40 {
		t.Fatalf("only %d vectors", len(vectors))
	}
	for _, v := range vectors {
		var k Key
		if v.Key["kind"] == "seat" {
			k, err = SeatKey(v.Key["seat"], v.Key["project"], v.Key["workspace"])
		} else {
			k, err = SessionKey(v.Key["session"])
		}
		if err != nil {
			t.Errorf("%s: %v", v.Name, err)
			continue
		}
		if got := string(k.JSON()); got != v.JSON {
			t.Errorf("%s: JSON\n got %q\nwant %q", v.Name, got, v.JSON)
		}
		if got := k.Hash(); got != v.Hash {
			t.Errorf("%s: Hash = %s, want %s", v.Name, got, v.Hash)
		}
	}
}

// refDriver runs one request against the real reference implementation
// (testdata/refdriver.mjs under Node.js). Where Node.js or the reference
// is missing the test is skipped, saying why, except in CI, which must run
// it.
func refDriver(t *testing.T, req map[string]any) []map[string]any {
	t.Helper()
	node, err := exec.LookPath("node")
	ref := os.Getenv("CLAIMSTORE_REFERENCE")
	if ref == "" {
		ref, _ = filepath.Abs("../../shared/reference")
	}
	_, rerr := os.Stat(filepath.Join(ref, "stack/packages/conversation/src/claim.mjs"))
	if err != nil || rerr != nil {
		msg := "the reference implementation cannot run here: need node on PATH and the reference at $CLAIMSTORE_REFERENCE or ../shared/reference"
		if os.Getenv("CI") != "" {
			t.Fatalf("%s (node: %v, reference: %v)", msg, err, rerr)
		}
		t.Skipf("%s (node: %v, reference: %v)", msg, err, rerr)
	}
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, "../testdata/refdriver.mjs")
	cmd.Env = append(os.Environ(), "CLAIMSTORE_REFERENCE="+ref)
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("refdriver: %v\n%s\n%s", err, out, stderr.Bytes())
	}
	var resp struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("refdriver output %q: %v", out, err)
	}
	return resp.Results
}

const (
	compatMachine = "3f6c2a9e8d7b41c0a5e4f3d2c1b0a998"
	compatBoot    = "5b0c9a3e-2f1d-4c8b-9e7a-1d2c3b4a5f60"
)

func compatRequest(root string, ops ...map[string]any) map[string]any {
	return map[string]any{
		"root": root, "host": map[string]string{"machineId": compatMachine, "bootId": compatBoot},
		"processes": map[string]string{"4100": "88001"}, "now": "2026-01-01T00:00:00.000Z", "ops": ops,
	}
}

// view is what both implementations must agree on for a key.
type view struct {
	N       float64
	State   string
	Held    bool
	Damaged bool
	Record  any // the head record as a JSON value
}

func goView(t *testing.T, s *Store, k Key) view {
	t.Helper()
	h, err := s.Head(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	v := view{N: float64(h.N), State: string(h.State()), Held: h.Held(), Damaged: h.Damage != nil}
	if h.Record != nil {
		data, err := s.Backend().Read(context.Background(), k.Loc(), h.N)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &v.Record); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

func refView(r map[string]any) view {
	v := view{State: r["state"].(string), Held: r["held"].(bool), Damaged: r["damaged"].(bool), Record: r["record"]}
	v.N, _ = r["n"].(float64)
	return v
}

// TestCompatWithReference shares one root between this implementation and
// the reference, each writing steps of the same claims, and requires both to
// read every key the same after every step.
func TestCompatWithReference(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	host := &hostidtest.Host{Machine: compatMachine, Boot: compatBoot, Procs: map[int]string{4100: "88001"}}
	s, err := OpenRoot(root, &TOpts{Host: host})
	if err != nil {
		t.Fatal(err)
	}
	seat, _ := SeatKey("seat-<1>", "proj & co", "/home/dév/ws\u2028")
	session, _ := SessionKey("sess\t\"0001\"")
	refSeat := map[string]string{"seat": seat.Seat, "project": seat.Project, "workspace": seat.Workspace}
	agree := func(step string) {
		t.Helper()
		res := refDriver(t, compatRequest(root,
			map[string]any{"op": "head", "seat": refSeat},
			map[string]any{"op": "head", "session": session.Session}))
		for i, k := range []Key{seat, session} {
			if res[i]["ok"] != true {
				t.Fatalf("%s: reference head: %v", step, res[i])
			}
			if diff := cmp.Diff(refView(res[i]), goView(t, s, k)); diff != "" {
				t.Errorf("%s: %s (-reference +this):\n%s", step, k, diff)
			}
		}
	}

	// This implementation acquires and advances, with a member of its own
	// and an owner member the reference does not know (pidns).
	owner := Owner{PID: 4100, Start: "88001", Incarnation: json.RawMessage("1"), PIDNS: initialPIDNS}
	c, err := s.Acquire(context.Background(), seat, session, AcquireFields{Owner: owner, Fields: map[string]any{"generation": 1, "pins": []string{"a"}, "bindingId": "b<&>"}})
	if err != nil {
		t.Fatal(err)
	}
	agree("go acquire")
	if err := s.Advance(context.Background(), c, Patch{State: Active, Fields: map[string]any{"spawnMarker": true, "futureField": map[string]any{"x": []int{1, 2}}}}); err != nil {
		t.Fatal(err)
	}
	agree("go advance")

	// The reference advances the same claim (rebuilt from the heads) and
	// must carry this implementation's members forward.
	res := refDriver(t, compatRequest(root, map[string]any{"op": "advance", "claimId": c.ID, "seat": refSeat, "session": session.Session,
		"patch": map[string]any{"state": "stopping", "stop": map[string]any{"by": "ref"}}}))
	if res[0]["ok"] != true {
		t.Fatalf("reference advance: %v", res[0])
	}
	agree("reference advance")
	h, err := s.Head(context.Background(), session)
	if err != nil || h.Record == nil {
		t.Fatalf("head after the reference's advance: %v %v", err, h.Damage)
	}
	if raw, ok := h.Record.Fields.Get("futureField"); !ok || string(raw) != `{"x":[1,2]}` {
		t.Errorf("futureField after the reference's advance = %s, %v", raw, ok)
	}
	if raw, _ := h.Record.Fields.Get(fieldOwner); string(raw) != `{"pid":4100,"start":"88001","incarnation":1,"pidns":"`+initialPIDNS+`"}` {
		t.Errorf("owner after the reference's advance = %s, want pidns carried forward unchanged", raw)
	}

	// This implementation continues the claim from the reference's heads:
	// classification adopts the same owner and hands the claim back.
	got, err := s.Classify(context.Background(), seat, session, &ClassifyOptions{Adopt: &owner})
	if err != nil || got.Outcome != OutcomeOwned {
		t.Fatalf("classify = %+v, %v; want owned", got, err)
	}
	if err := s.Release(context.Background(), got.Claim, NewProof(ProofCohort, "cohort-1")); err != nil {
		t.Fatal(err)
	}
	agree("go release")

	// The reference acquires the freed pair; this implementation reads it
	// and refuses a second claim exactly as the reference would.
	res = refDriver(t, compatRequest(root, map[string]any{"op": "acquire", "seat": refSeat, "session": session.Session,
		"fields": map[string]any{"claimId": "c0123456789abcdef01234567", "owner": map[string]any{"pid": 4100, "start": "88001", "incarnation": 2}, "generation": 2}}))
	if res[0]["ok"] != true {
		t.Fatalf("reference acquire: %v", res[0])
	}
	agree("reference acquire")
	if _, err := s.Acquire(context.Background(), seat, session, AcquireFields{Owner: owner}); err == nil {
		t.Fatal("acquire over the reference's claim succeeded")
	} else if r, ok := err.(*Refusal); !ok || r.Code != AlreadyActive {
		t.Fatalf("acquire over the reference's claim: %v, want already-active", err)
	}
	// And the reference refuses this implementation's acquire attempt's
	// twin: both agree the pair is held.
	res = refDriver(t, compatRequest(root, map[string]any{"op": "acquire", "seat": refSeat, "session": session.Session,
		"fields": map[string]any{"owner": map[string]any{"pid": 4100, "start": "88001", "incarnation": 3}}}))
	if res[0]["ok"] != false || res[0]["code"] != string(AlreadyActive) {
		t.Fatalf("reference acquire on a held pair: %v", res[0])
	}

	// A torn revision written by hand reads damaged in both.
	res = refDriver(t, compatRequest(root, map[string]any{"op": "write", "path": filepath.Join(string(KindSession), session.Hash(), RevisionName(h.N+3)), "content": "{\"version\":1,\n"}))
	if res[0]["ok"] != true {
		t.Fatalf("reference write: %v", res[0])
	}
	agree("torn head")
}

// TestCompatNoUnitClaim: a claim taken with NoUnit (claimctl run --no-unit)
// records unitName null from its first revision; the reference reads its
// heads as this implementation does, and both hold it, spawn-marked, once
// its owner is gone (the marker with no recorded run proves nothing over),
// whatever a unit lookup would say.
func TestCompatNoUnitClaim(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	host := &hostidtest.Host{Machine: compatMachine, Boot: compatBoot, Procs: map[int]string{4100: "88001"}}
	s, err := OpenRoot(root, &TOpts{Host: host})
	if err != nil {
		t.Fatal(err)
	}
	seat, _ := SeatKey("s", "p", "/w")
	session, _ := SessionKey("nounit")
	refSeat := map[string]string{"seat": seat.Seat, "project": seat.Project, "workspace": seat.Workspace}
	agree := func(step string) {
		t.Helper()
		res := refDriver(t, compatRequest(root,
			map[string]any{"op": "head", "seat": refSeat},
			map[string]any{"op": "head", "session": session.Session}))
		for i, k := range []Key{seat, session} {
			if res[i]["ok"] != true {
				t.Fatalf("%s: reference head: %v", step, res[i])
			}
			if diff := cmp.Diff(refView(res[i]), goView(t, s, k)); diff != "" {
				t.Errorf("%s: %s (-reference +this):\n%s", step, k, diff)
			}
		}
	}
	// The owner's pid runs another process (another start time): gone for
	// both.
	owner := Owner{PID: 4100, Start: "77", PIDNS: initialPIDNS}
	if _, err := s.Acquire(context.Background(), seat, session, AcquireFields{Owner: owner, NoUnit: true, UnitName: "x.service"}); err == nil {
		t.Fatal("NoUnit with a UnitName was accepted")
	}
	c, err := s.Acquire(context.Background(), seat, session, AcquireFields{Owner: owner, NoUnit: true})
	if err != nil {
		t.Fatal(err)
	}
	if raw, ok := c.Record.Fields.Get(fieldUnitName); !ok || string(raw) != "null" || c.Record.UnitName() != "" {
		t.Fatalf("unitName of a NoUnit claim = %s (%v); want null", raw, ok)
	}
	agree("go acquire")
	if err := s.Advance(context.Background(), c, Patch{Fields: map[string]any{"spawnMarker": true}}); err != nil {
		t.Fatal(err)
	}
	agree("go spawn marker")

	res := refDriver(t, compatRequest(root, map[string]any{"op": "classify", "seat": refSeat, "session": session.Session}))
	if res[0]["ok"] != true || res[0]["state"] != "uncertain" {
		t.Fatalf("reference classify of a spawn-marked claim naming no unit = %v; want uncertain", res[0])
	}
	agree("reference classify")
	got, err := s.Classify(context.Background(), seat, session, &ClassifyOptions{Units: absentUnits{}})
	if err != nil || got.Outcome != OutcomeUncertain || got.Refusal == nil || got.Unit == nil || got.Unit.Name != "" {
		t.Fatalf("classify = %+v, %v; want uncertain, held, no unit named", got, err)
	}
	agree("go classify")
}

// absentUnits says every unit is absent.
type absentUnits struct{}

func (absentUnits) LookupUnit(_ context.Context, name string) UnitObservation {
	return UnitObservation{Name: name, State: UnitAbsent, Detail: "absent (test)"}
}

func writeFile0400(name, content string) error { return os.WriteFile(name, []byte(content), 0o400) }

// TestCompatPrunedRoot: a root this implementation pruned reads the same in
// the reference for every key that remains (a compacted seat: the same
// head; a removed session: no revisions), and the reference claims a
// compacted seat and a removed session again, from the seat's next number
// and the session's first, which this implementation then reads as held.
// A tombstone an interrupted prune left is the one designed difference:
// the reference reads it as damaged (held, so that it never links above
// it), this implementation as free; the next prune removes the key.
func TestCompatPrunedRoot(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "root")
	host := &hostidtest.Host{Machine: compatMachine, Boot: compatBoot, Procs: map[int]string{4100: "88001"}}
	clk := newClock()
	s, err := OpenRoot(root, &TOpts{Host: host, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	owner := Owner{PID: 4100, Start: "88001", PIDNS: initialPIDNS}
	seats := []Key{}
	for _, name := range []string{"a", "b"} {
		k, _ := SeatKey(name, "p", "/w")
		seats = append(seats, k)
	}
	var sessions []Key
	for i := range 6 {
		k, _ := SessionKey(fmt.Sprintf("s-%d", i))
		sessions = append(sessions, k)
		c, err := s.Acquire(ctx, seats[i%2], k, AcquireFields{Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Advance(ctx, c, Patch{State: Active}); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, c, NewProof(ProofCohort, "done")); err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			clk.add(40 * day) // s-0..s-3 are old, s-4 and s-5 young
		}
	}
	clk.add(10 * day)
	refSeat := func(k Key) map[string]any {
		return map[string]any{"seat": map[string]string{"seat": k.Seat, "project": k.Project, "workspace": k.Workspace}}
	}
	agree := func(step string, keys []Key) {
		t.Helper()
		var ops []map[string]any
		for _, k := range keys {
			op := map[string]any{"op": "head"}
			if k.Kind == KindSeat {
				op["seat"] = refSeat(k)["seat"]
			} else {
				op["session"] = k.Session
			}
			ops = append(ops, op)
		}
		res := refDriver(t, compatRequest(root, ops...))
		for i, k := range keys {
			if res[i]["ok"] != true {
				t.Fatalf("%s: reference head of %s: %v", step, k, res[i])
			}
			if diff := cmp.Diff(refView(res[i]), goView(t, s, k)); diff != "" {
				t.Errorf("%s: %s (-reference +this):\n%s", step, k, diff)
			}
		}
	}
	all := append(append([]Key{}, seats...), sessions...)
	agree("before prune", all)
	rep, err := s.Prune(ctx, &PruneOptions{OlderThan: 30 * day})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Removed != 4 || rep.Compacted != 2 {
		t.Fatalf("prune report %+v, want 4 sessions removed and 2 seats compacted", rep)
	}
	agree("after prune", all)

	// The reference claims a compacted seat and a removed session.
	res := refDriver(t, compatRequest(root, map[string]any{"op": "acquire", "seat": refSeat(seats[0])["seat"], "session": sessions[0].Session,
		"fields": map[string]any{"claimId": "c0123456789abcdef01234567", "owner": map[string]any{"pid": 4100, "start": "88001", "incarnation": 2}}}))
	if res[0]["ok"] != true {
		t.Fatalf("reference acquire on a pruned root: %v", res[0])
	}
	agree("reference acquire", all)
	if h, _ := s.Head(ctx, sessions[0]); h.N != 1 || !h.Held() {
		t.Errorf("session claimed again by the reference: head %d held=%v, want r1 held", h.N, h.Held())
	}
	mustCheckClean(t, s)

	// A tombstone left by a prune cut short.
	h, err := s.Head(ctx, sessions[4])
	if err != nil {
		t.Fatal(err)
	}
	clk.add(40 * day)
	if _, _, won, err := s.publishTombstone(ctx, h); err != nil || !won {
		t.Fatalf("tombstone: %v %v", won, err)
	}
	res = refDriver(t, compatRequest(root, map[string]any{"op": "head", "session": sessions[4].Session}))
	if rv := refView(res[0]); !rv.Held || !rv.Damaged || rv.N != 4 {
		t.Errorf("reference on a tombstone: %+v; want damaged and held at r4", rv)
	}
	if gv := goView(t, s, sessions[4]); gv.Held || gv.N != 4 {
		t.Errorf("this implementation on a tombstone: %+v; want free at r4", gv)
	}
	if _, err := s.Prune(ctx, &PruneOptions{OlderThan: 30 * day}); err != nil {
		t.Fatal(err)
	}
	agree("tombstone pruned", []Key{sessions[4]})
	if h, _ := s.Head(ctx, sessions[4]); h.N != 0 {
		t.Errorf("tombstoned session after the next prune: head %d, want removed", h.N)
	}
}
