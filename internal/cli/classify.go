package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/lifecycle"
)

var classifyCmd = &command{
	name:    "classify",
	args:    "[--root DIR|URL] " + connSyn + " [--json] [--dry-run] [--units MODE] [--bus ADDR] [--unit-timeout D] (--seat S --project P --workspace W --session ID | --all)",
	summary: "Decide from durable evidence what a pair is after a crash or reboot, and publish it.",
	doc: `
classify judges one pair, or with --all every pair under the root, in the
store's order: free; another machine (foreign-host); a damaged head; two
claims; an owner that is live, unknown or invalid (already-active, nothing
published); a claim from an earlier boot (stopped with a boot proof, which
classify issues as a file under <root>/proofs); a release cut between the keys
(completed); reserved with no spawn marker and its unit absent (stopped with a
no-unit proof); otherwise uncertain, with the spawn marker carried forward.
Nothing is published unless the owner is proven gone.

The claim's unit is looked up on the service manager --units chooses. A
recorded unit name without a type suffix (the reference's
mosaic-chat-<claim id>) is looked up as a .service. A lookup that fails or
times out is unknown, and unknown never frees a pair.

--dry-run says what classify would publish, and publishes nothing and issues
no proof.

--all prints one line per pair that is not free (NDJSON: one line per pair,
orphan key and error, then a summary line), shows progress on standard error
when it is a terminal, and ends with a summary table. Without --dry-run it
records how the walk ended, and when, under <root>/status/ for claimctl
metrics; a record that cannot be written is said on standard error, and a
walk that would exit 0 then exits 1.

Exit: 0 when every pair is free or stopped with a proof; 3 (already-active) or
5 (foreign-host) when one pair stays held by that refusal; 6 when a pair is
left uncertain (with --all: when any pair or key stays held, for any reason);
1 on errors.`,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		var kf keyFlags
		kf.register(fs)
		var uf unitFlags
		uf.register(fs)
		all := fs.Bool("all", false, "classify every pair under the root")
		dry := fs.Bool("dry-run", false, "say what would be published; publish nothing")
		return func(e *env) error {
			if err := uf.validate(c); err != nil {
				return err
			}
			var seat, session claimstore.Key
			if *all {
				if kf.seatGiven(c) || c.set["session"] {
					return usagef("--all classifies every pair; do not name keys with it")
				}
			} else {
				var err error
				if seat, session, err = kf.pair(c); err != nil {
					return err
				}
			}
			rc, err := e.resolveRoot(c.rootFlag, c.rootSet)
			if err != nil {
				return err
			}
			// A default root that does not exist is a machine where
			// nothing was ever claimed: walking it finds nothing (the note
			// above says so). A root named by --root or the environment
			// that does not exist is more likely a typo, and an error.
			missing := e.rootMissing("classify", rc)
			if missing && *all && !rc.Default {
				return exitErr{code: exitError, msg: fmt.Sprintf("there is no claim root at %s to walk; pass the root with --root", rc.Path)}
			}
			if err := e.checkMachineID(); err != nil {
				return err
			}
			if *all {
				if err := checkClaimRoot(rc); err != nil {
					return err
				}
			}
			s, err := e.openStore(rc, !*dry)
			if err != nil {
				return err
			}
			units, done := uf.lookup()
			defer done()
			opts := &claimstore.ClassifyOptions{DryRun: *dry}
			if units != nil {
				opts.Units = units
			}
			ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
			defer stop()
			if *all {
				// A walk that publishes is recorded for claimctl metrics; a
				// dry run changed nothing, and a root that does not exist
				// is not made to hold a record.
				return classifyAll(ctx, e, c, s, opts, !*dry && !missing)
			}
			res, err := s.Classify(ctx, seat, session, opts)
			if err != nil {
				return err
			}
			j := classifyOut(s, seat, session, res)
			if c.json {
				writeJSON(e.stdout, j)
			} else {
				printClassify(e.stdout, s, &j)
			}
			return exitErr{code: exitCode(j.Exit)}
		}
	},
}

// pairExit is the exit code one classification gives.
func pairExit(res *claimstore.Result) exitCode {
	switch {
	case res.Free(), res.Outcome == claimstore.OutcomeOwned:
		return exitOK
	case res.Refusal != nil && res.Refusal.Code != claimstore.UnsafeReplacement:
		return refusalExit[res.Refusal.Code]
	}
	return exitUncertain
}

func classifyOut(s *claimstore.Store, seat, session claimstore.Key, res *claimstore.Result) classifyJSON {
	j := classifyJSON{Type: "pair", Seat: keyOut(seat, s.Root()), Session: keyOut(session, s.Root()),
		ClaimID: res.ClaimID, Outcome: string(res.Outcome), Free: res.Free(), DryRun: res.DryRun,
		Proof: proofOut(res.Proof), Published: []publishedJSON{}, Completed: res.Completed, Damaged: res.Damaged,
		Needs: res.Needs, Refusal: refusalOut(res.Refusal), Exit: int(pairExit(res))}
	if res.Record != nil {
		o := judgeOwnerFromResult(s, res)
		j.Owner = &o
		j.processGroup = res.Record.ProcessGroup()
	}
	if res.Unit != nil {
		j.Unit = &unitJSON{Name: res.Unit.Name, State: string(res.Unit.State), Detail: res.Unit.Detail}
	}
	if bp := res.BootProof; bp != nil {
		j.BootProof = &bootProofJSON{ID: bp.ID, Path: s.Path(claimstore.ProofDir, bp.ID+".json"), MachineID: bp.MachineID,
			RecordedBootID: bp.RecordedBootID, CurrentBootID: bp.CurrentBootID, ObservedAt: bp.ObservedAt}
	}
	if d := res.Decommission; d != nil {
		dj := decommissionOut(s, d)
		j.Decommission = &dj
	}
	for _, p := range res.Published {
		j.Published = append(j.Published, publishedJSON{Key: keyOut(p.Key, s.Root()), Revision: p.Revision, State: string(p.State),
			Path: s.RevisionPath(p.Key, p.Revision)})
	}
	j.Why = classifyWhy(s, seat, session, res)
	return j
}

// judgeOwnerFromResult reports the owner as the classification judged it.
func judgeOwnerFromResult(s *claimstore.Store, res *claimstore.Result) ownerJSON {
	j := ownerJSON{State: string(res.Owner), Reason: res.OwnerReason}
	if o, err := res.Record.Owner(); err == nil {
		j.PID, j.Start, j.Boot, j.Incarnation, j.PIDNS = o.PID, o.Start, o.Boot, validJSON(o.Incarnation), o.PIDNS
	}
	if j.State == "" {
		// Judged before the owner (another machine, damage, two claims).
		return judgeOwner(s, res.Record)
	}
	return j
}

// classifyWhy says what the outcome means and what to do next.
func classifyWhy(s *claimstore.Store, seat, session claimstore.Key, res *claimstore.Result) string {
	would := ""
	if res.DryRun && len(res.Published) > 0 {
		would = " (dry run: nothing published)"
	}
	switch res.Outcome {
	case claimstore.OutcomeFree:
		return "free: neither key is held"
	case claimstore.OutcomeOwned:
		return "owned by the caller"
	case claimstore.OutcomeStopped:
		what := "stopped with proof " + describeProof(proofOut(res.Proof))
		switch {
		case res.Completed:
			what += ": a release cut between the keys was completed"
		case res.Proof != nil && res.Proof.Kind == claimstore.ProofBoot:
			what += ": the claim's boot has ended, so its writer is gone"
		case res.Decommission != nil:
			what += fmt.Sprintf(": machine %s is decommissioned by record %s (%s), which names the claim's boot", res.Decommission.MachineID, res.Decommission.ID, res.Decommission.Evidence)
		case res.Proof != nil && res.Proof.Kind == claimstore.ProofNoUnit:
			what += ": the owner is gone, nothing was spawned and the unit is absent"
		}
		if len(res.Published) == 0 {
			what += "; already published, nothing to do"
		}
		if res.DryRun && len(res.Published) > 0 {
			return what + would + "; the pair would be free"
		}
		return what + "; the pair is free"
	}
	if res.Completed && res.Refusal != nil {
		// A release cut between the keys was finished on one key, and the
		// other key belongs to another claim now.
		return fmt.Sprintf("completed the release of claim %s%s; the pair is still held: %s", res.ClaimID, would, res.Refusal.Reason)
	}
	if res.Refusal == nil {
		return fmt.Sprintf("left %s%s", res.Outcome, would)
	}
	r := res.Refusal
	switch {
	case r.Code == claimstore.AlreadyActive:
		return fmt.Sprintf("held, nothing published: %s; wait for the owner, or find it by hand if it cannot be judged", r.Reason)
	case r.Code == claimstore.ForeignHost:
		return fmt.Sprintf("held, nothing published: %s; classify or release it on that machine", r.Reason)
	case res.Damaged:
		return fmt.Sprintf("held, nothing published: %s; run `claimctl fsck --root %s` and `claimctl log` on the key", r.Reason, shellQuote(s.Root()))
	case res.Needs == claimstore.NeedsBootProof:
		return fmt.Sprintf("left uncertain: %s", r.Reason)
	case res.Record == nil:
		return fmt.Sprintf("held, nothing published: %s; read both histories with `claimctl log`", r.Reason)
	}
	next := "stop the writer (" + writerOf(res.Record) + ") for certain, then `claimctl release --claim " + res.ClaimID + " --proof cohortProof:REF` with the keys"
	if pg := lifecycle.ProcessGroupOf(res.Record); pg > 0 {
		// A run without a service manager: no unit to look up, but its
		// process group can be judged by an adopter.
		next = "run `claimctl run --adopt --no-unit` with the keys, which waits for process group " + strconv.Itoa(pg) + " to be gone and releases the claim, or " + next
	} else if res.Unit != nil && res.Unit.State == claimstore.UnitUnknown && res.Unit.Name != "" {
		// A claim that names no unit has none to look up.
		next = "let classify look the unit up (--units, --bus), or " + next
	}
	return fmt.Sprintf("left %s%s: %s; %s", res.Outcome, would, r.Reason, next)
}

func printClassify(w io.Writer, s *claimstore.Store, j *classifyJSON) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "pair\t%s + %s\n", describeKeyJSON(j.Seat), describeKeyJSON(j.Session))
	if j.ClaimID != "" {
		fmt.Fprintf(tw, "claim\t%s\n", j.ClaimID)
	}
	if j.Owner != nil && j.Owner.State != "" {
		fmt.Fprintf(tw, "owner\tpid %d: %s (%s)\n", j.Owner.PID, j.Owner.State, escText(j.Owner.Reason))
	}
	if j.processGroup > 0 {
		// No unit was ever made for it: name what the writer ran in.
		fmt.Fprintf(tw, "writer\tprocess group %d (run without a service manager)\n", j.processGroup)
	} else if j.Unit != nil && j.Unit.Name == "" {
		// Not "unit -": nothing names one (a run without a service
		// manager cut before it recorded its process group).
		fmt.Fprintf(tw, "writer\tno unit, and no process group recorded\n")
	} else if j.Unit != nil {
		fmt.Fprintf(tw, "unit\t%s: %s (%s)\n", orDash(esc(j.Unit.Name)), j.Unit.State, escText(j.Unit.Detail))
	}
	fmt.Fprintf(tw, "outcome\t%s\n", j.Outcome)
	if j.Refusal != nil {
		fmt.Fprintf(tw, "refusal\t%s\n", j.Refusal.Code)
	}
	if j.BootProof != nil {
		fmt.Fprintf(tw, "boot proof\t%s (boot %s ended; now %s)\n", esc(j.BootProof.Path), esc(j.BootProof.RecordedBootID), esc(j.BootProof.CurrentBootID))
	}
	verb := "published"
	if j.DryRun {
		verb = "would publish"
	}
	for _, p := range j.Published {
		fmt.Fprintf(tw, "%s\t%s r%d %s  %s\n", verb, p.Key.Kind, p.Revision, p.State, esc(p.Path))
	}
	fmt.Fprintf(tw, "why\t%s\n", escText(j.Why))
	tw.Flush()
}

// classifyAll walks the root and ends with the summary. With record, the
// walk's outcome is recorded in the root (Store.RecordClassifyAll), where
// claimctl metrics reads it; a record that cannot be written is said on
// standard error and fails a walk that would have exited 0 (the unit that
// runs it at boot then fails visibly, rather than monitoring showing an
// older walk as the last one).
func classifyAll(ctx context.Context, e *env, c *common, s *claimstore.Store, opts *claimstore.ClassifyOptions, record bool) error {
	started := time.Now()
	// Progress counts keys: the total is the key directories under the
	// root, known before the walk; each pair judged is two of them, each
	// orphan one. Free keys of no pair (idle) are never reported one by
	// one, so the count can end short of the total; the summary counts them.
	progress := !c.json && isTerminal(e.stderr)
	total, keys := 0, 0
	if progress {
		opts.Progress = func(read, all int) {
			total = all
			e.progress("classify", "keys read", read, all)
			if read == all {
				e.progress("classify", "keys judged", 0, all)
			}
		}
	}
	clearProgress := e.progressDone
	byProof := map[string]int{}
	n, printed := 0, 0
	each := func(pr *claimstore.PairResult) {
		n++
		if progress {
			if pr.Orphan != "" || pr.Seat == nil || pr.Session == nil {
				keys++
			} else {
				keys += 2
			}
			e.progress("classify", "keys judged", keys, total)
		}
		var line any
		var text string
		switch {
		case pr.Orphan != "":
			j := orphanJSON{Type: "orphan", Kind: string(pr.Loc.Kind), Dir: s.Path(string(pr.Loc.Kind), pr.Loc.Hash), Reason: pr.Orphan}
			if k := firstKey(pr.Seat, pr.Session); k != nil {
				kj := keyOut(*k, s.Root())
				j.Key = &kj
			}
			line, text = j, fmt.Sprintf("orphan\t%s\t%s", esc(j.Dir), escText(j.Reason))
		case pr.Err != nil:
			var ref *claimstore.Refusal
			if errors.As(pr.Err, &ref) {
				j := classifyJSON{Type: "pair", Seat: keyOut(*pr.Seat, s.Root()), Session: keyOut(*pr.Session, s.Root()), ClaimID: ref.ClaimID,
					Outcome: string(claimstore.OutcomeUncertain), DryRun: opts.DryRun, Published: []publishedJSON{}, Refusal: refusalOut(ref),
					Exit: int(refusalExit[ref.Code]), Why: ref.Error()}
				line, text = j, fmt.Sprintf("refused\t%s + %s\t%s", describeKeyJSON(j.Seat), describeKeyJSON(j.Session), escText(j.Why))
				break
			}
			j := pairErrorJSON{Type: "error", Seat: keyOut(*pr.Seat, s.Root()), Session: keyOut(*pr.Session, s.Root()), Error: pr.Err.Error()}
			line, text = j, fmt.Sprintf("error\t%s + %s\t%s", describeKeyJSON(j.Seat), describeKeyJSON(j.Session), escText(j.Error))
		default:
			j := classifyOut(s, *pr.Seat, *pr.Session, pr.Result)
			if j.Outcome == string(claimstore.OutcomeStopped) && len(j.Published) > 0 && j.Proof != nil {
				byProof[j.Proof.Kind]++
			}
			line = j
			if j.Outcome != string(claimstore.OutcomeFree) {
				label := j.Outcome
				if j.Refusal != nil && j.Refusal.Code != string(claimstore.UnsafeReplacement) {
					label += " (" + j.Refusal.Code + ")"
				}
				text = fmt.Sprintf("%s\t%s + %s\t%s", label, describeKeyJSON(j.Seat), describeKeyJSON(j.Session), escText(j.Why))
			}
		}
		if c.json {
			writeJSON(e.stdout, line)
		} else if text != "" {
			clearProgress()
			// Lines stream as pairs are judged, so they cannot be aligned
			// as a table; the label column has a fixed width.
			label, rest, _ := strings.Cut(text, "\t")
			fmt.Fprintf(e.stdout, "%-*s  %s\n", labelWidth, label, strings.ReplaceAll(rest, "\t", "  "))
			printed++
		}
	}
	sum, werr := s.ClassifyAll(ctx, opts, each)
	clearProgress()
	if sum == nil {
		sum = &claimstore.Summary{}
	}
	code := exitOK
	switch {
	case werr != nil || sum.Errors > 0:
		code = exitError
	case !sum.Clean():
		code = exitUncertain
	}
	if record {
		// Recorded also when the walk was stopped (SIGTERM): that its last
		// walk did not finish is what monitoring must see, and the record
		// is one small write.
		if _, err := s.RecordClassifyAll(context.WithoutCancel(ctx), sum, werr, started); err != nil {
			fmt.Fprintf(e.stderr, "claimctl classify: the outcome of this walk was not recorded for claimctl metrics (the classifications above stand): %s\n", escText(err.Error()))
			if code == exitOK {
				code = exitError
			}
		}
	}
	j := summaryJSON{Type: "summary", Root: s.Root(), DryRun: opts.DryRun, Pairs: sum.Pairs, Free: sum.Free, Stopped: sum.Stopped,
		StoppedByProof: byProof, Uncertain: map[string]int{}, Refused: map[string]int{}, Owned: sum.Owned, Idle: sum.Idle,
		Orphans: sum.Orphans, Errors: sum.Errors, Clean: sum.Clean() && werr == nil, Exit: int(code)}
	for k, v := range sum.Uncertain {
		j.Uncertain[k] = v
	}
	for k, v := range sum.Refused {
		j.Refused[string(k)] = v
	}
	if werr != nil {
		// No summary: its counts would cover only the part walked (all
		// zeros when the listing failed) and read as a clean root. The
		// lines above, if any, stand; the error says where it stopped.
		return exitErr{code: exitError, msg: fmt.Sprintf("the walk of %s stopped after %d pairs and keys, so there is no summary: %v; fix the cause and run classify --all again", s.Root(), n, werr)}
	}
	if c.json {
		writeJSON(e.stdout, j)
	} else {
		if printed > 0 {
			fmt.Fprintln(e.stdout) // between the pairs' lines and the summary
		}
		printSummary(e.stdout, &j)
	}
	if code != exitOK && !c.json {
		fmt.Fprintf(e.stderr, "claimctl classify: %s\n", summaryNext(&j))
	}
	return exitErr{code: code}
}

// labelWidth is the width of classify --all's label column: the longest
// label a line can carry ("reserved (already-active)"), so that streamed
// lines, which cannot be aligned as a table, still line up.
var labelWidth = func() int {
	w := 0
	for _, o := range []claimstore.Outcome{claimstore.OutcomeFree, claimstore.OutcomeOwned, claimstore.OutcomeStopped, claimstore.OutcomeUncertain, claimstore.OutcomeStopping, claimstore.OutcomeActive, claimstore.OutcomeReserved} {
		for _, c := range claimstore.Codes {
			if c != claimstore.UnsafeReplacement { // never appended: it is what uncertain says
				w = max(w, len(string(o))+len(" ()")+len(string(c)))
			}
		}
	}
	return w
}()

func firstKey(ks ...*claimstore.Key) *claimstore.Key {
	for _, k := range ks {
		if k != nil {
			return k
		}
	}
	return nil
}

func summaryNext(j *summaryJSON) string {
	var parts []string
	if n := sum(j.Uncertain); n > 0 {
		parts = append(parts, fmt.Sprintf("%d pair(s) left uncertain", n))
	}
	if n := sum(j.Refused); n > 0 {
		parts = append(parts, fmt.Sprintf("%d pair(s) refused", n))
	}
	if j.Orphans > 0 {
		parts = append(parts, fmt.Sprintf("%d orphan key(s)", j.Orphans))
	}
	if j.Errors > 0 {
		parts = append(parts, fmt.Sprintf("%d error(s)", j.Errors))
	}
	return strings.Join(parts, ", ") + " under " + j.Root + "; the lines above name each with what to do (`claimctl show` gives the evidence)"
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// breakdown formats counts by reason, sorted.
func breakdown(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func printSummary(w io.Writer, j *summaryJSON) {
	title := "summary"
	if j.DryRun {
		title = "summary (dry run: nothing published)"
	}
	fmt.Fprintf(w, "%s of %s\n", title, j.Root)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OUTCOME\tPAIRS\tWHY")
	fmt.Fprintf(tw, "free\t%d\t\n", j.Free)
	fmt.Fprintf(tw, "stopped with proof\t%d\t%s\n", j.Stopped, breakdown(j.StoppedByProof))
	fmt.Fprintf(tw, "left uncertain\t%d\t%s\n", sum(j.Uncertain), breakdown(j.Uncertain))
	fmt.Fprintf(tw, "refused\t%d\t%s\n", sum(j.Refused), breakdown(j.Refused))
	if j.Owned > 0 {
		fmt.Fprintf(tw, "owned\t%d\t\n", j.Owned)
	}
	fmt.Fprintf(tw, "orphan keys\t%d\t\n", j.Orphans)
	fmt.Fprintf(tw, "errors\t%d\t\n", j.Errors)
	fmt.Fprintf(tw, "idle keys\t%d\tfree keys of no pair\n", j.Idle)
	tw.Flush()
}
