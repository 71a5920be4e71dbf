package claimstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/claimstore/claimstore/hostid"
)

// A classification walks down the decision table (ARCHITECTURE.md,
// "Recovery: the decision table"): each row reads what the rows above it
// established and either decides the outcome or passes to the next. The
// rows are in the table's order, numbered as it numbers them; the rows
// the table numbers with a letter sit between its numbered rows: 1a
// frees on an operator's decommission record what row 2 would hold as
// another machine's, and 3a and 6a are guards. TestDecisionRowsMatchArchitecture keeps the
// two in lockstep.

// judgement is one classification in progress: the pair as read, and what
// each row established for the rows below it.
type judgement struct {
	s               *Store
	ctx             context.Context
	opts            *ClassifyOptions
	seatK, sessionK Key
	p               *Pair
	res             *Result
	held            []*Head // the held heads, seat first
	ours            []*Head // the heads of the claim judged, seat first
	latest          *Record // the claim's latest record
	claim           *Claim
	owner           Owner
	ownerErr        error
	marker          json.RawMessage // the claim's spawn marker, if any
	boot            string          // this boot's id
	// decommission is why row 1a did not free another machine's claim
	// although its machine has a decommission record: row 2 says it.
	decommission string
}

// decisionRow is one row of the decision table.
type decisionRow struct {
	step string // the row's number in ARCHITECTURE.md's table
	when string // its condition, as the table words it
	// decide decides the outcome and returns true, or returns false for
	// the next row to look. An error ends the classification.
	decide func(*judgement) (bool, error)
}

var decisionTable = []decisionRow{
	{"1", "neither key held", (*judgement).free},
	{"1a", "a claim of a decommissioned machine, from a boot its record covers", (*judgement).decommissioned},
	{"2", "a held head from another machine id", (*judgement).foreign},
	{"3", "a damaged head", (*judgement).damaged},
	{"3a", "a release cut between the keys whose other key another claim then took", (*judgement).movedRelease},
	{"4", "keys held by different claims", (*judgement).twoClaims},
	{"5", "caller adopts the recorded owner (pid + incarnation)", (*judgement).adopted},
	{"6", "owner live, unknown or invalid", (*judgement).ownerNotGone},
	{"6a", "the claim's record names another pair", (*judgement).otherPair},
	{"7", "claim from an earlier boot of this machine", (*judgement).earlierBoot},
	{"8", "one key already stopped with a proof", (*judgement).cutRelease},
	{"9", "reserved, no spawn marker, unit absent or none named", (*judgement).nothingRan},
	{"10", "anything else", (*judgement).mayRun},
}

func (s *Store) classifyOnce(ctx context.Context, seatK, sessionK Key, opts *ClassifyOptions) (*Result, error) {
	// Read as for a write: a held head below a gap must not be judged as
	// if it were the key's newest revision.
	p, err := s.pair(ctx, seatK, sessionK, true)
	if err != nil {
		return nil, err
	}
	j := &judgement{s: s, ctx: ctx, opts: opts, seatK: seatK, sessionK: sessionK, p: p,
		res: &Result{Seat: p.Seat, Session: p.Session, DryRun: opts.DryRun}}
	for _, h := range []*Head{p.Seat, p.Session} {
		if h.Held() {
			j.held = append(j.held, h)
		}
	}
	for _, row := range decisionTable {
		done, err := row.decide(j)
		if err != nil {
			return nil, err
		}
		if done {
			return j.res, nil
		}
	}
	panic("claimstore: the decision table's last row decides every pair")
}

// 1. Reported free on heads a crashed writer may have linked and not made
// durable: they are made durable first, or a power cut could take the
// stopped revisions back after "free" was said.
func (j *judgement) free() (bool, error) {
	if j.p.Held() {
		return false, nil
	}
	if !j.opts.DryRun {
		if err := j.s.syncHeads(j.ctx, j.p.Seat, j.p.Session); err != nil {
			return false, err
		}
	}
	j.res.Outcome = OutcomeFree
	return true, nil
}

// refused ends the classification uncertain with the refusal the held pair
// gives.
func (j *judgement) refused() {
	r := j.s.Refusal(j.p)
	j.res.Outcome, j.res.Refusal, j.res.ClaimID = OutcomeUncertain, r, r.ClaimID
	j.res.Damaged = r.Code == UnsafeReplacement
}

// 1a. Another machine's claim, of a boot that machine's newest
// decommission record names: the operator asserted that no writer of that
// boot will ever run again (docs/DECOMMISSION.md, "What the operator
// asserts"), which is the one fact about another machine's writer that
// this machine can rest on.
// Everything else about the pair must be as plain as row 7 needs it: one
// claim holding, no damaged head, the claim's own pair, a well-formed boot
// its owner agrees with. Anything less is left to row 2 (held,
// foreign-host), with the reason. A claim of this machine is never freed
// here, whatever a record says: rows 5 to 10 judge it on its processes.
func (j *judgement) decommissioned() (bool, error) {
	s := j.s
	mine, err := s.machineID()
	if err != nil {
		return false, nil // row 2 refuses: this machine cannot be told apart
	}
	var id, machine string
	for _, h := range j.held {
		if h.Record == nil || h.Damage != nil || h.Record.Host.MachineID == mine {
			return false, nil
		}
		if id != "" && h.Record.ClaimID != id {
			return false, nil
		}
		id, machine = h.Record.ClaimID, h.Record.Host.MachineID
	}
	if !hostid.ValidMachineID(machine) {
		return false, nil
	}
	d, _, err := s.currentDecommission(j.ctx, machine)
	if err != nil {
		j.decommission = fmt.Sprintf("machine %s's decommission records cannot be read (%v), so nothing is freed on them", machine, err)
		return false, nil
	}
	if d == nil {
		return false, nil
	}
	if d.Lift() {
		j.decommission = fmt.Sprintf("machine %s's decommission was lifted by record %s, so classify frees nothing on it; decommission it again if it is gone", machine, d.ID)
		return false, nil
	}
	var ours []*Head
	for _, h := range []*Head{j.p.Seat, j.p.Session} {
		if h.Record != nil && h.Record.ClaimID == id {
			ours = append(ours, h)
		}
	}
	latest := ours[0].Record
	owner, ownerErr := latest.Owner()
	for _, h := range ours {
		if !d.Covers(machine, h.Record.Host.BootID) {
			j.decommission = fmt.Sprintf("machine %s is decommissioned by record %s, but claim %s is from boot %q, which the record does not name (it names %s): a boot it does not cover may be a later one, and is never freed by it",
				machine, d.ID, id, h.Record.Host.BootID, strings.Join(d.BootIDs, ", "))
			return false, nil
		}
	}
	if why := bootEvidence(latest, owner, ownerErr); why != "" {
		j.decommission = fmt.Sprintf("machine %s is decommissioned by record %s, but claim %s's boot cannot be judged: %s", machine, d.ID, id, why)
		return false, nil
	}
	if pk := pairOf(latest); pk != nil && (pk[0] != j.seatK || pk[1] != j.sessionK) {
		j.decommission = fmt.Sprintf("machine %s is decommissioned by record %s, but claim %s belongs to the pair %s + %s: classify that pair", machine, d.ID, id, pk[0], pk[1])
		return false, nil
	}
	res := j.res
	res.ClaimID, res.Record, res.Decommission = id, latest, d
	j.claim = &Claim{ID: id, Seat: j.seatK, Session: j.sessionK, SeatRev: j.p.Seat.N, SessionRev: j.p.Session.N, Record: latest.clone()}
	next := latest.clone()
	next.State, next.Proof = Stopped, &Proof{Kind: ProofDecommissioned, Ref: d.ID, raw: decommissionProofJSON(d.ID)}
	// A release cut between the keys is finished with its own proof, as
	// row 8 would: the writer's own evidence is better than the operator's.
	for _, h := range ours {
		if h.Record.State == Stopped && h.Record.Proof != nil {
			next = h.Record.clone()
			res.Completed = true
		}
	}
	if !res.Completed {
		if err := applyFields(&next.Fields, j.opts.StoppedFields); err != nil {
			return false, err
		}
	}
	setMarker(next, spawnMarkerOf(ours))
	res.Outcome, res.Proof = OutcomeStopped, next.Proof
	return true, s.finish(j.ctx, j.claim, j.p, next, res)
}

// 2. A claim of another machine (or of a machine whose own id cannot be
// read) can only be judged there.
func (j *judgement) foreign() (bool, error) {
	if j.s.Refusal(j.p).Code != ForeignHost {
		return false, nil
	}
	j.refused()
	if j.decommission != "" {
		j.res.Refusal.Reason += "; " + j.decommission
	}
	return true, nil
}

// 3. A damaged head holds its key until an operator repairs it.
func (j *judgement) damaged() (bool, error) {
	if !(j.p.Seat.Damage != nil && j.p.Seat.Held() || j.p.Session.Damage != nil && j.p.Session.Held()) {
		return false, nil
	}
	j.refused()
	return true, nil
}

// 3a. A release cut between the keys, whose other key was then taken by
// another claim, reads as two claims; completeMovedRelease resolves it.
func (j *judgement) movedRelease() (bool, error) {
	r, err := j.s.completeMovedRelease(j.ctx, j.p, j.held, j.res)
	if r != nil {
		j.res = r
	}
	return r != nil || err != nil, err
}

// 4. Two claims on one pair: nothing proves either writer over.
func (j *judgement) twoClaims() (bool, error) {
	if len(j.held) != 2 || j.held[0].Record.ClaimID == j.held[1].Record.ClaimID {
		return false, nil
	}
	j.res.Outcome, j.res.Refusal = OutcomeUncertain, j.s.Refusal(j.p)
	return true, nil
}

// 5. The claim judged from here on, and its latest record: every step
// publishes on the seat key first, so when the seat's head belongs to the
// claim it is the newer of the two; wall-clock writtenAt is never
// consulted. The caller adopting this very owner owns the pair.
func (j *judgement) adopted() (bool, error) {
	id := j.held[0].Record.ClaimID
	j.res.ClaimID = id
	for _, h := range []*Head{j.p.Seat, j.p.Session} {
		if h.Record != nil && h.Record.ClaimID == id {
			j.ours = append(j.ours, h)
		}
	}
	j.latest = j.ours[0].Record
	j.res.Record = j.latest
	j.claim = &Claim{ID: id, Seat: j.seatK, Session: j.sessionK, SeatRev: j.p.Seat.N, SessionRev: j.p.Session.N, Record: j.latest.clone()}
	j.owner, j.ownerErr = j.latest.Owner()
	a := j.opts.Adopt
	if a == nil || j.ownerErr != nil || j.owner.PID != a.PID || !bytes.Equal(compact(j.owner.Incarnation), compact(a.Incarnation)) {
		return false, nil
	}
	j.res.Outcome, j.res.Claim = OutcomeOwned, j.claim
	return true, nil
}

// 6. Only a proven-gone owner goes further.
func (j *judgement) ownerNotGone() (bool, error) {
	j.res.Owner, j.res.OwnerReason = j.s.judgeOwner(j.latest)
	if j.res.Owner == hostid.Gone {
		return false, nil
	}
	id := j.claim.ID
	j.res.Outcome = Outcome(j.p.State())
	j.res.Refusal = refuse(AlreadyActive, id, fmt.Sprintf("claim %s's owner is %s: %s", id, j.res.Owner, j.res.OwnerReason), nil, j.seatK, j.sessionK)
	return true, nil
}

// 6a. A claim that names its own pair is finished only there: publishing
// its revisions here would spread it onto a key it never held.
func (j *judgement) otherPair() (bool, error) {
	pk := pairOf(j.latest)
	if pk == nil || pk[0] == j.seatK && pk[1] == j.sessionK {
		j.marker = spawnMarkerOf(j.ours)
		return false, nil
	}
	id := j.claim.ID
	j.res.Outcome = OutcomeUncertain
	j.res.Refusal = refuse(UnsafeReplacement, id, fmt.Sprintf("claim %s belongs to the pair %s + %s, not to this pair; classify that pair", id, pk[0], pk[1]), nil, j.seatK, j.sessionK)
	return true, nil
}

// 7. Another boot of this machine: every process of that boot is gone.
func (j *judgement) earlierBoot() (bool, error) {
	s, latest, id := j.s, j.latest, j.claim.ID
	boot, err := s.host.BootID()
	if err != nil {
		return false, fmt.Errorf("cannot read this boot's id, so no claim can be judged: %w", err)
	}
	j.boot = boot
	if latest.Host.BootID == boot {
		return false, nil
	}
	res := j.res
	// Only a well-formed boot id that is consistent with the owner's own
	// recorded boot says "an earlier boot": a malformed or contradictory
	// one says nothing, and nothing is freed on it.
	if why := bootEvidence(latest, j.owner, j.ownerErr); why != "" {
		res.Outcome = OutcomeUncertain
		res.Refusal = refuse(UnsafeReplacement, id, fmt.Sprintf("claim %s's boot cannot be judged: %s", id, why), nil, j.seatK, j.sessionK)
		return true, nil
	}
	issuer := j.opts.BootProofs
	if issuer == nil {
		issuer = storeIssuer{s}
	}
	var ref string
	for _, h := range j.ours {
		// A classification cut after its first stopped revision left a
		// boot proof: finish with it rather than issue another. One of
		// this store's must verify; another issuer's cannot be checked
		// here, and finishing with it is what row 8 would do.
		if h.Record.State == Stopped && h.Record.Proof != nil && h.Record.Proof.Kind == ProofBoot &&
			(!isProofID(h.Record.Proof.Ref) || s.VerifyProof(j.ctx, h.Record) == nil) {
			ref = h.Record.Proof.Ref
			res.Completed = true
		}
	}
	if ref != "" {
	} else if j.opts.DryRun {
		if _, native := issuer.(storeIssuer); native {
			ref = "(to be issued)"
		}
	} else if ref, err = issuer.IssueBootProof(j.ctx, latest); err != nil {
		return false, err
	}
	if ref == "" {
		res.Outcome, res.Needs = OutcomeUncertain, NeedsBootProof
		res.Refusal = refuse(UnsafeReplacement, id, fmt.Sprintf("claim %s is from boot %s, not this boot %s, and no boot proof was issued", id, latest.Host.BootID, boot), nil, j.seatK, j.sessionK)
		return true, nil
	}
	if !j.opts.DryRun || res.Completed {
		if bp, err := s.ReadBootProof(j.ctx, ref); err == nil {
			res.BootProof = bp
		}
	}
	next := latest.clone()
	next.State, next.Proof = Stopped, &Proof{Kind: ProofBoot, Ref: ref, raw: bootProofJSON(ref)}
	if err := applyFields(&next.Fields, j.opts.StoppedFields); err != nil {
		return false, err
	}
	// After the caller's fields: a spawn marker is carried into the
	// stopped revision whatever they say (the record of what may have run
	// is the store's, as Advance refuses to clear it).
	setMarker(next, j.marker)
	res.Outcome, res.Proof = OutcomeStopped, next.Proof
	return true, s.finish(j.ctx, j.claim, j.p, next, res)
}

// 8. A release cut between the keys: finished with the same proof.
func (j *judgement) cutRelease() (bool, error) {
	for _, h := range j.ours {
		if h.Record.State == Stopped && h.Record.Proof != nil {
			next := h.Record.clone()
			setMarker(next, j.marker)
			j.res.Outcome, j.res.Proof, j.res.Completed = OutcomeStopped, next.Proof, true
			return true, j.s.finish(j.ctx, j.claim, j.p, next, j.res)
		}
	}
	return false, nil
}

// 9. Reserved with nothing spawned and no unit: nothing ever ran.
//
// A claim that names no unit (unitName null: a run without a service
// manager, AcquireFields.NoUnit) has no unit to look up; its evidence is
// the marker alone. Only this store writes such a record (the reference
// names a unit in every claim), and its supervisors publish the spawn
// marker before they start anything: reserved, unmarked, with the owner
// judged gone above, nothing was started and nothing can be. This is the
// evidence the same claim had when its record named a unit that was never
// going to exist.
func (j *judgement) nothingRan() (bool, error) {
	obs := UnitObservation{Name: j.latest.UnitName(), State: UnitUnknown, Detail: "no unit lookup configured"}
	if obs.Name == "" {
		obs.Detail = "the record names no unit"
	} else if j.opts.Units != nil {
		obs = j.opts.Units.LookupUnit(j.ctx, obs.Name)
	}
	j.res.Unit = &obs
	if j.p.State() != Reserved || j.marker != nil || (obs.State != UnitAbsent && obs.Name != "") {
		return false, nil
	}
	next := j.latest.clone()
	next.State, next.Proof = Stopped, NewProof(ProofNoUnit, "")
	if err := applyFields(&next.Fields, j.opts.StoppedFields); err != nil {
		return false, err
	}
	j.res.Outcome, j.res.Proof = OutcomeStopped, next.Proof
	return true, j.s.finish(j.ctx, j.claim, j.p, next, j.res)
}

// 10. Anything else may still run. An absent unit after a spawn is an
// observation, not a proof; the marker is carried, never dropped.
func (j *judgement) mayRun() (bool, error) {
	latest, res, opts, id := j.latest, j.res, j.opts, j.claim.ID
	next := latest.clone()
	next.State = Uncertain
	if latest.State == Stopping && latest.StopRequested() {
		next.State = Stopping
		res.ResumeStop, _ = latest.Fields.Get(fieldStop)
	}
	setMarker(next, j.marker)
	if opts.Adopt != nil {
		raw, err := jsJSON(opts.Adopt)
		if err != nil {
			return false, err
		}
		next.Fields.Set(fieldOwner, raw)
		res.Adopted = true
	}
	res.Outcome = Outcome(next.State)
	obs := res.Unit
	writer := fmt.Sprintf("unit %s: %s", obs.State, obs.Detail)
	if pg := latest.ProcessGroup(); pg > 0 {
		writer = fmt.Sprintf("process group %d, run without a service manager", pg)
	}
	res.Refusal = refuse(UnsafeReplacement, id, fmt.Sprintf("claim %s's owner is gone, but its writer may still run (%s)", id, writer), nil, j.seatK, j.sessionK)
	if err := j.s.finish(j.ctx, j.claim, j.p, next, res); err != nil {
		return false, err
	}
	if opts.Adopt != nil || next.State == Stopping {
		res.Claim = j.claim
	}
	return true, nil
}
