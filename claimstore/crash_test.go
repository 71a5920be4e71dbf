package claimstore_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"path"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/hostid"
	"github.com/claimstore/claimstore/hostid/hostidtest"
	"github.com/claimstore/claimstore/internal/crashfs"
)

var exhaustive = flag.Bool("crash.exhaustive", false, "enumerate the named-temporaries, torn-writes variant even under -short")

const (
	testMachine = "0123456789abcdef0123456789abcdef"
	bootA       = "aaaaaaaa-0000-4000-8000-00000000000a"
	bootB       = "bbbbbbbb-0000-4000-8000-00000000000b"
	bootC       = "cccccccc-0000-4000-8000-00000000000c"
	root        = "/var/claims"
	ownerPID    = 4100
	ownerStart  = "500"
)

// liveHost is boot A with the owner running.
func liveHost() *hostidtest.Host {
	return &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{ownerPID: ownerStart}}
}

// absentUnits says every unit is absent: the answer that tempts a
// classifier most, since after a spawn it proves nothing.
type absentUnits struct{}

func (absentUnits) LookupUnit(_ context.Context, name string) claimstore.UnitObservation {
	return claimstore.UnitObservation{Name: name, State: claimstore.UnitAbsent, Detail: "test: absent"}
}

func mustKeys(t testing.TB, n int) (claimstore.Key, claimstore.Key) {
	t.Helper()
	seat, err := claimstore.SeatKey(fmt.Sprintf("seat-%d", n), "proj", "/ws")
	if err != nil {
		t.Fatal(err)
	}
	session, err := claimstore.SessionKey(fmt.Sprintf("sess-%d", n))
	if err != nil {
		t.Fatal(err)
	}
	return seat, session
}

func fixedNow() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 6e6, time.UTC) }

// claimID returns a fixed claim id, so that runs are deterministic.
func claimID(c byte) string { return "c" + strings.Repeat(string(c), 24) }

// world is one timeline: a filesystem, the store of the process running
// the operations, and what that process was told (acknowledged).
type world struct {
	t      testing.TB
	fs     *crashfs.FS
	host   *hostidtest.Host
	store  *claimstore.Store
	claims map[string]*claimstore.Claim // by name in the scenario
	keys   map[string][2]claimstore.Key // by claim name: seat, session
	ids    map[string]string            // claim name -> claim id

	// acked are the files an acknowledged operation published, with the
	// contents they had: each must survive every crash.
	acked map[string][]byte
	// holders are the claims acknowledged as holding their keys (an
	// acknowledged acquire, no acknowledged release), by claim id.
	holders map[string][2]claimstore.Key
	// marked are the claim ids whose spawn marker was acknowledged set.
	marked map[string]bool
	// vfs, when set, is the filesystem the scenario's own stores use (a
	// fault injector over fs); crash states are always taken of fs.
	vfs vfs.FS
}

// sfs is the filesystem the scenario's stores run on.
func (w *world) sfs() vfs.FS {
	if w.vfs != nil {
		return w.vfs
	}
	return w.fs
}

func newWorld(t testing.TB, opts *crashfs.Options) *world {
	t.Helper()
	w := &world{t: t, fs: crashfs.New(opts), host: liveHost(),
		claims: map[string]*claimstore.Claim{}, keys: map[string][2]claimstore.Key{}, ids: map[string]string{},
		acked: map[string][]byte{}, holders: map[string][2]claimstore.Key{}, marked: map[string]bool{}}
	// The root's parent exists and is durable; the root itself is made by
	// the first write.
	if err := w.fs.MkdirAll(path.Dir(root), 0o755); err != nil {
		t.Fatal(err)
	}
	w.store = w.open(w.fs, w.host, nil)
	return w
}

func (w *world) open(fsys vfs.FS, h hostid.Host, barrier claimstore.BarrierFunc) *claimstore.Store {
	w.t.Helper()
	// Sequential: a stop after the k-th call must meet the same call every
	// run (the overlapped protocol's crash states are the same).
	s, err := claimstore.OpenRoot(root, &claimstore.TOpts{FS: fsys, Host: h, Now: fixedNow, Barrier: barrier, Sequential: true})
	if err != nil {
		w.t.Fatal(err)
	}
	return s
}

func revPath(k claimstore.Key, n uint64) string {
	return path.Join(root, string(k.Kind), k.Hash(), claimstore.RevisionName(n))
}

// ack records revision n of k as acknowledged, with its live contents.
func (w *world) ack(k claimstore.Key, n uint64) {
	w.t.Helper()
	p := revPath(k, n)
	data, ok := w.fs.Files(path.Dir(p))[p]
	if !ok {
		w.t.Fatalf("acknowledged revision %s is not even in the page cache", p)
	}
	w.acked[p] = data
}

func (w *world) ackClaim(c *claimstore.Claim) {
	w.ack(c.Seat, c.SeatRev)
	w.ack(c.Session, c.SessionRev)
}

// step is one operation of a scenario. run returns the operation's error;
// an operation that returns nil has acknowledged its effects (it records
// them in w). expectRefusal marks an operation whose success is a refusal.
type step struct {
	name string
	run  func(w *world) error
	// strict: every filesystem call of the operation matters, so a call
	// that fails must make it fail. Operations whose answer to a failed
	// read is a refusal or an uncertain classification are not strict.
	strict bool
}

func acquire(name string, keyN int, id byte) step {
	return step{"acquire " + name, func(w *world) error {
		seat, session := mustKeys(w.t, keyN)
		c, err := w.store.Acquire(context.Background(), seat, session, claimstore.AcquireFields{
			ClaimID: claimID(id),
			Owner:   claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA},
		})
		if err != nil {
			return err
		}
		for hid, ks := range w.holders {
			if ks[0] == seat || ks[1] == session {
				w.t.Fatalf("acquire of %s acknowledged while claim %s is an acknowledged holder", name, hid)
			}
		}
		w.claims[name], w.keys[name], w.ids[name] = c, [2]claimstore.Key{seat, session}, c.ID
		w.holders[c.ID] = [2]claimstore.Key{seat, session}
		w.ackClaim(c)
		return nil
	}, true}
}

func advance(name string, p claimstore.Patch) step {
	return step{fmt.Sprintf("advance %s to %s", name, p.State), func(w *world) error {
		c := w.claims[name]
		if err := w.store.Advance(context.Background(), c, p); err != nil {
			return err
		}
		if v, ok := p.Fields["spawnMarker"]; ok && v == true {
			w.marked[c.ID] = true
		}
		w.ackClaim(c)
		return nil
	}, true}
}

func release(name string) step {
	return step{"release " + name, func(w *world) error {
		c := w.claims[name]
		if err := w.store.Release(context.Background(), c, claimstore.NewProof(claimstore.ProofCohort, "cohort-1")); err != nil {
			return err
		}
		delete(w.holders, c.ID)
		w.ackClaim(c)
		return nil
	}, true}
}

// cutRelease releases with a barrier that stops between the keys: the
// seat is stopped with a proof, the session not yet. Not acknowledged.
func cutRelease(name string) step {
	return step{"release " + name + " cut between keys", func(w *world) error {
		c := w.claims[name]
		cut := errors.New("cut")
		s := w.open(w.sfs(), w.host, func(p claimstore.Point) error {
			if p.Barrier == claimstore.BarrierBetweenKeys {
				return cut
			}
			return nil
		})
		if err := s.Release(context.Background(), c, claimstore.NewProof(claimstore.ProofCohort, "cohort-1")); !errors.Is(err, cut) {
			return fmt.Errorf("cut release: %v, want the cut", err)
		}
		return nil
	}, false}
}

// ownerDies ends the owner process (same boot).
// Its claims stay held, but no longer by a live owner: classify may prove
// them over, so they are no longer checked as holders.
func ownerDies() step {
	return step{"owner dies", func(w *world) error {
		delete(w.host.Procs, ownerPID)
		w.holders = map[string][2]claimstore.Key{}
		return nil
	}, false}
}

// reboot presents boot B with no processes.
func reboot() step {
	return step{"reboot", func(w *world) error {
		w.host.Boot, w.host.Procs = bootB, map[int]string{}
		w.holders = map[string][2]claimstore.Key{}
		return nil
	}, false}
}

// classify classifies claim name's pair and acknowledges what it published.
func classify(name string) step {
	return step{"classify " + name, func(w *world) error {
		ks := w.keys[name]
		res, err := w.store.Classify(context.Background(), ks[0], ks[1], &claimstore.ClassifyOptions{Units: absentUnits{}})
		if err != nil {
			return err
		}
		for _, p := range res.Published {
			w.ack(p.Key, p.Revision)
		}
		if res.BootProof != nil {
			p := path.Join(root, claimstore.ProofDir, res.BootProof.ID+".json")
			w.acked[p] = w.fs.Files(path.Dir(p))[p]
		}
		if res.Free() && res.Outcome == claimstore.OutcomeStopped {
			delete(w.holders, w.ids[name])
		}
		return nil
	}, false}
}

// acquireRaced acquires claim name on pair keyN while, at the barrier
// between its keys, claim rival takes the session key with another seat
// (pair rivalN). The acquire must close its seat and refuse.
func acquireRaced(name string, keyN int, id byte, rivalN int, rivalID byte) step {
	return step{"acquire " + name + " raced", func(w *world) error {
		seat, session := mustKeys(w.t, keyN)
		rseat, _ := mustKeys(w.t, rivalN)
		raced := false
		var rerr error
		s := w.open(w.sfs(), w.host, func(p claimstore.Point) error {
			if p.Barrier != claimstore.BarrierBetweenKeys || raced {
				return nil
			}
			raced = true
			c, err := w.store.Acquire(context.Background(), rseat, session, claimstore.AcquireFields{ClaimID: claimID(rivalID), Owner: claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}})
			if err != nil {
				rerr = err
				return err
			}
			w.claims["rival"], w.keys["rival"], w.ids["rival"] = c, [2]claimstore.Key{rseat, session}, c.ID
			w.holders[c.ID] = [2]claimstore.Key{rseat, session}
			w.ackClaim(c)
			return nil
		})
		w.keys[name], w.ids[name] = [2]claimstore.Key{seat, session}, claimID(id)
		_, err := s.Acquire(context.Background(), seat, session, claimstore.AcquireFields{ClaimID: claimID(id), Owner: claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}})
		if rerr != nil {
			return rerr
		}
		var ref *claimstore.Refusal
		if !errors.As(err, &ref) {
			if err == nil {
				w.t.Fatalf("acquire of %s succeeded although the session was taken between its keys", name)
			}
			return err
		}
		return nil
	}, false}
}

type scenario struct {
	name  string
	steps []step
}

func active() claimstore.Patch {
	return claimstore.Patch{State: claimstore.Active, Fields: map[string]any{"spawnMarker": true, "invocationId": "inv-1"}}
}

func stopping() claimstore.Patch {
	return claimstore.Patch{State: claimstore.Stopping, Fields: map[string]any{"stop": map[string]any{"requestedBy": "test"}}}
}

var scenarios = []scenario{
	{"lifecycle", []step{acquire("a", 1, 'a'), advance("a", active()), advance("a", stopping()), release("a"), acquire("b", 1, 'b')}},
	{"acquire-raced", []step{acquireRaced("a", 1, 'a', 2, 'd')}},
	{"classify-reserved-owner-gone", []step{acquire("a", 1, 'a'), ownerDies(), classify("a")}},
	{"classify-active-owner-gone", []step{acquire("a", 1, 'a'), advance("a", active()), ownerDies(), classify("a")}},
	{"classify-release-cut", []step{acquire("a", 1, 'a'), advance("a", active()), cutRelease("a"), ownerDies(), classify("a")}},
	{"classify-after-reboot", []step{acquire("a", 1, 'a'), advance("a", active()), reboot(), classify("a")}},
}

// enumStats counts, for one operation, the crash points and states checked.
type enumStats struct {
	points   int // stop points: between every two calls, and after the last
	calls    int // calls the operation made when it ran to the end
	raw      int // crash states enumerated (before removing duplicates)
	distinct int // distinct crash states checked
	process  int // process-crash states (the live tree) checked
}

// TestCrashEnumeration runs every operation of every scenario, stopping it
// after each of its filesystem calls in turn, and checks every state a power
// cut at that point can leave (and the state a process crash leaves),
// classifying each on a later boot.
func TestCrashEnumeration(t *testing.T) {
	variants := []struct {
		name string
		opts crashfs.Options
	}{{"unnamed-temps", crashfs.Options{}}}
	if *exhaustive || !testing.Short() {
		variants = append(variants, struct {
			name string
			opts crashfs.Options
		}{"named-temps-torn", crashfs.Options{NamedTemps: true, TornWrites: true}})
	}
	total := enumStats{}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) {
					for i, st := range sc.steps {
						if st.name == "owner dies" || st.name == "reboot" {
							continue
						}
						es := enumerate(t, v.opts, sc.steps[:i], st)
						t.Logf("%-18s %-36s calls=%3d points=%3d crash-states=%4d distinct=%4d process-crash=%3d",
							v.name, st.name, es.calls, es.points, es.raw, es.distinct, es.process)
						total.points += es.points
						total.raw += es.raw
						total.distinct += es.distinct
						total.process += es.process
					}
				})
			}
		})
	}
	t.Logf("TOTAL points=%d crash-states=%d distinct=%d process-crash=%d", total.points, total.raw, total.distinct, total.process)
}

// enumerate stops op after k calls for k = 0, 1, ... until it completes,
// and checks every crash state at each stop point.
func enumerate(t *testing.T, opts crashfs.Options, setup []step, op step) enumStats {
	t.Helper()
	var es enumStats
	for k := 0; ; k++ {
		w := newWorld(t, &opts)
		for _, s := range setup {
			if err := s.run(w); err != nil {
				t.Fatalf("setup %s: %v", s.name, err)
			}
		}
		before := w.fs.Calls()
		w.fs.StopAfter(k)
		err := op.run(w)
		stopped := w.fs.Stopped()
		if !stopped && err != nil {
			t.Fatalf("%s without a crash: %v", op.name, err)
		}
		if stopped && err == nil && op.strict {
			// The operation acknowledged although a call failed: only
			// acceptable if the failed call was after the last one that
			// mattered (none of the store's calls are optional).
			t.Errorf("%s stopped after %d calls but reported success", op.name, k)
		}
		es.points++
		where := fmt.Sprintf("%s stopped after %d calls", op.name, k)
		if !stopped {
			where = op.name + " completed"
			es.calls = w.fs.Calls() - before
		}
		cs := checkAllCrashes(t, w, where)
		es.raw += cs.Raw
		es.distinct += cs.Distinct
		es.process++
		if !stopped {
			return es
		}
		if t.Failed() {
			return es
		}
	}
}

// checkAllCrashes checks every state a power cut can leave w's filesystem
// in now, each classified on a later boot, and the state a crash of the
// process leaves (the page cache), classified on the same boot.
func checkAllCrashes(t *testing.T, w *world, where string) crashfs.CrashStats {
	t.Helper()
	states, cs, err := w.fs.CrashStates(crashfs.ModelSubset, 0)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	live := w.fs.Snapshot()
	for n, st := range states {
		checkCrash(t, w, live, st, fmt.Sprintf("%s, power cut state %d/%d (pending %v)", where, n+1, len(states), w.fs.Pending()), bootC)
	}
	// A process crash keeps the page cache and no more: a new process, on
	// the same boot with the owner gone, goes on with what was pending
	// still pending; then the power fails.
	if w.fs.Lost() == 0 {
		// With a write lost by a failed fsync, the page cache shows what
		// the disk will never have, and the kernel tells only the process
		// that saw the failure: no later process can know (see
		// ErrSyncFailed). Compound crashes are checked on honest caches.
		checkCompound(t, w, where+", process crash")
	}
	return cs
}

// checkCompound is a compound crash: the operation's process died where w
// stands (its writes in the page cache, not all durable); a new process on
// the same boot checks the invariants, classifies every pair and takes a
// new claim on each pair it finds free, acknowledging what it published;
// then the power fails, in every way it can. Everything either process
// acknowledged must survive, a pair the new process reported free or
// stopped must still read free, its new claims must still hold, and no key
// may read free without a proof that verifies. This is where a reader that
// decides on a head another process linked but never made durable, or a
// writer that skips the fsync of a directory's parent on first use, is
// caught.
func checkCompound(t *testing.T, w *world, where string) {
	t.Helper()
	fork := w.fs.Fork()
	checkInvariants(t, w, fork.Files(root), fork, where, true)
	h := &hostidtest.Host{Machine: testMachine, Boot: w.host.Boot, Procs: map[int]string{}}
	s := w.open(fork, h, nil)
	acks := map[string][]byte{}
	ack := func(p string) {
		data, ok := fork.Files(path.Dir(p))[p]
		if !ok {
			t.Fatalf("%s: acknowledged %s is not even in the page cache", where, p)
		}
		acks[p] = data
	}
	var names []string
	for name := range w.keys {
		names = append(names, name)
	}
	sort.Strings(names)
	var freed [][2]claimstore.Key
	results := map[string]*claimstore.Result{}
	for _, name := range names {
		ks := w.keys[name]
		res := checkClassify(t, s, ks[0], ks[1], w.marked, where+": classify "+name)
		if res == nil {
			continue // reported by checkClassify
		}
		results[name] = res
		for _, p := range res.Published {
			ack(revPath(p.Key, p.Revision))
		}
		if res.BootProof != nil {
			ack(path.Join(root, claimstore.ProofDir, res.BootProof.ID+".json"))
		}
		if res.Free() {
			freed = append(freed, ks)
		}
	}
	// The power fails right after the classifications were reported: a new
	// claim's fsyncs must not be what made them durable.
	checkCompoundCrashes(t, w, fork.Fork(), names, acks, freed, nil, where+", classified")
	holders := map[string][2]claimstore.Key{}
	for _, name := range names {
		ks := w.keys[name]
		if results[name] == nil {
			continue
		}
		// As the pair reads now: the pairs of a scenario may share a key,
		// and classifying one may have freed another's.
		p, err := s.Pair(context.Background(), ks[0], ks[1])
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		c, err := s.Acquire(context.Background(), ks[0], ks[1], claimstore.AcquireFields{ClaimID: claimID('f'), Owner: claimstore.Owner{PID: 9, Start: "1", Boot: w.host.Boot}})
		if p.Held() {
			if err == nil {
				t.Errorf("%s: a new claim acquired %s's pair, which reads %s after classify", where, name, p.State())
			} else if !isRefusal(err, "") {
				t.Errorf("%s: acquire on %s's held pair: %v, want a refusal", where, name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: a new claim could not acquire %s's free pair: %v", where, name, err)
			continue
		}
		ack(revPath(c.Seat, c.SeatRev))
		ack(revPath(c.Session, c.SessionRev))
		holders[c.ID] = ks
		break // the pairs of a scenario may share a key: one new claim is enough
	}
	checkCompoundCrashes(t, w, fork, names, acks, freed, holders, where+", classified and claimed")
}

// checkCompoundCrashes checks every power cut of fork after a second
// process acknowledged acks, reported the pairs freed free, and took the
// claims holders.
func checkCompoundCrashes(t *testing.T, w *world, fork *crashfs.FS, names []string, acks map[string][]byte, freed [][2]claimstore.Key, holders map[string][2]claimstore.Key, where string) {
	t.Helper()
	states, _, err := fork.CrashStates(crashfs.ModelSubset, 0)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	for n, st := range states {
		at := fmt.Sprintf("%s, then a power cut, state %d/%d", where, n+1, len(states))
		files := st.Files(root)
		for _, m := range []map[string][]byte{w.acked, acks} {
			for _, p := range sortedPaths(m) {
				if got, ok := files[p]; !ok {
					t.Errorf("%s: acknowledged %s is lost", at, p)
				} else if !bytes.Equal(got, m[p]) {
					t.Errorf("%s: acknowledged %s changed content", at, p)
				}
			}
		}
		after := w.open(st, &hostidtest.Host{Machine: testMachine, Boot: bootC}, nil)
		for _, name := range names {
			ks := w.keys[name]
			p, err := after.Pair(context.Background(), ks[0], ks[1])
			if err != nil {
				t.Fatalf("%s: %v", at, err)
			}
			for _, hd := range []*claimstore.Head{p.Seat, p.Session} {
				if hd.Held() || hd.N == 0 {
					continue
				}
				if hd.Record == nil || hd.Record.Proof == nil {
					t.Errorf("%s: %s reads free without a proof", at, hd.Key)
				} else if err := after.VerifyProof(context.Background(), hd.Record); err != nil {
					t.Errorf("%s: %s reads free on a proof that does not verify: %v", at, hd.Key, err)
				}
			}
		}
		for _, ks := range freed {
			p, err := after.Pair(context.Background(), ks[0], ks[1])
			if err != nil {
				t.Fatalf("%s: %v", at, err)
			}
			for _, hd := range []*claimstore.Head{p.Seat, p.Session} {
				if hd.Held() && (hd.Record == nil || holders[hd.Record.ClaimID] == [2]claimstore.Key{}) {
					t.Errorf("%s: the new process reported %v + %v free, and %s reads %s again", at, ks[0], ks[1], hd.Key, hd.State())
				}
			}
		}
		for id, ks := range holders {
			for _, k := range ks {
				hd, err := after.Head(context.Background(), k)
				if err != nil {
					t.Fatal(err)
				}
				if hd.Record == nil || hd.Record.ClaimID != id || !hd.Held() {
					t.Errorf("%s: the new process's acknowledged claim %s no longer holds %s (head %d)", at, id, k, hd.N)
				}
			}
		}
	}
}

// checkCrash checks the invariants on a crash state, then classifies it on
// a host with the given boot and no processes, and checks again.
func checkCrash(t *testing.T, w *world, live, st *crashfs.FS, where string, boot string) {
	t.Helper()
	checkInvariants(t, w, live.Files(root), st, where, true)
	crashed := st.Files(root)
	h := &hostidtest.Host{Machine: testMachine, Boot: boot, Procs: map[int]string{}}
	s := w.open(st, h, nil)
	for name, ks := range w.keys {
		checkClassify(t, s, ks[0], ks[1], w.marked, where+": classify "+name)
	}
	// After classify, the names the crash left keep their contents; the
	// holders need not hold any more (their owners are gone, and classify
	// may have proved them over).
	checkInvariants(t, w, crashed, st, where+", after classify", false)
	// A new claim on each pair succeeds exactly when the pair is free.
	for name, ks := range w.keys {
		p, err := s.Pair(context.Background(), ks[0], ks[1])
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Acquire(context.Background(), ks[0], ks[1], claimstore.AcquireFields{ClaimID: claimID('e'), Owner: claimstore.Owner{PID: 9, Start: "1", Boot: boot}})
		var ref *claimstore.Refusal
		switch {
		case p.Held() && err == nil:
			t.Errorf("%s: a new claim acquired %s's pair although it was held (%s)", where, name, p.State())
		case !p.Held() && err != nil:
			t.Errorf("%s: a new claim could not acquire %s's free pair: %v", where, name, err)
		case err != nil && !errors.As(err, &ref):
			t.Errorf("%s: acquire on %s's pair: %v", where, name, err)
		}
		if err == nil {
			break // the pairs of a scenario may share a key: one new claim is enough
		}
	}
}

// checkClassify classifies a pair on a host where no owner runs and checks
// that the answer is resolved without guessing: free only when nothing
// held it, stopped only with a proof that verifies (and never a no-unit
// proof for a claim whose spawn marker was acknowledged), and otherwise
// uncertain or stopping with a reason, the pair still held.
func checkClassify(t *testing.T, s *claimstore.Store, seat, session claimstore.Key, marked map[string]bool, where string) *claimstore.Result {
	t.Helper()
	before, err := s.Pair(context.Background(), seat, session)
	if err != nil {
		t.Fatalf("%s: pair: %v", where, err)
	}
	res, err := s.Classify(context.Background(), seat, session, &claimstore.ClassifyOptions{Units: absentUnits{}})
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return nil
	}
	after, err := s.Pair(context.Background(), seat, session)
	if err != nil {
		t.Fatalf("%s: pair: %v", where, err)
	}
	switch res.Outcome {
	case claimstore.OutcomeFree:
		if before.Held() {
			t.Errorf("%s: free, but the pair was held (%s)", where, before.State())
		}
	case claimstore.OutcomeStopped:
		if after.Held() {
			t.Errorf("%s: stopped, but the pair is still held (%s)", where, after.State())
		}
		for _, hd := range []*claimstore.Head{after.Seat, after.Session} {
			if hd.Record == nil {
				continue
			}
			if err := s.VerifyProof(context.Background(), hd.Record); err != nil {
				t.Errorf("%s: %s stopped with a proof that does not verify: %v", where, hd.Key, err)
			}
			if hd.Record.Proof != nil && hd.Record.Proof.Kind == claimstore.ProofNoUnit && marked[hd.Record.ClaimID] {
				t.Errorf("%s: %s stopped with a no-unit proof, but claim %s's spawn marker was acknowledged", where, hd.Key, hd.Record.ClaimID)
			}
		}
	case claimstore.OutcomeUncertain, claimstore.OutcomeStopping:
		if res.Refusal == nil && res.Needs == "" {
			t.Errorf("%s: %s without a reason", where, res.Outcome)
		}
		if !after.Held() {
			t.Errorf("%s: %s, but the pair reads free", where, res.Outcome)
		}
	default:
		t.Errorf("%s: outcome %s on a host where no owner runs", where, res.Outcome)
	}
	// Classifying again on the same evidence publishes nothing new
	// that changes the outcome.
	res2, err := s.Classify(context.Background(), seat, session, &claimstore.ClassifyOptions{Units: absentUnits{}})
	if err != nil {
		t.Errorf("%s: classify again: %v", where, err)
	} else if res.Free() != res2.Free() {
		t.Errorf("%s: classified twice: %s then %s", where, res.Outcome, res2.Outcome)
	}
	return res
}

// keyOracle reads a key's history straight from the tree, not through the
// store: the highest revision and the state it reads as.
func keyOracle(st *crashfs.FS, k claimstore.Key) (max uint64, state claimstore.State, files map[uint64][]byte) {
	dir := path.Join(root, string(k.Kind), k.Hash())
	files = map[uint64][]byte{}
	for p, data := range st.Files(dir) {
		if path.Dir(p) != dir {
			continue
		}
		if n, ok := claimstore.ParseRevisionName(path.Base(p)); ok {
			files[n] = data
			if n > max {
				max = n
			}
		}
	}
	if max == 0 {
		return 0, claimstore.Stopped, files
	}
	rec, err := claimstore.DecodeRecord(files[max], k, max)
	switch {
	case err != nil:
		return max, claimstore.Uncertain, files
	case rec.State == claimstore.Stopped && rec.Proof == nil:
		return max, claimstore.Uncertain, files
	}
	return max, rec.State, files
}

func rank(s claimstore.State) int {
	for i, x := range claimstore.States {
		if x == s {
			return i
		}
	}
	return -1
}

// checkInvariants checks the crash model's guarantees (ARCHITECTURE.md,
// "Crash model") on one crash state: before the crash the files were
// before; holders says whether the acknowledged holders must still hold
// their keys.
func checkInvariants(t *testing.T, w *world, before map[string][]byte, st *crashfs.FS, where string, holders bool) {
	t.Helper()
	files := st.Files(root)
	// An acknowledged revision (or proof) survives any crash.
	for _, p := range sortedPaths(w.acked) {
		got, ok := files[p]
		if !ok {
			t.Errorf("%s: acknowledged %s is lost", where, p)
		} else if !bytes.Equal(got, w.acked[p]) {
			t.Errorf("%s: acknowledged %s changed content:\nwas %s\nnow %s", where, p, w.acked[p], got)
		}
	}
	// A revision name never changes content, and only ever names complete
	// contents: whatever a crash kept is what the page cache showed.
	for p, data := range files {
		_, isRev := claimstore.ParseRevisionName(path.Base(p))
		isProof := path.Dir(p) == path.Join(root, claimstore.ProofDir) && !strings.HasPrefix(path.Base(p), vfs.TempPrefix)
		if !isRev && !isProof {
			continue
		}
		if want, ok := before[p]; ok && !bytes.Equal(data, want) {
			t.Errorf("%s: %s reads %q after the crash but %q before", where, p, data, want)
		}
	}
	s := w.open(st.Snapshot(), &hostidtest.Host{Machine: testMachine, Boot: bootC}, nil)
	for name, ks := range w.keys {
		p, err := s.Pair(context.Background(), ks[0], ks[1])
		if err != nil {
			t.Fatalf("%s: pair of %s: %v", where, name, err)
		}
		for _, h := range []*claimstore.Head{p.Seat, p.Session} {
			max, state, revs := keyOracle(st, h.Key)
			// Head probes a dense history; below a gap it may stop short,
			// but only on a held revision, and a free-looking head is
			// confirmed by a listing (a revision beyond a gap makes it
			// damaged: uncertain, more conservative than the revision).
			if h.N != max && !(h.N < max && h.Held()) {
				t.Errorf("%s: %s: Head says revision %d, the directory's highest is %d", where, h.Key, h.N, max)
			}
			if h.N == max && h.State() != state && !(h.Damage != nil && h.State() == claimstore.Uncertain) {
				t.Errorf("%s: %s: Head reads %s, the highest revision reads %s", where, h.Key, h.State(), state)
			}
			// The pair is never less conservative than either key.
			if rank(p.State()) > rank(state) {
				t.Errorf("%s: pair %s reads %s, less conservative than %s's %s", where, name, p.State(), h.Key, state)
			}
			checkMarker(t, where, h.Key, revs)
		}
	}
	// No two claims are both acknowledged holders of one key, and an
	// acknowledged holder still holds both its keys.
	for id, ks := range w.holders {
		if !holders {
			break
		}
		for _, k := range ks {
			h, err := s.Head(context.Background(), k)
			if err != nil {
				t.Fatal(err)
			}
			// The holder's own unacknowledged release may have freed
			// it; nothing else may. A damaged head (only ever made
			// outside the protocol) holds the key for nobody, which is
			// safe.
			if h.Record == nil && h.Held() {
				continue
			}
			if h.Record == nil || h.Record.ClaimID != id || !h.Held() && h.Record.Proof.Kind != claimstore.ProofCohort {
				who := "nobody"
				if h.Record != nil {
					who = h.Record.ClaimID + " in state " + string(h.State())
				}
				t.Errorf("%s: claim %s is an acknowledged holder of %s, but its head %d is held by %s", where, id, k, h.N, who)
			}
		}
	}
}

// checkMarker: once a claim's revision on a key carries the spawn marker,
// every later revision of that claim on that key carries it too.
func checkMarker(t *testing.T, where string, k claimstore.Key, revs map[uint64][]byte) {
	t.Helper()
	var ns []uint64
	for n := range revs {
		ns = append(ns, n)
	}
	sort.Slice(ns, func(i, j int) bool { return ns[i] < ns[j] })
	marked := map[string]uint64{}
	for _, n := range ns {
		rec, err := claimstore.DecodeRecord(revs[n], k, n)
		if err != nil {
			continue
		}
		if rec.SpawnMarker() {
			if _, ok := marked[rec.ClaimID]; !ok {
				marked[rec.ClaimID] = n
			}
		} else if m, ok := marked[rec.ClaimID]; ok {
			t.Errorf("%s: %s: claim %s's revision %d dropped the spawn marker set at revision %d", where, k, rec.ClaimID, n, m)
		}
	}
}

func sortedPaths(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
