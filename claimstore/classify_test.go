package claimstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/claimstore/claimstore/hostid"
	"github.com/claimstore/claimstore/hostid/hostidtest"
)

const (
	bootA = "aaaaaaaa-0000-4000-8000-000000000001"
	bootB = "bbbbbbbb-0000-4000-8000-000000000002"
)

func testKeys(t *testing.T) (Key, Key) {
	t.Helper()
	seat, err := SeatKey("seat-1", "proj", "/ws")
	if err != nil {
		t.Fatal(err)
	}
	session, err := SessionKey("sess-1")
	if err != nil {
		t.Fatal(err)
	}
	return seat, session
}

// lifecycle runs acquire, advance to active with a spawn marker, and
// release, stopping at the nth barrier point of step op (counting from 1);
// n = 0 runs everything. It returns how many barrier points op met.
func lifecycle(t *testing.T, root, op string, n int) int {
	t.Helper()
	host := &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{4100: "500"}}
	count, current := 0, ""
	s, err := OpenRoot(root, &TOpts{Host: host, Sequential: true, Backend: backendFor(t, root), Barrier: func(p Point) error {
		if current != op {
			return nil
		}
		count++
		if count == n {
			return errCrash
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	seat, session := testKeys(t)
	current = "acquire"
	c, err := s.Acquire(context.Background(), seat, session, AcquireFields{Owner: Owner{PID: 4100, Start: "500", Boot: bootA}})
	if err != nil {
		if errors.Is(err, errCrash) {
			return count
		}
		t.Fatal(err)
	}
	current = "advance"
	if err := s.Advance(context.Background(), c, Patch{State: Active, Fields: map[string]any{"spawnMarker": true}}); err != nil {
		if errors.Is(err, errCrash) {
			return count
		}
		t.Fatal(err)
	}
	current = "release"
	if err := s.Release(context.Background(), c, NewProof(ProofCohort, "cohort-1")); err != nil {
		if errors.Is(err, errCrash) {
			return count
		}
		t.Fatal(err)
	}
	return count
}

// TestClassifyAfterCrashAtEveryBarrier takes a claim through a crash at
// every barrier point of acquire, advance and release, then classifies it
// in the same boot (the owner's pid gone) and after a reboot. Every case
// must end exactly as the decision table says, and none may end free
// without a proof.
func TestClassifyAfterCrashAtEveryBarrier(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		for _, op := range []string{"acquire", "advance", "release"} {
			total := lifecycle(t, newRoot(t), op, 0)
			if total < 9 {
				t.Fatalf("%s met %d barrier points, want at least 9 (4 per key and between-keys)", op, total)
			}
			for n := 1; n <= total; n++ {
				for _, reboot := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/point%d/reboot=%v", op, n, reboot), func(t *testing.T) {
						root := newRoot(t)
						lifecycle(t, root, op, n)
						boot := bootA
						if reboot {
							boot = bootB
						}
						host := &hostidtest.Host{Machine: testMachine, Boot: boot, Procs: map[int]string{}}
						s := openOn(t, root, host)
						seat, session := testKeys(t)
						before, err := s.Pair(context.Background(), seat, session)
						if err != nil {
							t.Fatal(err)
						}
						markerBefore := false
						for _, h := range []*Head{before.Seat, before.Session} {
							if h.Record != nil && h.Held() && h.Record.SpawnMarker() {
								markerBefore = true
							}
						}
						res, err := s.Classify(context.Background(), seat, session, &ClassifyOptions{Units: mapUnits{}})
						if err != nil {
							t.Fatal(err)
						}
						after, err := s.Pair(context.Background(), seat, session)
						if err != nil {
							t.Fatal(err)
						}
						// The decision table, from what the crash left.
						var want Outcome
						switch {
						case !before.Held():
							want = OutcomeFree
						case reboot:
							want = OutcomeStopped // a boot proof
						case before.Seat.Record != nil && before.Seat.Record.State == Stopped && before.Seat.Record.Proof != nil:
							want = OutcomeStopped // release completed
						case before.State() == Reserved && !markerBefore:
							want = OutcomeStopped // no unit, nothing spawned
						default:
							want = OutcomeUncertain
						}
						if res.Outcome != want {
							t.Fatalf("outcome %s, want %s (pair before: %s; result %+v)", res.Outcome, want, before.State(), res)
						}
						if after.Held() != (want == OutcomeUncertain) {
							t.Errorf("after classify: held=%v, outcome %s", after.Held(), res.Outcome)
						}
						for _, h := range []*Head{after.Seat, after.Session} {
							if h.N == 0 {
								continue
							}
							if !h.Held() {
								if h.Record.Proof == nil {
									t.Errorf("%s is free without a proof", h.Key)
								} else if err := s.VerifyProof(context.Background(), h.Record); err != nil {
									t.Errorf("%s: proof does not verify: %v", h.Key, err)
								}
								if reboot && h.Record.Proof.Kind != ProofBoot && !res.Completed && before.Held() {
									t.Errorf("%s: after a reboot, proof %s, want boot", h.Key, h.Record.Proof.Kind)
								}
							}
							if markerBefore && !h.Record.SpawnMarker() && h.Record.ClaimID == res.ClaimID && !(h.Record.State == Stopped && res.Completed) {
								t.Errorf("%s: spawn marker lost", h.Key)
							}
						}
						if res.Outcome == OutcomeStopped && res.Proof.Kind == ProofBoot && res.BootProof == nil {
							t.Error("boot proof issued but not reported")
						}
						again, err := s.Classify(context.Background(), seat, session, &ClassifyOptions{Units: mapUnits{}})
						if err != nil {
							t.Fatal(err)
						}
						if len(again.Published) != 0 {
							t.Errorf("second classification published %v", again.Published)
						}
					})
				}
			}
		}
	})
}

// TestClassifyTable has one row per branch of the decision table
// (ARCHITECTURE.md, "Recovery: the decision table"), each built from real
// revisions on disk.
func TestClassifyTable(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		type row struct {
			name    string
			setup   func(t *testing.T, s *Store, seat, session Key)
			host    *hostidtest.Host // the classifying host
			opts    *ClassifyOptions
			want    Outcome
			refusal Code
			needs   string
			proof   ProofKind
			publish int
			// explain is the row Explain names with no options: no unit
			// lookup (row 9 never decides) and no adopter (row 5 neither).
			explain string
		}
		live := map[int]string{4100: "500"}
		sameBootGone := &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{}}
		acquire := func(state State, marker bool) func(t *testing.T, s *Store, seat, session Key) {
			return func(t *testing.T, s *Store, seat, session Key) {
				c, err := s.Acquire(context.Background(), seat, session, AcquireFields{ClaimID: "c00000000000000000000000a", Owner: Owner{PID: 4100, Start: "500", Incarnation: []byte("7")}})
				if err != nil {
					t.Fatal(err)
				}
				if state != Reserved || marker {
					p := Patch{State: state}
					if marker {
						p.Fields = map[string]any{"spawnMarker": true}
					}
					if state == Stopping {
						p.Fields = map[string]any{"spawnMarker": true, "stop": map[string]string{"by": "test"}}
					}
					if err := s.Advance(context.Background(), c, p); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		rows := []row{
			{name: "1 free", explain: "1", setup: func(*testing.T, *Store, Key, Key) {}, host: sameBootGone, want: OutcomeFree},
			{name: "2 foreign host", explain: "2", setup: acquire(Active, true), host: &hostidtest.Host{Machine: "ffffffffffffffffffffffffffffffff", Boot: bootB, Procs: map[int]string{}}, want: OutcomeUncertain, refusal: ForeignHost},
			{name: "3 damaged head", explain: "3", setup: func(t *testing.T, s *Store, seat, session Key) {
				acquire(Active, true)(t, s, seat, session)
				writeRaw(t, s, session, 3, "{torn")
			}, host: sameBootGone, want: OutcomeUncertain, refusal: UnsafeReplacement},
			{name: "4 mixed claims", explain: "4", setup: func(t *testing.T, s *Store, seat, session Key) {
				acquire(Active, true)(t, s, seat, session)
				other, _ := SessionKey("other")
				seat2, _ := SeatKey("seat-2", "proj", "/ws")
				c2, err := s.Acquire(context.Background(), seat2, other, AcquireFields{Owner: Owner{PID: 4100, Start: "500"}})
				if err != nil {
					t.Fatal(err)
				}
				// Forge the second claim's record onto the first session key.
				rec := c2.Record.clone()
				h, _ := s.Head(context.Background(), session)
				if _, err := s.publish(context.Background(), session, h.N+1, rec); err != nil {
					t.Fatal(err)
				}
			}, host: sameBootGone, want: OutcomeUncertain, refusal: UnsafeReplacement},
			{name: "5 adopt same owner", explain: "10", setup: acquire(Active, true), host: sameBootGone, opts: &ClassifyOptions{Adopt: &Owner{PID: 4100, Incarnation: []byte("7")}}, want: OutcomeOwned},
			{name: "6 owner live", explain: "6", setup: acquire(Active, true), host: &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: live}, want: OutcomeActive, refusal: AlreadyActive},
			{name: "6 owner unknown (proc unreadable)", explain: "6", setup: acquire(Active, true), host: &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: nil}, opts: nil, want: OutcomeActive, refusal: AlreadyActive},
			{name: "7 other boot, pid reused with the same start", explain: "7", setup: acquire(Active, true), host: &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: live}, want: OutcomeStopped, proof: ProofBoot, publish: 2},
			{name: "7 other boot with proof", explain: "7", setup: acquire(Active, true), host: &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{}}, want: OutcomeStopped, proof: ProofBoot, publish: 2},
			{name: "7 other boot without issuer", explain: "7", setup: acquire(Active, true), host: &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{}}, opts: &ClassifyOptions{BootProofs: NoBootProofs}, want: OutcomeUncertain, refusal: UnsafeReplacement, needs: NeedsBootProof},
			{name: "8 release cut between keys", explain: "8", setup: func(t *testing.T, s *Store, seat, session Key) {
				c, err := s.Acquire(context.Background(), seat, session, AcquireFields{Owner: Owner{PID: 4100, Start: "500"}})
				if err != nil {
					t.Fatal(err)
				}
				s.barrier = func(p Point) error {
					if p.Barrier == BarrierBetweenKeys {
						return errCrash
					}
					return nil
				}
				if err := s.Release(context.Background(), c, NewProof(ProofCohort, "x")); !errors.Is(err, errCrash) {
					t.Fatal(err)
				}
			}, host: sameBootGone, want: OutcomeStopped, proof: ProofCohort, publish: 1},
			{name: "9 reserved, no unit", explain: "10", setup: acquire(Reserved, false), host: sameBootGone, opts: &ClassifyOptions{Units: mapUnits{}}, want: OutcomeStopped, proof: ProofNoUnit, publish: 2},
			{name: "10 reserved, unit present", explain: "10", setup: acquire(Reserved, false), host: sameBootGone, opts: &ClassifyOptions{Units: mapUnits{"mosaic-chat-c00000000000000000000000a": "alive"}}, want: OutcomeUncertain, refusal: UnsafeReplacement, publish: 2},
			{name: "10 reserved, no unit lookup", explain: "10", setup: acquire(Reserved, false), host: sameBootGone, want: OutcomeUncertain, refusal: UnsafeReplacement, publish: 2},
			{name: "10 marker, unit absent", explain: "10", setup: acquire(Active, true), host: sameBootGone, opts: &ClassifyOptions{Units: mapUnits{}}, want: OutcomeUncertain, refusal: UnsafeReplacement, publish: 2},
			{name: "10 stopping in flight", explain: "10", setup: acquire(Stopping, true), host: sameBootGone, opts: &ClassifyOptions{Units: mapUnits{}}, want: OutcomeStopping, refusal: UnsafeReplacement},
		}
		for _, r := range rows {
			t.Run(r.name, func(t *testing.T) {
				root := newRoot(t)
				w := openOn(t, root, &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: live})
				seat, session := testKeys(t)
				r.setup(t, w, seat, session)
				s := openOn(t, root, r.host)
				if r.host.Procs == nil {
					s.host = unreadableProc{r.host}
				}
				// Explain names the row that decides, from the same rows,
				// and publishes nothing.
				p, err := s.Pair(ctx, seat, session)
				if err != nil {
					t.Fatal(err)
				}
				ex, err := s.Explain(ctx, p)
				if err != nil {
					t.Fatalf("Explain: %v", err)
				}
				if ex.Row != r.explain {
					t.Errorf("Explain names row %s (%s), want row %s", ex.Row, ex.When, r.explain)
				}
				if after, _ := s.Pair(ctx, seat, session); after.Seat.N != p.Seat.N || after.Session.N != p.Session.N {
					t.Errorf("Explain published: seat r%d -> r%d, session r%d -> r%d", p.Seat.N, after.Seat.N, p.Session.N, after.Session.N)
				}
				res, err := s.Classify(ctx, seat, session, r.opts)
				if err != nil {
					t.Fatal(err)
				}
				if r.opts == nil && ex.Result.Outcome != res.Outcome {
					t.Errorf("Explain concludes %s, Classify %s", ex.Result.Outcome, res.Outcome)
				}
				if res.Outcome != r.want {
					t.Errorf("outcome %s, want %s (%+v)", res.Outcome, r.want, res)
				}
				var code Code
				if res.Refusal != nil {
					code = res.Refusal.Code
				}
				if code != r.refusal {
					t.Errorf("refusal %q, want %q", code, r.refusal)
				}
				if res.Needs != r.needs {
					t.Errorf("needs %q, want %q", res.Needs, r.needs)
				}
				var pk ProofKind
				if res.Proof != nil {
					pk = res.Proof.Kind
				}
				if pk != r.proof {
					t.Errorf("proof %q, want %q", pk, r.proof)
				}
				if len(res.Published) != r.publish {
					t.Errorf("published %v, want %d revisions", res.Published, r.publish)
				}
				if r.proof == ProofBoot {
					if res.BootProof == nil || res.BootProof.RecordedBootID != bootA || res.BootProof.CurrentBootID != bootB || res.BootProof.ClaimID != res.ClaimID {
						t.Errorf("boot proof %+v", res.BootProof)
					}
					h, _ := s.Head(context.Background(), session)
					if err := s.VerifyProof(context.Background(), h.Record); err != nil {
						t.Errorf("VerifyProof: %v", err)
					}
				}
				if r.want == OutcomeStopping && res.ResumeStop == nil {
					t.Error("stop in flight not handed back")
				}
			})
		}
	})
}

// unreadableProc presents a host whose /proc cannot be read.
type unreadableProc struct{ *hostidtest.Host }

func (u unreadableProc) StartTime(pid int) (string, error) {
	return "", fmt.Errorf("open /proc/%d/stat: permission denied", pid)
}

// Signal0 says the pid exists but is not ours to signal.
func (u unreadableProc) Signal0(int) error { return unix.EPERM }

var _ hostid.Host = unreadableProc{}

func writeRaw(t *testing.T, s *Store, k Key, n uint64, content string) {
	t.Helper()
	if onEtcd(s) {
		writeRev(t, s, k, n, []byte(content))
		return
	}
	dir := s.KeyDir(k)
	if err := writeFile0400(filepath.Join(dir, RevisionName(n)), content); err != nil {
		t.Fatal(err)
	}
}

// TestClassifyReusesItsBootProof: a classification cut after its first
// stopped revision is finished, on the next run, with the boot proof it
// already published: one proof, no extra revision.
func TestClassifyReusesItsBootProof(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		root := newRoot(t)
		w := openOn(t, root, liveHost())
		seat, session := testKeys(t)
		if _, err := w.Acquire(context.Background(), seat, session, AcquireFields{Owner: Owner{PID: 4100, Start: "500", Boot: bootA}}); err != nil {
			t.Fatal(err)
		}
		host := &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{}}
		cut, err := OpenRoot(root, &TOpts{Host: host, Sequential: true, Backend: backendFor(t, root), Barrier: func(p Point) error {
			if p.Barrier == BarrierBetweenKeys {
				return errCrash
			}
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cut.Classify(context.Background(), seat, session, nil); !errors.Is(err, errCrash) {
			t.Fatalf("cut classify: %v", err)
		}
		s := openOn(t, root, host)
		res, err := s.Classify(context.Background(), seat, session, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != OutcomeStopped || !res.Completed || len(res.Published) != 1 || res.Published[0].Key != session {
			t.Fatalf("second classify = %s, completed %v, published %v; want stopped, completing the session only", res.Outcome, res.Completed, res.Published)
		}
		if ids, _ := s.Backend().Proofs(context.Background()); len(ids) != 1 {
			t.Errorf("proofs %v, want exactly one", ids)
		}
		p, _ := s.Pair(context.Background(), seat, session)
		if p.Seat.N != 2 || p.Session.N != 2 || p.Held() || p.Seat.Record.Proof.Ref != p.Session.Record.Proof.Ref {
			t.Errorf("after: seat r%d, session r%d, held %v", p.Seat.N, p.Session.N, p.Held())
		}
	})
}

// TestClassifyRefusesAnotherPairsClaim: a claim that names its own pair is
// never spread onto a key outside it.
func TestClassifyRefusesAnotherPairsClaim(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		root := newRoot(t)
		w := openOn(t, root, liveHost())
		seat1, session := testKeys(t)
		seat2, _ := SeatKey("seat-2", "proj", "/ws")
		if _, err := w.Acquire(context.Background(), seat2, session, AcquireFields{Owner: Owner{PID: 4100, Start: "500", Boot: bootA}}); err != nil {
			t.Fatal(err)
		}
		s := openOn(t, root, &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{}})
		res, err := s.Classify(context.Background(), seat1, session, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != OutcomeUncertain || res.Refusal == nil || res.Refusal.Code != UnsafeReplacement || len(res.Published) != 0 {
			t.Fatalf("classify of the wrong pair = %s, %v, published %v", res.Outcome, res.Refusal, res.Published)
		}
		if h, _ := s.Head(context.Background(), seat1); h.N != 0 {
			t.Errorf("seat-1 gained revision %d", h.N)
		}
		p, err := s.Pair(context.Background(), seat1, session)
		if err != nil {
			t.Fatal(err)
		}
		if ex, err := s.Explain(context.Background(), p); err != nil || ex.Row != "6a" {
			t.Errorf("Explain = %+v, %v; want row 6a", ex, err)
		}
	})
}

// TestAdvanceNeverClearsSpawnMarker: once a writer may have been spawned,
// only a proof ends that.
func TestAdvanceNeverClearsSpawnMarker(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		root := newRoot(t)
		s := openOn(t, root, liveHost())
		seat, session := testKeys(t)
		c := active4100(t, s, seat, session, map[string]any{"spawnMarker": true})
		for _, v := range []any{false, nil, 0, ""} {
			if err := s.Advance(context.Background(), c, Patch{Fields: map[string]any{"spawnMarker": v}}); !errors.Is(err, ErrBadPatch) {
				t.Errorf("clearing the marker with %#v: %v, want ErrBadPatch", v, err)
			}
		}
		if h, _ := s.Head(context.Background(), seat); h.N != 2 {
			t.Errorf("seat at revision %d, want 2: a refused patch published", h.N)
		}
	})
}

// owner4100 is the owner the recovery tests' claims record: pid 4100,
// started at tick 500, alive on liveHost until a test removes it.
var owner4100 = Owner{PID: 4100, Start: "500"}

// liveHost is the test machine in bootA with owner4100's process running.
func liveHost() *hostidtest.Host {
	return &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{4100: "500"}}
}

// openOn opens a store on root with host, failing the test on error.
func openOn(t *testing.T, root string, host hostid.Host) *Store {
	t.Helper()
	s, err := OpenRoot(root, &TOpts{Host: host, Backend: backendFor(t, root)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// claim4100 acquires seat and session for owner4100.
func claim4100(t *testing.T, s *Store, seat, session Key) *Claim {
	t.Helper()
	c, err := s.Acquire(context.Background(), seat, session, AcquireFields{Owner: owner4100})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// active4100 is claim4100 advanced to active, with fields (nil: none).
func active4100(t *testing.T, s *Store, seat, session Key, fields map[string]any) *Claim {
	t.Helper()
	c := claim4100(t, s, seat, session)
	if err := s.Advance(context.Background(), c, Patch{State: Active, Fields: fields}); err != nil {
		t.Fatal(err)
	}
	return c
}

// cutAt makes every operation of s stop at barrier b, as a crash there.
func cutAt(s *Store, b Barrier) {
	s.barrier = func(p Point) error {
		if p.Barrier == b {
			return errCrash
		}
		return nil
	}
}
