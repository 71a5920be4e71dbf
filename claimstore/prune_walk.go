package claimstore

import (
	"context"
	"crypto/sha256"
	"time"
)

// Prune's walk. The first prune of a root with a long history finds nearly
// every key free, old and to be removed: a year of sessions is some 730,000
// keys. Walked as Walk walks (every key kept, slim, until the pairing), its
// memory was about a kilobyte a key, gigabytes at a year, all of it before
// the first removal: a machine that could not hold it could never prune.
//
// Almost every session of such a root pairs with nothing: its seat has
// gone on to other claims. Whether a session is such a key can be decided
// from the session and the seats alone, and the seats are few. So prune
// reads every seat first, then the sessions a chunk at a time, and keeps
// whole (slim, as Walk keeps it) only a session that could pair or could
// make a claim held: one that is held or cannot be read, one a seat's pair
// member names, one whose claim a seat carries, one whose own pair member
// names a seat that is missing or unreadable (a record always names a
// claim: DecodeRecord refuses one that does not). The seats and those
// sessions are paired by pairKeys exactly as a whole walk pairs them:
// every key a pair or a held claim could involve is among them
// (TestPruneWalkDecidesAsAWholeWalk, TestPruneWalkEveryShape). Every other
// session is idle in a whole walk too, and prune keeps of it a
// plainSession: what its decision and its batch need, about 200 bytes.

// plainSession is a session key as prune's walk keeps it once decided to
// pair with nothing, or a session candidate made from a walked key: what
// the decision needs (its claim, age and tombstone flag), and what its
// batch needs to read its head again and act (its key, its head's number
// and the SHA-256 of the head's bytes).
//
// It keeps no location: the key's hash is computed again when needed
// (Key.Loc), which costs a SHA-256 where keeping it cost some 80 bytes a
// key.
type plainSession struct {
	session   string
	claim     string
	n         uint64
	digest    [sha256.Size]byte
	old       bool
	tombstone bool
	why       string // why it is not old, when its date says nothing
}

func (p *plainSession) key() Key { return Key{Kind: KindSession, Session: p.session} }

// candidate makes p whole for its batch: the candidate a walked key would
// have been (from 1 to its head; the head itself read again by
// rereadHeads, against the digest).
func (p *plainSession) candidate() *candidate {
	k := p.key()
	d := p.digest
	in := &KeyInfo{Loc: k.Loc(), Key: &k, ClaimID: p.claim, Top: p.n, Head: &Head{Key: k, N: p.n, digest: &d}}
	return &candidate{in: in, from: 1, to: p.n}
}

// plainOf keeps of a free session key, slimmed by slimForPrune, what its
// decision and batch need.
func plainOf(in *KeyInfo, cutoff, now time.Time) plainSession {
	h := in.Head
	p := plainSession{session: in.Key.Session, claim: in.ClaimID, n: h.N, tombstone: h.Record.Tombstone}
	if h.digest != nil {
		p.digest = *h.digest
	}
	p.old, p.why = oldEnough(h.Record, cutoff, now)
	return p
}

// pruneWalk reads the root for Prune: every seat, then the sessions a chunk
// of pruneBatch at a time (see the top of this file). It returns the walk
// of the seats and of the sessions that could pair, paired as Walk pairs
// them (IdleKeys kept; Keys counts every key read), and the plain sessions
// with a history, in the order they were read, dated against cutoff and
// now (oldEnough).
func (s *Store) pruneWalk(ctx context.Context, cutoff, now time.Time, progress func(phase string, done, total int)) (*Walk, []plainSession, error) {
	seatLocs, err := s.be.Locs(ctx, KindSeat)
	if err != nil {
		return nil, nil, err
	}
	sessionLocs, err := s.be.Locs(ctx, KindSession)
	if err != nil {
		return nil, nil, err
	}
	total := len(seatLocs) + len(sessionLocs)
	read := 0
	opts := &WalkOptions{slim: slimForPrune}
	if progress != nil {
		opts.Progress = func(done, _ int) { progress("read", read+done, total) }
	}
	seats, err := s.readKeys(ctx, seatLocs, opts)
	if err != nil {
		return nil, nil, err
	}
	read += len(seatLocs)
	seatAt := map[Loc]*KeyInfo{}
	named := map[Loc]bool{}         // sessions a seat's pair member names
	seatClaims := map[string]bool{} // claims a seat carries
	revisions := 0
	for _, in := range seats {
		seatAt[in.Loc] = in
		if in.Pair != nil {
			named[in.Pair[1].Loc()] = true
		}
		if in.ClaimID != "" {
			seatClaims[in.ClaimID] = true
		}
		revisions += in.Revisions
	}
	// pairs reports whether a session could pair, or make a claim held,
	// in a whole walk: otherwise it is idle there, whatever else the root
	// holds. It is asked of a key with revisions (an empty directory is
	// passed over before): one whose newest revisions cannot be read, so
	// that it has no Key, holds (KeyInfo.Held).
	pairs := func(in *KeyInfo) bool {
		switch {
		case named[in.Loc] || in.Held() || seatClaims[in.ClaimID]:
			return true
		case in.Pair != nil && in.Pair[1] == *in.Key:
			// Its own pair member pairs it unless that seat has gone on
			// to another claim (pairKeys' moved): a missing or unreadable
			// seat has not.
			seat := seatAt[in.Pair[0].Loc()]
			return seat == nil || seat.Key == nil
		}
		return false
	}
	var sessions []*KeyInfo
	var plain []plainSession
	for start := 0; start < len(sessionLocs); start += pruneBatch {
		chunk := sessionLocs[start:min(start+pruneBatch, len(sessionLocs))]
		infos, err := s.readKeys(ctx, chunk, opts)
		if err != nil {
			return nil, nil, err
		}
		read += len(chunk)
		for _, in := range infos {
			revisions += in.Revisions
			switch {
			case in.Key == nil && in.Err == nil && in.Top == 0:
				// An empty key directory: free, with nothing to remove (a
				// seat naming it pairs with it as with no directory).
			case pairs(in):
				sessions = append(sessions, in)
			default:
				plain = append(plain, plainOf(in, cutoff, now))
				// What the read noted of its listing (Store.listed) is
				// let go too: its batch lists it again, where kept it
				// was another entry per key of the root.
				s.forgetListing(in.Loc)
			}
		}
		clear(chunk) // the names read go, but for the keys kept
	}
	w := s.pairKeys(seats, sessions, true)
	w.Keys, w.Revisions = total, revisions
	return w, plain, nil
}
