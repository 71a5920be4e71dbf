package claimstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/claimstore/claimstore/claimstore/storage"
)

// pairMember is the record member in which this implementation names both
// keys of a claim, so that a key whose partner never received the claim (an
// acquire cut between the keys) can still be paired by ClassifyAll. Other
// writers carry it forward as an unknown member.
const pairMember = "pair"

// PairResult is one entry of a ClassifyAll walk: a pair and its result, or
// a key whose partner cannot be found.
type PairResult struct {
	Seat, Session *Key // nil when not known
	Result        *Result
	// Orphan says why a key could not be paired; Loc is that key.
	Orphan string
	Loc    Loc
	Err    error
}

// Summary counts the outcomes of a ClassifyAll walk.
type Summary struct {
	Pairs     int            // pairs classified
	Free      int            // free before and after
	Stopped   int            // stopped with a proof by this walk (or in a dry run, would be)
	Uncertain map[string]int // left uncertain or stopping, by reason
	Refused   map[Code]int   // left held by a refusal, by code
	Owned     int
	Idle      int // free keys that belong to no pair (released history)
	Orphans   int // held keys whose partner cannot be found
	Errors    int
}

// Clean reports whether every pair ended free or stopped with a proof.
func (s *Summary) Clean() bool {
	return len(s.Uncertain) == 0 && len(s.Refused) == 0 && s.Orphans == 0 && s.Errors == 0 && s.Owned == 0
}

type keyInfo struct {
	loc     Loc
	key     *Key
	claimID string
	held    bool
	pair    *[2]Key // from the pair member
	err     error   // why the key could not be read at all
	top     uint64  // the highest revision listed
}

// ClassifyAll walks every key under the root, pairs seat and session keys
// whose heads belong to the same claim (or that a record names as a pair),
// and classifies each pair once, calling each (if not nil) with every
// result as it goes. Keys whose partner cannot be found are reported, not
// touched. The walk lists each kind's directory once and each key's
// directory once (to see gaps a probe would miss), then classifies; on a
// root of short histories its cost is the classifications' fsyncs.
func (s *Store) ClassifyAll(ctx context.Context, opts *ClassifyOptions, each func(*PairResult)) (*Summary, error) {
	if opts == nil {
		opts = &ClassifyOptions{}
	}
	sum := &Summary{Uncertain: map[string]int{}, Refused: map[Code]int{}}
	report := func(r *PairResult) {
		if each != nil {
			each(r)
		}
	}
	infos := map[Kind][]*keyInfo{}
	for _, kind := range []Kind{KindSeat, KindSession} {
		locs, err := s.be.Locs(ctx, kind)
		if err != nil {
			return sum, err
		}
		for _, loc := range locs {
			infos[kind] = append(infos[kind], s.keyInfo(ctx, loc))
		}
	}
	// Every decision of the walk rests on heads read above (or newer ones,
	// which Classify makes durable itself): make them durable in one go.
	if w, ok := s.be.(storage.WalkSyncer); ok && !opts.DryRun {
		heads := map[Loc]uint64{}
		for _, kind := range []Kind{KindSeat, KindSession} {
			for _, in := range infos[kind] {
				if in.err == nil && in.top > 0 {
					heads[in.loc] = in.top
				}
			}
		}
		if len(heads) > 0 {
			if err := w.SyncWalk(ctx, heads); err != nil {
				return sum, err
			}
		}
	}
	bySession := map[string]*keyInfo{}
	byLoc := map[Loc]*keyInfo{}
	for _, kind := range []Kind{KindSeat, KindSession} {
		for _, in := range infos[kind] {
			byLoc[in.loc] = in
			if kind == KindSession && in.key != nil && in.claimID != "" {
				bySession[in.claimID] = in
			}
		}
	}
	// moved reports whether in is a free key whose pair member names a
	// partner that has since gone on to another claim: a released key
	// whose other key was claimed again. It is idle, not a pair; the
	// partner is paired by its own claim.
	moved := func(in *keyInfo, partner Key) bool {
		other := byLoc[partner.Loc()]
		return !in.held && other != nil && other.key != nil && other.claimID != in.claimID
	}
	done := map[Loc]bool{}
	var pairs []pairToClassify
	for _, in := range infos[KindSeat] {
		partner := bySession[in.claimID]
		switch {
		case in.key == nil:
			sum.Orphans++
			done[in.loc] = true
			report(unreadable(in))
		case in.pair != nil:
			// The record names its pair: that is the pair, whatever other
			// key carries the same claim id (an id reused on two pairs
			// would otherwise pair keys of different claims, a pair that
			// never was). A record naming another seat pairs nothing here.
			if in.pair[0] == *in.key && !moved(in, in.pair[1]) {
				pairs = append(pairs, toClassify(*in.pair))
				done[in.loc], done[in.pair[1].Loc()] = true, true
			}
		case partner != nil && partner.key != nil && in.claimID != "" && (partner.pair == nil || partner.pair[0] == *in.key):
			// No pair member (the reference's records): pair by claim id,
			// unless the session's record names another seat.
			pairs = append(pairs, toClassify([2]Key{*in.key, *partner.key}))
			done[in.loc], done[partner.loc] = true, true
		}
	}
	for _, in := range infos[KindSession] {
		if done[in.loc] {
			continue
		}
		switch {
		case in.key == nil:
			sum.Orphans++
			done[in.loc] = true
			report(unreadable(in))
		case in.pair != nil && in.pair[1] == *in.key && !moved(in, in.pair[0]):
			pairs = append(pairs, toClassify(*in.pair))
			done[in.loc], done[in.pair[0].Loc()] = true, true
		}
	}
	for _, kind := range []Kind{KindSeat, KindSession} {
		for _, in := range infos[kind] {
			if done[in.loc] {
				continue
			}
			if !in.held {
				sum.Idle++
				continue
			}
			sum.Orphans++
			report(&PairResult{Loc: in.loc, Seat: ifKind(in.key, KindSeat), Session: ifKind(in.key, KindSession),
				Orphan: fmt.Sprintf("held by claim %s, but no key of the other kind names that claim; classify it by naming both keys", in.claimID)})
		}
	}
	sort.Slice(pairs, func(i, j int) bool {
		return pairs[i].order < pairs[j].order
	})
	// Pairs are classified by a pool of workers and reported, and
	// counted, in the sorted order above, whatever order they finish in.
	workers := opts.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	// One slot per pair, filled by whichever worker classified it, which
	// then sends the pair's index on finished (buffered for every pair, so
	// a worker never waits on the reporter): a pointer, an int and a bool
	// per pair. The reporter waits for the next pair in order, or for the
	// walk's cancellation, in one select: no wake-up can be missed.
	results := make([]*PairResult, len(pairs))
	finished := make(chan int, len(pairs))
	next := make(chan int)
	wctx, stop := context.WithCancel(ctx)
	// Every worker has ended when the walk returns, canceled or not: no
	// classification publishes after ClassifyAll returned.
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	go func() {
		defer close(next)
		for i := range pairs {
			if wctx.Err() != nil {
				return
			}
			select {
			case next <- i:
			case <-wctx.Done():
				return
			}
		}
	}()
	for range min(workers, len(pairs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if wctx.Err() != nil {
					continue // drain: the walk is over
				}
				seat, session := pairs[i].keys[0], pairs[i].keys[1]
				res, err := s.Classify(wctx, seat, session, opts)
				results[i] = &PairResult{Seat: &seat, Session: &session, Result: res, Err: err}
				finished <- i
			}
		}()
	}
	// A canceled walk stops dispatching; the workers finish the pair each
	// has in hand, and the reporter does not wait for pairs never started.
	got := make([]bool, len(pairs))
	for i := range pairs {
		for !got[i] {
			select {
			case j := <-finished:
				got[j] = true // results[j] was written before j was sent
			case <-ctx.Done():
				return sum, ctx.Err()
			}
		}
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		pr := results[i]
		results[i] = nil // reported: let it go
		res, err := pr.Result, pr.Err
		sum.Pairs++
		var ref *Refusal
		switch {
		case errors.As(err, &ref):
			sum.Refused[ref.Code]++
		case err != nil:
			sum.Errors++
		case res.Outcome == OutcomeFree:
			sum.Free++
		case res.Outcome == OutcomeStopped:
			sum.Stopped++
		case res.Outcome == OutcomeOwned:
			sum.Owned++
		case res.Outcome == OutcomeUncertain || res.Outcome == OutcomeStopping:
			if res.Refusal != nil && res.Refusal.Code != UnsafeReplacement {
				sum.Refused[res.Refusal.Code]++
			} else {
				sum.Uncertain[uncertainReason(res)]++
			}
		default:
			code := AlreadyActive
			if res.Refusal != nil {
				code = res.Refusal.Code
			}
			sum.Refused[code]++
		}
		report(pr)
	}
	return sum, nil
}

// pairToClassify is a pair ClassifyAll will classify, with the key it is
// sorted by: the seat's hash, then the session's. Computed once per pair, as
// the sort compares each pair about log2(pairs) times and a key's hash is a
// SHA-256 of its JSON.
type pairToClassify struct {
	keys  [2]Key
	order string
}

func toClassify(keys [2]Key) pairToClassify {
	return pairToClassify{keys: keys, order: keys[0].Hash() + keys[1].Hash()}
}

// unreadable reports a key whose own key cannot be read back.
func unreadable(in *keyInfo) *PairResult {
	if in.err != nil {
		return &PairResult{Loc: in.loc, Err: in.err, Orphan: "the key directory cannot be read (" + in.err.Error() + "); it stays held; fix the path and run claimctl fsck"}
	}
	return &PairResult{Loc: in.loc, Orphan: "no readable revision names the key (its recent revisions are damaged), so it stays held and cannot be paired; run claimctl fsck"}
}

func ifKind(k *Key, kind Kind) *Key {
	if k != nil && k.Kind == kind {
		return k
	}
	return nil
}

func uncertainReason(r *Result) string {
	switch {
	case r.Needs != "":
		return "needs " + r.Needs
	case r.Damaged:
		return "damaged head"
	case r.Outcome == OutcomeStopping:
		return "stop in flight"
	case r.Unit != nil:
		return "unit " + string(r.Unit.State)
	case r.Record == nil:
		return "held by two claims"
	}
	return "owner gone, writer may run"
}

// keyInfo reads what ClassifyAll needs of a key: the key itself (from its
// newest readable revision, checked against the directory's hash), the
// claim at its head, and whether the head holds it. It lists the directory
// (a walk classifies every key anyway, and a listing sees a gap that a
// probe would not): a key whose newest revision is damaged or sits above a
// gap is held, and is paired by the newest claim it can read.
func (s *Store) keyInfo(ctx context.Context, loc Loc) *keyInfo {
	in := &keyInfo{loc: loc, held: true}
	revs, _, err := s.be.List(ctx, loc)
	if err == nil && len(revs) > 0 && !dense(revs) {
		// A listing is not atomic; look once more before seeing a gap.
		revs, _, err = s.be.List(ctx, loc)
	}
	if err != nil {
		in.err = err
		return in
	}
	if len(revs) == 0 {
		in.held = false
		return in
	}
	top := revs[len(revs)-1]
	in.top = top
	// The classification reads the key's head to publish on, which wants
	// a listing of it once per store: this one.
	s.noteListing(loc, top, dense(revs))
	for i := len(revs) - 1; i >= 0 && i >= len(revs)-16; i-- {
		n := revs[i]
		data, err := s.be.Read(ctx, loc, n)
		if err != nil {
			continue
		}
		k, ok := keyOf(data, loc)
		if !ok {
			continue
		}
		rec, err := DecodeRecord(data, k, n)
		if err != nil {
			continue
		}
		in.key, in.claimID, in.pair = &k, rec.ClaimID, pairOf(rec)
		if n == top && dense(revs) {
			in.held = rec.held()
			if !in.held {
				// Free only as Head would say it: a directory or file
				// others can write, or a boot proof that does not check,
				// holds the key.
				h, err := s.probeHead(ctx, k)
				in.held = err != nil || h.Held()
			}
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

// pairJSON is the pair member for a claim on seat and session.
func pairJSON(seat, session Key) json.RawMessage {
	b := []byte(`{"seat":`)
	b = append(b, seat.JSON()...)
	b = append(b, `,"session":`...)
	b = append(b, session.JSON()...)
	return append(b, '}')
}
