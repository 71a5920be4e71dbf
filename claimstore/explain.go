package claimstore

import "context"

// Explanation is why a pair reads as it does: the row of the decision table
// (ARCHITECTURE.md, "Recovery: the decision table") that decides it, and
// what a classification of it would conclude.
type Explanation struct {
	// Row is the deciding row's number as the table numbers it ("1",
	// "1a", ..., "10").
	Row string
	// When is the row's condition, as the table words it.
	When string
	// Result is what a dry-run classification of the pair concludes on
	// the heads given (nothing published, no proof issued).
	Result *Result
}

// Explain judges p row by row, with the very rows Classify decides by, in a
// dry run: it publishes nothing, issues no proof and looks no unit up (so
// row 9, which needs a unit observed absent, never decides; row 10 says the
// writer may run). It returns the row that decides and its result.
//
// Unlike Classify it judges the heads as given and does not read them again: p
// is typically from Pair, whose held heads are not confirmed by a listing,
// so explaining a held pair costs no listing of its keys. A head above a
// gap that Pair did not see is found by Classify (and fsck), which read
// for a write. The rows read only what they need: an earlier boot's proof
// (row 7), a foreign machine's decommission records (row 1a), and, when
// two claims hold the keys, the other key's history (row 3a).
//
// An error is one a classification would end with: this boot's id cannot
// be read (row 7), or a record, proof or history cannot.
func (s *Store) Explain(ctx context.Context, p *Pair) (*Explanation, error) {
	if err := checkKinds(p.Seat.Key, p.Session.Key); err != nil {
		return nil, err
	}
	opts := &ClassifyOptions{DryRun: true}
	j := &judgement{s: s, ctx: ctx, opts: opts, seatK: p.Seat.Key, sessionK: p.Session.Key, p: p,
		res: &Result{Seat: p.Seat, Session: p.Session, DryRun: true}}
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
			return &Explanation{Row: row.step, When: row.when, Result: j.res}, nil
		}
	}
	panic("claimstore: the decision table's last row decides every pair")
}
