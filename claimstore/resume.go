package claimstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/claimstore/claimstore/hostid"
)

// A step (Advance, Release) publishes on the seat key and then on the
// session key. An I/O error between the two leaves the seat one revision
// ahead of the session, both the claim's own: the step is cut. A process
// that resumes the claim later (a supervisor restarted, an operator's
// `claimctl advance`) must recognise that state as the claim's own
// continuation, not as a head that moved under it, and either finish the
// cut step (FinishStep) or refuse a different one.

// Fence names the revisions a caller last published for a claim: the
// seat's and the session's.
type Fence struct{ Seat, Session uint64 }

// Resumed is a claim rebuilt from the store for a step.
type Resumed struct {
	// Claim is fenced at the claim's revisions; its Record is the claim's
	// latest (the seat's: every step publishes there first).
	Claim *Claim
	// Cut reports that the claim's last step reached the seat and not the
	// session: SessionRecord says less than Claim.Record. Finish it with
	// FinishStep before any other step.
	Cut bool
	// SessionRecord is the record of the claim's session revision.
	SessionRecord *Record
}

// ClaimNotFoundError is returned by Resume when no revision of either key
// belongs to the claim: a mistyped id or the wrong keys, not a claim that
// moved.
type ClaimNotFoundError struct {
	ID                  string
	Seat, Session       Key
	SeatDir, SessionDir string
}

func (e *ClaimNotFoundError) Error() string {
	return fmt.Sprintf("claim %s not found: no revision of %s (%s) or %s (%s) belongs to it; check the id (acquire printed it) and the keys", e.ID, e.Seat, e.SeatDir, e.Session, e.SessionDir)
}

// Resume rebuilds claim id on seat and session so that a step can be taken
// on it: fenced on at, the revisions the caller last published, or, when at
// is nil, on the current heads if both belong to the claim. A key whose
// revision is missing, damaged or another claim's is refused
// (UnsafeReplacement), unless no revision of either key belongs to the
// claim (*ClaimNotFoundError); a claim of another machine is refused
// (ForeignHost).
//
// A retry of a cut step that names the revisions the caller held before
// the step finds the seat one revision ahead, the claim's own: that
// revision is taken as the claim's (Resumed.Cut), not as a head that moved.
//
// Resume reads the named revisions or the heads; only a refusal lists the
// keys' histories, to tell a missing claim from a moved one.
func (s *Store) Resume(ctx context.Context, id string, seat, session Key, at *Fence) (*Resumed, error) {
	if err := checkKinds(seat, session); err != nil {
		return nil, err
	}
	refusal := func(format string, a ...any) error {
		r := refuse(UnsafeReplacement, id, fmt.Sprintf(format, a...), nil, seat, session)
		r.Hint = "read the heads with `claimctl show` and the history with `claimctl log`; name the claim's own last revisions with --seat-rev and --session-rev"
		return r
	}
	notFound := func() error {
		for _, k := range []Key{seat, session} {
			revs, err := s.Revisions(ctx, k)
			if err != nil {
				return nil
			}
			for _, r := range revs {
				if r.Record != nil && r.Record.ClaimID == id {
					return nil
				}
			}
		}
		return &ClaimNotFoundError{ID: id, Seat: seat, Session: session, SeatDir: s.KeyDir(seat), SessionDir: s.KeyDir(session)}
	}
	cl := &Claim{ID: id, Seat: seat, Session: session}
	var recs [2]*Record
	for i, k := range []Key{seat, session} {
		var n uint64
		var rec *Record
		var damage error
		if at != nil {
			n = []uint64{at.Seat, at.Session}[i]
			r, err := s.ReadRevision(ctx, k, n)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				if err := notFound(); err != nil {
					return nil, err
				}
				return nil, refusal("%s has no revision %d (%s)", k, n, s.KeyDir(k))
			case err != nil:
				return nil, err
			}
			rec, damage = r.Record, r.Damage
			if i == 0 && damage == nil && rec.ClaimID == id {
				h, err := s.Head(ctx, k)
				if err == nil && h.N == n+1 && h.Record != nil && h.Record.ClaimID == id {
					// The claim's own newer revision on the seat: a step cut
					// after it, if the session is still where the caller
					// says (else the step completed and the fence refuses).
					if sh, err := s.Head(ctx, session); err == nil && sh.N == at.Session {
						n, rec = h.N, h.Record
					}
				}
			}
		} else {
			h, err := s.Head(ctx, k)
			if err != nil {
				return nil, fmt.Errorf("reading the head of %s in %s: %w", k, s.KeyDir(k), err)
			}
			if h.N == 0 {
				if err := notFound(); err != nil {
					return nil, err
				}
				return nil, refusal("%s has no revisions, so claim %s does not hold it", k, id)
			}
			n, rec, damage = h.N, h.Record, h.Damage
		}
		if damage != nil {
			return nil, refusal("revision %d of %s is damaged: %v", n, k, damage)
		}
		if rec.ClaimID != id {
			if err := notFound(); err != nil {
				return nil, err
			}
			return nil, refusal("revision %d of %s belongs to claim %s, not %s", n, k, rec.ClaimID, id)
		}
		recs[i] = rec
		*cl.rev(k) = n
	}
	cl.Record = recs[0]
	mine, err := s.machineID()
	if err != nil {
		return nil, fmt.Errorf("cannot read this machine's id: %w", err)
	}
	if cl.Record.Host.MachineID != mine {
		r := refuse(ForeignHost, id, fmt.Sprintf("claim %s was taken on machine %q; this is machine %s", id, cl.Record.Host.MachineID, mine), nil, seat, session)
		r.Hint = "advance or release the claim on the machine that took it"
		return nil, r
	}
	return &Resumed{Claim: cl, SessionRecord: recs[1], Cut: !sameContent(cl.Record, recs[1])}, nil
}

// sameContent reports whether two records of one claim say the same thing:
// equal but for the key, revision and writtenAt they were published with.
func sameContent(a, b *Record) bool {
	x, y := *a, *b
	x.Key, x.Revision, x.WrittenAt = b.Key, 0, ""
	y.Revision, y.WrittenAt = 0, ""
	da, err1 := x.Marshal()
	db, err2 := y.Marshal()
	return err1 == nil && err2 == nil && bytes.Equal(da, db)
}

// CutSince reports whether a step begun when c stood at seatRev and
// sessionRev ended cut between its keys: its seat revision landed (c moved
// on the seat as it landed) and its session revision did not. A cut claim
// is completed by FinishStep, or by the same step again; a later process
// learns of the cut from Resume (Resumed.Cut). A step refused before it
// published anything, or one that published on both keys, is not cut.
func (c *Claim) CutSince(seatRev, sessionRev uint64) bool {
	return c.SeatRev != seatRev && c.SessionRev == sessionRev
}

// FinishStep publishes the claim's latest record (its seat revision) as the
// session key's next revision: the half of a cut step that is missing
// (Resumed.Cut). It is fenced as a step is: the session's head must still
// be the claim's revision, and the exclusive publish fails if any writer
// took the number meanwhile. c.SessionRev is updated when it lands.
func (s *Store) FinishStep(ctx context.Context, c *Claim) error {
	if err := c.check(); err != nil {
		return err
	}
	k := c.Session
	h, err := s.head(ctx, k, true)
	if err != nil {
		return err
	}
	var gap *GapError
	if h.Record == nil && errors.As(h.Damage, &gap) {
		r := refuse(UnsafeReplacement, c.ID, gap.Error(), nil, c.Seat, k)
		r.Hint = gap.Hint()
		return r
	}
	moved := func(what string) error {
		r := refuse(UnsafeReplacement, c.ID, what, nil, c.Seat, k)
		r.Hint = "read the heads with `claimctl show` and the history with `claimctl log`"
		return r
	}
	if h.Record == nil || h.N != c.SessionRev || h.Record.ClaimID != c.ID {
		return moved(fmt.Sprintf("%s moved under claim %s while its cut step was being finished: its head is revision %d, not the claim's revision %d", k, c.ID, h.N, c.SessionRev))
	}
	// checkSize and publish each stamp their own copy of the record with
	// the key, the revision and the time: c.Record is published as it is.
	if err := s.checkSize(c.Record, k); err != nil {
		return err
	}
	won, err := s.publish(ctx, k, c.SessionRev+1, c.Record)
	if err != nil {
		return err
	}
	if !won {
		return moved(fmt.Sprintf("another writer published revision %d of %s while claim %s's cut step was being finished", c.SessionRev+1, k, c.ID))
	}
	c.SessionRev++
	return nil
}

// Satisfies reports whether r already is what a step with patch p would
// publish: a retry of a step cut between the keys is then finished, not
// repeated. A stopped record with a proof satisfies only the release that
// recorded that proof.
func (r *Record) Satisfies(p Patch) bool {
	if p.Proof != nil {
		if r.State != Stopped || r.Proof == nil || r.Proof.Kind != p.Proof.Kind || r.Proof.Ref != p.Proof.Ref {
			return false
		}
	} else if !r.held() {
		return false
	}
	if p.State != "" && r.State != p.State {
		return false
	}
	for name, v := range p.Fields {
		got, ok := r.Fields.Get(name)
		want, err := json.Marshal(v)
		if !ok || err != nil || !jsonEqual(got, want) {
			return false
		}
	}
	return true
}

// jsonEqual compares two JSON values by their compact form.
func jsonEqual(a, b []byte) bool {
	var x, y bytes.Buffer
	return json.Compact(&x, a) == nil && json.Compact(&y, b) == nil && bytes.Equal(x.Bytes(), y.Bytes())
}

// ReservedMember reports whether a record member is the store's own: a
// Patch may not set it (ErrBadPatch), and a caller should refuse it before
// anything is touched. State and proof are set by Patch.State and
// Patch.Proof, not as fields.
func ReservedMember(name string) bool {
	return reserved[name] || name == "state" || name == "proof"
}

// ReadRevision reads revision n of k. A revision that does not exist is an
// error wrapping fs.ErrNotExist; one that exists and cannot be read or
// decoded is returned with its Damage set.
func (s *Store) ReadRevision(ctx context.Context, k Key, n uint64) (*Revision, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	r := &Revision{N: n}
	data, err := s.be.Read(ctx, k.Loc(), n)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, err
	case err != nil:
		r.Damage = err
	default:
		r.Data = data
		r.Record, r.Damage = DecodeRecord(data, k, n)
	}
	return r, nil
}

// RevisionNumbers lists k's revision numbers, ascending. Its cost is one
// listing of the key.
func (s *Store) RevisionNumbers(ctx context.Context, k Key) ([]uint64, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	_, nums, _, err := s.list(ctx, k.Loc())
	return nums, err
}

// HeadsOfClaim calls fn with every key whose readable head belongs to claim
// id, seat keys first, until fn returns false. It reads every key's head
// (one probe each, no listing). An error listing a kind's keys is returned
// with the kind's directory.
func (s *Store) HeadsOfClaim(ctx context.Context, id string, fn func(k Key, n uint64, rec *Record) (more bool)) error {
	for _, kind := range []Kind{KindSeat, KindSession} {
		locs, err := s.be.Locs(ctx, kind)
		if err != nil {
			return fmt.Errorf("listing %s: %w", s.be.Path(string(kind)), err)
		}
		for _, loc := range locs {
			if err := ctx.Err(); err != nil {
				return err
			}
			n, data, err := s.be.Head(ctx, loc)
			if err != nil || n == 0 {
				continue
			}
			k, ok := keyOf(data, loc)
			if !ok {
				continue
			}
			rec, err := DecodeRecord(data, k, n)
			if err != nil || rec.ClaimID != id {
				continue
			}
			if !fn(k, n, rec) {
				return nil
			}
		}
	}
	return nil
}

// FindClaim finds the keys of claim id: those whose head belongs to it,
// and the partner a head's pair member names when that partner's head has
// moved on. It reads every key's head. It returns nil keys and no error
// when no head belongs to the claim.
func (s *Store) FindClaim(ctx context.Context, id string) (seat, session *Key, err error) {
	err = s.HeadsOfClaim(ctx, id, func(k Key, _ uint64, rec *Record) bool {
		if k.Kind == KindSeat {
			seat = &k
		} else {
			session = &k
		}
		if p := pairOf(rec); p != nil {
			if seat == nil {
				seat = &p[0]
			}
			if session == nil {
				session = &p[1]
			}
		}
		return true
	})
	return seat, session, err
}

// JudgeOwner judges a record's owner on this store's host, as
// classification does: an owner recorded without a boot ran under the
// record's boot. An owner on another machine is unknown here: its pid says
// nothing about this one.
func (s *Store) JudgeOwner(rec *Record) (hostid.State, string) {
	if _, err := rec.Owner(); err != nil {
		return hostid.Invalid, err.Error()
	}
	if mine, err := s.machineID(); err != nil || mine != rec.Host.MachineID {
		return hostid.Unknown, "the claim was taken on another machine; its owner can only be judged there"
	}
	return s.judgeOwner(rec)
}
