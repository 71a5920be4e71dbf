package claimstore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/internal/shquote"
)

// Head is a key's highest revision as read.
type Head struct {
	Key    Key
	N      uint64  // the highest revision number; 0: the key has none
	Record *Record // nil when N is 0 or the revision is damaged
	// Damage says why revision N is damaged (invalid, unreadable, not a
	// regular file), or is nil. A damaged head holds the key as Uncertain.
	Damage error
	// raw is revision N's bytes as read: a publish over a free head
	// follows exactly these (storage.GuardedPublisher).
	raw []byte
	// digest, in a head a walk slimmed for prune (slimForPrune), stands
	// for the bytes it dropped: their SHA-256.
	digest *[sha256.Size]byte
}

// Held reports whether the head holds its key: it does unless it is
// absent or stopped with a proof, and always when it is damaged (a key
// directory another user can write holds its key even when empty).
func (h *Head) Held() bool {
	if h.Damage != nil {
		return true
	}
	if h.N == 0 {
		return false
	}
	return h.Record == nil || h.Record.held()
}

// State returns the state the key reads as: Stopped when free, Uncertain
// when damaged or stopped without a proof, else the head's state.
func (h *Head) State() State {
	switch {
	case h.Damage != nil:
		return Uncertain
	case h.N == 0:
		return Stopped
	case h.Record == nil:
		return Uncertain
	case h.Record.State == Stopped && h.Record.Proof == nil:
		return Uncertain
	}
	return h.Record.State
}

// Head reads key k's highest revision. A head that cannot be determined at
// all (an I/O error, a key directory that is a symlink) is an error; a
// highest revision that does not validate or cannot be read is returned as
// damaged.
func (s *Store) Head(ctx context.Context, k Key) (*Head, error) { return s.head(ctx, k, false) }

// head reads k's head. The probe assumes a dense history, so a head that
// reads free is confirmed by a listing: a revision beyond a gap (a lost r1,
// a file restored by hand) would otherwise read as free, and a free key is
// the one answer the store must never give on a guess. Held keys, the hot
// path, skip the listing, unless the head is read to publish on (forWrite):
// a revision above it would mean the next number is a gap being filled, a
// lost number published again, and a gap below it would make the write
// build on a history that lost revisions (a backend whose head is the
// highest revision name, etcd, sees a head above a gap that the directory
// backend's cold probe stops below; both read such a key as damaged before
// a write). That listing is made once per key per store; after it the
// protocol only appends, which the probe follows.
func (s *Store) head(ctx context.Context, k Key, forWrite bool) (*Head, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	loc := k.Loc()
	for attempt := 0; ; attempt++ {
		h, counted, err := s.probeCounted(ctx, k)
		if err != nil {
			return nil, err
		}
		if h.Held() && !forWrite {
			return h, nil
		}
		if s.listedUpTo(loc, h.N) {
			// This store listed the key whole and dense at or below this
			// head; since then the protocol has only appended.
			return h, nil
		}
		c, err := s.censusWith(ctx, loc, counted)
		if err != nil {
			return nil, err
		}
		if c.count == 0 {
			s.noteListing(loc, 0, true)
			return h, nil
		}
		top := c.top
		// Both a free head and a head to publish on need the whole history
		// intact: a gap anywhere means revisions were lost or planted, and
		// neither a free answer nor a new revision may rest on that.
		if top <= h.N && c.dense() {
			s.noteListing(loc, h.N, true)
			return h, nil
		}
		var damage error
		if !c.dense() {
			damage = &DamageError{Reason: fmt.Sprintf("revision %d exists, but the history below it is not dense", top)}
			if base, revs, _, err := s.list(ctx, loc); err == nil && !dense(base, revs) {
				damage = s.gapError(k, base, revs)
			}
		}
		switch {
		case c.dense() && attempt < 3:
			// No gap: a writer published after the probe. Read again.
			continue
		case c.dense():
			damage = &DamageError{Reason: fmt.Sprintf("the head moved during every one of %d reads; try again", attempt+1)}
		case attempt == 0:
			// A listing is not atomic: one taken while revisions are
			// being linked can show N+2 without N+1. Look once more
			// before calling it a gap.
			continue
		}
		h.Damage = &fs.PathError{Op: "read head", Path: s.RevisionPath(k, top), Err: damage}
		h.N, h.Record = top, nil
		return h, nil
	}
}

// census is what a listing of a key says: its highest revision and how many
// revisions it holds. Names in a directory are unique, so the history is
// dense (1..top, no gap) exactly when there are top of them.
//
// A compacted key (see storage.Compacter) keeps its revisions from a base
// up: dense is then base..top.
type census struct {
	top   uint64
	count int
	base  uint64
}

func (c census) dense() bool { return c.count > 0 && uint64(c.count) == c.top-c.base+1 }

// census lists loc, as cheaply as the backend can: a free head is
// confirmed by one, so its cost is most of a cold free head's.
func (s *Store) census(ctx context.Context, loc Loc) (census, error) {
	if b, ok := s.be.(storage.Censuser); ok {
		top, n, base, err := b.Census(ctx, loc)
		return census{top: top, count: n, base: max(base, 1)}, err
	}
	base, revs, _, err := s.list(ctx, loc)
	if err != nil || len(revs) == 0 {
		return census{base: 1}, err
	}
	return census{top: revs[len(revs)-1], count: len(revs), base: base}, nil
}

// censusWith is the census the backend took with the head (counted, from
// storage.CountedHeader: the same snapshot, so it confirms that very
// head), else a census of loc taken now.
func (s *Store) censusWith(ctx context.Context, loc Loc, counted *storage.Count) (census, error) {
	if counted == nil {
		return s.census(ctx, loc)
	}
	return census{top: counted.Top, count: counted.Count, base: max(counted.Base, 1)}, nil
}

// list lists loc's revisions from its base up (see storage.Compacter),
// with the base they were listed against: 1 on a backend that never
// compacts.
func (s *Store) list(ctx context.Context, loc Loc) (base uint64, revs []uint64, other []string, err error) {
	if c, ok := s.be.(storage.Compacter); ok {
		base, revs, other, err = c.ListFrom(ctx, loc)
		return max(base, 1), revs, other, err
	}
	revs, other, err = s.be.List(ctx, loc)
	return 1, revs, other, err
}

// listedUpTo reports whether a listing of loc this store took showed its
// history dense and nothing above n: since then the protocol has only
// appended, which the probe follows.
func (s *Store) listedUpTo(loc Loc, n uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	top, ok := s.listed[loc]
	return ok && n >= top
}

// noteListing records what a listing of loc showed: dense up to top, or a
// gap. A gap forgets any earlier listing, so that the next head read to
// publish on, or to answer free, lists the key again and reads it damaged:
// a store that has seen revisions lost must not go on trusting what it
// listed before.
func (s *Store) noteListing(loc Loc, top uint64, dense bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !dense {
		delete(s.listed, loc)
		return
	}
	s.listed[loc] = max(top, s.listed[loc])
}

// forgetListing forgets what a listing of loc showed: the next head read
// to publish on, or to answer free, lists it again. It costs a listing,
// never a wrong answer.
func (s *Store) forgetListing(loc Loc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.listed, loc)
}

// GapError is the damage of a head that sits above a gap: revisions
// missing below the key's newest one, lost in a crash of the disk, deleted
// or planted by hand. The protocol never leaves one, so the key reads as
// held (damaged) wherever the gap could matter, and what an operator needs
// is which revisions are missing: "damaged head revision 3" for a valid
// revision 3 would send them to the wrong file.
type GapError struct {
	Key  Key
	Top  uint64 // the newest revision listed
	Gaps []Gap  // ascending
	Dir  string // the key's directory (or prefix), as the backend names it
	root string
}

// Missing names the missing revisions, whole: "revision 2 is missing",
// "revisions 2-4 and 7 are missing", with at most five runs named and the
// rest counted.
func (e *GapError) Missing() string {
	var ranges []string
	var count uint64
	for i, r := range e.Gaps {
		count += r.Count()
		switch {
		case i >= 5:
		case r.From == r.To:
			ranges = append(ranges, fmt.Sprint(r.From))
		default:
			ranges = append(ranges, fmt.Sprintf("%d-%d", r.From, r.To))
		}
	}
	if more := len(e.Gaps) - len(ranges); more > 0 {
		ranges = append(ranges, fmt.Sprintf("%d more runs (%d revisions in all)", more, count))
	}
	if len(ranges) == 0 {
		return "no revision is missing"
	}
	list := ranges[0]
	if len(ranges) > 1 {
		list = strings.Join(ranges[:len(ranges)-1], ", ") + " and " + ranges[len(ranges)-1]
	}
	if count == 1 {
		return "revision " + list + " is missing"
	}
	return "revisions " + list + " are missing"
}

func (e *GapError) Error() string {
	return fmt.Sprintf("%s has a gap in its history: %s below revision %d (%s); the key reads as held until an operator restores them", e.Key, e.Missing(), e.Top, e.Dir)
}

// Hint is what to do about the gap.
func (e *GapError) Hint() string {
	return fmt.Sprintf("run `claimctl fsck --root %s` for every gap and `claimctl log` for the history; restore the missing revisions from a backup, or retire the key, by hand (nothing in claimstore rewrites history)", shquote.Quote(e.root))
}

// gapError is the damage of k's head given a listing revs that is not
// dense.
func (s *Store) gapError(k Key, base uint64, revs []uint64) *GapError {
	return &GapError{Key: k, Top: revs[len(revs)-1], Gaps: gapsOf(base, revs), Dir: s.KeyDir(k), root: s.Root()}
}

// Gap is a run of revisions missing from a key's history, From to To
// inclusive: lost in a crash of the disk, deleted or planted by hand. The
// protocol never leaves one.
type Gap struct{ From, To uint64 }

// Count is how many revisions the gap is missing.
func (g Gap) Count() uint64 { return g.To - g.From + 1 }

// Gaps lists k's history and returns its highest revision and every run of
// revisions missing below it (none for a dense history, or an empty one).
// Its cost is one listing of the key; its memory, one entry per gap.
func (s *Store) Gaps(ctx context.Context, k Key) (top uint64, gaps []Gap, err error) {
	if err := k.Validate(); err != nil {
		return 0, nil, err
	}
	base, revs, _, err := s.list(ctx, k.Loc())
	if err != nil || len(revs) == 0 {
		return 0, nil, err
	}
	return revs[len(revs)-1], gapsOf(base, revs), nil
}

// gapsOf returns the runs missing from revs (ascending) below its last,
// from base (the lowest revision the key keeps) up.
func gapsOf(base uint64, revs []uint64) []Gap {
	var out []Gap
	want := base
	for _, n := range revs {
		if n > want {
			out = append(out, Gap{From: want, To: n - 1})
		}
		want = n + 1
	}
	return out
}

// dense reports whether revs (ascending) are exactly base..base+len(revs)-1.
func dense(base uint64, revs []uint64) bool {
	return len(revs) > 0 && revs[0] == base && revs[len(revs)-1] == base+uint64(len(revs))-1
}

// probeHead reads the head the backend's probing finds.
func (s *Store) probeHead(ctx context.Context, k Key) (*Head, error) {
	n, data, err := s.be.Head(ctx, k.Loc())
	return s.headOf(ctx, k, n, data, err)
}

// probeCounted reads k's head as probeHead does, and the census the
// backend took with it where it can (storage.CountedHeader), else nil.
func (s *Store) probeCounted(ctx context.Context, k Key) (*Head, *storage.Count, error) {
	b, ok := s.be.(storage.CountedHeader)
	if !ok {
		h, err := s.probeHead(ctx, k)
		return h, nil, err
	}
	n, data, counted, err := b.CountedHead(ctx, k.Loc())
	h, err := s.headOf(ctx, k, n, data, err)
	return h, counted, err
}

// headAt reads revision n of k as its head, where n was the head a moment
// ago: by the backend's storage.HeadAtReader where it has one, else as
// probeHead does. An error wrapping storage.ErrHeadMoved says n is no
// longer the head.
func (s *Store) headAt(ctx context.Context, k Key, n uint64) (*Head, error) {
	r, ok := s.be.(storage.HeadAtReader)
	if !ok {
		return s.probeHead(ctx, k)
	}
	data, err := r.HeadAt(ctx, k.Loc(), n)
	return s.headOf(ctx, k, n, data, err)
}

// headOf makes the Head of k from what the backend read of revision n
// (data, or err: a *storage.ReadError is damage at its revision).
func (s *Store) headOf(ctx context.Context, k Key, n uint64, data []byte, err error) (*Head, error) {
	var rerr error
	var re *storage.ReadError
	switch {
	case errors.As(err, &re):
		n, rerr = re.N, re.Err
	case err != nil:
		return nil, err
	}
	h := &Head{Key: k, N: n, raw: data}
	switch {
	case rerr != nil:
		h.Damage = rerr
	case n == 0:
	default:
		h.Record, h.Damage = DecodeRecord(data, k, n)
		if h.Damage != nil {
			h.Damage = &fs.PathError{Op: "decode", Path: s.RevisionPath(k, n), Err: h.Damage}
		} else if err := s.verifyHeadProof(ctx, h.Record); err != nil {
			h.Record = nil
			h.Damage = &fs.PathError{Op: "verify proof", Path: s.RevisionPath(k, n), Err: &DamageError{Reason: err.Error(), Err: err}}
		}
	}
	return h, nil
}

// verifyHeadProof checks the boot proof of a head that would read free.
// Free is the one answer never given on a guess: a stopped head naming one
// of this store's boot proofs (boot-<24 hex>) that is missing (a root
// restored without proofs/), unreadable or not matching the claim is
// damaged, not free. A ref in another issuer's format (the reference
// implementation's verifier, a custom BootProofIssuer) names evidence
// outside the store and is taken as written, like a cohortProof.
//
// The proof is read at every head read, never remembered: a decision rests
// on the proof as it is when the decision is taken, and a proof removed
// under a long-lived store (a root restored from a backup, an operator
// moving files) must read the same in it as in a fresh one. It costs one
// read of a small file per free head that names a boot proof.
func (s *Store) verifyHeadProof(ctx context.Context, rec *Record) error {
	if rec.State == Stopped && rec.Proof != nil && rec.Proof.Kind == ProofDecommissioned {
		// Always this store's evidence: classify publishes it only on a
		// record under the root, which must still cover the claim.
		if err := s.verifyDecommissionProof(ctx, rec); err != nil {
			return fmt.Errorf("stopped on decommission record %s, which does not prove the claim over: %w; the key reads as held (run claimctl fsck)", rec.Proof.Ref, err)
		}
		return nil
	}
	if rec.State != Stopped || rec.Proof == nil || rec.Proof.Kind != ProofBoot || !isProofID(rec.Proof.Ref) {
		return nil
	}
	if err := s.VerifyProof(ctx, rec); err != nil {
		return fmt.Errorf("stopped on boot proof %s, which does not prove the claim over: %w; the key reads as held (run claimctl fsck)", rec.Proof.Ref, err)
	}
	return nil
}

// Revision is one revision of a key's history.
type Revision struct {
	N      uint64
	Record *Record // nil when damaged
	Data   []byte  // the file's contents as read
	Damage error
	// Segment is the archive segment an archived revision was read from
	// (ArchivedRevisions); empty for a live one.
	Segment string
}

// Revisions returns k's whole history, oldest first. Its cost grows with
// the history; Head's does not.
func (s *Store) Revisions(ctx context.Context, k Key) ([]Revision, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	_, nums, _, err := s.list(ctx, k.Loc())
	if err != nil {
		return nil, err
	}
	out := make([]Revision, 0, len(nums))
	for _, n := range nums {
		r := Revision{N: n}
		r.Data, err = s.be.Read(ctx, k.Loc(), n)
		if err != nil {
			r.Damage = err
		} else if r.Record, err = DecodeRecord(r.Data, k, n); err != nil {
			r.Damage = err
		}
		out = append(out, r)
	}
	return out, nil
}

// Pair is the view of a claim's two keys.
type Pair struct {
	Seat, Session *Head
}

// State returns the pair state: the more conservative of the two keys.
func (p *Pair) State() State { return Conservative(p.Seat.State(), p.Session.State()) }

// Held reports whether either key is held.
func (p *Pair) Held() bool { return p.Seat.Held() || p.Session.Held() }

// Pair reads both keys' heads.
func (s *Store) Pair(ctx context.Context, seat, session Key) (*Pair, error) {
	return s.pair(ctx, seat, session, false)
}

func (s *Store) pair(ctx context.Context, seat, session Key, forWrite bool) (*Pair, error) {
	if err := checkKinds(seat, session); err != nil {
		return nil, err
	}
	sh, err := s.head(ctx, seat, forWrite)
	if err != nil {
		return nil, err
	}
	ss, err := s.head(ctx, session, forWrite)
	if err != nil {
		return nil, err
	}
	return &Pair{Seat: sh, Session: ss}, nil
}

func checkKinds(seat, session Key) error {
	if err := seat.Validate(); err != nil {
		return err
	}
	if err := session.Validate(); err != nil {
		return err
	}
	if seat.Kind != KindSeat {
		return &KeyError{Field: "kind", Value: string(seat.Kind), Reason: "the first key of a pair must be a seat key"}
	}
	if session.Kind != KindSession {
		return &KeyError{Field: "kind", Value: string(session.Kind), Reason: "the second key of a pair must be a session key"}
	}
	return nil
}

// Refusal explains why a held pair refuses a new claim. It returns nil
// when neither key is held.
func (s *Store) Refusal(p *Pair) *Refusal {
	var heads []*Head
	for _, h := range []*Head{p.Seat, p.Session} {
		if h.Held() {
			heads = append(heads, h)
		}
	}
	if len(heads) == 0 {
		return nil
	}
	keys := []Key{p.Seat.Key, p.Session.Key}
	mine, merr := s.machineID()
	for _, h := range heads {
		if h.Record != nil && (merr != nil || h.Record.Host.MachineID != mine) {
			if merr != nil {
				return refuse(ForeignHost, h.Record.ClaimID, fmt.Sprintf("%s is held by claim %s and this machine's id cannot be read", h.Key, h.Record.ClaimID), merr, keys...)
			}
			return refuse(ForeignHost, h.Record.ClaimID, fmt.Sprintf("%s is held by claim %s taken on machine %q; this is machine %s", h.Key, h.Record.ClaimID, h.Record.Host.MachineID, mine), nil, keys...)
		}
	}
	for _, h := range heads {
		var gap *GapError
		if h.Record == nil && errors.As(h.Damage, &gap) {
			r := refuse(UnsafeReplacement, "", gap.Error(), nil, keys...)
			r.Hint = gap.Hint()
			return r
		}
	}
	for _, h := range heads {
		if h.Record == nil {
			return refuse(UnsafeReplacement, "", fmt.Sprintf("%s has a damaged head revision %d", h.Key, h.N), h.Damage, keys...)
		}
	}
	if len(heads) == 2 && heads[0].Record.ClaimID != heads[1].Record.ClaimID {
		return refuse(UnsafeReplacement, "", fmt.Sprintf("%s is held by claim %s but %s by claim %s", heads[0].Key, heads[0].Record.ClaimID, heads[1].Key, heads[1].Record.ClaimID), nil, keys...)
	}
	state := Stopped
	for _, h := range heads {
		state = Conservative(state, h.State())
	}
	id := heads[0].Record.ClaimID
	reason := fmt.Sprintf("%s is held by claim %s in state %s", heads[0].Key, id, state)
	if state == Reserved || state == Active {
		if o, err := heads[0].Record.Owner(); err == nil {
			reason += fmt.Sprintf(" (owner pid %d)", o.PID)
		}
		return refuse(AlreadyActive, id, reason, nil, keys...)
	}
	return refuse(UnsafeReplacement, id, reason, nil, keys...)
}
