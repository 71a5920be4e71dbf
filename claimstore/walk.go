package claimstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"sync"
	"sync/atomic"
)

// A walk reads a whole root once — each kind's keys listed once, each key's
// history listed once, its newest readable revisions read — and pairs the
// keys as the store pairs them: by the pair member a record names, or, for
// records without one (the reference's), by claim id. classify --all
// classifies the walk's pairs, list shows them, fsck checks the same keys;
// none of them pairs keys by a rule of its own.

// KeyInfo is what a walk read of one key.
type KeyInfo struct {
	Loc Loc
	// Key is the key, from its newest readable revision (checked against
	// the directory's hash); nil when no readable revision names it.
	Key *Key
	// Head is the key's head as a read to publish on reads it: damaged
	// when its newest revision cannot be read or sits above a gap; nil
	// when Key is nil or the key could not be read (Err).
	Head *Head
	// ClaimID and Pair are the newest readable revision's claim and pair
	// member (nil when it names none).
	ClaimID string
	Pair    *[2]Key
	// Top is the highest revision listed; 0 for a key with none.
	Top uint64
	// Revisions counts the revisions listed (Top, less any gap).
	Revisions int
	// Err is why the key could not be read at all; it is held.
	Err error
}

// Held reports whether the key holds: a key that cannot be read, or whose
// key no readable revision names, holds, as a damaged head does.
func (in *KeyInfo) Held() bool {
	switch {
	case in.Err != nil:
		return true
	case in.Top == 0:
		return false
	case in.Head == nil:
		return true
	}
	return in.Head.Held()
}

// WalkPair is a pair the walk found: both keys, and what the walk read of
// each.
type WalkPair struct {
	Seat, Session         Key
	SeatInfo, SessionInfo *KeyInfo
	order                 string // the seat's hash, then the session's
}

// Orphan is a held key the walk could not pair, and why.
type Orphan struct {
	Info   *KeyInfo
	Reason string
}

// Walk is a whole root read and paired.
type Walk struct {
	// Pairs are sorted by the seat's key hash, then the session's.
	Pairs []WalkPair
	// Orphans are the held keys with no partner, in the order the walk
	// met them: the unreadable keys as the kinds are read, then the held
	// keys of no pair, seats first.
	Orphans []Orphan
	// Idle counts the free keys of no pair (released history); IdleKeys
	// lists them when WalkOptions.KeepIdle is set.
	Idle     int
	IdleKeys []*KeyInfo
	// Keys counts every key walked; Revisions, every revision listed in
	// them.
	Keys      int
	Revisions int
}

// WalkOptions configure Walk. A nil *WalkOptions means the defaults.
type WalkOptions struct {
	// KeepIdle keeps the free keys of no pair (Walk.IdleKeys), which a walk
	// otherwise only counts: on a root with a long history they are most
	// of its keys.
	KeepIdle bool
	// Progress, if set, is called after each key is read with the number
	// read and the number to read.
	Progress func(done, total int)
	// SlimFree keeps of a free key's head only what says it is free: its
	// key and number, with a stand-in record (stopped with a proof; no
	// members, no bytes) shared by every free head. A caller that shows or
	// counts held keys only (list without --all, Stats) needs no more; on
	// a root with a long history the free keys are nearly all of it, and
	// their records were most of a walk's memory. Store.Head reads such a
	// head whole again.
	SlimFree bool

	// tops, if set, receives every readable key's highest revision:
	// ClassifyAll makes them durable before it decides on any.
	tops map[Loc]uint64
	// slim, if set, is applied to each key as soon as it is read, to keep
	// of it only what the caller decides on (slimKeyInfo for ClassifyAll,
	// slimForPrune for Prune, both of which read again what they act on):
	// the records and their bytes were most of a walk's memory, kept for
	// every key until the last was read.
	slim func(*KeyInfo)
	// readers, if above 0, is how many keys are read at once in place of
	// walkReaders (tests compare a walk read one key at a time).
	readers int
}

// slimKeyInfo keeps of a key only what a walk for ClassifyAll uses: the
// key, its claim and pair member, its numbers and errors for pairing and
// orphans, and of its head whether it holds and why not (N, Damage, and in
// place of the record one of two shared records that hold or do not, as it
// did). ClassifyAll
// classifies each pair from its keys alone, reading their heads again;
// the records, their raw bytes and members were most of the walk's
// memory, kept for every key until the last pair was classified.
func slimKeyInfo(in *KeyInfo) {
	h := in.Head
	if h == nil {
		return
	}
	slim := &Head{Key: h.Key, N: h.N, Damage: h.Damage}
	switch {
	case h.Record == nil:
	case h.Record.held():
		slim.Record = slimHeld
	default:
		slim.Record = slimFree
	}
	in.Head = slim
}

// slimFreeHeads is WalkOptions.SlimFree's slim: a free head becomes its key
// and number over slimFree; a held or damaged one is kept whole.
func slimFreeHeads(in *KeyInfo) {
	h := in.Head
	if h == nil || h.Record == nil || h.Held() {
		return
	}
	in.Head = &Head{Key: h.Key, N: h.N, Record: slimFree}
}

// slimHeld and slimFree stand for a record that holds its key and one that
// does not (stopped with a proof), in a slimmed walk; never written to.
var (
	slimHeld = &Record{State: Active}
	slimFree = &Record{State: Stopped, Proof: &Proof{Kind: ProofCohort}}
)

// walkReaders is how many keys a walk reads at once. Reading a key is a
// listing and a revision or two, each a few system calls that wait on the
// kernel (and, on a cold root, on the disk); read one after the other, a
// root's keys were all read before the first pair was classified, with
// at most one read in flight. Sixteen keep two cores and a disk's queue
// busy; the memory is what each reader holds of one key.
const walkReaders = 16

// inParallel calls f(i) for each i from 0 to n-1, workers calls at once,
// and returns when every call has returned. The walk, fsck and prune's
// compactions share it: their work is system calls that wait, one key each.
func inParallel(n, workers int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(i)
			}
		})
	}
	wg.Wait()
}

// readKeys reads every key of all with keyInfo, walkReaders at once, and
// returns what it read in the order of all: whatever order the reads end
// in, the walk pairs exactly as a walk reading one key at a time does.
// Progress is called once per key read, never from two readers at once,
// with a count that only grows.
func (s *Store) readKeys(ctx context.Context, all []Loc, opts *WalkOptions) ([]*KeyInfo, error) {
	out := make([]*KeyInfo, len(all))
	readers := walkReaders
	if opts.readers > 0 {
		readers = opts.readers
	}
	slim := opts.slim
	if slim == nil && opts.SlimFree {
		slim = slimFreeHeads
	}
	var mu sync.Mutex
	done := 0
	inParallel(len(all), readers, func(i int) {
		if ctx.Err() != nil {
			return
		}
		out[i] = s.keyInfo(ctx, all[i])
		if slim != nil {
			slim(out[i])
		}
		if opts.Progress != nil {
			mu.Lock()
			done++
			opts.Progress(done, len(all))
			mu.Unlock()
		}
	})
	// A canceled walk may have left keys unread: it returns no walk.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Walk reads every key under the root and pairs them (see Walk). Its cost
// is one listing per kind and per key, and the newest readable revisions of
// each key, walkReaders keys at once; its memory, what it keeps of the
// keys it pairs.
func (s *Store) Walk(ctx context.Context, opts *WalkOptions) (*Walk, error) {
	if opts == nil {
		opts = &WalkOptions{}
	}
	all, err := s.keyLocs(ctx, false)
	if err != nil {
		return nil, err
	}
	read, err := s.readKeys(ctx, all, opts)
	if err != nil {
		return nil, err
	}
	var infos [2][]*KeyInfo
	revisions := 0
	for _, in := range read {
		i := 0
		if in.Loc.Kind == KindSession {
			i = 1
		}
		infos[i] = append(infos[i], in)
		revisions += in.Revisions
		if opts.tops != nil && in.Err == nil && in.Top > 0 {
			opts.tops[in.Loc] = in.Top
		}
	}
	w := s.pairKeys(infos[0], infos[1], opts.KeepIdle)
	w.Keys, w.Revisions = len(all), revisions
	return w, nil
}

// keyLocs lists every key under the root, seats first: the one list of
// keys that Walk (and so list and classify --all), Check and Prune go
// through. With skipUnsafe, a kind directory the backend refuses to list
// as unsafe (ErrUnsafePath: a symlink) is skipped, for a caller that
// reports it otherwise.
func (s *Store) keyLocs(ctx context.Context, skipUnsafe bool) ([]Loc, error) {
	var all []Loc
	for _, kind := range []Kind{KindSeat, KindSession} {
		locs, err := s.be.Locs(ctx, kind)
		if skipUnsafe && errors.Is(err, ErrUnsafePath) {
			continue
		}
		if err != nil {
			// The backend's error names the directory (or prefix).
			return nil, err
		}
		all = append(all, locs...)
	}
	return all, nil
}

// pairKeys pairs the keys of a walk (see Walk).
func (s *Store) pairKeys(seats, sessions []*KeyInfo, keepIdle bool) *Walk {
	w := &Walk{}
	bySession := map[string]*KeyInfo{}
	byLoc := map[Loc]*KeyInfo{}
	for _, ins := range [][]*KeyInfo{seats, sessions} {
		for _, in := range ins {
			byLoc[in.Loc] = in
			if in.Loc.Kind == KindSession && in.Key != nil && in.ClaimID != "" {
				bySession[in.ClaimID] = in
			}
		}
	}
	// moved reports whether in is a free key whose pair member names a
	// partner that has since gone on to another claim: a released key
	// whose other key was claimed again. It is idle, not a pair; the
	// partner is paired by its own claim.
	moved := func(in *KeyInfo, partner Key) bool {
		other := byLoc[partner.Loc()]
		return !in.Held() && other != nil && other.Key != nil && other.ClaimID != in.ClaimID
	}
	done := map[Loc]bool{}
	// info is what the walk read of k, for a pair: a key named by its
	// partner's pair member that has no directory (an acquire cut before
	// it) reads as a key without revisions; one that cannot be read, as
	// damaged by why.
	info := func(k Key) *KeyInfo {
		in := byLoc[k.Loc()]
		switch {
		case in == nil:
			return &KeyInfo{Loc: k.Loc(), Key: &k, Head: &Head{Key: k}}
		case in.Head == nil:
			c := *in
			c.Key = &k
			c.Head = &Head{Key: k, N: in.Top, Damage: in.Err}
			if c.Head.Damage == nil && in.Top > 0 {
				c.Head.Damage = &fs.PathError{Op: "read head", Path: s.RevisionPath(k, in.Top), Err: &DamageError{Reason: "no readable revision names the key"}}
			}
			return &c
		}
		return in
	}
	add := func(keys [2]Key) {
		w.Pairs = append(w.Pairs, WalkPair{Seat: keys[0], Session: keys[1], SeatInfo: info(keys[0]), SessionInfo: info(keys[1]), order: keys[0].Hash() + keys[1].Hash()})
		done[keys[0].Loc()], done[keys[1].Loc()] = true, true
	}
	// unreadable reports whether in is a key that cannot be paired: its
	// directory cannot be read, or no readable revision names it. An empty
	// key directory (a writer stopped before its first revision) is free.
	unreadable := func(in *KeyInfo) bool { return in.Key == nil && (in.Err != nil || in.Top > 0) }
	for _, in := range seats {
		partner := bySession[in.ClaimID]
		switch {
		case in.Key == nil && !unreadable(in):
		case in.Key == nil:
			done[in.Loc] = true
			w.Orphans = append(w.Orphans, Orphan{Info: in, Reason: unreadableReason(in)})
		case in.Pair != nil:
			// The record names its pair: that is the pair, whatever other
			// key carries the same claim id (an id reused on two pairs
			// would otherwise pair keys of different claims, a pair that
			// never was). A record naming another seat pairs nothing here.
			if in.Pair[0] == *in.Key && !moved(in, in.Pair[1]) {
				add(*in.Pair)
			}
		case partner != nil && partner.Key != nil && in.ClaimID != "" && (partner.Pair == nil || partner.Pair[0] == *in.Key):
			// No pair member (the reference's records): pair by claim id,
			// unless the session's record names another seat.
			add([2]Key{*in.Key, *partner.Key})
		}
	}
	for _, in := range sessions {
		if done[in.Loc] {
			continue
		}
		switch {
		case in.Key == nil && !unreadable(in):
		case in.Key == nil:
			done[in.Loc] = true
			w.Orphans = append(w.Orphans, Orphan{Info: in, Reason: unreadableReason(in)})
		case in.Pair != nil && in.Pair[1] == *in.Key && !moved(in, in.Pair[0]):
			add(*in.Pair)
		}
	}
	for _, ins := range [][]*KeyInfo{seats, sessions} {
		for _, in := range ins {
			if done[in.Loc] {
				continue
			}
			if !in.Held() {
				w.Idle++
				if keepIdle {
					w.IdleKeys = append(w.IdleKeys, in)
				}
				continue
			}
			w.Orphans = append(w.Orphans, Orphan{Info: in, Reason: fmt.Sprintf("held by claim %s, but no key of the other kind names that claim; classify it by naming both keys", in.ClaimID)})
		}
	}
	sort.Slice(w.Pairs, func(i, j int) bool { return w.Pairs[i].order < w.Pairs[j].order })
	return w
}

// unreadableReason says why a key no readable revision names is held.
func unreadableReason(in *KeyInfo) string {
	if in.Err != nil {
		return "the key directory cannot be read (" + in.Err.Error() + "); it stays held; fix the path and run claimctl fsck"
	}
	return "no readable revision names the key (its recent revisions are damaged), so it stays held and cannot be paired; run claimctl fsck"
}

// keyInfo reads what a walk needs of a key: the key itself (from its
// newest readable revision, checked against the directory's hash), the
// claim and pair member there, and its head as a read to publish on reads
// it. It lists the directory (a walk classifies every key anyway, and a
// listing sees a gap that a probe would not): a key whose newest revision
// is damaged or sits above a gap is held, and is paired by the newest claim
// it can read.
func (s *Store) keyInfo(ctx context.Context, loc Loc) *KeyInfo {
	in := &KeyInfo{Loc: loc}
	base, revs, _, err := s.list(ctx, loc)
	if err == nil && len(revs) > 0 && !dense(base, revs) {
		// A listing is not atomic; look once more before seeing a gap.
		base, revs, _, err = s.list(ctx, loc)
	}
	if err != nil {
		in.Err = err
		return in
	}
	if len(revs) == 0 {
		return in
	}
	top := revs[len(revs)-1]
	in.Top, in.Revisions = top, len(revs)
	// The classification reads the key's head to publish on, which wants
	// a listing of it once per store: this one.
	s.noteListing(loc, top, dense(base, revs))
	var topDamage error
	for i := len(revs) - 1; i >= 0 && i >= len(revs)-16; i-- {
		n := revs[i]
		data, err := s.be.Read(ctx, loc, n)
		if err != nil {
			if n == top {
				topDamage = err
			}
			continue
		}
		k, ok := keyOf(data, loc)
		if !ok {
			if n == top {
				topDamage = &DamageError{Reason: "it does not name the key its directory is named after"}
			}
			continue
		}
		rec, err := DecodeRecord(data, k, n)
		if err != nil {
			if n == top {
				topDamage = err
			}
			continue
		}
		in.Key, in.ClaimID, in.Pair = &k, rec.ClaimID, pairOf(rec)
		switch {
		case !dense(base, revs):
			in.Head = &Head{Key: k, N: top, Damage: &fs.PathError{Op: "read head", Path: s.RevisionPath(k, top), Err: s.gapError(k, base, revs)}}
		case n != top:
			in.Head = &Head{Key: k, N: top, Damage: &fs.PathError{Op: "read head", Path: s.RevisionPath(k, top), Err: topDamage}}
		case !rec.held():
			// Free only as Head would say it: a directory or file others
			// can write, or a boot proof that does not check, holds the
			// key.
			h, err := s.probeHead(ctx, k)
			if err != nil {
				h = &Head{Key: k, N: top, Damage: err}
			}
			in.Head = h
		default:
			in.Head = &Head{Key: k, N: top, Record: rec}
		}
		return in
	}
	return in
}

// keyOf extracts the key member of a revision and checks that it hashes to
// the directory it was found in.
func keyOf(data []byte, loc Loc) (Key, bool) {
	var r struct {
		Key map[string]string `json:"key"`
	}
	if json.Unmarshal(data, &r) != nil {
		return Key{}, false
	}
	k := Key{Kind: Kind(r.Key["kind"]), Seat: r.Key["seat"], Project: r.Key["project"], Workspace: r.Key["workspace"], Session: r.Key["session"]}
	if k.Validate() != nil || k.Kind != loc.Kind || k.Hash() != loc.Hash {
		return Key{}, false
	}
	return k, true
}

// pairOf returns the pair member of rec, when it names a pair rec's key is
// in.
func pairOf(rec *Record) *[2]Key {
	raw, ok := rec.Fields.Get(pairMember)
	if !ok {
		return nil
	}
	var p struct {
		Seat    map[string]string `json:"seat"`
		Session map[string]string `json:"session"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return nil
	}
	seat, err1 := SeatKey(p.Seat["seat"], p.Seat["project"], p.Seat["workspace"])
	session, err2 := SessionKey(p.Session["session"])
	if err1 != nil || err2 != nil || rec.Key != seat && rec.Key != session {
		return nil
	}
	return &[2]Key{seat, session}
}

// PairOf returns the pair a record names (its pair member: both keys of
// the claim, which this implementation records), or false.
func PairOf(rec *Record) (seat, session Key, ok bool) {
	p := pairOf(rec)
	if p == nil {
		return Key{}, Key{}, false
	}
	return p[0], p[1], true
}

// pairJSON is the pair member for a claim on seat and session.
func pairJSON(seat, session Key) json.RawMessage {
	b := []byte(`{"seat":`)
	b = append(b, seat.JSON()...)
	b = append(b, `,"session":`...)
	b = append(b, session.JSON()...)
	return append(b, '}')
}
