package claimstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/hostid"
)

func TestOpenRoot(t *testing.T) {
	tests := []struct {
		name       string
		setup      func(t *testing.T, root string)
		wantUnsafe bool // the error wraps ErrUnsafeRoot
		wantErr    bool
	}{
		{"missing root, parent exists", func(t *testing.T, root string) {}, false, false},
		{"private directory", func(t *testing.T, root string) { mkdir(t, root, 0o700) }, false, false},
		{"0755 directory", func(t *testing.T, root string) { mkdir(t, root, 0o755) }, false, false},
		{"symlink to a private directory", func(t *testing.T, root string) {
			target := filepath.Join(t.TempDir(), "real")
			mkdir(t, target, 0o700)
			if err := os.Symlink(target, root); err != nil {
				t.Fatal(err)
			}
		}, true, true},
		{"group-writable", func(t *testing.T, root string) { mkdir(t, root, 0o770) }, true, true},
		{"world-writable sticky", func(t *testing.T, root string) { mkdir(t, root, 0o777|fs.ModeSticky) }, true, true},
		{"a regular file", func(t *testing.T, root string) {
			if err := os.WriteFile(root, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, true, true},
		{"parent missing", func(t *testing.T, root string) { os.RemoveAll(filepath.Dir(root)) }, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "parent", "root")
			mkdir(t, filepath.Dir(root), 0o700)
			tt.setup(t, root)
			before := lstatMode(root)
			s, err := OpenRoot(root, &TOpts{Host: thisHost})
			if (err != nil) != tt.wantErr {
				t.Fatalf("Open: %v, want error %v", err, tt.wantErr)
			}
			if errors.Is(err, ErrUnsafeRoot) != tt.wantUnsafe {
				t.Errorf("Open: %v; wraps ErrUnsafeRoot: %v, want %v", err, !tt.wantUnsafe, tt.wantUnsafe)
			}
			if err != nil && !strings.Contains(err.Error(), root) {
				t.Errorf("Open error %q does not name the root %s", err, root)
			}
			if err == nil && s.Root() != root {
				t.Errorf("Root() = %s, want %s", s.Root(), root)
			}
			if after := lstatMode(root); after != before {
				t.Errorf("Open touched the root: mode %s before, %s after", before, after)
			}
		})
	}
	if _, err := OpenRoot("", nil); err == nil {
		t.Error("Open with an empty root succeeded")
	}
}

func mkdir(t *testing.T, dir string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

func lstatMode(path string) string {
	fi, err := os.Lstat(path)
	if err != nil {
		return "absent"
	}
	return fi.Mode().String()
}

// TestLifecycle runs acquire → active → release and checks every revision
// written, the heads and the pair state at each step.
func TestLifecycle(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		s := openStore(t, newRoot(t), nil)
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		f := fields(t, s)
		f.Fields = map[string]any{"bindingId": "b<1>", "pins": map[string]int{"a": 1}, "generation": 2}
		c, err := s.Acquire(context.Background(), seat, session, f)
		if err != nil {
			t.Fatal(err)
		}
		if !ValidClaimID(c.ID) || c.SeatRev != 1 || c.SessionRev != 1 || c.Seat != seat || c.Session != session {
			t.Fatalf("claim = %+v", c)
		}
		checkPair(t, s, seat, session, Reserved)
		if err := s.Advance(context.Background(), c, Patch{State: Active, Fields: map[string]any{"spawnMarker": "m-1", "invocationId": "inv"}}); err != nil {
			t.Fatal(err)
		}
		checkPair(t, s, seat, session, Active)
		if err := s.Release(context.Background(), c, NewProof(ProofCohort, "cohort-1")); err != nil {
			t.Fatal(err)
		}
		checkPair(t, s, seat, session, Stopped)
		if c.SeatRev != 3 || c.SessionRev != 3 {
			t.Errorf("claim revisions after release = %d, %d; want 3, 3", c.SeatRev, c.SessionRev)
		}

		owner, _ := json.Marshal(f.Owner)
		wantRec := func(k Key, n int, state, marker, inv, proof string) string {
			return `{"version":1,"kind":"writer-claim","claimId":"` + c.ID + `","bindingId":"b<1>","pins":{"a":1},` +
				`"host":{"machineId":"` + testMachine + `","bootId":"` + testBoot + `"},"owner":` + string(owner) +
				`,"unitName":"mosaic-chat-` + c.ID + `","spawnMarker":` + marker + `,"invocationId":` + inv +
				`,"engine":null,"shim":null,"generation":2,"state":"` + state + `","proof":` + proof +
				`,"stop":null,"prior":null,"execution":null,"cohortRef":null` +
				`,"pair":{"seat":` + string(seat.JSON()) + `,"session":` + string(session.JSON()) + `}` +
				`,"key":` + string(k.JSON()) +
				`,"revision":` + fmt.Sprint(n) + `,"writtenAt":"2024-05-06T07:08:09.010Z"}` + "\n"
		}
		for _, k := range []Key{seat, session} {
			want := map[string][]byte{
				RevisionName(1): []byte(wantRec(k, 1, "reserved", "false", "null", "null")),
				RevisionName(2): []byte(wantRec(k, 2, "active", `"m-1"`, `"inv"`, "null")),
				RevisionName(3): []byte(wantRec(k, 3, "stopped", `"m-1"`, `"inv"`, `{"kind":"cohortProof","ref":"cohort-1"}`)),
			}
			if diff := cmp.Diff(want, dirFiles(t, s, k), cmp.Transformer("string", func(b []byte) string { return string(b) })); diff != "" {
				t.Errorf("%v history (-want +got):\n%s", k, diff)
			}
		}
		// A released pair is free: a new claim takes it at revision 4.
		c2 := mustAcquire(t, s, seat, session)
		if c2.ID == c.ID || c2.SeatRev != 4 || c2.SessionRev != 4 {
			t.Errorf("second claim = %+v", c2)
		}
		// The first claim is over; it can no longer advance, nor be released
		// again.
		if err := s.Advance(context.Background(), c, Patch{State: Active}); !errors.Is(err, ErrReleased) {
			t.Errorf("Advance of a released claim after a new acquire: %v, want ErrReleased", err)
		}
		if err := s.Release(context.Background(), c, NewProof(ProofCohort, "again")); !errors.Is(err, ErrReleased) {
			t.Errorf("second Release: %v, want ErrReleased", err)
		}
	})
}

func checkPair(t *testing.T, s *Store, seat, session Key, want State) {
	t.Helper()
	p, err := s.Pair(context.Background(), seat, session)
	if err != nil {
		t.Fatal(err)
	}
	if p.State() != want || p.Held() != (want != Stopped) {
		t.Errorf("pair state %s held %v; want %s", p.State(), p.Held(), want)
	}
}

func isRefusal(err error, code Code) bool {
	var r *Refusal
	return errors.As(err, &r) && r.Code == code
}

// TestUnknownFieldsCarriedForward: a revision written by a newer writer
// with members this implementation does not know is advanced, and the next
// revision carries those members (compacted, byte for byte) and every
// reference field unchanged.
func TestUnknownFieldsCarriedForward(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		s := openStore(t, newRoot(t), nil)
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		for _, k := range []Key{seat, session} {
			rec := refRecord(k, 1, testClaimID, "reserved").
				set("futureField", `{ "a" : [1, 2] }`).
				set("host", `{"machineId":"`+testMachine+`","bootId":"`+testBoot+`","arch":"riscv"}`)
			writeRev(t, s, k, 1, rec.bytes())
		}
		sh, err := s.Head(context.Background(), seat)
		if err != nil || sh.Record == nil {
			t.Fatalf("Head: %+v, %v", sh, err)
		}
		c := &Claim{ID: testClaimID, Seat: seat, Session: session, SeatRev: 1, SessionRev: 1, Record: sh.Record}
		if err := s.Advance(context.Background(), c, Patch{State: Active}); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(context.Background(), c, NewProof(ProofNoUnit, "")); err != nil {
			t.Fatal(err)
		}
		for _, k := range []Key{seat, session} {
			for n := uint64(2); n <= 3; n++ {
				got, err := decodeObject(readRev(t, s, k, n))
				if err != nil {
					t.Fatal(err)
				}
				in, _ := decodeObject(readRev(t, s, k, 1))
				for _, m := range in {
					switch m.Name {
					case "state", "proof", "revision", "writtenAt":
						continue
					}
					v, ok := got.Get(m.Name)
					if !ok || !bytes.Equal(compact(v), compact(m.Value)) {
						t.Errorf("%v revision %d: member %s = %s, want %s carried forward", k, n, m.Name, v, compact(m.Value))
					}
				}
				if v, _ := got.Get("futureField"); string(v) != `{"a":[1,2]}` {
					t.Errorf("%v revision %d: futureField = %s", k, n, v)
				}
			}
		}
	})
}

// TestBarrierSequence: every operation meets the barriers in the documented
// order, with the key, revision and claim of each point.
//
// A step meets them in this order: both temporaries written (seat, then
// session), then both synced (at once in a concurrent store), then the
// seat revision linked and its directory synced, then the session's.
func TestBarrierSequence(t *testing.T) {
	var log barrierLog
	s := openStore(t, newRoot(t), &TOpts{Barrier: log.hook, Sequential: true})
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	at := func(b Barrier, k Key, n uint64, id string) Point {
		return Point{Barrier: b, Key: k, Revision: n, ClaimID: id}
	}
	step := func(n uint64, id string) []Point {
		return []Point{
			at(BarrierTempWritten, seat, n, id), at(BarrierTempWritten, session, n, id),
			at(BarrierTempSynced, seat, n, id), at(BarrierTempSynced, session, n, id),
			at(BarrierLinked, seat, n, id), at(BarrierDirSynced, seat, n, id),
			at(BarrierBetweenKeys, seat, n, id),
			at(BarrierLinked, session, n, id), at(BarrierDirSynced, session, n, id),
		}
	}
	c := mustAcquire(t, s, seat, session)
	if diff := cmp.Diff(step(1, c.ID), log.take()); diff != "" {
		t.Errorf("Acquire barriers (-want +got):\n%s", diff)
	}
	if err := s.Advance(context.Background(), c, Patch{State: Active}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(step(2, c.ID), log.take()); diff != "" {
		t.Errorf("Advance barriers (-want +got):\n%s", diff)
	}
	if err := s.Release(context.Background(), c, NewProof(ProofNoUnit, "")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(step(3, c.ID), log.take()); diff != "" {
		t.Errorf("Release barriers (-want +got):\n%s", diff)
	}
	// Reads meet no barrier.
	if _, err := s.Pair(context.Background(), seat, session); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Revisions(context.Background(), seat); err != nil {
		t.Fatal(err)
	}
	if got := log.take(); len(got) != 0 {
		t.Errorf("reads met barriers: %v", got)
	}
}

// TestBarrierOrderConcurrent: a store that overlaps a step's work meets
// the barriers in an order that varies, but never breaks the one order the
// protocol needs: every revision's temporary synced before its link, the
// seat linked and its directory synced before the step goes between the
// keys, and only then the session linked and synced.
func TestBarrierOrderConcurrent(t *testing.T) {
	var log barrierLog
	s := openStore(t, newRoot(t), &TOpts{Barrier: log.hook})
	for i := range 20 {
		seat, session := seatKey(t, fmt.Sprint("s", i)), sessionKey(t, fmt.Sprint("x", i))
		c := mustAcquire(t, s, seat, session)
		if err := s.Advance(context.Background(), c, Patch{State: Active}); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(context.Background(), c, NewProof(ProofNoUnit, "")); err != nil {
			t.Fatal(err)
		}
		for n := uint64(1); n <= 3; n++ {
			var seen []Point
			for _, p := range log.points {
				if p.Revision == n && (p.Key == seat || p.Key == session) {
					seen = append(seen, p)
				}
			}
			pos := map[string]int{}
			for i, p := range seen {
				pos[string(p.Key.Kind)+"/"+string(p.Barrier)] = i
			}
			if len(pos) != 9 {
				t.Fatalf("revision %d: barriers %v, want 9 distinct", n, seen)
			}
			for _, edge := range [][2]string{
				{"seat/temp-written", "seat/temp-synced"}, {"seat/temp-synced", "seat/linked"},
				{"seat/linked", "seat/dir-synced"}, {"seat/dir-synced", "seat/between-keys"},
				{"seat/between-keys", "session/linked"},
				{"session/temp-written", "session/temp-synced"}, {"session/temp-synced", "session/linked"},
				{"session/linked", "session/dir-synced"},
			} {
				if pos[edge[0]] >= pos[edge[1]] {
					t.Errorf("revision %d: %s came after %s: %v", n, edge[0], edge[1], seen)
				}
			}
		}
		log.take()
	}
}

// TestBarrierStops: a hook error at any barrier stops the operation there,
// returns that error, and leaves exactly what a crash there would: the
// revisions linked so far and no temporary names.
func TestBarrierStops(t *testing.T) {
	type stop struct {
		b   Barrier
		key Kind
	}
	points := []stop{
		{BarrierTempWritten, KindSeat}, {BarrierTempSynced, KindSeat}, {BarrierLinked, KindSeat}, {BarrierDirSynced, KindSeat},
		{BarrierBetweenKeys, KindSeat},
		{BarrierTempWritten, KindSession}, {BarrierTempSynced, KindSession}, {BarrierLinked, KindSession}, {BarrierDirSynced, KindSession},
	}
	// After stopping at points[i] of a step that publishes revision n:
	// the seat has n once its link happened, the session once its link did.
	wantRevs := func(i int, n uint64) (seatN, sessionN uint64) {
		seatN, sessionN = n-1, n-1
		// Both temporaries are prepared before the seat's is linked: a
		// stop at either's has linked nothing.
		if i >= 2 && i != 5 && i != 6 {
			seatN = n
		}
		if i >= 7 {
			sessionN = n
		}
		return
	}
	for _, op := range []string{"acquire", "advance", "release"} {
		for i, p := range points {
			t.Run(fmt.Sprintf("%s/%s/%s", op, p.key, p.b), func(t *testing.T) {
				var armed bool
				hook := func(pt Point) error {
					if armed && pt.Barrier == p.b && pt.Key.Kind == p.key {
						armed = false
						return errCrash
					}
					return nil
				}
				s := openStore(t, newRoot(t), &TOpts{Barrier: hook, Sequential: true})
				seat, session := seatKey(t, "s"), sessionKey(t, "x")
				n := uint64(1)
				var err error
				switch op {
				case "acquire":
					armed = true
					_, err = s.Acquire(context.Background(), seat, session, fields(t, s))
				case "advance", "release":
					c := mustAcquire(t, s, seat, session)
					n = 2
					armed = true
					if op == "advance" {
						err = s.Advance(context.Background(), c, Patch{State: Active})
					} else {
						err = s.Release(context.Background(), c, NewProof(ProofNoUnit, ""))
					}
					// The claim records each revision whose publish
					// returned, so a call cut between the keys can be
					// retried. (A stop at linked or dir-synced leaves a
					// revision the claim does not record: see the report
					// on this contract; not asserted here.)
					sn, xn := wantRevs(i, n)
					if p.b != BarrierLinked && p.b != BarrierDirSynced && (c.SeatRev != sn || c.SessionRev != xn) {
						t.Errorf("claim revisions %d, %d after the stop; want %d, %d", c.SeatRev, c.SessionRev, sn, xn)
					}
				}
				if !errors.Is(err, errCrash) {
					t.Fatalf("%s stopped at %s on %s: %v, want the hook's error", op, p.b, p.key, err)
				}
				sn, xn := wantRevs(i, n)
				if diff := cmp.Diff(revNames(sn), dirNames(t, s, seat)); diff != "" {
					t.Errorf("seat entries (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(revNames(xn), dirNames(t, s, session)); diff != "" {
					t.Errorf("session entries (-want +got):\n%s", diff)
				}
				noTemps(t, s, seat)
				noTemps(t, s, session)
				// Whatever was linked is a complete, valid revision.
				for _, k := range []Key{seat, session} {
					if h, err := s.Head(context.Background(), k); err != nil || h.Damage != nil {
						t.Errorf("%v head after the stop: %+v, %v", k, h, err)
					}
				}
			})
		}
	}
}

// TestAdvanceFenced: a head moved by another writer makes Advance refuse
// with unsafe-replacement, and it publishes nothing on that key.
func TestAdvanceFenced(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		for _, moved := range []Kind{KindSeat, KindSession} {
			t.Run(string(moved), func(t *testing.T) {
				root := newRoot(t)
				s := openStore(t, root, nil)
				seat, session := seatKey(t, "s"), sessionKey(t, "x")
				c := mustAcquire(t, s, seat, session)
				k := seat
				if moved == KindSession {
					k = session
				}
				// The competing writer publishes revision 2 under another claim,
				// through another store on the same root.
				other := openStore(t, root, nil)
				rec := refRecord(k, 2, testClaimID, "uncertain").bytes()
				if err := other.Backend().Publish(context.Background(), k.Loc(), 2, rec, nil); err != nil {
					t.Fatal(err)
				}
				seatBefore, sessionBefore := dirFiles(t, s, seat), dirFiles(t, s, session)
				err := s.Advance(context.Background(), c, Patch{State: Active})
				var r *Refusal
				if !errors.As(err, &r) || r.Code != UnsafeReplacement {
					t.Fatalf("Advance after a competing writer: %v; want refusal %s", err, UnsafeReplacement)
				}
				if r.ClaimID != c.ID || len(r.Keys) != 2 || r.Hint == "" || !strings.Contains(r.Error(), string(UnsafeReplacement)) {
					t.Errorf("refusal = %+v", r)
				}
				if diff := cmp.Diff(sessionBefore, dirFiles(t, s, session)); diff != "" {
					t.Errorf("session changed (-want +got):\n%s", diff)
				}
				// Both heads are fenced before the first publication: a moved
				// session key leaves the seat untouched too.
				if diff := cmp.Diff(seatBefore, dirFiles(t, s, seat)); diff != "" {
					t.Errorf("seat changed (-want +got):\n%s", diff)
				}
				if !bytes.Equal(readRev(t, s, k, 2), rec) {
					t.Error("the competing writer's revision changed")
				}
			})
		}
	})
}

// TestAdvanceLosesLinkRace: a competing writer that takes the very number
// Advance is publishing (between its fencing read and its link) makes it
// refuse; the competitor's file stands.
func TestAdvanceLosesLinkRace(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		root := newRoot(t)
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		other := openStore(t, root, nil)
		rec := refRecord(seat, 2, testClaimID, "uncertain").bytes()
		var armed bool
		s := openStore(t, root, &TOpts{Sequential: true, Barrier: func(p Point) error {
			if armed && p.Barrier == BarrierTempSynced && p.Key == seat {
				armed = false
				return other.Backend().Publish(context.Background(), seat.Loc(), p.Revision, rec, nil)
			}
			return nil
		}})
		c := mustAcquire(t, s, seat, session)
		armed = true
		if err := s.Advance(context.Background(), c, Patch{State: Active}); !isRefusal(err, UnsafeReplacement) {
			t.Fatalf("Advance that lost the link: %v; want refusal %s", err, UnsafeReplacement)
		}
		if !bytes.Equal(readRev(t, s, seat, 2), rec) {
			t.Error("the winner's revision changed")
		}
		if diff := cmp.Diff(revNames(1), dirNames(t, s, session)); diff != "" {
			t.Errorf("session entries (-want +got):\n%s", diff)
		}
		noTemps(t, s, seat)
	})
}

func TestBadPatches(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		s := openStore(t, newRoot(t), nil)
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		c := mustAcquire(t, s, seat, session)
		for _, p := range []Patch{
			{State: "running"},
			{Proof: &Proof{Kind: "trust-me"}},
			{Fields: map[string]any{"claimId": "c000000000000000000000000"}},
			{Fields: map[string]any{"key": "x"}},
			{Fields: map[string]any{"revision": 9}},
			{Fields: map[string]any{"writtenAt": "x"}},
			{Fields: map[string]any{"version": 2}},
			{Fields: map[string]any{"kind": "x"}},
			{Fields: map[string]any{"host": map[string]string{}}},
			{Fields: map[string]any{"state": "active"}},
			{Fields: map[string]any{"proof": nil}},
			{Fields: map[string]any{"bad": func() {}}},
		} {
			if err := s.Advance(context.Background(), c, p); !errors.Is(err, ErrBadPatch) {
				t.Errorf("Advance(%+v): %v, want ErrBadPatch", p, err)
			}
		}
		if err := s.Release(context.Background(), c, nil); !errors.Is(err, ErrBadPatch) {
			t.Errorf("Release without a proof: %v, want ErrBadPatch", err)
		}
		for _, bad := range []*Claim{nil, {}, {ID: c.ID, Record: c.Record}} {
			if err := s.Advance(context.Background(), bad, Patch{State: Active}); !errors.Is(err, ErrNotOwned) {
				t.Errorf("Advance(%+v): %v, want ErrNotOwned", bad, err)
			}
		}
		if _, err := s.Acquire(context.Background(), seatKey(t, "t"), sessionKey(t, "y"), AcquireFields{Owner: Owner{PID: 0}}); err == nil {
			t.Error("Acquire with pid 0 succeeded")
		}
		if _, err := s.Acquire(context.Background(), seatKey(t, "t"), sessionKey(t, "y"), AcquireFields{ClaimID: "x", Owner: c.Record.mustOwner(t)}); err == nil {
			t.Error("Acquire with a malformed claim id succeeded")
		}
		for _, k := range []Key{seat, session} {
			if diff := cmp.Diff(revNames(1), dirNames(t, s, k)); diff != "" {
				t.Errorf("%v entries after rejected calls (-want +got):\n%s", k, diff)
			}
		}
		if names := dirNames(t, s, seatKey(t, "t")); len(names) != 0 {
			t.Errorf("rejected Acquire wrote %v", names)
		}
	})
}

func (r *Record) mustOwner(t *testing.T) Owner {
	t.Helper()
	o, err := r.Owner()
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// headSpec is a key's history for a table test: the head revision's
// content as a function of the key, or nil for no history.
type headSpec struct {
	name string
	rec  func(k Key) []byte
}

func stateHead(state, proof string) func(Key) []byte {
	return func(k Key) []byte { return refRecord(k, 1, testClaimID, state).set("proof", proof).bytes() }
}

var headSpecs = []struct {
	headSpec
	state State
	held  bool
}{
	{headSpec{"free", nil}, Stopped, false},
	{headSpec{"stopped+proof", stateHead("stopped", `{"kind":"cohortProof","ref":"c"}`)}, Stopped, false},
	{headSpec{"reserved", stateHead("reserved", "null")}, Reserved, true},
	{headSpec{"active", stateHead("active", "null")}, Active, true},
	{headSpec{"stopping", stateHead("stopping", "null")}, Stopping, true},
	{headSpec{"uncertain", stateHead("uncertain", "null")}, Uncertain, true},
	{headSpec{"stopped without proof", stateHead("stopped", "null")}, Uncertain, true},
	{headSpec{"active with a proof", stateHead("active", `{"kind":"boot","ref":"b"}`)}, Active, true},
	{headSpec{"damaged", func(Key) []byte { return []byte("{\"version\":1,\n") }}, Uncertain, true},
	{headSpec{"other machine", func(k Key) []byte {
		return refRecord(k, 1, testClaimID, "active").set("host", `{"machineId":"`+otherMachine+`","bootId":"b"}`).bytes()
	}}, Active, true},
}

// TestHeadStates: each kind of head reads as the state and holds the key as
// ARCHITECTURE.md's invariants say ("A key is held unless its head is
// `stopped` *with* a proof"); damaged and proofless stopped heads are
// uncertain.
func TestHeadStates(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		for _, tt := range headSpecs {
			t.Run(tt.name, func(t *testing.T) {
				s := openStore(t, newRoot(t), nil)
				k := sessionKey(t, "x")
				if tt.rec != nil {
					writeRev(t, s, k, 1, tt.rec(k))
				}
				h, err := s.Head(context.Background(), k)
				if err != nil {
					t.Fatal(err)
				}
				if h.State() != tt.state || h.Held() != tt.held {
					t.Errorf("State %s Held %v; want %s %v", h.State(), h.Held(), tt.state, tt.held)
				}
				if tt.name == "damaged" {
					var de *DamageError
					if h.Record != nil || !errors.As(h.Damage, &de) || !strings.Contains(h.Damage.Error(), s.KeyDir(k)) {
						t.Errorf("damaged head: Record %v, Damage %v; want a *DamageError with the path", h.Record, h.Damage)
					}
				}
			})
		}
	})
}

// TestPairState: over every combination of heads, the pair state is the
// more conservative of the two and never less conservative than either.
func TestPairState(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		s := openStore(t, newRoot(t), nil)
		i := 0
		for _, a := range headSpecs {
			for _, b := range headSpecs {
				i++
				seat, session := seatKey(t, fmt.Sprint("seat", i)), sessionKey(t, fmt.Sprint("sess", i))
				if a.rec != nil {
					writeRev(t, s, seat, 1, a.rec(seat))
				}
				if b.rec != nil {
					writeRev(t, s, session, 1, b.rec(session))
				}
				p, err := s.Pair(context.Background(), seat, session)
				if err != nil {
					t.Fatal(err)
				}
				got := p.State()
				if want := Conservative(a.state, b.state); got != want {
					t.Errorf("pair (%s, %s) = %s, want %s", a.name, b.name, got, want)
				}
				if got.rank() > a.state.rank() || got.rank() > b.state.rank() {
					t.Errorf("pair (%s, %s) = %s is less conservative than a key", a.name, b.name, got)
				}
				if p.Held() != (a.held || b.held) {
					t.Errorf("pair (%s, %s) Held = %v", a.name, b.name, p.Held())
				}
			}
		}
	})
}

// TestAcquireRefusals: Acquire on held keys refuses with the right code and
// publishes nothing; on free keys it succeeds after the existing history.
func TestAcquireRefusals(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		const otherClaim = "cffffffffffffffffffffffff"
		tests := []struct {
			name         string
			seat, sess   func(k Key) []byte
			host         string // the store's machine id; "" for testMachine
			want         Code   // "" for success
			wantClaimID  string
			wantSeatRevs uint64
		}{
			{"both free", nil, nil, "", "", "", 1},
			{"both released", stateHead("stopped", `{"kind":"no-unit","ref":null}`), stateHead("stopped", `{"kind":"boot","ref":"b"}`), "", "", "", 2},
			{"reserved", stateHead("reserved", "null"), stateHead("reserved", "null"), "", AlreadyActive, testClaimID, 1},
			{"active seat only", stateHead("active", "null"), nil, "", AlreadyActive, testClaimID, 1},
			{"active session only", nil, stateHead("active", "null"), "", AlreadyActive, testClaimID, 0},
			{"stopping", stateHead("stopping", "null"), stateHead("stopping", "null"), "", UnsafeReplacement, testClaimID, 1},
			{"uncertain", stateHead("uncertain", "null"), nil, "", UnsafeReplacement, testClaimID, 1},
			{"stopped without proof", nil, stateHead("stopped", "null"), "", UnsafeReplacement, testClaimID, 0},
			{"damaged seat", func(Key) []byte { return []byte("garbage") }, nil, "", UnsafeReplacement, "", 1},
			{"mixed claims", stateHead("active", "null"), func(k Key) []byte { return refRecord(k, 1, otherClaim, "active").bytes() }, "", UnsafeReplacement, "", 1},
			{"foreign host", stateHead("active", "null"), stateHead("active", "null"), otherMachine, ForeignHost, testClaimID, 1},
			{"foreign host beats damage", func(Key) []byte { return []byte("garbage") }, stateHead("reserved", "null"), otherMachine, ForeignHost, testClaimID, 1},
			{"foreign but released", stateHead("stopped", `{"kind":"no-unit","ref":null}`), nil, otherMachine, "", "", 2},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var opts TOpts
				if tt.host != "" {
					opts.Host = hostid.Override{Host: thisHost, Machine: tt.host}
				}
				s := openStore(t, newRoot(t), &opts)
				seat, session := seatKey(t, "s"), sessionKey(t, "x")
				if tt.seat != nil {
					writeRev(t, s, seat, 1, tt.seat(seat))
				}
				if tt.sess != nil {
					writeRev(t, s, session, 1, tt.sess(session))
				}
				seatBefore, sessionBefore := dirFiles(t, s, seat), dirFiles(t, s, session)
				c, err := s.Acquire(context.Background(), seat, session, fields(t, s))
				if tt.want == "" {
					if err != nil {
						t.Fatalf("Acquire: %v", err)
					}
					if c.SeatRev != tt.wantSeatRevs {
						t.Errorf("seat revision %d, want %d", c.SeatRev, tt.wantSeatRevs)
					}
					checkPair(t, s, seat, session, Reserved)
					return
				}
				var r *Refusal
				if !errors.As(err, &r) {
					t.Fatalf("Acquire: %v, want a refusal", err)
				}
				if r.Code != tt.want || r.ClaimID != tt.wantClaimID || r.Hint == "" || r.Reason == "" {
					t.Errorf("refusal = %+v; want code %s, claim %q", r, tt.want, tt.wantClaimID)
				}
				if diff := cmp.Diff([]Key{seat, session}, r.Keys); diff != "" {
					t.Errorf("refusal keys (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(seatBefore, dirFiles(t, s, seat)); diff != "" {
					t.Errorf("seat changed (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(sessionBefore, dirFiles(t, s, session)); diff != "" {
					t.Errorf("session changed (-want +got):\n%s", diff)
				}
			})
		}
	})
}

// TestAcquireSessionTakenBetweenKeys: another claim takes the session after
// Acquire published on the seat and before it reached the session. Acquire
// closes its own seat revision with stopped + no-unit and refuses; the
// other claim keeps the session, and the seat is free again.
func TestAcquireSessionTakenBetweenKeys(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		root := newRoot(t)
		seat, seat2, session := seatKey(t, "s1"), seatKey(t, "s2"), sessionKey(t, "x")
		other := openStore(t, root, nil)
		var rival *Claim
		var rivalErr error
		s := openStore(t, root, &TOpts{Sequential: true, Barrier: func(p Point) error {
			if p.Barrier == BarrierBetweenKeys && rival == nil {
				rival, rivalErr = other.Acquire(context.Background(), seat2, session, fields(t, other))
			}
			return nil
		}})
		c, err := s.Acquire(context.Background(), seat, session, fields(t, s))
		if rivalErr != nil {
			t.Fatalf("rival Acquire: %v", rivalErr)
		}
		var r *Refusal
		if !errors.As(err, &r) || c != nil {
			t.Fatalf("Acquire that lost the session: %v, %v; want a refusal", c, err)
		}
		if r.Code != AlreadyActive || r.ClaimID != rival.ID {
			t.Errorf("refusal = %+v; want %s naming the rival claim %s", r, AlreadyActive, rival.ID)
		}
		if diff := cmp.Diff(revNames(2), dirNames(t, s, seat)); diff != "" {
			t.Fatalf("seat entries (-want +got):\n%s", diff)
		}
		r1, err := DecodeRecord(readRev(t, s, seat, 1), seat, 1)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := DecodeRecord(readRev(t, s, seat, 2), seat, 2)
		if err != nil {
			t.Fatal(err)
		}
		if r1.State != Reserved || r2.State != Stopped || r2.ClaimID != r1.ClaimID || r2.Proof == nil || r2.Proof.Kind != ProofNoUnit {
			t.Errorf("seat revisions: 1 %s %s, 2 %s %s %+v; want reserved then stopped with a no-unit proof by the same claim", r1.State, r1.ClaimID, r2.State, r2.ClaimID, r2.Proof)
		}
		if h, _ := s.Head(context.Background(), seat); h.Held() {
			t.Error("the seat is still held after the close-out")
		}
		if diff := cmp.Diff(revNames(1), dirNames(t, s, session)); diff != "" {
			t.Errorf("session entries (-want +got):\n%s", diff)
		}
		if h, _ := s.Head(context.Background(), session); h.Record == nil || h.Record.ClaimID != rival.ID {
			t.Errorf("session head = %+v; want the rival's claim", h)
		}
		// The rival's claim is intact and advances.
		if err := other.Advance(context.Background(), rival, Patch{State: Active}); err != nil {
			t.Errorf("rival Advance: %v", err)
		}
		// And the seat can be claimed again.
		mustAcquire(t, s, seat, sessionKey(t, "y"))
	})
}

// TestAcquireLosesSeatRace: a writer that takes the seat's next number
// between Acquire's read and its link makes Acquire re-read, and refuse
// since the seat is now held.
func TestAcquireLosesSeatRace(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		root := newRoot(t)
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		other := openStore(t, root, nil)
		var rival *Claim
		s := openStore(t, root, &TOpts{Sequential: true, Barrier: func(p Point) error {
			if p.Barrier == BarrierTempSynced && rival == nil {
				var err error
				rival, err = other.Acquire(context.Background(), seat, sessionKey(t, "y"), fields(t, other))
				return err
			}
			return nil
		}})
		_, err := s.Acquire(context.Background(), seat, session, fields(t, s))
		var r *Refusal
		if !errors.As(err, &r) || r.Code != AlreadyActive || rival == nil || r.ClaimID != rival.ID {
			t.Fatalf("Acquire that lost the seat: %v; want %s naming the rival", err, AlreadyActive)
		}
		if diff := cmp.Diff(revNames(1), dirNames(t, s, seat)); diff != "" {
			t.Errorf("seat entries (-want +got):\n%s", diff)
		}
		if names := dirNames(t, s, session); len(names) != 0 {
			t.Errorf("session entries: %v", names)
		}
	})
}

// TestDamagedHeadNeverReused: a damaged highest revision holds the key; the
// valid revision under it is not used instead, and its number is never
// published again.
func TestDamagedHeadNeverReused(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		s := openStore(t, newRoot(t), nil)
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		writeRev(t, s, session, 1, stateHead("stopped", `{"kind":"no-unit","ref":null}`)(session))
		writeRev(t, s, session, 2, refRecord(session, 3, testClaimID, "stopped").set("proof", `{"kind":"no-unit","ref":null}`).bytes()) // wrong revision member
		h, err := s.Head(context.Background(), session)
		if err != nil {
			t.Fatal(err)
		}
		var de *DamageError
		if h.N != 2 || !errors.As(h.Damage, &de) || h.State() != Uncertain || !h.Held() {
			t.Fatalf("head = %+v; want revision 2 damaged, uncertain, held", h)
		}
		before := dirFiles(t, s, session)
		if _, err := s.Acquire(context.Background(), seat, session, fields(t, s)); !isRefusal(err, UnsafeReplacement) {
			t.Errorf("Acquire: %v, want %s", err, UnsafeReplacement)
		}
		if diff := cmp.Diff(before, dirFiles(t, s, session)); diff != "" {
			t.Errorf("session changed (-want +got):\n%s", diff)
		}
		// A claim whose own head got damaged cannot advance either.
		c := mustAcquire(t, s, seatKey(t, "t"), sessionKey(t, "y"))
		replaceRev(t, s, c.Session, 1, []byte("torn"))
		err = s.Advance(context.Background(), c, Patch{State: Active})
		if !isRefusal(err, UnsafeReplacement) || !errors.As(err, &de) {
			t.Errorf("Advance over a damaged head: %v; want %s wrapping the *DamageError", err, UnsafeReplacement)
		}
	})
}

// TestErrorsAsAndIs: the documented error types and sentinels are reachable
// through the wrapping the store does.
func TestErrorsAsAndIs(t *testing.T) {
	s := openStore(t, newRoot(t), nil)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	c := mustAcquire(t, s, seat, session)

	_, err := s.Acquire(context.Background(), seat, session, fields(t, s))
	var r *Refusal
	if !errors.As(err, &r) || r.Code != AlreadyActive || r.ClaimID != c.ID {
		t.Errorf("errors.As(*Refusal) on %v", err)
	}
	var asErr error = r
	if !errors.As(fmt.Errorf("wrapped: %w", asErr), &r) {
		t.Error("a wrapped refusal is not found by errors.As")
	}
	if _, err := s.Head(context.Background(), Key{Kind: KindSession, Session: ""}); !errors.As(fmt.Errorf("x: %w", err), new(*KeyError)) {
		t.Errorf("errors.As(*KeyError) on %v", err)
	}
	_, err = s.Backend().Read(context.Background(), session.Loc(), 9)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is(fs.ErrNotExist) on %v", err)
	}
	for _, code := range Codes {
		if hints[code] == "" {
			t.Errorf("code %s has no hint", code)
		}
	}
	if len(Codes) != 3 {
		t.Errorf("Codes = %v; the vocabulary is closed at three", Codes)
	}
}
