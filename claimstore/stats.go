package claimstore

import (
	"context"
	"time"

	"github.com/claimstore/claimstore/hostid"
)

// Stats is the state of a whole root as one walk reads it (Store.Stats):
// what monitoring reports (claimctl metrics). It only reads; nothing in it
// decides anything.
type Stats struct {
	// Keys and Revisions count every key walked and every revision listed
	// in them; Proofs, the proofs in the root.
	Keys, Revisions, Proofs int
	// Pairs counts the walk's pairs (Walk) by the state each reads as, the
	// more conservative of its keys': a held pair by its state, a free one
	// (both keys released with a proof, the claim still naming both) as
	// Stopped. Every state of States is present.
	Pairs map[State]int
	// Uncertain counts the pairs that read Uncertain by why (every cause
	// of UncertainCauses present): the sum is Pairs[Uncertain].
	Uncertain map[UncertainCause]int
	// HeldByOwner counts the held pairs by their claim's owner, judged now
	// as classification judges it (Store.JudgeOwner; every class of
	// OwnerClasses present): the sum is the held pairs.
	HeldByOwner map[OwnerClass]int
	// Orphans counts the held keys that belong to no pair, by kind (both
	// kinds present); Idle, the free keys of no pair.
	Orphans map[Kind]int
	Idle    int
	// OldestHeld is when the newest readable record of the longest
	// unchanged held claim (pair or orphan key) was written, by its
	// writtenAt (the clock of the machine that wrote it: informational),
	// and OldestHeldClaim that claim; zero and "" when no held claim has a
	// readable writtenAt.
	OldestHeld      time.Time
	OldestHeldClaim string
}

// UncertainCause says why a pair reads Uncertain.
type UncertainCause string

const (
	// UncertainDamaged: a head that cannot be read, does not validate, or
	// sits above a gap (fsck's to explain).
	UncertainDamaged UncertainCause = "damaged"
	// UncertainUnproven: a head stopped without a proof.
	UncertainUnproven UncertainCause = "stopped-without-proof"
	// UncertainMayRun: a head recorded uncertain — classify left it so
	// because its writer may still run (or a supervisor said so).
	UncertainMayRun UncertainCause = "writer-may-run"
)

// UncertainCauses lists the causes, the one that wins a pair first.
var UncertainCauses = []UncertainCause{UncertainDamaged, UncertainUnproven, UncertainMayRun}

// OwnerClass is what a held pair's owner is judged to be.
type OwnerClass string

const (
	OwnerLive    = OwnerClass(hostid.Live)
	OwnerGone    = OwnerClass(hostid.Gone)
	OwnerUnknown = OwnerClass(hostid.Unknown)
	OwnerInvalid = OwnerClass(hostid.Invalid)
	// OwnerForeign: the claim was taken on another machine, where alone
	// its owner can be judged (JudgeOwner says unknown here).
	OwnerForeign OwnerClass = "foreign"
	// OwnerUnreadable: no readable record of the pair names an owner
	// (both heads damaged).
	OwnerUnreadable OwnerClass = "unreadable"
)

// OwnerClasses lists the owner classes.
var OwnerClasses = []OwnerClass{OwnerLive, OwnerGone, OwnerUnknown, OwnerInvalid, OwnerForeign, OwnerUnreadable}

// Stats walks the root (Store.Walk: one listing per kind and per key, the
// newest readable revisions of each), lists its proofs, and judges the
// owner of every held claim once per recorded owner. Its cost is a walk's;
// it publishes nothing and makes nothing durable. A root that cannot be
// walked, or whose proofs cannot be listed, is an error: counts of part of
// a root would read as a root with less held.
func (s *Store) Stats(ctx context.Context) (*Stats, error) {
	w, err := s.Walk(ctx, &WalkOptions{SlimFree: true})
	if err != nil {
		return nil, err
	}
	proofs, err := s.be.Proofs(ctx)
	if err != nil {
		return nil, err
	}
	st := &Stats{Keys: w.Keys, Revisions: w.Revisions, Proofs: len(proofs), Idle: w.Idle,
		Pairs: map[State]int{}, Uncertain: map[UncertainCause]int{}, HeldByOwner: map[OwnerClass]int{}, Orphans: map[Kind]int{}}
	for _, x := range States {
		st.Pairs[x] = 0
	}
	for _, c := range UncertainCauses {
		st.Uncertain[c] = 0
	}
	for _, c := range OwnerClasses {
		st.HeldByOwner[c] = 0
	}
	st.Orphans[KindSeat], st.Orphans[KindSession] = 0, 0
	judged := map[string]OwnerClass{}
	for _, p := range w.Pairs {
		seat, session := p.SeatInfo.Head, p.SessionInfo.Head
		pair := Pair{Seat: seat, Session: session}
		state := pair.State()
		st.Pairs[state]++
		if !pair.Held() {
			continue
		}
		if state == Uncertain {
			st.Uncertain[uncertainCause(seat, session)]++
		}
		// The claim's latest record: the seat's, unless only the session
		// holds (every step publishes on the seat first); the other's when
		// that one cannot be read.
		latest, other := seat, session
		if !seat.Held() {
			latest, other = session, seat
		}
		rec := latest.Record
		if rec == nil {
			rec = other.Record
			if rec == slimFree {
				// A free partner the walk kept slim: its owner is in
				// its record, read again (a head that cannot be read
				// now names none).
				rec = nil
				if h, err := s.Head(ctx, other.Key); err == nil {
					rec = h.Record
				}
			}
		}
		st.HeldByOwner[s.ownerClass(rec, judged)]++
		st.noteHeld(rec)
	}
	for _, o := range w.Orphans {
		st.Orphans[o.Info.Loc.Kind]++
		if o.Info.Head != nil {
			st.noteHeld(o.Info.Head.Record)
		}
	}
	return st, nil
}

// uncertainCause is why a pair of heads reads Uncertain: the first cause of
// UncertainCauses either key has.
func uncertainCause(heads ...*Head) UncertainCause {
	has := map[UncertainCause]bool{}
	for _, h := range heads {
		switch {
		case h.Damage != nil || h.N > 0 && h.Record == nil:
			has[UncertainDamaged] = true
		case h.Record != nil && h.Record.State == Stopped && h.Record.Proof == nil:
			has[UncertainUnproven] = true
		case h.Record != nil && h.Record.State == Uncertain:
			has[UncertainMayRun] = true
		}
	}
	for _, c := range UncertainCauses {
		if has[c] {
			return c
		}
	}
	return UncertainDamaged // not reached: an uncertain pair has one of them
}

// ownerClass judges rec's owner, once per recorded owner, machine and boot.
func (s *Store) ownerClass(rec *Record, judged map[string]OwnerClass) OwnerClass {
	if rec == nil {
		return OwnerUnreadable
	}
	raw, _ := rec.Fields.Get("owner")
	key := string(raw) + "\x00" + rec.Host.MachineID + "\x00" + rec.Host.BootID
	if c, ok := judged[key]; ok {
		return c
	}
	var c OwnerClass
	if _, err := rec.Owner(); err != nil {
		c = OwnerInvalid
	} else if mine, err := s.machineID(); err != nil || mine != rec.Host.MachineID {
		c = OwnerForeign
	} else {
		state, _ := s.JudgeOwner(rec)
		c = OwnerClass(state)
	}
	judged[key] = c
	return c
}

// noteHeld keeps the oldest writtenAt of a held claim's record.
func (st *Stats) noteHeld(rec *Record) {
	if rec == nil {
		return
	}
	t, err := time.Parse(time.RFC3339Nano, rec.WrittenAt)
	if err != nil {
		return
	}
	if st.OldestHeld.IsZero() || t.Before(st.OldestHeld) {
		st.OldestHeld, st.OldestHeldClaim = t, rec.ClaimID
	}
}
