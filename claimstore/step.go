package claimstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/claimstore/claimstore/claimstore/storage"
)

// Claim is a writer claim this store published. It records the revisions
// the claim last published on each key: every later step is fenced on them.
// A Claim is not safe for concurrent use.
type Claim struct {
	ID         string
	Seat       Key
	Session    Key
	SeatRev    uint64
	SessionRev uint64
	Record     *Record // the claim's latest record
}

// AcquireFields are the fields of a new claim.
type AcquireFields struct {
	// ClaimID is the new claim's id; "" means a fresh random one.
	ClaimID string
	// Owner is the supervisor process that owns the claim (see Store.Self).
	Owner Owner
	// UnitName is the systemd unit the writer will run in; "" means the
	// reference's default, "mosaic-chat-<claim id>", unless NoUnit.
	UnitName string
	// NoUnit records that the writer runs in no unit (a process group of
	// the supervisor's own, lifecycle.GroupStarter): unitName is null from
	// the first revision, so that nothing names a unit that never existed.
	// Classify has no unit to look up for such a claim: marked, it is held
	// until the facts prove its process group over; reserved and unmarked
	// with its owner gone, nothing was started (the marker comes before
	// any start), and decision step 9 frees it. The reference reads such a
	// record (it does not check unitName). NoUnit with a UnitName is an
	// error.
	NoUnit bool
	// Fields are further members to record (bindingId, harness,
	// conversation, branch, leaf, pins, generation, prior, execution,
	// cohortRef, or anything else), each JSON-encoded as given.
	Fields map[string]any
}

// UnitNameFor returns the reference implementation's unit name for a claim.
func UnitNameFor(claimID string) string { return "mosaic-chat-" + claimID }

func (s *Store) newRecord(f AcquireFields) (*Record, error) {
	id := f.ClaimID
	if id == "" {
		id = NewClaimID()
	} else if !ValidClaimID(id) {
		return nil, fmt.Errorf("claim id %q is not \"c\" and 24 lowercase hex digits", id)
	}
	if f.Owner.PID <= 0 {
		return nil, fmt.Errorf("owner pid %d is not a process id (use Store.Self)", f.Owner.PID)
	}
	machine, err := s.machineID()
	if err != nil {
		return nil, fmt.Errorf("cannot record the host: %w", err)
	}
	boot, err := s.host.BootID()
	if err != nil {
		return nil, fmt.Errorf("cannot record the host: %w", err)
	}
	if f.NoUnit && f.UnitName != "" {
		return nil, fmt.Errorf("unit name %q given with NoUnit: a writer runs in a unit or in none", f.UnitName)
	}
	unit := appendJSString(nil, f.UnitName)
	switch {
	case f.NoUnit:
		unit = json.RawMessage("null")
	case f.UnitName == "":
		unit = appendJSString(nil, UnitNameFor(id))
	}
	owner, err := jsJSON(f.Owner)
	if err != nil {
		return nil, err
	}
	r := &Record{ClaimID: id, State: Reserved, Host: Host{MachineID: machine, BootID: boot}}
	null := json.RawMessage("null")
	r.Fields.Set(fieldOwner, owner)
	r.Fields.Set(fieldUnitName, unit)
	r.Fields.Set(fieldSpawnMarker, json.RawMessage("false"))
	r.Fields.Set("invocationId", null)
	r.Fields.Set("engine", null)
	r.Fields.Set("shim", null)
	for _, name := range []string{"stop", "prior", "execution", "cohortRef"} {
		r.Fields.Set(name, null)
	}
	if err := applyFields(&r.Fields, f.Fields); err != nil {
		return nil, err
	}
	return r, nil
}

func deleteField(fs Fields, name string) Fields {
	out := fs[:0]
	for _, f := range fs {
		if f.Name != name {
			out = append(out, f)
		}
	}
	return out
}

func applyFields(dst *Fields, m map[string]any) error {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if reserved[name] || name == "state" || name == "proof" {
			return fmt.Errorf("%w: member %q is the store's own", ErrBadPatch, name)
		}
		raw, err := jsJSON(m[name])
		if err != nil {
			return fmt.Errorf("%w: member %q: %v", ErrBadPatch, name, err)
		}
		dst.Set(name, raw)
	}
	return nil
}

func (s *Store) pause(p Point) error {
	if s.barrier == nil {
		return nil
	}
	return s.barrier(p)
}

// publish publishes rec as revision n of k. It reports false, nil when
// another writer won revision n.
func (s *Store) publish(ctx context.Context, k Key, n uint64, rec *Record) (bool, error) {
	won, _, err := s.publishLinked(ctx, k, n, rec)
	return won, err
}

// publishLinked is publish that also reports whether the revision was
// linked, which it may be even when a later barrier returned an error.
func (s *Store) publishLinked(ctx context.Context, k Key, n uint64, rec *Record) (won, linked bool, err error) {
	p := s.prepare(ctx, k, n, rec)
	return p.commit(ctx)
}

// publishOver is publish over a head the caller read free: on a backend
// that removes keys (storage.GuardedPublisher) it publishes only while
// that head is still there, so that a key pruned and written again since
// is never built on; it reports false, nil then, as after a lost race.
func (s *Store) publishOver(ctx context.Context, h *Head, rec *Record) (bool, error) {
	pr := &preparing{done: make(chan struct{}), prev: h.raw}
	s.prepareInto(ctx, pr, h.Key, h.N+1, rec)
	close(pr.done)
	won, _, err := pr.commit(ctx)
	return won, err
}

// preparing is a revision being prepared (Backend.Prepare), perhaps in
// another goroutine: commit and abort wait for it.
type preparing struct {
	done   chan struct{}
	p      Prepared
	err    error
	linked bool

	s   *Store
	loc Loc
	n   uint64
	id  string
	// prev, when set, is revision n-1 as read: the publish follows it
	// (see publishOver).
	prev []byte
	// data is the revision's bytes, once marshalled.
	data []byte
}

// prepare prepares rec as revision n of k.
func (s *Store) prepare(ctx context.Context, k Key, n uint64, rec *Record) *preparing {
	pr := &preparing{done: make(chan struct{})}
	s.prepareInto(ctx, pr, k, n, rec)
	close(pr.done)
	return pr
}

func (s *Store) prepareInto(ctx context.Context, pr *preparing, k Key, n uint64, rec *Record) {
	hook, ok := pr.encodeOne(s, k, n, rec)
	if !ok {
		return
	}
	if g, ok := s.be.(storage.GuardedPublisher); ok && pr.prev != nil && n > 1 {
		pr.p, pr.err = g.PrepareOver(ctx, k.Loc(), n, pr.data, pr.prev, hook)
		return
	}
	pr.p, pr.err = s.be.Prepare(ctx, k.Loc(), n, pr.data, hook)
}

// encodeOne is encode for a revision that shares nothing with another.
func (pr *preparing) encodeOne(s *Store, k Key, n uint64, rec *Record) (hook func(Barrier) error, ok bool) {
	return pr.encode(s, k, n, rec, rec.appendBody(make([]byte, 0, 1024)), timestamp(s.now()))
}

// encode is the first half of preparing rec as revision n of k: the
// revision's bytes (pr.data, checked against the size bound) and the
// barrier hook of its publish. body is rec's encoding but for its last
// members (Record.appendBody), which encode does not change: a step's two
// revisions share it. ok is false, with pr.err set, when the revision
// cannot be published.
func (pr *preparing) encode(s *Store, k Key, n uint64, rec *Record, body []byte, writtenAt string) (hook func(Barrier) error, ok bool) {
	pr.s, pr.loc, pr.n, pr.id = s, k.Loc(), n, rec.ClaimID
	data := appendTail(append(make([]byte, 0, len(body)+256), body...), k, n, writtenAt)
	if err := sizeOK(k, n, len(data)); err != nil {
		pr.err = err
		return nil, false
	}
	pr.data = data
	return func(b Barrier) error {
		if b == BarrierLinked {
			pr.linked = true
		}
		return s.pause(Point{Barrier: b, Key: k, Revision: n, ClaimID: rec.ClaimID})
	}, true
}

// prepareStep prepares rec as revision seatN of seat and sessionN of
// session, a step's two revisions, and returns both prepared (or failed).
// sessionPrev, when set, is the session's revision sessionN-1 as read,
// which its publish must follow (see publishOver).
//
// On a backend that prepares in batches (storage.BatchPreparer) both
// temporaries are written before either is made durable, and then both
// at once, on no goroutine of the store's: see dirbackend's PrepareBatch
// for why the order matters. Otherwise the session revision is prepared
// on a goroutine while the seat's is (prepareAsync).
//
// fence, when set, is the step's check that the claim still holds a key:
// on a BatchPreparer it is each request's Fence, called while the
// temporaries' fsyncs are in flight, and its error fails that key's
// revision; elsewhere it is called first, for the seat and then the
// session, and an error fails both without preparing either.
func (s *Store) prepareStep(ctx context.Context, seat Key, seatN uint64, session Key, sessionN uint64, rec *Record, sessionPrev []byte, fence func(Key) error) (seatP, sessionP *preparing) {
	bp, ok := s.be.(storage.BatchPreparer)
	if !ok {
		if fence != nil {
			for _, k := range []Key{seat, session} {
				if err := fence(k); err != nil {
					return failedPrep(err), failedPrep(err)
				}
			}
		}
		sessionP = s.prepareAsync(ctx, session, sessionN, rec, sessionPrev)
		return s.prepare(ctx, seat, seatN, rec), sessionP
	}
	seatP = &preparing{done: make(chan struct{})}
	sessionP = &preparing{done: make(chan struct{}), prev: sessionPrev}
	defer close(seatP.done)
	defer close(sessionP.done)
	var reqs []storage.PrepareRequest
	var to []*preparing
	body, writtenAt := rec.appendBody(make([]byte, 0, 1024)), timestamp(s.now())
	for _, x := range []struct {
		pr *preparing
		k  Key
		n  uint64
	}{{seatP, seat, seatN}, {sessionP, session, sessionN}} {
		if hook, ok := x.pr.encode(s, x.k, x.n, rec, body, writtenAt); ok {
			r := storage.PrepareRequest{Loc: x.pr.loc, N: x.n, Data: x.pr.data, Prev: x.pr.prev, Hook: hook}
			if fence != nil {
				r.Fence = func() error { return fence(x.k) }
			}
			reqs = append(reqs, r)
			to = append(to, x.pr)
		}
	}
	ps, errs := bp.PrepareBatch(ctx, reqs)
	for i, pr := range to {
		pr.p, pr.err = ps[i], errs[i]
	}
	return seatP, sessionP
}

// failedPrep is a revision that failed before it was prepared.
func failedPrep(err error) *preparing {
	pr := &preparing{done: make(chan struct{}), err: err}
	close(pr.done)
	return pr
}

// sizeOK refuses a revision larger than the read side accepts: the bound a
// reader applies (MaxFileSize) is the bound a writer applies, so that the
// store never publishes what it will then refuse to read.
func sizeOK(k Key, n uint64, size int) error {
	if size <= MaxFileSize {
		return nil
	}
	return tooLarge(fmt.Sprintf("revision %d of %s would be %d bytes, which is", n, k, size))
}

// tooLarge is the ErrRecordTooLarge error for what (the start of a
// sentence ending in a verb: which record, how many bytes), with the bound
// and what to do.
func tooLarge(what string) error {
	return fmt.Errorf("%w: %s more than the %d bytes a revision may hold (every reader refuses a larger one as damaged); nothing was published: record less (the members given are the likely cause)", ErrRecordTooLarge, what, MaxFileSize)
}

// checkSize refuses, before anything is read or published, a record that
// would be too large as a revision of any of keys: a step publishes on both
// keys, and one that failed only on the second would be cut between them.
// The revision number is taken at its widest, so that the answer does not
// depend on which number the step publishes.
//
// A record far below the bound (every record of a usual claim) is let
// through on sizeBound, which adds up lengths instead of encoding the
// record; only one whose bound reaches MaxFileSize is encoded, and then the
// exact size decides, so that the answer is exactly the encoding's.
func (s *Store) checkSize(rec *Record, keys ...Key) error {
	writtenAt := timestamp(s.now())
	for _, k := range keys {
		if rec.sizeBound(k, writtenAt) <= MaxFileSize {
			continue
		}
		r := rec.clone()
		r.Key, r.Revision, r.WrittenAt = k, MaxRevision, writtenAt
		data, err := r.Marshal()
		if err != nil {
			return err
		}
		if len(data) > MaxFileSize {
			// Measured at MaxRevision, which is not the number the step
			// would publish: the message says so rather than name a
			// revision that does not exist.
			return tooLarge(fmt.Sprintf("a record of %d bytes for %s (at its widest revision number) is", len(data), k))
		}
	}
	return nil
}

// escapedMax is the most bytes that encoding one byte of a string takes:
// a control byte is \u00XX, a byte of invalid UTF-8 becomes \ufffd, and
// U+2028's three bytes a \u2028 (jsJSON); everything else takes fewer.
const escapedMax = 6

// sizeBound is an upper bound of len(r.Marshal()) with r's key k, its
// revision at MaxRevision and writtenAt, computed from lengths alone: every
// string counted as if each byte took escapedMax, every raw member (owner,
// fields, a host or proof as read) as it is (Marshal compacts them, which
// never lengthens), every member name once more for the record's own order
// besides the fields'. It never falls below the encoding, or checkSize
// would let an oversize record through; how far above it is does not
// matter, since a bound at MaxFileSize or more is checked exactly.
func (r *Record) sizeBound(k Key, writtenAt string) int {
	str := func(s string) int { return escapedMax*len(s) + 2 }
	// '{', "}\n", version and kind's values (short constants), revision's
	// digits, and per member a colon and a comma.
	n := 64
	for _, name := range recordOrder {
		n += str(name) + 2
	}
	n += str("key") + str("revision") + str("writtenAt") + 6 + 20
	n += str(r.ClaimID) + str(string(r.State)) + str(writtenAt)
	if r.Host.raw != nil {
		n += len(r.Host.raw)
	} else {
		n += str("machineId") + str(r.Host.MachineID) + str("bootId") + str(r.Host.BootID) + 4
	}
	switch {
	case r.Proof == nil:
		n += len("null")
	case r.Proof.raw != nil:
		n += len(r.Proof.raw)
	default:
		n += str("kind") + str(string(r.Proof.Kind)) + str("ref") + str(r.Proof.Ref) + 4
	}
	for _, f := range r.Fields {
		n += str(f.Name) + 2 + len(f.Value)
	}
	n += 2
	for _, m := range k.members() {
		n += str(m[0]) + str(m[1]) + 2
	}
	return n
}

// prepareAsync is prepare overlapping the caller's work, unless the store
// is sequential.
//
// prev, when set, is revision n-1 as read, which the publish must follow
// (see publishOver).
func (s *Store) prepareAsync(ctx context.Context, k Key, n uint64, rec *Record, prev []byte) *preparing {
	pr := &preparing{done: make(chan struct{}), prev: prev}
	if s.sequential {
		s.prepareInto(ctx, pr, k, n, rec)
		close(pr.done)
		return pr
	}
	go func() {
		defer close(pr.done)
		s.prepareInto(ctx, pr, k, n, rec)
	}()
	return pr
}

// publishAfter publishes p once other, the other key's revision of the
// same step, is prepared too: a step whose second revision cannot even be
// prepared (ENOSPC, a failed fsync, a barrier's stop) publishes neither,
// rather than being cut between its keys. On such a failure both are
// aborted and the failure returned.
func (s *Store) publishAfter(ctx context.Context, p, other *preparing) (won, linked bool, err error) {
	<-other.done
	<-p.done
	// A number already taken is no failure to prepare: the link would
	// lose, and commit says so. Nor is the other revision left unprepared
	// because p's number was taken (storage.ErrEarlierTaken): p loses,
	// and the other is then never linked.
	if other.err != nil && !errors.Is(other.err, ErrRevisionExists) && !errors.Is(other.err, storage.ErrEarlierTaken) {
		p.abort()
		return false, false, other.err
	}
	if p.err != nil && !errors.Is(p.err, ErrRevisionExists) {
		other.abort()
		return false, false, p.err
	}
	return p.commit(ctx)
}

// commit publishes a prepared revision: won is false when another writer
// had the number; linked says whether the revision was linked, which it
// may be even when a later barrier returned an error.
func (pr *preparing) commit(ctx context.Context) (won, linked bool, err error) {
	<-pr.done
	if errors.Is(pr.err, ErrRevisionExists) {
		return false, false, nil
	}
	if pr.err != nil {
		return false, false, pr.err
	}
	err = pr.p.Commit(ctx)
	if errors.Is(err, ErrRevisionExists) || errors.Is(err, storage.ErrHeadMoved) {
		return false, false, nil
	}
	if err == nil {
		pr.s.noteOwn(pr.loc, pr.n, pr.id)
	}
	return err == nil, pr.linked, err
}

// noteOwn records that this store published revision n of loc, of claim
// claimID.
func (s *Store) noteOwn(loc Loc, n uint64, claimID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.own == nil {
		s.own = map[Loc]ownRev{}
	}
	s.own[loc] = ownRev{n: n, claimID: claimID}
}

// abort discards a prepared revision, once it is prepared.
func (pr *preparing) abort() {
	<-pr.done
	if pr.p != nil {
		pr.p.Abort()
	}
}

// Acquire takes a new writer claim on both keys: it publishes the claim,
// reserved, on the seat key and then on the session key. It refuses (a
// *Refusal) when either key is held. If the session key is taken between
// the two steps, it closes its own seat revision as stopped with a no-unit
// proof (nothing was spawned) and refuses. A lost link race re-reads and
// re-decides, a bounded number of times.
//
// On a machine an operator decommissioned (its newest decommission record
// is a decommission, not a lift) it publishes nothing and returns a
// *QuarantinedError naming the record and the command that lifts it.
//
// An error other than a refusal leaves the claim's state unknown to the
// caller: at worst the seat key is held by a reserved claim with nothing
// spawned, which classify frees with a no-unit proof.
func (s *Store) Acquire(ctx context.Context, seat, session Key, f AcquireFields) (*Claim, error) {
	if err := checkKinds(seat, session); err != nil {
		return nil, err
	}
	rec, err := s.newRecord(f)
	if err != nil {
		return nil, err
	}
	rec.Fields.Set(pairMember, pairJSON(seat, session))
	if err := s.checkSize(rec, seat, session); err != nil {
		return nil, err
	}
	// A machine an operator decommissioned takes no claims: others free
	// its claims of the boots the record names, so one taken here now
	// could be freed under its running writer. Read at every acquire (one
	// small read that finds nothing on a machine never decommissioned),
	// never remembered: a long-lived store sees a decommission written
	// after it opened.
	if err := s.checkQuarantine(ctx, rec.Host.MachineID); err != nil {
		return nil, err
	}
	for range s.retries + 1 {
		p, err := s.Pair(ctx, seat, session)
		if err != nil {
			return nil, err
		}
		if r := s.Refusal(p); r != nil {
			return nil, r
		}
		// Both revisions are written and synced before the seat's is
		// linked; the session's is linked only once the seat's is durable.
		sessionRev := p.Session.N + 1
		// Over a free session head, which prune may remove: the publish
		// follows exactly the head read (publishOver).
		seatPrep, prep := s.prepareStep(ctx, seat, p.Seat.N+1, session, sessionRev, rec, p.Session.raw, nil)
		won, _, err := s.publishAfter(ctx, seatPrep, prep)
		if err != nil || !won {
			prep.abort()
			if err != nil {
				return nil, err
			}
			continue
		}
		seatRev := p.Seat.N + 1
		if err := s.pause(Point{Barrier: BarrierBetweenKeys, Key: seat, Revision: seatRev, ClaimID: rec.ClaimID}); err != nil {
			prep.abort()
			return nil, err
		}
		if won, _, err = prep.commit(ctx); err != nil {
			return nil, err
		}
		seatMoved := false
		if !won {
			// Another writer published that session revision since the
			// pair was read: if the key is free still, publish above it —
			// but only while this claim's seat revision is the seat's
			// head. A seat moved since (a classification freed the claim
			// while this process stood between the keys, and others may
			// have claimed and released the pair after it) means the claim
			// was over before it held the session; holding the session for
			// it would hold the pair for nothing that can run. A seat that
			// moves after this read races the session's publish at the
			// same number, as any classification does: one of the two wins,
			// and a lost classification reads the pair again.
			seatNow, err := s.Head(ctx, seat)
			if err != nil {
				return nil, err
			}
			seatMoved = seatNow.N != seatRev
			if !seatMoved {
				now, err := s.Head(ctx, session)
				if err != nil {
					return nil, err
				}
				if !now.Held() {
					sessionRev = now.N + 1
					if won, err = s.publishOver(ctx, now, rec); err != nil {
						return nil, err
					}
				}
			}
		}
		if !won {
			// Nothing was spawned under this claim: close the seat revision
			// with a no-unit proof so that it does not hold the seat (a
			// seat that moved holds it no longer).
			if !seatMoved {
				closed := rec.clone()
				closed.State = Stopped
				closed.Proof = NewProof(ProofNoUnit, "")
				if _, err := s.publish(ctx, seat, seatRev+1, closed); err != nil {
					return nil, err
				}
			}
			p, err := s.Pair(ctx, seat, session)
			if err != nil {
				return nil, err
			}
			if r := s.Refusal(p); r != nil {
				return nil, r
			}
			return nil, refuse(UnsafeReplacement, rec.ClaimID, fmt.Sprintf("%s changed while it was being claimed", session), nil, seat, session)
		}
		return &Claim{ID: rec.ClaimID, Seat: seat, Session: session, SeatRev: seatRev, SessionRev: sessionRev, Record: rec}, nil
	}
	return nil, refuse(UnsafeReplacement, "", fmt.Sprintf("%s changed during every one of %d attempts", seat, s.retries+1), nil, seat, session)
}

// Patch is a change to a claim's record.
type Patch struct {
	// State is the new state; "" keeps the current one.
	State State
	// Proof is the proof to record; nil keeps the current one.
	Proof *Proof
	// Fields are members to set, each JSON-encoded as given. They may not
	// name the members the store owns (ErrBadPatch).
	Fields map[string]any
}

func (c *Claim) check() error {
	if c == nil || c.Record == nil || c.Seat.Kind != KindSeat || c.Session.Kind != KindSession {
		return ErrNotOwned
	}
	return nil
}

// Advance publishes the patched record on the seat key and then on the
// session key. Each key's head must still be the revision this claim last
// published there; otherwise it refuses with unsafe-replacement and
// publishes nothing more. c is updated as each key's revision lands, so a
// call cut between the keys can be retried with the same claim.
func (s *Store) Advance(ctx context.Context, c *Claim, p Patch) error {
	if err := c.check(); err != nil {
		return err
	}
	if !c.Record.held() {
		return fmt.Errorf("%w: claim %s is stopped with a %s proof; take a new claim", ErrReleased, c.ID, c.Record.Proof.Kind)
	}
	if p.State != "" && !p.State.Valid() {
		return fmt.Errorf("%w: state %q", ErrBadPatch, p.State)
	}
	if p.Proof != nil && !p.Proof.Kind.valid() {
		return fmt.Errorf("%w: proof kind %q", ErrBadPatch, p.Proof.Kind)
	}
	next := c.Record.clone()
	if p.State != "" {
		next.State = p.State
	}
	if p.Proof != nil {
		next.Proof = p.Proof
	}
	if err := applyFields(&next.Fields, p.Fields); err != nil {
		return err
	}
	if !next.held() {
		// This step frees the claim: whichever call makes it, Release or
		// Advance, the proof must be one that can free it.
		if err := s.checkReleaseProof(ctx, c, next); err != nil {
			return err
		}
	}
	if c.Record.SpawnMarker() && !next.SpawnMarker() {
		// A marker says a writer may have been spawned; only a proof,
		// never a patch, ends that possibility.
		return fmt.Errorf("%w: the spawn marker of claim %s is set and cannot be cleared", ErrBadPatch, c.ID)
	}
	// A claim is only ever stepped on the machine that took it: another
	// machine cannot judge its owner, and its boot proofs mean nothing here.
	if mine, err := s.machineID(); err != nil || c.Record.Host.MachineID != mine {
		reason := fmt.Sprintf("claim %s was taken on machine %q", c.ID, c.Record.Host.MachineID)
		if err == nil {
			reason += ", not on this machine " + mine
		}
		return refuse(ForeignHost, c.ID, reason, err, c.Seat, c.Session)
	}
	return s.step(ctx, c, next)
}

// step publishes next on both keys of c, seat first, fenced on c's
// revisions. Both heads are checked before anything is linked (while the
// temporaries' fsyncs are in flight, on a backend that can say so), so a
// key that moved under the claim stops the step before it publishes; a
// writer that moves the session key after that check still wins its
// number, and the step then refuses between the keys, as a crash there
// would.
func (s *Store) step(ctx context.Context, c *Claim, next *Record) error {
	if err := s.checkSize(next, c.Seat, c.Session); err != nil {
		return err
	}
	// The checks of both heads: run while the temporaries' fsyncs are in
	// flight, where the backend can (storage.PrepareRequest.Fence), which
	// takes them off the step's time. The backend may call them on a
	// goroutine of its own, one after the other: fenceErr is read only
	// once prepareStep has returned, after the last of them.
	var fenceErr error // the first key's that failed, the seat's first
	fence := func(k Key) error {
		err := s.fenced(ctx, c, k)
		if fenceErr == nil {
			fenceErr = err
		}
		return err
	}
	// Only this order matters: both temporaries synced, then seat link,
	// seat directory fsync, session link, session directory fsync (a
	// claim's seat head is never older than its session head, even after
	// a power cut). A writer that moved the session key since the check
	// above wins its number, and the session link then fails: the link is
	// the arbiter.
	seatPrep, prep := s.prepareStep(ctx, c.Seat, c.SeatRev+1, c.Session, c.SessionRev+1, next, nil, fence)
	if fenceErr != nil {
		// A claim that lost a key says so, whatever else went wrong
		// while its revisions were prepared (a full disk, say).
		seatPrep.abort()
		prep.abort()
		return fenceErr
	}
	won, linked, err := s.publishAfter(ctx, seatPrep, prep)
	if linked {
		// The revision exists even if a barrier stopped the rest: the
		// claim must know it as its own, or a retry refuses against it.
		c.SeatRev++
		c.Record = next
	}
	if err == nil && !won {
		err = refuse(UnsafeReplacement, c.ID, fmt.Sprintf("another writer published revision %d of %s under claim %s", c.SeatRev+1, c.Seat, c.ID), nil, c.Seat, c.Session)
	}
	if err == nil {
		err = s.pause(Point{Barrier: BarrierBetweenKeys, Key: c.Seat, Revision: c.SeatRev, ClaimID: c.ID})
	}
	if err != nil {
		prep.abort()
		return err
	}
	won, linked, err = prep.commit(ctx)
	if linked {
		c.SessionRev++
		c.Record = next
	}
	if err != nil {
		return err
	}
	if !won {
		return refuse(UnsafeReplacement, c.ID, fmt.Sprintf("another writer published revision %d of %s under claim %s", c.SessionRev+1, c.Session, c.ID), nil, c.Seat, c.Session)
	}
	return nil
}

func (c *Claim) rev(k Key) *uint64 {
	if k.Kind == KindSession {
		return &c.SessionRev
	}
	return &c.SeatRev
}

// fenced checks that k's head is still the revision c last published there.
func (s *Store) fenced(ctx context.Context, c *Claim, k Key) error {
	rev := *c.rev(k)
	if s.fencedOwn(ctx, k.Loc(), rev, c.ID) {
		return nil
	}
	h, err := s.head(ctx, k, true)
	if err != nil {
		return err
	}
	var gap *GapError
	if h.Record == nil && errors.As(h.Damage, &gap) {
		r := refuse(UnsafeReplacement, c.ID, gap.Error(), nil, c.Seat, c.Session)
		r.Hint = gap.Hint()
		return r
	}
	if h.Record == nil || h.N != rev || h.Record.ClaimID != c.ID {
		what := fmt.Sprintf("its head is revision %d, not this claim's revision %d", h.N, rev)
		if h.N == rev && h.Damage != nil {
			what = fmt.Sprintf("its head revision %d is damaged", h.N)
		}
		return refuse(UnsafeReplacement, c.ID, fmt.Sprintf("%s moved under claim %s: %s", k, c.ID, what), h.Damage, c.Seat, c.Session)
	}
	return nil
}

// fencedOwn is fenced's fast path: when this store itself published
// revision rev of loc for claim id, and a probe finds rev still the head
// (in a directory it can trust, the very file it linked), the revision
// needs no reading: a revision name never refers to anything but what was
// linked to it.
func (s *Store) fencedOwn(ctx context.Context, loc Loc, rev uint64, id string) bool {
	s.mu.Lock()
	o, ok := s.own[loc]
	s.mu.Unlock()
	// The number is IsOwnHead's to check (what this store linked last);
	// the claim id is this check's: the same number under another claim is
	// not this claim's revision.
	if !ok || o.claimID != id {
		return false
	}
	// Nothing above rev that a listing would see and a probe would not (a
	// gap above): this store's own publish of rev read the key for writing,
	// which lists it whole.
	pb, ok := s.be.(storage.OwnHeadChecker)
	return ok && pb.IsOwnHead(ctx, loc, rev)
}

// Release publishes stopped with the proof on both keys, seat first. The
// proof says why nothing still runs; a release cut between the keys is
// completed by Classify.
func (s *Store) Release(ctx context.Context, c *Claim, proof *Proof) error {
	if proof == nil {
		return fmt.Errorf("%w: a release needs a proof", ErrBadPatch)
	}
	if err := c.check(); err != nil {
		return err
	}
	return s.Advance(ctx, c, Patch{State: Stopped, Proof: proof})
}

// checkReleaseProof refuses a step of claim c to next, which frees it,
// when next's proof cannot end the claim.
func (s *Store) checkReleaseProof(ctx context.Context, c *Claim, next *Record) error {
	proof := next.Proof
	if proof.Kind == ProofNoUnit && (c.Record.SpawnMarker() || next.SpawnMarker()) {
		// A no-unit proof says nothing was ever spawned; the marker says
		// something may have been. Only a supervisor's cohort proof (or a
		// boot proof) can end a claim that may have spawned.
		return fmt.Errorf("%w: claim %s has a spawn marker, so a no-unit proof cannot release it; release it with a cohortProof once its writers are stopped", ErrBadPatch, c.ID)
	}
	if proof.Kind == ProofDecommissioned {
		// Only classify frees on an operator's record, and only a claim
		// of another machine: a supervisor releasing its own claim has
		// better evidence than an assertion that its machine is gone.
		return fmt.Errorf("%w: a %q proof is published by classify only, on a decommission record, for another machine's claim; release claim %s with the proof of what stopped its writer", ErrBadPatch, ProofDecommissioned, c.ID)
	}
	if proof.Kind == ProofBoot {
		// A boot proof is this store's own evidence: it must exist and
		// match the claim before anything is freed on it.
		r := c.Record.clone()
		r.State, r.Proof = Stopped, proof
		if err := s.VerifyProof(ctx, r); err != nil {
			return fmt.Errorf("%w: boot proof %q does not prove claim %s over: %w", ErrBadPatch, proof.Ref, c.ID, err)
		}
	}
	return nil
}
