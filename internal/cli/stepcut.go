package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/claimstore/claimstore/claimstore"
)

// A step (advance, release) publishes on the seat key and then on the
// session key. An I/O error between the two (ENOSPC after the seat's
// revision, say) leaves the seat one revision ahead of the session, both
// the claim's own: the step is cut. Two things must then be true: the error
// says exactly what was published and what was not, with the command that
// finishes the step; and that command (or the caller's own retry, naming
// the revisions it held) is recognised as this claim's continuation, not
// refused as "moved under" another writer.

// stepCutError is a step cut between its keys.
type stepCutError struct {
	claimID   string
	published publishedJSON // the seat's new revision
	pending   publishedJSON // the session's revision that was not published
	finish    string        // the command that finishes the step
	cause     error
}

func (e *stepCutError) Error() string {
	return fmt.Sprintf("the step of claim %s was cut between its keys by an error: %v; published %s r%d (%s) %s; NOT published %s r%d (%s) %s; the claim is held and its keys are out of step until the step is finished: run `%s`",
		e.claimID, e.cause, e.published.Key.Kind, e.published.Revision, e.published.State, e.published.Path,
		e.pending.Key.Kind, e.pending.Revision, e.pending.State, e.pending.Path, e.finish)
}

func (e *stepCutError) Unwrap() error { return e.cause }

// stepCommand is the command line of a step for a claim at the given
// revisions, with the step's own flags.
func stepCommand(verb, root string, cl *claimstore.Claim, seatRev, sessionRev uint64, flags []string) string {
	args := []string{"claimctl", verb, "--root", shellQuote(root),
		"--seat", shellQuote(cl.Seat.Seat), "--project", shellQuote(cl.Seat.Project), "--workspace", shellQuote(cl.Seat.Workspace),
		"--session", shellQuote(cl.Session.Session), "--claim", cl.ID,
		"--seat-rev", strconv.FormatUint(seatRev, 10), "--session-rev", strconv.FormatUint(sessionRev, 10)}
	for _, f := range flags {
		args = append(args, shellQuote(f))
	}
	return strings.Join(args, " ")
}

// sameContent reports whether two records of one claim say the same thing:
// equal but for the key, revision and writtenAt they were published with.
func sameContent(a, b *claimstore.Record) bool {
	x, y := *a, *b
	x.Key, x.Revision, x.WrittenAt = b.Key, 0, ""
	y.Revision, y.WrittenAt = 0, ""
	da, err1 := x.Marshal()
	db, err2 := y.Marshal()
	return err1 == nil && err2 == nil && bytes.Equal(da, db)
}

// cutStep reports whether cl is a step cut between its keys: the seat's
// revision (the claim's latest) says something the session's does not.
// Every step publishes on the seat first, so the reverse cannot be a cut.
func cutStep(cl *claimstore.Claim, sessionRec *claimstore.Record) bool {
	return sessionRec != nil && !sameContent(cl.Record, sessionRec)
}

// finishOnSession publishes the claim's latest record (its seat revision)
// as the session key's next revision: the half of a cut step that is
// missing. It is fenced as a step is: the session's head must still be the
// claim's revision, and the exclusive link fails if any writer took the
// number meanwhile.
func finishOnSession(s *claimstore.Store, cl *claimstore.Claim) error {
	k := cl.Session
	h, err := s.Head(bg, k)
	if err != nil {
		return err
	}
	if g := gapOf(s, k); g != nil {
		return &claimstore.Refusal{Code: claimstore.UnsafeReplacement, Keys: []claimstore.Key{cl.Seat, k}, ClaimID: cl.ID, Reason: g.reason(), Hint: gapHint(s)}
	}
	if h.Record == nil || h.N != cl.SessionRev || h.Record.ClaimID != cl.ID {
		return &claimstore.Refusal{Code: claimstore.UnsafeReplacement, Keys: []claimstore.Key{cl.Seat, k}, ClaimID: cl.ID,
			Reason: fmt.Sprintf("%s moved under claim %s while its cut step was being finished: its head is revision %d, not the claim's revision %d", k, cl.ID, h.N, cl.SessionRev),
			Hint:   "read the heads with `claimctl show` and the history with `claimctl log`"}
	}
	rec := *cl.Record
	rec.Key, rec.Revision = k, cl.SessionRev+1
	rec.WrittenAt = time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
	data, err := rec.Marshal()
	if err != nil {
		return err
	}
	if err := s.Backend().Publish(bg, k.Loc(), rec.Revision, data, nil); err != nil {
		if errors.Is(err, claimstore.ErrRevisionExists) {
			return &claimstore.Refusal{Code: claimstore.UnsafeReplacement, Keys: []claimstore.Key{cl.Seat, k}, ClaimID: cl.ID,
				Reason: fmt.Sprintf("another writer published revision %d of %s while claim %s's cut step was being finished", rec.Revision, k, cl.ID),
				Hint:   "read the heads with `claimctl show` and the history with `claimctl log`"}
		}
		return err
	}
	cl.SessionRev = rec.Revision
	return nil
}

// cutError describes a step that failed after its seat revision.
func cutError(s *claimstore.Store, cl *claimstore.Claim, cause error) error {
	state := string(cl.Record.State)
	verb, flags := finishFlags(cl.Record)
	return &stepCutError{
		claimID: cl.ID,
		published: publishedJSON{Key: keyOut(cl.Seat, s.Root()), Revision: cl.SeatRev, State: state,
			Path: s.RevisionPath(cl.Seat, cl.SeatRev)},
		pending: publishedJSON{Key: keyOut(cl.Session, s.Root()), Revision: cl.SessionRev + 1, State: state,
			Path: s.RevisionPath(cl.Session, cl.SessionRev+1)},
		finish: stepCommand(verb, s.Root(), cl, cl.SeatRev, cl.SessionRev, flags),
		cause:  cause,
	}
}

// finishFlags is the step that a claim's latest record is the result of,
// as far as finishing it needs: release with its proof for a stopped
// record, else advance to its state (the rest of the record is carried over
// from the seat's revision as it is).
func finishFlags(r *claimstore.Record) (verb string, flags []string) {
	if r.State == claimstore.Stopped && r.Proof != nil {
		p := string(r.Proof.Kind)
		if r.Proof.Ref != "" {
			p += ":" + r.Proof.Ref
		}
		return "release", []string{"--proof", p}
	}
	return "advance", []string{"--state", string(r.State)}
}

// jsonEqual compares two JSON values by their compact form.
func jsonEqual(a, b []byte) bool {
	var x, y bytes.Buffer
	return json.Compact(&x, a) == nil && json.Compact(&y, b) == nil && bytes.Equal(x.Bytes(), y.Bytes())
}
