package claimstore

import (
	"context"
	"errors"
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
	wopts := &WalkOptions{tops: map[Loc]uint64{}, slim: slimKeyInfo, Progress: opts.Progress}
	w, err := s.Walk(ctx, wopts)
	if err != nil {
		return sum, err
	}
	// Every decision of the walk rests on heads read above (or newer ones,
	// which Classify makes durable itself): make them durable in one go.
	// Without a storage.WalkSyncer each classification makes its own heads
	// durable.
	if ws, ok := s.be.(storage.WalkSyncer); ok && !opts.DryRun && len(wopts.tops) > 0 {
		if err := ws.SyncWalk(ctx, wopts.tops); err != nil {
			return sum, err
		}
	}
	sum.Idle = w.Idle
	for _, o := range w.Orphans {
		sum.Orphans++
		report(&PairResult{Loc: o.Info.Loc, Seat: ifKind(o.Info.Key, KindSeat), Session: ifKind(o.Info.Key, KindSession), Orphan: o.Reason, Err: o.Info.Err})
	}
	err = s.classifyPairs(ctx, w.Pairs, opts, func(pr *PairResult) {
		sum.count(pr)
		report(pr)
	})
	return sum, err
}

// count adds one pair's result to the summary.
func (sum *Summary) count(pr *PairResult) {
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
}

// classifyPairs classifies pairs with a pool of workers and calls done with
// each result in the order of pairs, whatever order they finish in.
func (s *Store) classifyPairs(ctx context.Context, pairs []WalkPair, opts *ClassifyOptions, done func(*PairResult)) error {
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
				seat, session := pairs[i].Seat, pairs[i].Session
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
				return ctx.Err()
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		pr := results[i]
		results[i] = nil // reported: let it go
		done(pr)
	}
	return nil
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
