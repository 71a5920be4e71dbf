package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/hostid"
	"github.com/claimstore/claimstore/unitprobe"
)

var acquireCmd = &command{
	name:    "acquire",
	args:    "[--root DIR|URL] " + connSyn + " [--json] --seat S --project P --workspace W --session ID --owner-pid PID|parent [--incarnation JSON] [--claim-id ID] [--unit NAME] [--set NAME=JSON]...",
	summary: "Take a new writer claim on a pair, reserved, and print it.",
	doc: `
acquire publishes a new claim, reserved, on the seat key and then on the
session key. It refuses when either key is held: already-active (exit 3) for a
live or possibly live owner, unsafe-replacement (4) for a state nobody can
prove over, foreign-host (5) for a claim of another machine.

The owner is the supervisor process that owns the claim, and --owner-pid
names it (required): a claim is held while its owner lives, and once the owner
is gone classify may free it, so the owner must be the process that lives as
long as the writer it supervises, not whatever happened to start claimctl (in
"claimctl acquire … | python3 …" run by sh -c, claimctl's parent is a shell
that exits at once, and the claim would be freeable right away). Pass the
supervisor's pid ($$ in a shell script that supervises the writer), or
"parent" for claimctl's own parent when that is the supervisor. Its start
time is read from /proc/PID/stat, with its boot and PID namespace.

It prints the claim: its id and the revision it published on each key. Pass
them to advance and release as --claim, --seat-rev and --session-rev.

--claim-id chooses the id. An id that a key's head under the root already
carries is refused (exit 1): a claim id names one claim on one pair. The check
reads every key's head (only an explicit id pays for it), compares heads only,
and is not atomic against another acquire naming the same id; each record
names its own pair, which classify --all pairs by.

A record is at most 1048576 bytes (1 MiB), the bound every reader applies,
measured at its widest revision number: one larger (members given with --set)
is a usage error (exit 2) that names its size and the bound, and nothing is
published.`,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		var kf keyFlags
		kf.register(fs)
		ownerPID := fs.String("owner-pid", "", "the supervisor process that owns the claim: its `pid`, or parent for claimctl's own parent (required)")
		incarnation := fs.String("incarnation", "", "the owner's incarnation, any `JSON` value")
		claimID := fs.String("claim-id", "", "the new claim's `id` (default: a fresh random one)")
		unit := fs.String("unit", "", "the systemd unit `name` the writer will run in (default: mosaic-chat-<claim id>)")
		sets := setFlags{}
		fs.Var(sets, "set", "record member `NAME=JSON` (repeatable; the whole record at most 1048576 bytes), e.g. --set leaf='\"abc\"' --set generation=3")
		return func(e *env) error {
			seat, session, err := kf.pair(c)
			if err != nil {
				return err
			}
			if c.set["claim-id"] {
				if err := claimIDFlag("claim-id", *claimID); err != nil {
					return err
				}
			}
			if c.set["unit"] {
				if err := unitprobe.ValidateName(systemdName(*unit)); err != nil {
					return usagef("--unit %s: %v", quotePrefix(*unit), err)
				}
			}
			if c.set["incarnation"] {
				if err := jsonValue(*incarnation); err != nil {
					return usagef("--incarnation %v (quote strings: --incarnation '\"x\"')", err)
				}
				if err := exactJSON(*incarnation); err != nil {
					return usagef("--incarnation: %v", err)
				}
			}
			host := e.host()
			pid, err := ownerPIDFlag(c, *ownerPID)
			if err != nil {
				return err
			}
			owner, err := ownerOf(host, pid)
			if err != nil {
				if *ownerPID == "parent" {
					return usagef("--owner-pid parent: claimctl's parent process %d: %v", pid, err)
				}
				return usagef("--owner-pid %d: %v", pid, err)
			}
			if c.set["incarnation"] {
				owner.Incarnation = json.RawMessage(*incarnation)
			}
			rc, err := e.resolveRoot(c.rootFlag, c.rootSet)
			if err != nil {
				return err
			}
			if err := e.checkMachineID(); err != nil {
				return err
			}
			s, err := e.openStore(rc, true)
			if err != nil {
				return err
			}
			if c.set["claim-id"] {
				if err := claimIDInUse(e.ctx, s, *claimID); err != nil {
					return err
				}
			}
			f := claimstore.AcquireFields{ClaimID: *claimID, Owner: owner, UnitName: *unit}
			if len(sets) > 0 {
				f.Fields = sets
			}
			cl, err := s.Acquire(e.ctx, seat, session, f)
			if err != nil {
				return err
			}
			return printClaim(e, c, s, cl, "acquired")
		}
	},
}

// ownerPIDFlag reads --owner-pid: a pid, or "parent". It is required: the
// owner decides when a claim may be freed, and claimctl cannot tell whether
// the process that started it is the supervisor that lives as long as the
// writer (a shell running a pipeline, sh -c, exits at once).
func ownerPIDFlag(c *common, v string) (int, error) {
	if !c.set["owner-pid"] {
		return 0, usagef("--owner-pid is missing: name the supervisor process that owns the claim (it holds the claim while it lives): its pid ($$ in a shell script that supervises the writer), or parent for claimctl's own parent when that is the supervisor")
	}
	if v == "parent" {
		return os.Getppid(), nil
	}
	pid, err := strconv.Atoi(v)
	if err != nil || pid <= 0 {
		return 0, usagef("--owner-pid %s is not a process id (a positive number) or parent", quotePrefix(v))
	}
	return pid, nil
}

// claimIDInUse refuses a --claim-id that a key's head under the root
// already carries: a claim id names one claim on one pair, and show
// --claim, advance, release and the reference pair keys by it.
//
// It reads every key's head (what `claimctl list` reads), so only an
// explicit --claim-id pays for it; a generated id (96 random bits) is not
// checked. Its limits: it compares heads only, so an id that survives only
// below a key's head (its keys since taken by other claims) is not seen,
// which nothing that pairs by heads can trip on; and it is not atomic, so
// two acquires racing with the same new id on two pairs can both pass it.
// For those, each record names its own pair (the pair member), and
// classify --all pairs keys as it says.
func claimIDInUse(ctx context.Context, s *claimstore.Store, id string) error {
	var found error
	err := s.HeadsOfClaim(ctx, id, func(k claimstore.Key, n uint64, rec *claimstore.Record) bool {
		what := fmt.Sprintf("%s r%d (%s)", k, n, s.RevisionPath(k, n))
		if seat, session, ok := claimstore.PairOf(rec); ok {
			what += fmt.Sprintf(", of the pair %s + %s", seat, session)
		}
		found = fmt.Errorf("--claim-id %s is in use: it is the claim at the head of %s; a claim id names one claim on one pair: choose another id, or omit --claim-id for a fresh one", id, what)
		return false
	})
	if err != nil {
		return fmt.Errorf("checking that --claim-id %s is not in use: %w", id, err)
	}
	return found
}

// ownerOf identifies process pid as an owner (hostid.Identify, which
// refuses to record one without its PID namespace), and words what stops
// it for claimctl's user.
func ownerOf(host hostid.Host, pid int) (claimstore.Owner, error) {
	o, err := hostid.Identify(host, pid)
	var ie *hostid.IdentifyError
	switch {
	case err == nil:
		return claimstore.Owner{PID: o.PID, Start: o.Start, Boot: o.Boot, PIDNS: o.PIDNS}, nil
	case !errors.As(err, &ie):
		return claimstore.Owner{}, err
	case ie.Part == hostid.PartStart && errors.Is(err, fs.ErrNotExist):
		return claimstore.Owner{}, fmt.Errorf("no process %d (/proc/%d/stat does not exist)", pid, pid)
	case ie.Part != hostid.PartPIDNS:
		return claimstore.Owner{}, ie.Err
	case errors.Is(err, fs.ErrPermission) && geteuid() == 0:
		// Root cannot read it: the process belongs to another user
		// namespace (PID 1 of a container's host, seen from inside).
		return claimstore.Owner{}, fmt.Errorf("cannot read the PID namespace of process %d (/proc/%d/ns/pid: %v), even as root: it belongs to another user namespace than claimctl's, so its pid cannot be judged from here; name a supervisor process of this namespace instead (your shell's $$, or the supervisor's own pid)", pid, pid, ie.Err)
	}
	return claimstore.Owner{}, fmt.Errorf("cannot read the PID namespace of process %d (/proc/%d/ns/pid): %w; run claimctl as the owner's user, or as root", pid, pid, ie.Err)
}

// revFlags are --seat-rev and --session-rev: the fence of advance and
// release.
type revFlags struct{ seat, session uint64 }

func (r *revFlags) register(fs *flag.FlagSet) {
	fs.Uint64Var(&r.seat, "seat-rev", 0, "the claim's last revision `N` on the seat key (default: the seat's head, if it is the claim's)")
	fs.Uint64Var(&r.session, "session-rev", 0, "the claim's last revision `N` on the session key (default: the session's head, if it is the claim's)")
}

func (r *revFlags) validate(c *common) error {
	if c.set["seat-rev"] != c.set["session-rev"] {
		return usagef("give both --seat-rev and --session-rev, or neither (then the heads are used if they are the claim's)")
	}
	if c.set["seat-rev"] {
		for _, v := range []struct {
			n    string
			rev  uint64
			flag string
		}{{"seat", r.seat, "seat-rev"}, {"session", r.session, "session-rev"}} {
			if v.rev == 0 || v.rev > claimstore.MaxRevision {
				return usagef("--%s %d: revisions are numbered from 1 to %d", v.flag, v.rev, uint64(claimstore.MaxRevision))
			}
		}
	}
	return nil
}

// fence is the fence named on the command line, or nil for the heads.
func (r *revFlags) fence(c *common) *claimstore.Fence {
	if !c.set["seat-rev"] {
		return nil
	}
	return &claimstore.Fence{Seat: r.seat, Session: r.session}
}

var advanceCmd = &command{
	name:    "advance",
	args:    "[--root DIR|URL] " + connSyn + " [--json] --claim ID --seat S --project P --workspace W --session ID [--seat-rev N --session-rev N] [--state STATE] [--spawn-marker] [--set NAME=JSON]...",
	summary: "Publish the next revision of a claim, with a new state or members, on both keys.",
	doc: `
advance publishes the claim's record, patched, on the seat key and then on the
session key. It is fenced: each key's head must still be the claim's revision
named by --seat-rev and --session-rev, or, when both are omitted, the heads are
read and used only if both belong to --claim. A head that moved is refused
(unsafe-replacement, exit 4). A claim taken on another machine is refused
(foreign-host, exit 5).

--state is reserved, active, stopping or uncertain (use release to stop).
--spawn-marker records that a writer may have been spawned; classify never
frees such a claim on an absent unit. A patched record larger than 1048576
bytes (1 MiB) at its widest revision number is a usage error (exit 2), and
nothing is published.`,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		var ref claimRef
		ref.register(fs)
		state := fs.String("state", "", "the new `state`: reserved, active, stopping or uncertain")
		marker := fs.Bool("spawn-marker", false, "record that a writer may have been spawned (spawnMarker: true)")
		sets := setFlags{}
		fs.Var(sets, "set", "record member `NAME=JSON` (repeatable; the whole record at most 1048576 bytes)")
		return func(e *env) error {
			seat, session, err := ref.parse(c, "advance")
			if err != nil {
				return err
			}
			p := claimstore.Patch{Fields: map[string]any{}}
			if c.set["state"] {
				st := claimstore.State(*state)
				switch {
				case !st.Valid():
					return usagef("--state %s: want reserved, active, stopping or uncertain", quotePrefix(*state))
				case st == claimstore.Stopped:
					return usagef("--state stopped: use `claimctl release --proof KIND[:REF]`, which records why the writer is over")
				}
				p.State = st
			}
			for k, v := range sets {
				p.Fields[k] = v
			}
			if *marker {
				p.Fields["spawnMarker"] = true
			}
			if p.State == "" && len(p.Fields) == 0 {
				return usagef("nothing to advance: give --state, --spawn-marker or --set")
			}
			return stepClaim(e, c, *ref.id, seat, session, &ref.rf, "advanced", p, func(s *claimstore.Store, cl *claimstore.Claim) error {
				return s.Advance(e.ctx, cl, p)
			})
		}
	},
}

var releaseCmd = &command{
	name:    "release",
	args:    "[--root DIR|URL] " + connSyn + " [--json] --claim ID --seat S --project P --workspace W --session ID [--seat-rev N --session-rev N] --proof KIND[:REF]",
	summary: "Publish stopped with a proof on both keys of a claim, freeing the pair.",
	doc: `
release publishes the claim's record as stopped, with the proof, on the seat key
and then on the session key, fenced as advance is. The proof says why nothing
still runs: cohortProof:REF (the supervisor's proof that its writer cohort
stopped), no-unit (nothing was ever spawned), or boot:ID (a boot proof). A
release cut between the keys is completed by classify.`,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		var ref claimRef
		ref.register(fs)
		proof := fs.String("proof", "", "the proof `KIND[:REF]`: cohortProof:REF, no-unit, or boot:ID")
		return func(e *env) error {
			seat, session, err := ref.parse(c, "release")
			if err != nil {
				return err
			}
			if !c.set["proof"] {
				return usagef("--proof is missing: a release records why nothing still runs (cohortProof:REF, no-unit or boot:ID)")
			}
			pr, err := parseProof(*proof)
			if err != nil {
				return err
			}
			return stepClaim(e, c, *ref.id, seat, session, &ref.rf, "released", claimstore.Patch{State: claimstore.Stopped, Proof: pr}, func(s *claimstore.Store, cl *claimstore.Claim) error {
				return s.Release(e.ctx, cl, pr)
			})
		}
	},
}

// claimRef names an existing claim on the command line: its keys, its id,
// and optionally the revisions to fence on.
type claimRef struct {
	kf keyFlags
	rf revFlags
	id *string
}

func (r *claimRef) register(fs *flag.FlagSet) {
	r.kf.register(fs)
	r.rf.register(fs)
	r.id = fs.String("claim", "", "the claim `id` (as acquire printed it)")
}

// parse checks the flags before anything is touched, and returns the keys.
func (r *claimRef) parse(c *common, verb string) (seat, session claimstore.Key, err error) {
	if seat, session, err = r.kf.pair(c); err != nil {
		return seat, session, err
	}
	if !c.set["claim"] {
		return seat, session, usagef("--claim is missing: name the claim to %s (its id as acquire printed it)", verb)
	}
	if err := claimIDFlag("claim", *r.id); err != nil {
		return seat, session, err
	}
	return seat, session, r.rf.validate(c)
}

// stepClaim opens the root for writing, resumes the named claim fenced on
// the revisions given (or the current heads), runs step on it, and prints
// it. A retry of a step cut between the keys (the seat's record already
// satisfies p) is finished, not repeated.
func stepClaim(e *env, c *common, id string, seat, session claimstore.Key, rf *revFlags, verb string, p claimstore.Patch, step func(*claimstore.Store, *claimstore.Claim) error) error {
	rc, err := e.resolveRoot(c.rootFlag, c.rootSet)
	if err != nil {
		return err
	}
	if err := e.checkMachineID(); err != nil {
		return err
	}
	s, err := e.openStore(rc, true)
	if err != nil {
		return err
	}
	r, err := s.Resume(e.ctx, id, seat, session, rf.fence(c))
	if err != nil {
		return err
	}
	cl := r.Claim
	if r.Cut {
		// The claim's last step reached the seat and not the session.
		fverb, fflags := finishFlags(cl.Record)
		finish := stepCommand(fverb, s.Root(), e.connArgs(s.Root()), cl, cl.SeatRev, cl.SessionRev, fflags)
		if !cl.Record.Satisfies(p) {
			return &claimstore.Refusal{Code: claimstore.UnsafeReplacement, Keys: []claimstore.Key{seat, session}, ClaimID: id,
				Reason: fmt.Sprintf("claim %s's last step was cut between its keys: %s r%d (%s) is the claim's own, %s r%d has not caught up; this step is not that one", id, seat, cl.SeatRev, cl.Record.State, session, cl.SessionRev),
				Hint:   fmt.Sprintf("finish the cut step first with `%s`, then run this step again naming --seat-rev %d --session-rev %d", finish, cl.SeatRev, cl.SessionRev+1)}
		}
		// This is the cut step, retried: publish its missing half.
		if err := s.FinishStep(e.ctx, cl); err != nil {
			return err
		}
		return printClaim(e, c, s, cl, verb)
	}
	seatRev, sessionRev := cl.SeatRev, cl.SessionRev
	if err := step(s, cl); err != nil {
		var ref *claimstore.Refusal
		if !errors.As(err, &ref) && cl.CutSince(seatRev, sessionRev) {
			return cutError(e, s, cl, err)
		}
		return err
	}
	return printClaim(e, c, s, cl, verb)
}

func printClaim(e *env, c *common, s *claimstore.Store, cl *claimstore.Claim, verb string) error {
	r := cl.Record
	j := claimJSON{Root: s.Root(), ClaimID: cl.ID,
		Seat:    seatJSON{Seat: cl.Seat.Seat, Project: cl.Seat.Project, Workspace: cl.Seat.Workspace},
		Session: cl.Session.Session, SeatRev: cl.SeatRev, SessionRev: cl.SessionRev,
		State: string(r.State), Proof: proofOut(r.Proof), UnitName: r.UnitName(), SpawnMarker: r.SpawnMarker()}
	o := judgeOwner(s, r)
	j.Owner = &o
	e.done = fmt.Sprintf("claim %s was %s: seat r%d, session r%d, state %s, under %s; `claimctl show --root %s --claim %s` shows it", cl.ID, verb, cl.SeatRev, cl.SessionRev, r.State, s.Root(), shellQuote(s.Root()), cl.ID)
	if c.json {
		writeJSON(e.stdout, j)
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tclaim %s\n", verb, j.ClaimID)
	// Every command that writes names the root it wrote to: a root resolved
	// from a relative --root or a default must be visible.
	fmt.Fprintf(tw, "root\t%s\n", esc(j.Root))
	fmt.Fprintf(tw, "seat\t%s\tr%d\n", cl.Seat, j.SeatRev)
	fmt.Fprintf(tw, "session\t%s\tr%d\n", cl.Session, j.SessionRev)
	st := j.State
	if j.Proof != nil {
		st += " (proof " + describeProof(j.Proof) + ")"
	}
	fmt.Fprintf(tw, "state\t%s\n", st)
	if j.State != string(claimstore.Stopped) {
		fmt.Fprintf(tw, "owner\tpid %d (%s)\n", o.PID, o.State)
		fmt.Fprintf(tw, "unit\t%s\n", esc(j.UnitName))
	}
	if j.State != string(claimstore.Stopped) {
		fmt.Fprintf(tw, "next\t--claim %s --seat-rev %s --session-rev %s\n", j.ClaimID, strconv.FormatUint(j.SeatRev, 10), strconv.FormatUint(j.SessionRev, 10))
	}
	return tw.Flush()
}
