package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/claimstore/claimstore/claimstore"
)

var decommissionCmd = &command{
	name:    "decommission",
	args:    "[--root DIR|URL] " + connSyn + " [--json] --machine ID (--evidence KIND --reason TEXT | --lift --reason TEXT) [--yes]",
	summary: "Record that a machine will never run again, so that classify frees its claims; or lift that record.",
	doc: `
decommission records an operator's assertion that the machine with id
--machine (its /etc/machine-id, as show and list print it) will never again
run any writer of the boots this root has seen it run: it is powered off for
good, its disks wiped, or its instance deleted (--evidence powered-off, wiped
or instance-deleted). Make sure of it first — fence it, as Pacemaker's
stonith_admin --confirm asks — because classify then frees that machine's
claims, of those boots, on any other machine, whatever their writers were
doing: a machine that is in fact still running would then share its seats
with new writers.

The record is written once, exclusively, under the root (<root>/proofs/, on
etcd under the prefix), naming the machine, every boot of it in the root's
heads and the newest, the evidence, --reason (say what was checked and
where it is recorded), who asserted it (uid and user, host name, this
machine's id) and when. It never frees anything by itself: run
claimctl classify --all (or classify the pairs) afterwards; each freed key
gets a stopped revision whose proof names the record. A claim of a boot
the record does not name (the machine booted again after the record) is
never freed by it.

The machine is then quarantined: claimctl and the library refuse to acquire
on it, naming the record and the command that lifts it. A supervisor there
that still runs finds its next step refused, because classify moved its
heads. --lift --reason TEXT writes the record that ends the quarantine (as
attributable as the first); classify then frees nothing more on the lifted
record, and what it freed stays free.

Refused, writing nothing: a malformed --machine, --evidence outside the set
or an empty --reason (exit 2); this machine's own id, a machine no key of
the root was ever taken by, a machine already decommissioned (to record new
evidence, lift it first) or not decommissioned (--lift), or another
operator's record written first (exit 1).

On a terminal it shows what it will record and asks you to type the
machine id to confirm; anything else cancels (exit 1, nothing written).
Without a terminal, pass --yes: a script must say so.`,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		machine := fs.String("machine", "", "the `id` of the machine (32 hex digits, its /etc/machine-id)")
		evidence := fs.String("evidence", "", "what was checked: `KIND`, one of "+evidenceList())
		reason := fs.String("reason", "", "the operator's `TEXT`: what was checked, and where it is recorded (a ticket)")
		lift := fs.Bool("lift", false, "lift the machine's decommission: it is in service again")
		yes := fs.Bool("yes", false, "do not ask for confirmation (required without a terminal)")
		return func(e *env) error {
			if !c.set["machine"] {
				return usagef("--machine is missing: name the machine by its id (32 hex digits, as show and list print it)")
			}
			if *lift && c.set["evidence"] {
				return usagef("--evidence is for a decommission; a lift (--lift) takes only --reason")
			}
			if !*lift && !c.set["evidence"] {
				return usagef("--evidence is missing: say what was checked, one of %s", evidenceList())
			}
			if !c.set["reason"] {
				return usagef("--reason is missing: say what was checked, and where it is recorded")
			}
			if err := claimstore.CheckDecommission(*machine, *evidence, *reason, *lift); err != nil {
				return usageErr{strings.TrimPrefix(err.Error(), claimstore.ErrBadDecommission.Error()+": ")}
			}
			ask := !*yes
			if ask && !stdinIsTerminal(e) {
				return usagef("standard input is not a terminal, so the decommission cannot be confirmed interactively: pass --yes to confirm it from a script")
			}
			rc, err := e.resolveRoot(c.rootFlag, c.rootSet)
			if err != nil {
				return err
			}
			if err := e.checkMachineID(); err != nil {
				return err
			}
			if err := checkClaimRoot(rc); err != nil {
				return err
			}
			s, err := e.openStore(rc, true)
			if err != nil {
				return err
			}
			if ask {
				if err := confirmDecommission(e, s, *machine, *lift); err != nil {
					return err
				}
			}
			var rec *claimstore.DecommissionRecord
			if *lift {
				rec, err = s.LiftDecommission(e.ctx, *machine, *reason, nil)
			} else {
				rec, err = s.Decommission(e.ctx, claimstore.DecommissionOptions{Machine: *machine, Evidence: claimstore.Evidence(*evidence), Reason: *reason})
			}
			if err != nil {
				return err
			}
			j := decommissionOut(s, rec)
			e.done = "record " + rec.ID + " was written"
			if c.json {
				writeJSON(e.stdout, j)
				return nil
			}
			printDecommission(e.stdout, s, &j)
			return nil
		}
	},
}

func evidenceList() string {
	var names []string
	for _, ev := range claimstore.Evidences {
		names = append(names, string(ev))
	}
	return strings.Join(names, ", ")
}

// stdinIsTerminal reports whether the command can ask its user: standard
// input and standard error are both a terminal. Tests replace it.
var stdinIsTerminal = func(e *env) bool {
	f, ok := e.stdin.(*os.File)
	return ok && isTerminalFd(int(f.Fd())) && isTerminal(e.stderr)
}

// confirmDecommission shows what would be recorded and asks for the
// machine id, typed in full: a y/N is too easy to give for an assertion
// that frees another machine's claims.
func confirmDecommission(e *env, s *claimstore.Store, machine string, lift bool) error {
	w := e.stderr
	if lift {
		cur, err := s.Decommissioned(e.ctx, machine)
		if err != nil {
			return err
		}
		if cur == nil || cur.Lift() {
			return &claimstore.DecommissionStateError{Machine: machine, Current: cur, Lifting: true}
		}
		fmt.Fprintf(w, "Lift the decommission of machine %s (record %s, %s, asserted by %s at %s)?\n", machine, cur.ID, cur.Evidence, cur.AssertedBy, cur.AssertedAt)
		fmt.Fprintf(w, "The machine may take claims again; classify frees nothing more on record %s.\n", cur.ID)
	} else {
		plan, err := s.PlanDecommission(e.ctx, machine)
		if err != nil {
			return err
		}
		if plan.Current != nil && !plan.Current.Lift() {
			return &claimstore.DecommissionStateError{Machine: machine, Current: plan.Current}
		}
		fmt.Fprintf(w, "Decommission machine %s under %s?\n", machine, s.Root())
		fmt.Fprintf(w, "  boots seen:   %s (newest %s)\n", strings.Join(plan.BootIDs, ", "), orDash(plan.LastBootID))
		fmt.Fprintf(w, "  held claims:  %d\n", plan.HeldClaims)
		fmt.Fprintf(w, "You assert that this machine will never again run any writer of those boots: classify will free its claims of them on any machine.\n")
	}
	fmt.Fprintf(w, "Type the machine id to confirm: ")
	line, err := bufio.NewReader(e.stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if strings.TrimSpace(line) != machine {
		return exitErr{code: exitError, msg: "not confirmed (the machine id was not typed): nothing was written"}
	}
	return nil
}

// decommissionJSON is a decommission record as claimctl shows it.
type decommissionJSON struct {
	ID         string       `json:"id"`
	Path       string       `json:"path"`
	Kind       string       `json:"kind"`
	MachineID  string       `json:"machineId"`
	Seq        uint64       `json:"seq"`
	LastBootID string       `json:"lastBootId,omitempty"`
	BootIDs    []string     `json:"bootIds"`
	HeldClaims int          `json:"heldClaims"`
	Evidence   string       `json:"evidence,omitempty"`
	Reason     string       `json:"reason"`
	Lifts      string       `json:"lifts,omitempty"`
	AssertedBy asserterJSON `json:"assertedBy"`
	AssertedAt string       `json:"assertedAt"`
}

type asserterJSON struct {
	UID       int    `json:"uid"`
	User      string `json:"user"`
	Hostname  string `json:"hostname"`
	MachineID string `json:"machineId"`
}

func decommissionOut(s *claimstore.Store, r *claimstore.DecommissionRecord) decommissionJSON {
	return decommissionJSON{ID: r.ID, Path: s.Path(claimstore.ProofDir, r.ID+".json"), Kind: r.Kind, MachineID: r.MachineID, Seq: r.Seq,
		LastBootID: r.LastBootID, BootIDs: r.BootIDs, HeldClaims: r.HeldClaims, Evidence: string(r.Evidence), Reason: r.Reason,
		Lifts: r.Lifts, AssertedBy: asserterJSON(r.AssertedBy), AssertedAt: r.AssertedAt}
}

func printDecommission(w io.Writer, s *claimstore.Store, j *decommissionJSON) {
	if j.Kind == claimstore.DecommissionLiftKind {
		fmt.Fprintf(w, "lifted the decommission of machine %s (record %s): record %s\n", j.MachineID, j.Lifts, j.ID)
	} else {
		fmt.Fprintf(w, "decommissioned machine %s: record %s\n", j.MachineID, j.ID)
		fmt.Fprintf(w, "evidence    %s\n", j.Evidence)
		fmt.Fprintf(w, "boots       %s (newest %s)\n", orDash(strings.Join(j.BootIDs, ", ")), orDash(j.LastBootID))
		fmt.Fprintf(w, "held        %d claim(s)\n", j.HeldClaims)
	}
	fmt.Fprintf(w, "reason      %s\n", escText(j.Reason))
	fmt.Fprintf(w, "asserted    by %s (uid %d) on %s, machine %s, at %s\n", esc(orDash(j.AssertedBy.User)), j.AssertedBy.UID, esc(orDash(j.AssertedBy.Hostname)), j.AssertedBy.MachineID, j.AssertedAt)
	fmt.Fprintf(w, "path        %s\n", esc(j.Path))
	if j.Kind == claimstore.DecommissionKind {
		fmt.Fprintf(w, "next        run `claimctl classify --root %s --all` to free the machine's claims of these boots\n", shellQuote(s.Root()))
	}
}

// decommissionViewJSON is what a decommission record says of a key's head
// (claimstore.ViewDecommission).
type decommissionViewJSON struct {
	State  string `json:"state"`
	Record string `json:"record"`
}

// decomCache reads each machine's newest decommission record once per
// command.
type decomCache struct {
	ctx  context.Context
	s    *claimstore.Store
	seen map[string]*claimstore.DecommissionRecord
}

func newDecomCache(ctx context.Context, s *claimstore.Store) *decomCache {
	return &decomCache{ctx: ctx, s: s, seen: map[string]*claimstore.DecommissionRecord{}}
}

// view says what a record's machine's decommission means for it, or nil.
// A record that cannot be read says nothing here: classify, which decides,
// says why it frees nothing.
func (c *decomCache) view(rec *claimstore.Record) *decommissionViewJSON {
	if c == nil || rec == nil {
		return nil
	}
	if v := c.s.ViewDecommission(rec, nil); v != nil {
		// Freed on a record: nothing need be read to say so.
		return &decommissionViewJSON{State: v.State, Record: v.Record}
	}
	if c.seen == nil {
		return nil
	}
	m := rec.Host.MachineID
	newest, ok := c.seen[m]
	if !ok {
		newest, _ = c.s.Decommissioned(c.ctx, m)
		c.seen[m] = newest
	}
	v := c.s.ViewDecommission(rec, newest)
	if v == nil {
		return nil
	}
	return &decommissionViewJSON{State: v.State, Record: v.Record}
}

// decommissionWords says a view in words, for a claim of machine.
func decommissionWords(v *decommissionViewJSON, machine string) string {
	switch v.State {
	case claimstore.DecommissionFreed:
		return "freed by decommission record " + v.Record
	case claimstore.DecommissionCovered:
		return fmt.Sprintf("machine %s decommissioned by record %s: run `claimctl classify`", machine, v.Record)
	case claimstore.DecommissionLifted:
		return fmt.Sprintf("machine %s's decommission was lifted by record %s", machine, v.Record)
	}
	return fmt.Sprintf("machine %s is decommissioned by record %s, but not for this claim's boot: only that machine can free it", machine, v.Record)
}
