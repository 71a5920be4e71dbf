package fuzz

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"path"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/hostid/hostidtest"
	"github.com/claimstore/claimstore/internal/crashfs"
	"github.com/claimstore/claimstore/internal/storetest"
)

const modelRoot = "/var/claims"

// modelHost is the machine in boot b: the supervisor process owns every
// claim while its boot lasts.
func modelHost(b string) *hostidtest.Host {
	return &hostidtest.Host{Boot: b, Procs: map[int]string{supervisorPID: "500"}}
}

const supervisorPID = 4100

type absentUnits struct{}

func (absentUnits) LookupUnit(_ context.Context, name string) claimstore.UnitObservation {
	return claimstore.UnitObservation{Name: name, State: claimstore.UnitAbsent}
}

// model is the state machine: the filesystem, the supervisor's store, and
// what the supervisor was told.
type model struct {
	fs    *crashfs.FS
	host  *hostidtest.Host
	store *claimstore.Store
	boots int
	ids   int

	pairs [][2]claimstore.Key
	// live are the claims the current supervisor process holds handles
	// to (lost at a crash), by claim id.
	live map[string]*claimstore.Claim
	// holders are acknowledged holders that nothing may have freed: no
	// crash since their acquire, no release or classify attempted.
	holders map[string][2]claimstore.Key
	acked   map[string][]byte
	marked  map[string]bool
	crashes int
	stats   *modelStats
}

// modelStats counts what one run of the model did: the steps it ran, and
// each action by outcome ("acquire", "acquire refused", "acquire cut",
// "advance stopping", "release idle", "classify owned", ...). A nil
// *modelStats counts nothing.
type modelStats struct {
	steps   int
	actions map[string]int
}

func newModelStats() *modelStats { return &modelStats{actions: map[string]int{}} }

func (st *modelStats) note(action string) {
	if st != nil {
		st.actions[action]++
	}
}

func (st *modelStats) String() string {
	names := make([]string, 0, len(st.actions))
	for a := range st.actions {
		names = append(names, a)
	}
	sortStrings(names)
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d steps:", st.steps)
	for _, a := range names {
		fmt.Fprintf(&b, " %s=%d", a, st.actions[a])
	}
	return b.String()
}

func newModel(t *rapid.T, st *modelStats) *model {
	named := rapid.Bool().Draw(t, "namedTemps")
	m := &model{fs: crashfs.New(&crashfs.Options{NamedTemps: named}),
		host: modelHost(bootID(0)), live: map[string]*claimstore.Claim{},
		holders: map[string][2]claimstore.Key{}, acked: map[string][]byte{}, marked: map[string]bool{},
		stats: st}
	if named {
		st.note("named temporaries")
	} else {
		st.note("anonymous temporaries")
	}
	if err := m.fs.MkdirAll(path.Dir(modelRoot), 0o755); err != nil {
		t.Fatal(err)
	}
	seat1, _ := claimstore.SeatKey("seat-1", "p", "/w")
	seat2, _ := claimstore.SeatKey("seat-2", "p", "/w")
	sess1, _ := claimstore.SessionKey("sess-1")
	sess2, _ := claimstore.SessionKey("sess-2")
	// Pairs share keys, so that claims contend.
	m.pairs = [][2]claimstore.Key{{seat1, sess1}, {seat1, sess2}, {seat2, sess1}}
	m.open(t)
	return m
}

func bootID(n int) string { return fmt.Sprintf("%08x-0000-4000-8000-000000000000", n) }

func (m *model) open(t *rapid.T) {
	s, err := storetest.Open(modelRoot, &storetest.Options{FS: m.fs, Host: m.host, Now: func() time.Time { return time.Unix(1, 0) }, Sequential: true})
	if err != nil {
		t.Fatal(err)
	}
	m.store = s
}

func (m *model) ack(t *rapid.T, k claimstore.Key, n uint64) {
	p := path.Join(modelRoot, string(k.Kind), k.Hash(), claimstore.RevisionName(n))
	data, ok := m.fs.Files(path.Dir(p))[p]
	if !ok {
		t.Fatalf("acknowledged %s is not there", p)
	}
	m.acked[p] = data
}

// arm draws whether the next operation is cut by a power failure, and
// after how many filesystem calls.
func (m *model) arm(t *rapid.T) {
	if k := rapid.IntRange(-3, 40).Draw(t, "cutAfter"); k >= 0 {
		m.fs.StopAfter(k)
	}
}

// settle handles the end of an operation: if the filesystem was stopped,
// the power fails: one of the crash states becomes the disk, the machine
// boots again, and the supervisor restarts with no claims in hand.
func (m *model) settle(t *rapid.T) bool {
	if !m.fs.Stopped() {
		m.fs.SetHook(nil)
		return false
	}
	states, _, err := m.fs.CrashStates(crashfs.ModelSubset, 1<<12)
	if err != nil {
		t.Fatal(err)
	}
	m.fs = states[rapid.IntRange(0, len(states)-1).Draw(t, "crashState")]
	m.boots++
	m.crashes++
	m.host = modelHost(bootID(m.boots))
	m.live = map[string]*claimstore.Claim{}
	m.holders = map[string][2]claimstore.Key{}
	m.open(t)
	return true
}

func (m *model) newID() string {
	m.ids++
	return fmt.Sprintf("c%024x", m.ids)
}

func (m *model) acquire(t *rapid.T) {
	pk := m.pairs[rapid.IntRange(0, len(m.pairs)-1).Draw(t, "pair")]
	m.arm(t)
	c, err := m.store.Acquire(context.Background(), pk[0], pk[1], claimstore.AcquireFields{ClaimID: m.newID(), Owner: claimstore.Owner{PID: supervisorPID, Start: "500", Boot: m.host.Boot}})
	if m.settle(t) {
		m.stats.note("acquire cut")
		return
	}
	var ref *claimstore.Refusal
	switch {
	case errors.As(err, &ref):
		m.stats.note("acquire refused")
		return
	case err != nil:
		t.Fatalf("acquire: %v", err)
	}
	for id, ks := range m.holders {
		if ks[0] == pk[0] || ks[1] == pk[1] {
			t.Fatalf("acquire of %v acknowledged while claim %s is an acknowledged holder of %v", pk, id, ks)
		}
	}
	m.stats.note("acquire")
	m.live[c.ID] = c
	m.holders[c.ID] = pk
	m.ack(t, c.Seat, c.SeatRev)
	m.ack(t, c.Session, c.SessionRev)
}

func (m *model) pickLive(t *rapid.T) *claimstore.Claim {
	if len(m.live) == 0 {
		return nil
	}
	ids := make([]string, 0, len(m.live))
	for id := range m.live {
		ids = append(ids, id)
	}
	sortStrings(ids)
	return m.live[rapid.SampledFrom(ids).Draw(t, "claim")]
}

func (m *model) advance(t *rapid.T, release bool) {
	action := "advance"
	if release {
		action = "release"
	}
	c := m.pickLive(t)
	if c == nil {
		m.stats.note(action + " idle")
		return
	}
	patch := claimstore.Patch{State: claimstore.Active, Fields: map[string]any{"spawnMarker": true}}
	if rapid.Bool().Draw(t, "stopping") {
		patch = claimstore.Patch{State: claimstore.Stopping, Fields: map[string]any{"stop": "requested"}}
		action = "advance stopping"
	}
	if release {
		patch = claimstore.Patch{State: claimstore.Stopped, Proof: claimstore.NewProof(claimstore.ProofCohort, "c")}
		delete(m.holders, c.ID) // from now on its own release may free it
		action = "release"
	}
	m.arm(t)
	err := m.store.Advance(context.Background(), c, patch)
	if m.settle(t) {
		m.stats.note(action + " cut")
		return
	}
	m.stats.note(action)
	var ref *claimstore.Refusal
	switch {
	case errors.As(err, &ref):
		t.Fatalf("advance of a claim the supervisor holds refused: %v", err)
	case err != nil:
		t.Fatalf("advance: %v", err)
	}
	if v, ok := patch.Fields["spawnMarker"]; ok && v == true {
		m.marked[c.ID] = true
	}
	m.ack(t, c.Seat, c.SeatRev)
	m.ack(t, c.Session, c.SessionRev)
	if release {
		delete(m.live, c.ID)
	}
}

func (m *model) classify(t *rapid.T) {
	pk := m.pairs[rapid.IntRange(0, len(m.pairs)-1).Draw(t, "pair")]
	m.arm(t)
	before, perr := m.store.Pair(context.Background(), pk[0], pk[1])
	res, err := m.store.Classify(context.Background(), pk[0], pk[1], &claimstore.ClassifyOptions{Units: absentUnits{}})
	if m.settle(t) {
		m.stats.note("classify cut")
		return
	}
	if err != nil || perr != nil {
		t.Fatalf("classify: %v %v", err, perr)
	}
	m.stats.note("classify " + string(res.Outcome))
	after, err := m.store.Pair(context.Background(), pk[0], pk[1])
	if err != nil {
		t.Fatal(err)
	}
	switch res.Outcome {
	case claimstore.OutcomeFree:
		if before.Held() {
			t.Fatalf("classify: free, but the pair was held")
		}
	case claimstore.OutcomeStopped:
		if after.Held() {
			t.Fatalf("classify: stopped, but the pair is held")
		}
		for _, h := range []*claimstore.Head{after.Seat, after.Session} {
			if h.Record == nil {
				continue
			}
			if err := m.store.VerifyProof(context.Background(), h.Record); err != nil {
				t.Fatalf("classify: %s stopped with a proof that does not verify: %v", h.Key, err)
			}
			if h.Record.Proof.Kind == claimstore.ProofNoUnit && m.marked[h.Record.ClaimID] {
				t.Fatalf("classify: %s stopped with a no-unit proof after claim %s's spawn marker was acknowledged", h.Key, h.Record.ClaimID)
			}
			if _, ok := m.holders[h.Record.ClaimID]; ok {
				t.Fatalf("classify freed claim %s, whose owner runs", h.Record.ClaimID)
			}
		}
	default:
		if !after.Held() {
			t.Fatalf("classify: %s, but the pair reads free", res.Outcome)
		}
		if res.Refusal == nil && res.Needs == "" {
			t.Fatalf("classify: %s without a reason", res.Outcome)
		}
	}
	for _, p := range res.Published {
		m.ack(t, p.Key, p.Revision)
	}
}

// check checks the invariants on the current disk.
func (m *model) check(t *rapid.T) {
	files := m.fs.Files(modelRoot)
	for p, want := range m.acked {
		if got, ok := files[p]; !ok || !bytes.Equal(got, want) {
			t.Fatalf("acknowledged %s lost or changed (present %v)", p, ok)
		}
	}
	s, err := storetest.Open(modelRoot, &storetest.Options{FS: m.fs.Snapshot(), Host: m.host, Sequential: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, pk := range m.pairs {
		p, err := s.Pair(context.Background(), pk[0], pk[1])
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range []*claimstore.Head{p.Seat, p.Session} {
			if rankOf(p.State()) > rankOf(h.State()) {
				t.Fatalf("pair %v reads %s, less conservative than %s", pk, p.State(), h.State())
			}
			var max uint64
			dir := path.Join(modelRoot, string(h.Key.Kind), h.Key.Hash())
			for f := range files {
				if n, ok := claimstore.ParseRevisionName(path.Base(f)); ok && path.Dir(f) == dir && n > max {
					max = n
				}
			}
			if h.N != max {
				t.Fatalf("%s: Head says %d, the directory's highest is %d", h.Key, h.N, max)
			}
		}
	}
	for id, ks := range m.holders {
		for _, k := range ks {
			h, err := s.Head(context.Background(), k)
			if err != nil {
				t.Fatal(err)
			}
			if h.Record == nil || h.Record.ClaimID != id || !h.Held() {
				t.Fatalf("claim %s is an acknowledged holder of %s, but its head %d is not its own", id, k, h.N)
			}
		}
	}
}

// modelFuzzSteps bounds the steps of one FuzzModel run. It is fixed, not
// a flag: a corpus entry's bytes decode to the same run only for the same
// bound.
const modelFuzzSteps = 30

// modelProp runs the model for at most maxSteps steps, counting into st
// (which may be nil).
func modelProp(maxSteps int, st *modelStats) func(*rapid.T) {
	return func(t *rapid.T) {
		if st != nil {
			*st = *newModelStats()
		}
		runModel(t, maxSteps, st)
	}
}

func runModel(t *rapid.T, maxSteps int, st *modelStats) {
	m := newModel(t, st)
	steps := rapid.IntRange(1, maxSteps).Draw(t, "steps")
	for range steps {
		if st != nil {
			st.steps++
		}
		switch rapid.IntRange(0, 4).Draw(t, "op") {
		case 0:
			m.acquire(t)
		case 1:
			m.advance(t, false)
		case 2:
			m.advance(t, true)
		default:
			m.classify(t)
		}
		m.check(t)
	}
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// rapidSteps is rapid's -rapid.steps (30 unless raised).
func rapidSteps() int {
	if f := flag.Lookup("rapid.steps"); f != nil {
		if n, ok := f.Value.(flag.Getter).Get().(int); ok && n > 0 {
			return n
		}
	}
	return modelFuzzSteps
}

// TestModel runs the state machine as a property test: -rapid.checks N
// runs more of them, -rapid.steps N makes each up to N steps long.
func TestModel(t *testing.T) {
	rapid.Check(t, modelProp(rapidSteps(), nil))
}

// FuzzModel feeds the fuzzer's bytes to rapid as its random bitstream. Its
// seeds are the committed testdata/fuzz/FuzzModel entries, long enough
// that each runs the model for many steps; TestModelCorpus fails if one
// runs out of bytes (rapid skips it) and checks that together they
// exercise every action.
func FuzzModel(f *testing.F) {
	f.Fuzz(rapid.MakeFuzz(modelProp(modelFuzzSteps, nil)))
}
