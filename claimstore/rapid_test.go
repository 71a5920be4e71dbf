package claimstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/hostid/hostidtest"
)

// The state machine below drives several claimants (each with its own
// Store on one shared root, as separate supervisors would be) through
// acquires, advances and releases on overlapping seats and sessions. A
// barrier plan, drawn per operation, either crashes the operation at a
// barrier, lets another claimant run an operation at that moment, or has a
// rogue writer publish on the key being written (taking the very number,
// or moving the head). A model tracks what the store acknowledged, and the
// guarantees of ARCHITECTURE.md's crash model are checked after every step.

const (
	smClaimants = 3
	smSeats     = 3
	smSessions  = 3
)

// keyStatus is what the model knows of a key's head.
type keyStatus int

const (
	kFree    keyStatus = iota // head is free (no history, or stopped with a proof)
	kHeld                     // head holds the key
	kUnknown                  // a crash or a partial step: either may be true
)

type keyModel struct {
	status keyStatus
	claim  string // the claim the head belongs to, when the model knows it
}

// smClaim is a claim a claimant acquired, as the model sees it.
type smClaim struct {
	c     *Claim
	owner int
	// live: the claimant may still use it. A crash (the supervisor died), a
	// refusal (the claim was broken under it) or a release ends that.
	live bool
	pid  int // the owner process
}

type planMode int

const (
	planNone planMode = iota
	planCrash
	planInterleave
	planRogue
)

// plan says what the barrier hook does during the current operation.
type plan struct {
	mode    planMode
	barrier Barrier
	nth     int // at the nth time the operation meets barrier
	seen    int
	fired   bool
	// interleave: the other claimant's operation to run.
	other func()
	// rogue: the keys a rogue writer published on during the operation.
	rogueKeys []Key
}

type claimMachine struct {
	t        *rapid.T
	host     *hostidtest.Host
	boots    int // the reboots so far, numbering the boot ids
	nextPID  int
	stores   []*Store
	operator *Store // reads, and the recover action
	pruner   *Store // prunes, with a clock 60 days on: every free key is old to it
	seats    []Key
	sessions []Key

	model  map[Key]*keyModel
	claims []*smClaim
	// holders maps a key to the acknowledged holders: claims whose Acquire
	// succeeded and that are not over yet. Never more than one.
	holders map[Key]string
	// observed is every revision file ever seen, by path: a name never
	// changes content and never disappears.
	observed map[string][]byte

	cur    *plan // the running operation's plan; nil when none
	nested bool  // an interleaved operation is running: no plan for it
	// pending is the session of the acquire in progress, for a rogue
	// writer at between-keys, before the claim exists.
	pending Key
}

func newClaimMachine(t *rapid.T, open func(*TOpts) (*Store, error)) *claimMachine {
	m := &claimMachine{t: t, model: map[Key]*keyModel{}, holders: map[Key]string{}, observed: map[string][]byte{}}
	m.host = &hostidtest.Host{Machine: testMachine, Boot: testBoot, Procs: map[int]string{}}
	m.nextPID = 1000
	for range smClaimants {
		s, err := open(&TOpts{Host: m.host, Now: fixedNow, Barrier: m.hook, Sequential: true})
		if err != nil {
			t.Fatal(err)
		}
		m.stores = append(m.stores, s)
	}
	var err error
	if m.operator, err = open(&TOpts{Host: m.host, Now: fixedNow}); err != nil {
		t.Fatal(err)
	}
	if m.pruner, err = open(&TOpts{Host: m.host, Now: func() time.Time { return fixedNow().Add(60 * 24 * time.Hour) }}); err != nil {
		t.Fatal(err)
	}
	for i := range smSeats {
		k, _ := SeatKey(fmt.Sprint("seat-", i), "p", "w")
		m.seats = append(m.seats, k)
		m.model[k] = &keyModel{}
	}
	for i := range smSessions {
		k, _ := SessionKey(fmt.Sprint("session-", i))
		m.sessions = append(m.sessions, k)
		m.model[k] = &keyModel{}
	}
	return m
}

// hook is every claimant store's barrier hook: it carries out the plan of
// the operation in progress.
func (m *claimMachine) hook(p Point) error {
	pl := m.cur
	if pl == nil || m.nested || pl.fired || pl.mode == planNone || p.Barrier != pl.barrier {
		return nil
	}
	pl.seen++
	if pl.seen != pl.nth {
		return nil
	}
	pl.fired = true
	switch pl.mode {
	case planCrash:
		return errCrash
	case planInterleave:
		m.nested = true
		pl.other()
		m.nested = false
	case planRogue:
		k, n := p.Key, p.Revision // before the link: take the very number
		switch p.Barrier {
		case BarrierLinked, BarrierDirSynced:
			n++ // after it: move the head under the writer
		case BarrierBetweenKeys:
			// Take the session the operation is about to write.
			k = m.sessionOf(p)
			h, err := m.operator.Head(context.Background(), k)
			if err != nil {
				m.t.Fatal(err)
			}
			n = h.N + 1
		}
		rec := refRecord(k, n, NewClaimID(), "uncertain").bytes()
		err := m.operator.Backend().Publish(context.Background(), k.Loc(), n, rec, nil)
		if errors.Is(err, ErrRevisionExists) && (p.Barrier == BarrierTempWritten || p.Barrier == BarrierTempSynced) {
			// The number was taken before this operation began: a claim
			// that lost its key still writes its temporaries (its step
			// checks its heads while they are fsynced), and then refuses.
			// There is nothing left to take.
			m.t.Logf("  rogue writer found %v revision %d taken already", k, n)
			return nil
		}
		if err != nil {
			m.t.Fatalf("rogue publish of %v revision %d: %v", k, n, err)
		}
		pl.rogueKeys = append(pl.rogueKeys, k)
		m.t.Logf("  rogue writer published %v revision %d", k, n)
	}
	return nil
}

// sessionOf finds the session key of the claim a between-keys point is for.
func (m *claimMachine) sessionOf(p Point) Key {
	for _, c := range m.claims {
		if c.c.ID == p.ClaimID {
			return c.c.Session
		}
	}
	return m.pending
}

// drawPlan draws the plan of an operation of claimant who.
func (m *claimMachine) drawPlan(t *rapid.T, who int) *plan {
	pl := &plan{mode: planMode(rapid.IntRange(0, 3).Draw(t, "plan"))}
	if pl.mode != planNone {
		pl.barrier = rapid.SampledFrom(Barriers).Draw(t, "barrier")
		pl.nth = rapid.IntRange(1, 2).Draw(t, "nth")
	}
	if pl.mode == planInterleave {
		other := (who + rapid.IntRange(1, smClaimants-1).Draw(t, "other")) % smClaimants
		op := m.drawOp(t, other)
		pl.other = func() { m.t.Logf("  interleaved:"); op(nil) }
	}
	return pl
}

// drawOp draws an operation for claimant who; run it with a plan (nil for
// none).
func (m *claimMachine) drawOp(t *rapid.T, who int) func(*plan) {
	switch rapid.IntRange(0, 2).Draw(t, "op") {
	case 0:
		seat := rapid.SampledFrom(m.seats).Draw(t, "seat")
		session := rapid.SampledFrom(m.sessions).Draw(t, "session")
		return func(pl *plan) { m.acquire(who, seat, session, pl) }
	case 1:
		i := rapid.IntRange(0, 100).Draw(t, "claim")
		state := rapid.SampledFrom([]State{Active, Stopping, Uncertain, Reserved}).Draw(t, "state")
		marker := rapid.Bool().Draw(t, "marker")
		return func(pl *plan) {
			m.advance(who, i, Patch{State: state, Fields: map[string]any{"spawnMarker": marker}}, pl)
		}
	default:
		i := rapid.IntRange(0, 100).Draw(t, "claim")
		kind := rapid.SampledFrom([]ProofKind{ProofCohort, ProofNoUnit}).Draw(t, "proof")
		return func(pl *plan) { m.release(who, i, NewProof(kind, "ref-1"), pl) }
	}
}

// liveClaim returns claimant who's i-th live claim (mod their number).
func (m *claimMachine) liveClaim(who, i int) *smClaim {
	var mine []*smClaim
	for _, c := range m.claims {
		if c.owner == who && c.live {
			mine = append(mine, c)
		}
	}
	if len(mine) == 0 {
		return nil
	}
	return mine[i%len(mine)]
}

// run runs op under plan pl (nil: a nested operation, no plan).
func (m *claimMachine) run(pl *plan, op func() error) error {
	if pl == nil {
		return op()
	}
	m.cur = pl
	defer func() { m.cur = nil }()
	return op()
}

func (m *claimMachine) afterRogue(pl *plan) {
	if pl == nil {
		return
	}
	for _, k := range pl.rogueKeys {
		*m.model[k] = keyModel{status: kHeld}
	}
}

func (m *claimMachine) acquire(who int, seat, session Key, pl *plan) {
	s := m.stores[who]
	// Each claim's supervisor is a process of its own: it runs until the
	// supervisor dies (a crash) or a reboot ends it.
	m.nextPID++
	o := Owner{PID: m.nextPID, Start: "1", Boot: m.host.Boot}
	m.host.Procs[o.PID] = "1"
	m.pending = session
	var c *Claim
	err := m.run(pl, func() error {
		var err error
		c, err = s.Acquire(context.Background(), seat, session, AcquireFields{Owner: o})
		return err
	})
	m.t.Logf("  claimant %d: Acquire(%s, %s) = %v", who, seat.Seat, session.Session, errOrID(err, c))
	switch {
	case err == nil:
		for _, k := range []Key{seat, session} {
			if h, ok := m.holders[k]; ok {
				m.t.Fatalf("two acknowledged holders of %v: %s and %s", k, h, c.ID)
			}
			m.holders[k] = c.ID
			*m.model[k] = keyModel{status: kHeld, claim: c.ID}
		}
		m.claims = append(m.claims, &smClaim{c: c, owner: who, live: true, pid: o.PID})
	case errors.Is(err, errCrash):
		delete(m.host.Procs, o.PID)
		// Whatever the crashed acquire published is held or not: unknown.
		for _, k := range []Key{seat, session} {
			if m.model[k].status == kFree {
				*m.model[k] = keyModel{status: kUnknown}
			}
		}
	case errors.As(err, new(*Refusal)):
		// A refused acquire leaves both keys as they were: it closes any
		// seat revision it made with stopped + no-unit.
		delete(m.host.Procs, o.PID)
	default:
		m.t.Fatalf("Acquire: unexpected error %v", err)
	}
	m.afterRogue(pl)
}

func errOrID(err error, c *Claim) string {
	if err != nil {
		return err.Error()
	}
	return "claim " + c.ID
}

func (m *claimMachine) advance(who, i int, p Patch, pl *plan) {
	sc := m.liveClaim(who, i)
	if sc == nil {
		return
	}
	if mk, ok := p.Fields["spawnMarker"].(bool); ok && !mk && sc.c.Record.SpawnMarker() {
		// A set marker is never cleared by a patch: the store refuses
		// before anything is published, and the claim goes on.
		if err := m.stores[who].Advance(context.Background(), sc.c, Patch{Fields: map[string]any{"spawnMarker": false}}); !errors.Is(err, ErrBadPatch) {
			m.t.Fatalf("clearing the spawn marker of %s: %v, want ErrBadPatch", sc.c.ID, err)
		}
		p.Fields["spawnMarker"] = true
	}
	err := m.run(pl, func() error { return m.stores[who].Advance(context.Background(), sc.c, p) })
	m.t.Logf("  claimant %d: Advance(%s, %s) = %v", who, sc.c.ID, p.State, err)
	m.settle(sc, err, false)
	m.afterRogue(pl)
}

func (m *claimMachine) release(who, i int, proof *Proof, pl *plan) {
	sc := m.liveClaim(who, i)
	if sc == nil {
		return
	}
	if proof.Kind == ProofNoUnit && sc.c.Record.SpawnMarker() {
		// A spawned writer is never released as "nothing ran": refused
		// before anything is published; the supervisor uses its own proof.
		if err := m.stores[who].Release(context.Background(), sc.c, proof); !errors.Is(err, ErrBadPatch) {
			m.t.Fatalf("no-unit release of spawn-marked %s: %v, want ErrBadPatch", sc.c.ID, err)
		}
		proof = NewProof(ProofCohort, "ref-1")
	}
	// Releasing means the caller holds a proof that nothing runs: from the
	// moment the release begins the claim is no holder, and a key whose
	// stopped revision landed may be taken at once (even while the
	// release is still on its way to the other key).
	for _, k := range []Key{sc.c.Seat, sc.c.Session} {
		if m.holders[k] == sc.c.ID {
			delete(m.holders, k)
		}
	}
	err := m.run(pl, func() error { return m.stores[who].Release(context.Background(), sc.c, proof) })
	m.t.Logf("  claimant %d: Release(%s, %s) = %v", who, sc.c.ID, proof.Kind, err)
	m.settle(sc, err, true)
	m.afterRogue(pl)
}

// settle updates the model after an Advance or Release of sc.
func (m *claimMachine) settle(sc *smClaim, err error, release bool) {
	// Keys another claim took meanwhile (an interleaved acquire after the
	// seat's release landed) are that claim's business.
	var keys []Key
	for _, k := range []Key{sc.c.Seat, sc.c.Session} {
		if id := m.model[k].claim; id == "" || id == sc.c.ID {
			keys = append(keys, k)
		}
	}
	switch {
	case err == nil && release:
		sc.live = false
		delete(m.host.Procs, sc.pid)
		for _, k := range keys {
			*m.model[k] = keyModel{status: kFree}
		}
	case err == nil:
		for _, k := range keys {
			*m.model[k] = keyModel{status: kHeld, claim: sc.c.ID}
		}
	case errors.Is(err, errCrash), errors.As(err, new(*Refusal)):
		if errors.Is(err, errCrash) {
			delete(m.host.Procs, sc.pid) // the supervisor died
		}
		// The supervisor died, or was told its claim broke: it uses the
		// claim no more. Its keys may be half-stepped. A claim whose
		// release began was over (the caller had the proof) and holds
		// nothing; any other stays an acknowledged holder until recovered.
		sc.live = false
		for _, k := range keys {
			*m.model[k] = keyModel{status: kUnknown}
		}
	default:
		m.t.Fatalf("unexpected error %v", err)
	}
}

// recover is the operator (classify's job, simplified): it closes a held
// key whose head belongs to no live claim with stopped + no-unit, and the
// claim stops being a holder.
func (m *claimMachine) recover(t *rapid.T) {
	var cands []Key
	for _, k := range append(slices.Clone(m.seats), m.sessions...) {
		h, err := m.operator.Head(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		// Never behind a live holder's back: only the operator's judgement
		// that nothing runs makes a key free, and a live claim runs.
		if h.Held() && h.Record != nil && !m.isLive(h.Record.ClaimID) && !m.isLive(m.holders[k]) {
			cands = append(cands, k)
		}
	}
	if len(cands) == 0 {
		t.Skip("nothing to recover")
	}
	k := rapid.SampledFrom(cands).Draw(t, "key")
	h, _ := m.operator.Head(context.Background(), k)
	rec := h.Record.clone()
	rec.State, rec.Proof = Stopped, NewProof(ProofNoUnit, "")
	won, err := m.operator.publish(context.Background(), k, h.N+1, rec)
	if err != nil || !won {
		t.Fatalf("recover publish on %v: %v, %v", k, won, err)
	}
	t.Logf("  operator: closed %v revision %d (claim %s)", k, h.N+1, rec.ClaimID)
	delete(m.holders, k)
	*m.model[k] = keyModel{status: kFree}
}

// reboot ends every process of the boot: every supervisor and writer.
// Nothing on disk changes; the claims stay held until classified.
func (m *claimMachine) reboot(t *rapid.T) {
	m.boots++
	m.host.Boot = fmt.Sprintf("22222222-0000-4000-8000-%012d", m.boots)
	m.host.Procs = map[int]string{}
	for _, c := range m.claims {
		c.live = false
	}
	t.Logf("  reboot: boot %s", m.host.Boot)
}

// ownerLive reports whether a record's owner runs now, as the model knows.
func (m *claimMachine) ownerLive(rec *Record) bool {
	o, err := rec.Owner()
	if err != nil {
		return false
	}
	_, running := m.host.Procs[o.PID]
	return running && o.Boot == m.host.Boot
}

// prune runs a prune to which every free key is old: it removes free
// sessions and compacts free seats, and must leave every held key as it
// was, never lower a seat's head (its numbering), and remove nothing else.
// What it removed is no longer expected on disk.
func (m *claimMachine) prune(t *rapid.T) {
	ctx := context.Background()
	keys := append(slices.Clone(m.seats), m.sessions...)
	before := map[Key]*Head{}
	for _, k := range keys {
		h, err := m.operator.Head(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		before[k] = h
	}
	rep, err := m.pruner.Prune(ctx, &PruneOptions{OlderThan: 30 * 24 * time.Hour, NoArchive: true})
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	t.Logf("  operator: Prune removed %d, compacted %d, kept %d", rep.Removed, rep.Compacted, rep.Kept)
	for _, k := range keys {
		h, err := m.operator.Head(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		b := before[k]
		switch {
		case b.Held():
			if !h.Held() || h.N != b.N {
				t.Fatalf("prune changed held %v: head %d (held %v), was %d", k, h.N, h.Held(), b.N)
			}
		case k.Kind == KindSeat:
			if h.N != b.N || h.Held() {
				t.Fatalf("prune moved seat %v's head from %d to %d (held %v): its numbering never restarts", k, b.N, h.N, h.Held())
			}
		default:
			if h.N != 0 && h.N != b.N {
				t.Fatalf("prune left session %v at %d, was %d: removed whole or kept", k, h.N, b.N)
			}
			if h.N == 0 {
				*m.model[k] = keyModel{status: kFree}
			}
		}
		// Prune is the one deleter: what it removed is forgotten.
		base, revs, _, err := m.operator.Backend().(storage.Compacter).ListFrom(ctx, k.Loc())
		if err != nil {
			t.Fatal(err)
		}
		have := map[uint64]bool{}
		for _, n := range revs {
			have[n] = true
		}
		for n := uint64(1); n <= b.N; n++ {
			if !have[n] {
				if n >= base && h.N != 0 {
					t.Fatalf("prune removed revision %d of %v above its base %d", n, k, base)
				}
				delete(m.observed, m.operator.KeyDir(k)+"/"+RevisionName(n))
			}
		}
	}
}

// classify is classify as an operator runs it after a crash: the decision
// is the store's, and the invariant is that nothing an owner may still
// use is ever freed.
func (m *claimMachine) classify(t *rapid.T) {
	seat := rapid.SampledFrom(m.seats).Draw(t, "seat")
	session := rapid.SampledFrom(m.sessions).Draw(t, "session")
	units := mapUnits{}
	if rapid.Bool().Draw(t, "unitAlive") {
		for _, c := range m.claims {
			units[UnitNameFor(c.c.ID)] = "alive"
		}
	}
	before, err := m.operator.Pair(context.Background(), seat, session)
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.operator.Classify(context.Background(), seat, session, &ClassifyOptions{Units: units})
	if err != nil {
		t.Fatalf("Classify(%s, %s): %v", seat.Seat, session.Session, err)
	}
	t.Logf("  operator: Classify(%s, %s) = %s, published %d", seat.Seat, session.Session, res.Outcome, len(res.Published))
	after, err := m.operator.Pair(context.Background(), seat, session)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range []*Head{before.Seat, before.Session} {
		now := []*Head{after.Seat, after.Session}[i]
		if h.Held() && h.Record != nil && m.ownerLive(h.Record) {
			if !now.Held() || now.Record == nil || now.Record.ClaimID != h.Record.ClaimID {
				t.Fatalf("classify freed or took %v, held by claim %s whose owner is live", h.Key, h.Record.ClaimID)
			}
			if now.N != h.N {
				t.Fatalf("classify published on %v, held by claim %s whose owner is live", h.Key, h.Record.ClaimID)
			}
		}
		if h.Held() && !now.Held() && res.Outcome != OutcomeStopped && !(res.Completed && stoppedIn(res, h.Key)) {
			t.Fatalf("%v became free, but the outcome is %s", h.Key, res.Outcome)
		}
	}
	for _, p := range res.Published {
		if p.State == Stopped {
			*m.model[p.Key] = keyModel{status: kFree}
			delete(m.holders, p.Key)
		} else {
			*m.model[p.Key] = keyModel{status: kHeld, claim: res.ClaimID}
		}
	}
	if res.Outcome == OutcomeStopped {
		for _, k := range []Key{seat, session} {
			if m.holders[k] == res.ClaimID {
				delete(m.holders, k)
			}
		}
	}
}

func (m *claimMachine) isLive(id string) bool {
	for _, c := range m.claims {
		if c.live && c.c.ID == id {
			return true
		}
	}
	return false
}

// check verifies the invariants against the disk.
func (m *claimMachine) check(t *rapid.T) {
	seen := map[string]bool{}
	for _, k := range append(slices.Clone(m.seats), m.sessions...) {
		dir := m.operator.KeyDir(k)
		base, revs, other, err := m.operator.Backend().(storage.Compacter).ListFrom(context.Background(), k.Loc())
		if err != nil {
			t.Fatal(err)
		}
		// Dense history from its base (1, unless prune compacted the key),
		// and nothing but revisions (no temporaries).
		for i, n := range revs {
			if n != base+uint64(i) {
				t.Fatalf("%v history is not dense from its base %d: %v", k, base, revs)
			}
		}
		if len(other) != 0 {
			t.Fatalf("%v holds non-revision names %v", k, other)
		}
		// Names never change content.
		for _, n := range revs {
			path := dir + "/" + RevisionName(n)
			data, err := m.operator.Backend().Read(context.Background(), k.Loc(), n)
			if err != nil {
				t.Fatal(err)
			}
			seen[path] = true
			if old, ok := m.observed[path]; ok && !bytes.Equal(old, data) {
				t.Fatalf("%s changed content:\n was %s\n now %s", path, old, data)
			}
			m.observed[path] = data
			if _, err := DecodeRecord(data, k, n); err != nil {
				t.Fatalf("%s is damaged: %v", path, err)
			}
		}
		// The head agrees with the model.
		h, err := m.operator.Head(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if want := base + uint64(len(revs)) - 1; len(revs) > 0 && h.N != want || len(revs) == 0 && h.N != 0 {
			t.Fatalf("%v: Head is revision %d, List says %v from base %d", k, h.N, revs, base)
		}
		km := m.model[k]
		switch km.status {
		case kFree:
			if h.Held() {
				t.Fatalf("%v: the model says free, the head is %s (claim %s)", k, h.State(), h.Record.ClaimID)
			}
		case kHeld:
			if !h.Held() {
				t.Fatalf("%v: the model says held, the head is free", k)
			}
			if km.claim != "" && h.Record.ClaimID != km.claim {
				t.Fatalf("%v: held by %s, the model says %s", k, h.Record.ClaimID, km.claim)
			}
		}
		// An acknowledged holder's key is held, by it or by whatever moved
		// it since (a rogue writer, or its own unfinished step).
		if id, ok := m.holders[k]; ok && !h.Held() {
			t.Fatalf("%v: claim %s is an acknowledged holder but the key is free", k, id)
		}
	}
	// Every revision ever seen is still there.
	for path := range m.observed {
		if !seen[path] {
			t.Fatalf("revision %s disappeared", path)
		}
	}
	// The pair state is never less conservative than either key.
	for _, seat := range m.seats {
		for _, session := range m.sessions {
			p, err := m.operator.Pair(context.Background(), seat, session)
			if err != nil {
				t.Fatal(err)
			}
			ps := p.State()
			if Conservative(ps, p.Seat.State()) != ps || Conservative(ps, p.Session.State()) != ps {
				t.Fatalf("pair (%v, %v) = %s is less conservative than %s / %s", seat, session, ps, p.Seat.State(), p.Session.State())
			}
		}
	}
}

// smRoot returns a fresh root for one run of the machine. It lives on tmpfs
// when /dev/shm is there: the machine fsyncs thousands of times per test,
// which costs milliseconds each on a disk and nothing on tmpfs, and tmpfs
// supports O_TMPFILE and link like ext4 does.
func smRoot(t *testing.T) func() string {
	base := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "claimstore-rapid-"); err == nil {
			base = dir
			t.Cleanup(func() { os.RemoveAll(dir) })
		}
	}
	if base == "" {
		t.Log("no /dev/shm: running the state machine on the test's temporary directory (slower)")
		base = t.TempDir()
	}
	n := 0
	return func() string {
		n++
		dir := filepath.Join(base, fmt.Sprint(n))
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(dir, "claims")
	}
}

// TestClaimStateMachine runs the machine over every backend (backends).
func TestClaimStateMachine(t *testing.T) {
	for _, bc := range backends(t) {
		t.Run(bc.name, func(t *testing.T) { claimStateMachine(t, bc) })
	}
}

func claimStateMachine(t *testing.T, bc backendCase) {
	nextRoot := smRoot(t)
	rapid.Check(t, func(rt *rapid.T) {
		open := bc.newRoot(t)
		if bc.dir {
			root := nextRoot()
			open = func(opts *TOpts) (*Store, error) { return OpenRoot(root, opts) }
		}
		t := rt
		m := newClaimMachine(t, open)
		t.Repeat(map[string]func(*rapid.T){
			"acquire": func(t *rapid.T) {
				who := rapid.IntRange(0, smClaimants-1).Draw(t, "who")
				seat := rapid.SampledFrom(m.seats).Draw(t, "seat")
				session := rapid.SampledFrom(m.sessions).Draw(t, "session")
				m.acquire(who, seat, session, m.drawPlan(t, who))
			},
			"advance": func(t *rapid.T) {
				who := rapid.IntRange(0, smClaimants-1).Draw(t, "who")
				if m.liveClaim(who, 0) == nil {
					t.Skip("no live claim")
				}
				i := rapid.IntRange(0, 100).Draw(t, "claim")
				state := rapid.SampledFrom([]State{Active, Stopping, Uncertain, Reserved, Stopped}).Draw(t, "state")
				m.advance(who, i, Patch{State: state, Fields: map[string]any{"spawnMarker": rapid.Bool().Draw(t, "marker")}}, m.drawPlan(t, who))
			},
			"release": func(t *rapid.T) {
				who := rapid.IntRange(0, smClaimants-1).Draw(t, "who")
				if m.liveClaim(who, 0) == nil {
					t.Skip("no live claim")
				}
				i := rapid.IntRange(0, 100).Draw(t, "claim")
				kind := rapid.SampledFrom([]ProofKind{ProofCohort, ProofNoUnit}).Draw(t, "proof")
				m.release(who, i, NewProof(kind, "ref-1"), m.drawPlan(t, who))
			},
			"recover":  m.recover,
			"classify": m.classify,
			"prune":    m.prune,
			"reboot":   m.reboot,
			"":         m.check,
		})
	})
}

// stoppedIn reports whether a classification published stopped on k.
func stoppedIn(res *Result, k Key) bool {
	for _, p := range res.Published {
		if p.Key == k && p.State == Stopped {
			return true
		}
	}
	return false
}
