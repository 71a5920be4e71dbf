package claimstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/claimstore/claimstore/hostid"
)

// UnitState is what the service manager says of a claim's unit.
type UnitState string

const (
	// UnitAbsent: the manager does not know the unit now. An observation,
	// not a proof: a unit that ran and was collected is absent too.
	UnitAbsent UnitState = "absent"
	// UnitPresent: the manager knows the unit (running, failed, ...).
	UnitPresent UnitState = "present"
	// UnitUnknown: no answer (no manager, timeout, permission).
	UnitUnknown UnitState = "unknown"
)

// UnitObservation is one answer about a unit.
type UnitObservation struct {
	Name   string
	State  UnitState
	Detail string // the manager's states, or why there was no answer
}

// UnitLookup looks up systemd units; package unitprobe provides one.
// Implementations must answer UnitUnknown, never UnitAbsent, when unsure.
type UnitLookup interface {
	LookupUnit(ctx context.Context, name string) UnitObservation
}

// ClassifyOptions configure a classification. A nil *ClassifyOptions
// means the defaults.
type ClassifyOptions struct {
	// Units looks up the claim's unit. Nil: every unit is UnitUnknown, so
	// nothing is ever freed on a unit observation.
	Units UnitLookup
	// BootProofs issues boot proofs. Nil: the store's built-in issuer,
	// which writes proof files under the root. NoBootProofs declines.
	BootProofs BootProofIssuer
	// Adopt is the owner a recovery controller takes over an orphan with:
	// if it is the recorded owner (same pid and incarnation) the pair is
	// Owned; otherwise, on an uncertain outcome, it is published as owner.
	Adopt *Owner
	// StoppedFields are members added to a stopped revision that the
	// classification publishes (for example the leaf at proof).
	StoppedFields map[string]any
	// DryRun decides and reports, but publishes nothing and issues no proof.
	DryRun bool
	// Workers bounds how many pairs ClassifyAll classifies at once: pairs
	// are independent, and a classification mostly waits for fsyncs, which
	// a disk serves better several at a time. 0 means DefaultWorkers; 1
	// classifies one pair after another. Results are reported in the same
	// order whatever the width.
	Workers int
	// Progress, if set, is called by ClassifyAll as its walk reads each
	// key, with the number read and the number of keys under the root,
	// before anything is classified.
	Progress func(read, total int)
}

// DefaultWorkers is ClassifyAll's width when ClassifyOptions.Workers is 0.
const DefaultWorkers = 8

// Outcome is what a classification concluded for a pair: Free, Owned, or
// the state the pair is left in.
type Outcome string

const (
	OutcomeFree      Outcome = "free"
	OutcomeOwned     Outcome = "owned"
	OutcomeStopped   Outcome = Outcome(Stopped)
	OutcomeUncertain Outcome = Outcome(Uncertain)
	OutcomeStopping  Outcome = Outcome(Stopping)
	OutcomeActive    Outcome = Outcome(Active)
	OutcomeReserved  Outcome = Outcome(Reserved)
)

// NeedsBootProof is Result.Needs when a claim from an earlier boot could
// be freed by a boot proof but none was issued.
const NeedsBootProof = "boot-proof"

// Published is one revision a classification published (or, in a dry run,
// would publish).
type Published struct {
	Key      Key
	Revision uint64
	State    State
}

// Result is the outcome of classifying one pair, with the evidence.
type Result struct {
	Outcome Outcome
	// Refusal says why the pair stays held, when it does for a reason
	// other than an uncertain outcome published here.
	Refusal *Refusal
	// Seat and Session are the heads as judged.
	Seat, Session *Head
	ClaimID       string
	Record        *Record // the claim's latest record, judged from
	// Owner is the recorded owner's state, and OwnerReason why.
	Owner       hostid.State
	OwnerReason string
	// Published lists every revision the call published, in order,
	// including those of an attempt that lost a number to another writer
	// and started over (the one that went on found them at the outcome).
	Published []Published
	Proof     *Proof     // the proof of a stopped outcome
	BootProof *BootProof // the boot proof issued, if one was
	// Decommission is the decommission record the claim was freed on
	// (row 1a), nil otherwise.
	Decommission *DecommissionRecord
	Completed    bool   // a release cut between the keys was completed
	Damaged      bool   // a head is damaged
	Needs        string // NeedsBootProof, or ""
	Unit         *UnitObservation
	Adopted      bool
	// Claim is the claim after classification, for an Owned pair or an
	// adopter to continue with (nil otherwise).
	Claim *Claim
	// ResumeStop is the stop request that was in flight, handed back to
	// resume, when the outcome is Stopping.
	ResumeStop json.RawMessage
	DryRun     bool
}

// Free reports whether the pair is provably free after classification.
func (r *Result) Free() bool { return r.Outcome == OutcomeFree || r.Outcome == OutcomeStopped }

// errRaced is returned inside a classification when a head moved between
// judging and publishing: the whole classification starts over. published
// is what it had published before the number it lost (the seat, when the
// session was lost), which the classification that goes on reports too:
// it finds that key at the outcome and publishes nothing more on it.
type errRaced struct{ published []Published }

func (errRaced) Error() string { return "raced" }

// Classify decides, from durable evidence only, what one pair is after a
// crash or a reboot, and publishes the outcome. In order:
//
//  1. neither key held: free;
//     1a. another machine's claim of a boot that machine's decommission
//     record covers: stopped with a decommissioned proof naming it;
//  2. a held head from another machine: uncertain, foreign-host;
//  3. a damaged head: uncertain, unsafe-replacement;
//  4. the keys held by different claims: uncertain, unsafe-replacement;
//  5. the caller adopts this very owner: owned;
//  6. the owner live, unknown or invalid: already-active, nothing published;
//  7. the claim from an earlier boot of this machine: stopped with a boot
//     proof, or uncertain needing one;
//  8. one key already stopped with a proof: the other finished with it;
//  9. reserved, no spawn marker, unit absent (or none named): stopped with a no-unit proof;
//  10. otherwise uncertain (or stopping, handed back to resume), with the
//     spawn marker carried forward.
//
// Nothing is published unless the owner is proven gone. Every publication
// is fenced on the heads judged: if one moved, the classification starts
// over from a fresh read (bounded), so two racing classifiers never both
// publish conflicting outcomes. Classifying again on the same evidence
// publishes nothing.
func (s *Store) Classify(ctx context.Context, seat, session Key, opts *ClassifyOptions) (*Result, error) {
	if err := checkKinds(seat, session); err != nil {
		return nil, err
	}
	if opts == nil {
		opts = &ClassifyOptions{}
	}
	var earlier []Published
	for range s.retries + 1 {
		res, err := s.classifyOnce(ctx, seat, session, opts)
		if r, raced := err.(errRaced); raced {
			earlier = append(earlier, r.published...)
			continue
		}
		if r, ok := err.(errRestart); ok {
			r.res.Published = slices.Concat(earlier, r.res.Published)
			return s.afterCompletion(ctx, r.res, seat, session)
		}
		if res != nil {
			res.Published = slices.Concat(earlier, res.Published)
		}
		return res, err
	}
	return &Result{Outcome: OutcomeUncertain, Published: earlier, Refusal: refuse(UnsafeReplacement, "", fmt.Sprintf("%s and %s changed during every one of %d classifications", seat, session, s.retries+1), nil, seat, session)}, nil
}

// spawnMarkerOf returns the first truthy spawn marker among the claim's
// heads, as written, or nil.
func spawnMarkerOf(ours []*Head) json.RawMessage {
	for _, h := range ours {
		if raw, ok := h.Record.Fields.Get(fieldSpawnMarker); ok && truthy(raw) {
			return raw
		}
	}
	return nil
}

func setMarker(r *Record, marker json.RawMessage) {
	if marker != nil {
		r.Fields.Set(fieldSpawnMarker, marker)
	}
}

func bootProofJSON(ref string) json.RawMessage { return proofJSON(ProofBoot, ref) }

// finish brings both keys of the claim to next, seat first, fenced on the
// heads p that the classification judged. A key already at next (same
// claim, state, proof, marker and owner) is left alone, which makes a
// second classification publish nothing. A key whose head belongs to an
// older claim that no longer holds it (a half-done acquire) gains the
// revision too.
func (s *Store) finish(ctx context.Context, c *Claim, p *Pair, next *Record, res *Result) error {
	if err := s.checkSize(next, c.Seat, c.Session); err != nil {
		return err
	}
	if !res.DryRun {
		// A key already at the outcome is not published again, but the
		// outcome rests on it: it must be durable before the other key is
		// published (a completed release) or the outcome reported.
		for _, h := range []*Head{p.Seat, p.Session} {
			if h.Damage == nil && h.Record != nil && sameOutcome(h.Record, next) {
				if err := s.syncHeads(ctx, h); err != nil {
					return err
				}
			}
		}
	}
	for _, h := range []*Head{p.Seat, p.Session} {
		if h.Damage != nil {
			return refuse(UnsafeReplacement, c.ID, fmt.Sprintf("%s has a damaged head revision %d", h.Key, h.N), h.Damage, c.Seat, c.Session)
		}
		if h.Record != nil && h.Record.ClaimID != c.ID && h.Held() {
			return refuse(UnsafeReplacement, c.ID, fmt.Sprintf("%s belongs to claim %s", h.Key, h.Record.ClaimID), nil, c.Seat, c.Session)
		}
		rev := &c.SeatRev
		if h.Key.Kind == KindSession {
			rev = &c.SessionRev
		}
		if h.Record != nil && sameOutcome(h.Record, next) {
			*rev = h.N
			continue
		}
		res.Published = append(res.Published, Published{Key: h.Key, Revision: h.N + 1, State: next.State})
		if res.DryRun {
			continue
		}
		won, err := s.publish(ctx, h.Key, h.N+1, next)
		if err != nil {
			return err
		}
		if !won {
			return errRaced{published: res.Published[:len(res.Published)-1]}
		}
		*rev = h.N + 1
		if h.Key.Kind == KindSeat {
			if err := s.pause(Point{Barrier: BarrierBetweenKeys, Key: h.Key, Revision: h.N + 1, ClaimID: c.ID}); err != nil {
				return err
			}
		}
	}
	c.Record = next
	return nil
}

func sameOutcome(a, b *Record) bool {
	if a.ClaimID != b.ClaimID || a.State != b.State || !a.Proof.equal(b.Proof) || a.SpawnMarker() != b.SpawnMarker() {
		return false
	}
	ao, _ := a.Fields.Get(fieldOwner)
	bo, _ := b.Fields.Get(fieldOwner)
	return bytes.Equal(compact(ao), compact(bo))
}

// bootEvidence says why a record's host boot id is no evidence of an
// earlier boot, or "" when it is: it must be a boot id, and the owner's own
// recorded boot, when there is one, must agree with it.
func bootEvidence(rec *Record, owner Owner, ownerErr error) string {
	if !hostid.ValidBootID(rec.Host.BootID) {
		return fmt.Sprintf("the record's host boot id %q is not a boot id", rec.Host.BootID)
	}
	if ownerErr == nil && owner.Boot != "" && owner.Boot != rec.Host.BootID {
		return fmt.Sprintf("the record's host boot %s and its owner's boot %s disagree", rec.Host.BootID, owner.Boot)
	}
	return ""
}

// judgeOwner judges a record's owner on this store's host.
func (s *Store) judgeOwner(rec *Record) (hostid.State, string) {
	owner, err := rec.Owner()
	if err != nil {
		return hostid.Invalid, err.Error()
	}
	who := owner.Identity()
	if who.Boot == "" {
		// The owner ran on the recorded host, in its boot: a later boot
		// ends it even if its pid and start ticks recur.
		who.Boot = rec.Host.BootID
	}
	return hostid.Judge(s.host, who)
}

// syncHeads makes the heads read durable (Backend.Sync), once per key and
// revision per store.
func (s *Store) syncHeads(ctx context.Context, heads ...*Head) error {
	for _, h := range heads {
		if err := s.be.Sync(ctx, h.Key.Loc(), h.N); err != nil {
			return err
		}
	}
	return nil
}

// errRestart ends a classification that completed a release on one key.
type errRestart struct{ res *Result }

func (errRestart) Error() string { return "restart" }

// completeMovedRelease finishes a release that was cut between the keys
// and whose other key was then taken by another claim (it was free, with
// its stopped revision): the held key still shows the old claim, and the
// pair reads as held by two claims, which nothing else resolves. If the
// other key's history ends the old claim stopped with a proof, and the old
// claim's owner is proven gone, the held key gets the same stopped record.
// The other key is never touched. It returns nil, nil when there is
// nothing to complete.
func (s *Store) completeMovedRelease(ctx context.Context, p *Pair, held []*Head, res *Result) (*Result, error) {
	for _, h := range held {
		other := p.Session
		if h.Key.Kind == KindSession {
			other = p.Seat
		}
		if other.Record == nil || other.Record.ClaimID == h.Record.ClaimID {
			continue
		}
		rec, err := s.lastOf(ctx, other.Key, h.Record.ClaimID)
		if err != nil {
			return nil, err
		}
		if rec == nil || rec.State != Stopped || rec.Proof == nil {
			continue
		}
		if state, _ := s.judgeOwner(h.Record); state != hostid.Gone {
			continue
		}
		next := rec.clone()
		if h.Record.SpawnMarker() {
			raw, _ := h.Record.Fields.Get(fieldSpawnMarker)
			setMarker(next, raw)
		}
		res.ClaimID, res.Record, res.Completed, res.Proof = h.Record.ClaimID, h.Record, true, next.Proof
		res.Owner, res.OwnerReason = s.judgeOwner(h.Record)
		res.Published = append(res.Published, Published{Key: h.Key, Revision: h.N + 1, State: Stopped})
		if res.DryRun {
			// As the real run would report it: the pair with h freed.
			freed := *h
			freed.Record = next
			if h.Key.Kind == KindSeat {
				return completionOutcome(res, &Pair{Seat: &freed, Session: other}), nil
			}
			return completionOutcome(res, &Pair{Seat: other, Session: &freed}), nil
		}
		// The completion rests on the other key's stopped revision: make
		// it durable before anything is published on its strength.
		if err := s.syncHeads(ctx, other); err != nil {
			return nil, err
		}
		won, err := s.publish(ctx, h.Key, h.N+1, next)
		if err != nil {
			return nil, err
		}
		if !won {
			return nil, errRaced{published: res.Published[:len(res.Published)-1]}
		}
		return nil, errRestart{res}
	}
	return nil, nil
}

// lastOf returns the newest record of claim id in k's history, or nil. It
// reads the whole history: only a rare recovery path calls it.
func (s *Store) lastOf(ctx context.Context, k Key, id string) (*Record, error) {
	revs, err := s.Revisions(ctx, k)
	if err != nil {
		return nil, err
	}
	for i := len(revs) - 1; i >= 0; i-- {
		if r := revs[i].Record; r != nil && r.ClaimID == id {
			return r, nil
		}
	}
	return nil, nil
}

// afterCompletion reports a classification that finished a moved release
// (completeMovedRelease). It publishes nothing more: the key the release
// was first cut from now belongs to another claim, with a pair of its own,
// and judging that claim here could spread it onto the key just freed.
// The outcome is the pair as it now reads.
func (s *Store) afterCompletion(ctx context.Context, res *Result, seat, session Key) (*Result, error) {
	p, err := s.Pair(ctx, seat, session)
	if err != nil {
		return nil, err
	}
	return completionOutcome(res, p), nil
}

// completionOutcome fills in the outcome of a completed moved release from
// the pair as it reads after the completion: stopped when it is free, or
// held by the claim that took the other key, which is judged only in its
// own pair.
func completionOutcome(res *Result, p *Pair) *Result {
	res.Seat, res.Session = p.Seat, p.Session
	res.Outcome, res.Refusal = OutcomeStopped, nil
	for _, h := range []*Head{p.Seat, p.Session} {
		if !h.Held() {
			continue
		}
		res.Outcome = Outcome(p.State())
		other := ""
		if h.Record != nil {
			other = h.Record.ClaimID
		}
		res.Refusal = refuse(UnsafeReplacement, other, fmt.Sprintf("claim %s's release was completed; %s is held by claim %s, which took it afterwards: classify that claim with its own pair", res.ClaimID, h.Key, other), h.Damage, p.Seat.Key, p.Session.Key)
	}
	return res
}
