package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/claimstore/claimstore/internal/shquote"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/hostid"
	"github.com/claimstore/claimstore/lifecycle"
)

var showCmd = &command{
	name:    "show",
	args:    "[--root DIR|URL] " + connSyn + " [--json] (--seat S --project P --workspace W [--session ID] | --session ID | --claim ID)",
	summary: "Show a pair, one key, or a claim: each key's head, its owner, the pair state and why it is held.",
	doc: `
With the seat flags and --session, show shows the pair; with only the seat flags
or only --session, that key. With --claim, it finds the keys whose head belongs
to that claim (reading every key's head under the root).

For each key: the head revision, when it was written, the state the key reads
as, the claim, and the owner with its state now (live, gone, unknown, invalid).
For a pair: the pair state and why it is held, with what to do next.

show only reads. Exit 0 whatever the state; 1 when the root or a key cannot
be read, or no key's head belongs to --claim.`,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		var kf keyFlags
		kf.register(fs)
		claim := fs.String("claim", "", "show the keys whose head belongs to claim `ID`")
		return func(e *env) error {
			var seat, session *claimstore.Key
			if c.set["claim"] {
				if kf.seatGiven(c) || c.set["session"] {
					return usagef("name either keys or --claim, not both")
				}
				if err := claimIDFlag("claim", *claim); err != nil {
					return err
				}
			} else {
				if kf.seatGiven(c) {
					k, err := kf.seatKey(c)
					if err != nil {
						return err
					}
					seat = &k
				}
				if c.set["session"] {
					k, err := kf.sessionKey(c)
					if err != nil {
						return err
					}
					session = &k
				}
				if seat == nil && session == nil {
					return usagef("name a pair, a key or a claim: --seat S --project P --workspace W, --session ID, or --claim ID")
				}
			}
			rc, err := e.resolveRoot(c.rootFlag, c.rootSet)
			if err != nil {
				return err
			}
			if err := e.checkMachineID(); err != nil {
				return err
			}
			e.rootMissing("show", rc)
			s, err := e.openStore(rc, false)
			if err != nil {
				return err
			}
			if c.set["claim"] {
				if seat, session, err = s.FindClaim(e.ctx, *claim); err != nil {
					return err
				}
				if seat == nil && session == nil {
					return fmt.Errorf("no key under %s has claim %s at its head; the claim may have been released and superseded (read a key's history with `claimctl log`)", s.Root(), *claim)
				}
			}
			return show(e, c, s, seat, session)
		}
	},
}

func show(e *env, c *common, s *claimstore.Store, seat, session *claimstore.Key) error {
	out := showJSON{Root: s.Root()}
	var heads []*claimstore.Head
	for _, k := range []*claimstore.Key{seat, session} {
		if k == nil {
			heads = append(heads, nil)
			continue
		}
		h, err := s.Head(e.ctx, *k)
		if err != nil {
			return fmt.Errorf("reading the head of %s in %s: %w", k, s.KeyDir(*k), err)
		}
		heads = append(heads, h)
	}
	decom := newDecomCache(e.ctx, s)
	if heads[0] != nil {
		j := headOut(s, heads[0])
		j.Decommission = decom.view(heads[0].Record)
		out.Seat = &j
	}
	if heads[1] != nil {
		j := headOut(s, heads[1])
		j.Decommission = decom.view(heads[1].Record)
		out.Session = &j
	}
	if heads[0] != nil && heads[1] != nil {
		p := &claimstore.Pair{Seat: heads[0], Session: heads[1]}
		out.Pair = explainPair(e, s, p, decom)
	}
	if c.json {
		writeJSON(e.stdout, out)
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "root\t%s\n", esc(s.Root()))
	var prevClaim string
	for i, h := range []*headJSON{out.Seat, out.Session} {
		if h == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", []string{"seat", "session"}[i], describeKeyJSON(h.Key), headLine(h, h.ClaimID != prevClaim))
		prevClaim = h.ClaimID
	}
	if out.Pair != nil {
		state := out.Pair.State
		if out.Seat != nil && out.Session != nil && out.Seat.Revision == 0 && out.Session.Revision == 0 && !out.Pair.Held {
			// Free, but not "stopped": nothing was ever published on it.
			state = "never claimed"
		}
		fmt.Fprintf(tw, "pair\t%s — %s\n", state, escText(out.Pair.Why))
		if out.Pair.Next != "" {
			fmt.Fprintf(tw, "next\t%s\n", escText(out.Pair.Next))
		}
	} else {
		for _, h := range []*headJSON{out.Seat, out.Session} {
			if h != nil && h.Held {
				fmt.Fprintf(tw, "next\tshow the pair (both keys) to see why it is held; read the history with `claimctl log`\n")
			}
		}
	}
	return tw.Flush()
}

// headLine is the rest of a key's row: revision, time, state, claim, owner.
func headLine(h *headJSON, withOwner bool) string {
	if h.Revision == 0 {
		return "-\t-\tfree\tno revisions"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "r%d\t%s\t%s", h.Revision, orDash(esc(h.WrittenAt)), h.State)
	if h.Damage != "" {
		fmt.Fprintf(&b, "\tdamaged: %s", escText(h.Damage))
		return b.String()
	}
	fmt.Fprintf(&b, "\tclaim %s", h.ClaimID)
	if h.Proof != nil {
		fmt.Fprintf(&b, "  proof %s", describeProof(h.Proof))
	}
	if h.Host != nil && !h.Host.ThisMachine {
		fmt.Fprintf(&b, "  host: machine %s (foreign)", esc(h.Host.MachineID))
	}
	if h.Decommission != nil {
		fmt.Fprintf(&b, "  %s", escText(decommissionWords(h.Decommission, h.Host.MachineID)))
	}
	if withOwner && h.Owner != nil && h.Held {
		fmt.Fprintf(&b, "  owner pid %d (%s: %s)", h.Owner.PID, h.Owner.State, escText(h.Owner.Reason))
	}
	if h.SpawnMarker && h.Held {
		b.WriteString("  spawn-marked")
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func describeProof(p *proofJSON) string {
	if p == nil {
		return "-"
	}
	if p.Ref == nil {
		return esc(p.Kind)
	}
	return esc(p.Kind) + ":" + esc(*p.Ref)
}

func describeKeyJSON(k keyJSON) string {
	return claimstore.Key{Kind: claimstore.Kind(k.Kind), Seat: k.Seat, Project: k.Project, Workspace: k.Workspace, Session: k.Session}.String()
}

// headOut describes a key's head, judging its owner now.
func headOut(s *claimstore.Store, h *claimstore.Head) headJSON {
	j := headJSON{Key: keyOut(h.Key, s.Root()), Revision: h.N, State: string(h.State()), Held: h.Held()}
	if h.N != 0 {
		j.Path = s.RevisionPath(h.Key, h.N)
	}
	if h.Damage != nil {
		// Damage may come with no revision at all: a key directory that
		// other users may write holds its key even when empty.
		j.Damage = h.Damage.Error()
		return j
	}
	if h.N == 0 {
		return j
	}
	r := h.Record
	j.RecordedState, j.ClaimID, j.WrittenAt = string(r.State), r.ClaimID, r.WrittenAt
	j.Proof = proofOut(r.Proof)
	j.UnitName, j.SpawnMarker = r.UnitName(), r.SpawnMarker()
	j.Host = hostOut(s.Host(), r)
	o := judgeOwner(s, r)
	j.Owner = &o
	return j
}

func hostOut(host hostid.Host, r *claimstore.Record) *hostJSON {
	mine, merr := host.MachineID()
	boot, berr := host.BootID()
	return &hostJSON{MachineID: r.Host.MachineID, BootID: r.Host.BootID,
		ThisMachine: merr == nil && mine == r.Host.MachineID,
		ThisBoot:    berr == nil && boot == r.Host.BootID}
}

// judgeOwner is the owner of a record as the store judges it.
func judgeOwner(s *claimstore.Store, r *claimstore.Record) ownerJSON {
	st, why := s.JudgeOwner(r)
	j := ownerJSON{State: string(st), Reason: why}
	if o, err := r.Owner(); err == nil {
		j.PID, j.Start, j.Boot, j.Incarnation, j.PIDNS = o.PID, o.Start, o.Boot, validJSON(o.Incarnation), o.PIDNS
	}
	return j
}

// explainPair says why a pair is held and what to do next. Which row of
// the decision table holds the pair is the library's to say
// (Store.Explain); this words it.
func explainPair(e *env, s *claimstore.Store, p *claimstore.Pair, decom *decomCache) *pairJSON {
	j := &pairJSON{State: string(p.State()), Held: p.Held()}
	if !p.Held() {
		j.Why = "free: neither key is held"
		return j
	}
	ref := s.Refusal(p)
	j.Refusal = refusalOut(ref)
	j.ClaimID = ref.ClaimID
	classify := classifyCommandFor(s, p.Seat.Key, p.Session.Key)
	x, err := s.Explain(e.ctx, p)
	if err != nil {
		// show only reads: what stops the judgement is said, not exited on.
		j.Why = "held: the pair cannot be judged: " + err.Error()
		j.Next = "run `" + classify + "`: it ends with the same error, which says what to repair"
		return j
	}
	res := x.Result
	switch x.Row {
	case "1a", "2":
		j.Why = "held by another machine: " + ref.Reason
		j.Next = "classify or release the claim on the machine that took it; nothing here can prove its writer over"
		for _, h := range []*claimstore.Head{p.Seat, p.Session} {
			if !h.Held() || h.Record == nil {
				continue
			}
			if v := decom.view(h.Record); v != nil {
				j.Why = "held by another machine: " + decommissionWords(v, h.Record.Host.MachineID)
				if v.State == claimstore.DecommissionCovered {
					j.Next = "run `" + classify + "`: it frees the claim on record " + v.Record
				}
				break
			}
		}
		return j
	case "3":
		var gap *claimstore.GapError
		if p.Seat.Held() && errors.As(p.Seat.Damage, &gap) || p.Session.Held() && errors.As(p.Session.Damage, &gap) {
			j.Why = "held: " + ref.Reason
			j.Next = ref.Hint
			return j
		}
		j.Why = "held: a head revision is damaged: " + ref.Reason
		j.Next = "run `claimctl fsck` for the path and `claimctl log` for the history; the key stays held until an operator repairs it"
		return j
	case "3a":
		j.ClaimID = res.ClaimID
		j.Why = fmt.Sprintf("held: claim %s's release was cut between the keys, and another claim then took the key it had freed", res.ClaimID)
		j.Next = "run `" + classify + "`: it completes the release on the key the claim still holds"
		return j
	case "4":
		j.Why = "held by two claims: " + ref.Reason
		j.Next = "read both histories with `claimctl log`; nothing proves either writer over"
		return j
	}
	id, latest := res.ClaimID, res.Record
	j.ClaimID = id
	switch x.Row {
	case "6":
		if res.Owner == hostid.Live {
			j.Why = fmt.Sprintf("held by claim %s: owner live (%s)", id, res.OwnerReason)
			j.Next = "wait for the owner to release it"
		} else {
			j.Why = fmt.Sprintf("held by claim %s: owner %s (%s); it cannot be proven gone", id, res.Owner, res.OwnerReason)
			j.Next = "find the owner process by hand; classify refuses while the owner cannot be judged"
		}
	case "6a":
		j.Why = "held: " + res.Refusal.Reason
		if seat, session, ok := claimstore.PairOf(latest); ok {
			j.Next = "run `" + classifyCommandFor(s, seat, session) + "`"
		}
	case "7":
		if res.Outcome != claimstore.OutcomeStopped {
			// The boot cannot be judged, or no proof can be issued.
			j.Why = "held: owner gone, but " + res.Refusal.Reason
			j.Next = "read the claim's history with `claimctl log`; classify frees nothing on this evidence"
			break
		}
		j.Why = fmt.Sprintf("held by claim %s: owner gone, its boot %s has ended", id, latest.Host.BootID)
		j.Next = "run `" + classify + "`: it publishes a boot proof and frees the pair"
	case "8":
		j.Why = fmt.Sprintf("held by claim %s: a release was cut between the keys", id)
		j.Next = "run `" + classify + "`: it completes the release"
	case "9":
		j.Why = fmt.Sprintf("held by claim %s: reserved, nothing spawned, and its unit is absent", id)
		j.Next = "run `" + classify + "`: it frees the pair with a no-unit proof"
	default:
		if state := p.State(); state == claimstore.Uncertain || state == claimstore.Stopping {
			j.Why = fmt.Sprintf("held by claim %s in state %s: owner gone, writer may run", id, state)
			j.Next = "make sure the claim's writer (" + writerOf(latest) + ") is stopped, then release it with a proof (`claimctl release --proof cohortProof:REF`)"
			if pg := lifecycle.ProcessGroupOf(latest); pg > 0 {
				j.Next = fmt.Sprintf("run `claimctl run --adopt --no-unit` with the keys: it waits for process group %d to be gone and releases the claim; or %s", pg, j.Next)
			}
			break
		}
		j.Why = "held: owner gone, writer may run"
		j.Next = "run `" + classify + "`"
	}
	return j
}

// classifyCommandFor is the classify command line for a pair.
func classifyCommandFor(s *claimstore.Store, seat, session claimstore.Key) string {
	return fmt.Sprintf("claimctl classify --root %s --seat %s --project %s --workspace %s --session %s",
		shellQuote(s.Root()), shellQuote(seat.Seat), shellQuote(seat.Project), shellQuote(seat.Workspace), shellQuote(session.Session))
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string { return shquote.Quote(s) }
