package cli

import (
	"fmt"
	"strconv"
	"strings"

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
func stepCommand(verb, root string, conn []string, cl *claimstore.Claim, seatRev, sessionRev uint64, flags []string) string {
	args := []string{"claimctl", verb, "--root", shellQuote(root)}
	for _, a := range conn {
		args = append(args, shellQuote(a))
	}
	args = append(args,
		"--seat", shellQuote(cl.Seat.Seat), "--project", shellQuote(cl.Seat.Project), "--workspace", shellQuote(cl.Seat.Workspace),
		"--session", shellQuote(cl.Session.Session), "--claim", cl.ID,
		"--seat-rev", strconv.FormatUint(seatRev, 10), "--session-rev", strconv.FormatUint(sessionRev, 10))
	for _, f := range flags {
		args = append(args, shellQuote(f))
	}
	return strings.Join(args, " ")
}

// cutError describes a step that failed after its seat revision.
func cutError(e *env, s *claimstore.Store, cl *claimstore.Claim, cause error) error {
	state := string(cl.Record.State)
	verb, flags := finishFlags(cl.Record)
	return &stepCutError{
		claimID: cl.ID,
		published: publishedJSON{Key: keyOut(cl.Seat, s.Root()), Revision: cl.SeatRev, State: state,
			Path: s.RevisionPath(cl.Seat, cl.SeatRev)},
		pending: publishedJSON{Key: keyOut(cl.Session, s.Root()), Revision: cl.SessionRev + 1, State: state,
			Path: s.RevisionPath(cl.Session, cl.SessionRev+1)},
		finish: stepCommand(verb, s.Root(), e.connArgs(s.Root()), cl, cl.SeatRev, cl.SessionRev, flags),
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
