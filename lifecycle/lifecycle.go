package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/claimstore/claimstore/claimstore"
)

// Spec is the writer a Starter starts.
type Spec struct {
	// Unit names the unit the writer runs in: the claim's unitName, with
	// ".service" added when it has no type suffix (Run.Spawn sets it); ""
	// when the claim names no unit (AcquireFields.NoUnit), which only a
	// starter without a service manager (GroupStarter) can start.
	Unit string
	// Argv is the command and its arguments; Argv[0] is looked up in PATH
	// by the starter (systemd: the manager's PATH).
	Argv []string
	// Env is added to the writer's environment (KEY=VALUE). Run.Spawn puts
	// the claim's variables (ClaimEnv) first.
	Env []string
	// Dir is the working directory; "" means the starter's default.
	Dir string
	// KillAfter is how long a stop may take: after it, what is left of the
	// writer is killed (systemd's TimeoutStopSec for a unit, SIGKILL to the
	// process group for GroupStarter). 0 means the starter's default
	// (DefaultKillAfter).
	KillAfter time.Duration
	// Stdin, Stdout and Stderr are handed to the writer; nil means the
	// starter's default (unitctl: the journal for output, /dev/null for
	// input; GroupStarter: /dev/null).
	Stdin, Stdout, Stderr *os.File
}

// Environment variables a writer started by Run.Spawn finds.
const (
	EnvClaimID   = "CLAIMSTORE_CLAIM_ID"
	EnvRoot      = "CLAIMSTORE_ROOT"
	EnvSeat      = "CLAIMSTORE_SEAT"
	EnvProject   = "CLAIMSTORE_PROJECT"
	EnvWorkspace = "CLAIMSTORE_WORKSPACE"
	EnvSession   = "CLAIMSTORE_SESSION"
	EnvUnit      = "CLAIMSTORE_UNIT"
)

// ClaimEnv is the environment that tells a writer which claim it runs
// under: its id, the root, the keys and the unit (empty when the claim
// names none: a writer run without a service manager).
func ClaimEnv(root string, c *claimstore.Claim) []string {
	return []string{
		EnvClaimID + "=" + c.ID,
		EnvRoot + "=" + root,
		EnvSeat + "=" + c.Seat.Seat,
		EnvProject + "=" + c.Seat.Project,
		EnvWorkspace + "=" + c.Seat.Workspace,
		EnvSession + "=" + c.Session.Session,
		EnvUnit + "=" + UnitFile(c.Record.UnitName()),
	}
}

// UnitFile returns a recorded unit name as systemd names the unit: the
// reference records "mosaic-chat-<claim id>" without a type suffix, which
// is a service. A claim that names no unit (a writer run without a service
// manager) has none: "" stays "".
func UnitFile(name string) string {
	if name == "" {
		return ""
	}
	for _, suffix := range []string{".service", ".scope", ".slice", ".socket", ".target", ".timer", ".mount", ".path", ".swap", ".device", ".automount"} {
		if strings.HasSuffix(name, suffix) {
			return name
		}
	}
	return name + ".service"
}

// A Starter starts a writer.
//
// Start returns once the writer runs (or is already over). It returns a
// Process whenever something may have been started, even with an error
// (a unit that was made and failed): the caller must wait for it before
// releasing. A starter that knows nothing of the command ran (a start the
// manager refused, a command that could not be executed) returns a Process
// that is already over, whose Exit says so, with the error: its Wait is the
// proof the claim is released on. A nil Process with an error says nothing
// either way (the call to the manager broke): the claim stays held.
type Starter interface {
	Start(ctx context.Context, spec Spec) (Process, error)
}

// A StartChecker is a Starter that can tell, before anything is published
// or started, that Start would refuse spec: for systemd, a unit by the
// claim's name exists already (another's, or a leftover), and a start would
// fail with nothing of the writer run. Spawn calls CheckStart before it
// publishes the spawn marker; its error stops the spawn there, with the
// claim still reserved and unmarked, and Release then frees it with a
// no-unit proof that names the reason. A nil error promises nothing (the
// name may be taken right after): Start's own answer still decides.
type StartChecker interface {
	CheckStart(ctx context.Context, spec Spec) error
}

// NotStartedError is Spawn's error when a StartChecker refused the start:
// nothing was published beyond the reserved claim, nothing was started,
// and Release frees the claim with a no-unit proof.
type NotStartedError struct {
	ClaimID string
	Err     error
}

func (e *NotStartedError) Error() string {
	return fmt.Sprintf("claim %s: nothing was started: %v", e.ClaimID, e.Err)
}
func (e *NotStartedError) Unwrap() error { return e.Err }

// Process is one run of a writer.
type Process interface {
	// ID identifies this run among all runs of the unit (systemd's
	// InvocationID), recorded in the claim as invocationId.
	ID() string
	// Wait blocks until the run is over and says how it ended. A nil error
	// is the starter's word that nothing of the run still runs: the claim
	// is released on it. An error (ctx ended, the manager unreachable, a
	// process group not verified empty) says nothing is proven.
	Wait(ctx context.Context) (*Exit, error)
	// Stop asks the run to end (all its processes); Wait then reports it.
	Stop(ctx context.Context) error
}

// Exit is how a run ended.
type Exit struct {
	// Status is the exit status as a shell reports it: the process's exit
	// code, or 128+signal when a signal killed it.
	Status int
	// Signal is the signal that killed the main process, or 0.
	Signal syscall.Signal
	// Result is the starter's word for the ending (systemd's Result:
	// success, exit-code, signal, core-dump, timeout, ...).
	Result string
	// Ref names the run and its result; the release's cohortProof carries it.
	Ref string
}

// Recorded is what a claim recorded of its run, for an Attacher.
type Recorded struct {
	Unit         string // as Spec.Unit
	InvocationID string // "" when the claim was cut before it recorded one
	ControlGroup string // the run's control group, "" when not recorded
	// ProcessGroup is the run's process group id when a GroupStarter
	// started it (no service manager), else 0.
	ProcessGroup int
}

// An Attacher re-attaches to the run a claim recorded, for Adopt. It
// returns a Process for the recorded run while it runs, or one whose Wait
// returns at once when the run is provably over; an error when it cannot
// tell (the claim then stays held).
type Attacher interface {
	Attach(ctx context.Context, rec Recorded) (Process, error)
}

// Record members this package writes besides the store's own.
const (
	fieldInvocation   = "invocationId"
	fieldControlGroup = "controlGroup"
	fieldProcessGroup = "processGroup"
	fieldStop         = "stop"
)

// Run is one claim and the writer run under it.
type Run struct {
	Store *claimstore.Store
	Claim *claimstore.Claim

	mu   sync.Mutex // serialises steps of Claim (Stop may race Wait)
	proc Process
	exit *Exit
	// unstarted is why a StartChecker refused the start, before the
	// spawn marker: Release then frees the claim with a no-unit proof.
	unstarted error
}

// Acquire takes a new claim on the pair (reserved). A refusal is a
// *claimstore.Refusal; nothing is started.
func Acquire(ctx context.Context, s *claimstore.Store, seat, session claimstore.Key, f claimstore.AcquireFields) (*Run, error) {
	c, err := s.Acquire(ctx, seat, session, f)
	if err != nil {
		return nil, err
	}
	return &Run{Store: s, Claim: c}, nil
}

// Process returns the run's process, nil before Spawn or Adopt.
func (r *Run) Process() Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc
}

// Spawn marks the spawn, starts the writer, and advances the claim to
// active recording the run's id, in that order. The marker is durable
// before st.Start is called: a supervisor killed at any point from there
// leaves a claim classify holds until the run is proven over. A starter
// that is a StartChecker is asked first, before the marker: its refusal
// (a *NotStartedError) leaves the claim reserved and unmarked, and Release
// frees it with a no-unit proof.
//
// On an error after Start returned a Process, the writer may run: Wait
// (or Stop, then Wait) and Release still work.
func (r *Run) Spawn(ctx context.Context, st Starter, spec Spec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		return errors.New("lifecycle: Spawn called twice")
	}
	c := r.Claim
	if c.Record.State != claimstore.Reserved {
		return fmt.Errorf("lifecycle: claim %s is %s; a writer is spawned only from reserved", c.ID, c.Record.State)
	}
	if len(spec.Argv) == 0 {
		return errors.New("lifecycle: Spec.Argv is empty: no command to start")
	}
	spec.Unit = UnitFile(c.Record.UnitName())
	spec.Env = append(ClaimEnv(r.Store.Root(), c), spec.Env...)
	if sc, ok := st.(StartChecker); ok && !c.Record.SpawnMarker() {
		if err := sc.CheckStart(ctx, spec); err != nil {
			r.unstarted = err
			return &NotStartedError{ClaimID: c.ID, Err: err}
		}
	}
	if !c.Record.SpawnMarker() {
		if err := r.Store.Advance(ctx, c, claimstore.Patch{Fields: map[string]any{"spawnMarker": true}}); err != nil {
			return fmt.Errorf("marking the spawn of claim %s (nothing was started): %w", c.ID, err)
		}
	}
	proc, err := st.Start(ctx, spec)
	if proc != nil {
		r.proc = proc
	}
	if err != nil {
		return err
	}
	fields := map[string]any{fieldInvocation: proc.ID()}
	if cg, ok := proc.(interface{ ControlGroup() string }); ok && cg.ControlGroup() != "" {
		fields[fieldControlGroup] = cg.ControlGroup()
	}
	if pg, ok := proc.(interface{ ProcessGroup() int }); ok && pg.ProcessGroup() > 0 {
		// What a later supervisor adopts (GroupAttacher), and what messages
		// name instead of a unit that never existed.
		fields[fieldProcessGroup] = pg.ProcessGroup()
	}
	if err := r.Store.Advance(ctx, c, claimstore.Patch{State: claimstore.Active, Fields: fields}); err != nil {
		return fmt.Errorf("the writer runs (%s), but claim %s could not be advanced to active: %w", proc.ID(), c.ID, err)
	}
	return nil
}

// Wait waits for the run to end. A nil error means it is provably over,
// and Release may follow.
func (r *Run) Wait(ctx context.Context) (*Exit, error) {
	proc := r.Process()
	if proc == nil {
		return nil, errors.New("lifecycle: Wait before Spawn: nothing runs")
	}
	x, err := proc.Wait(ctx)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.exit = x
	r.mu.Unlock()
	return x, nil
}

// StopRequest is the stop member a Stop records.
type StopRequest struct {
	Reason      string `json:"reason"`
	RequestedAt string `json:"requestedAt"`
	By          int    `json:"by"`
}

// Stop records the stop request (stopping, with the request in the stop
// member) and then asks the run to end; Wait reports the end. The writer is
// asked to stop even if the stopping revision could not be published (the
// error then says so): stopping a writer is never unsafe.
func (r *Run) Stop(ctx context.Context, reason string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	c := r.Claim
	if c.Record.State != claimstore.Stopping && !(c.Record.State == claimstore.Stopped && c.Record.Proof != nil) {
		req := StopRequest{Reason: reason, RequestedAt: time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), By: os.Getpid()}
		if err := r.Store.Advance(ctx, c, claimstore.Patch{State: claimstore.Stopping, Fields: map[string]any{fieldStop: req}}); err != nil {
			errs = append(errs, fmt.Errorf("recording the stop request of claim %s: %w", c.ID, err))
		}
	}
	if r.proc != nil {
		if err := r.proc.Stop(ctx); err != nil {
			errs = append(errs, &StopError{ClaimID: c.ID, Err: err})
		}
	}
	return errors.Join(errs...)
}

// StopError says the writer could not be asked to stop (the manager did
// not take the stop): it may run on, and the claim stays held.
type StopError struct {
	ClaimID string
	Err     error
}

func (e *StopError) Error() string {
	return fmt.Sprintf("stopping the writer of claim %s: %v", e.ClaimID, e.Err)
}
func (e *StopError) Unwrap() error { return e.Err }

// Release publishes stopped with a cohortProof naming the run and its
// result. It needs a Wait that returned without error: a claim is never
// released on a guess.
func (r *Run) Release(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.exit == nil && r.proc == nil && r.unstarted != nil && !r.Claim.Record.SpawnMarker() {
		// The start was refused before the marker: nothing was ever
		// spawned under this claim.
		return r.Store.Release(ctx, r.Claim, claimstore.NewProof(claimstore.ProofNoUnit, refOf("nothing was started: "+r.unstarted.Error())))
	}
	if r.exit == nil {
		return fmt.Errorf("lifecycle: claim %s: the writer is not proven over (Wait has not returned without error); the claim stays held", r.Claim.ID)
	}
	return r.Store.Release(ctx, r.Claim, claimstore.NewProof(claimstore.ProofCohort, r.exit.Ref))
}

// AdoptOptions configure Adopt.
type AdoptOptions struct {
	// Units looks the claim's unit up for classify (nil: unknown).
	Units claimstore.UnitLookup
	// Attacher re-attaches to a run recorded under a service manager
	// (a unit). Required unless the claim recorded a process group.
	Attacher Attacher
	// Groups re-attaches to a run recorded with a process group (a
	// GroupStarter's, no service manager); nil means GroupAttacher{}.
	Groups Attacher
}

// ErrNothingToAdopt is returned by Adopt when the pair is not held by a
// claim whose owner is gone and that classify hands over: it is free, or
// classify finished it (a boot proof, a cut release).
var ErrNothingToAdopt = errors.New("nothing to adopt")

// Adopt takes over the claim on the pair after its owner died: classify
// (with owner as the adopter) must hand it over — it does so only when the
// recorded owner is proven gone, publishing it uncertain (or stopping,
// when a stop was in flight) under the new owner. The recorded run is then
// re-attached: while the same invocation still runs the claim goes back to
// active and the returned Run waits for it as Spawn's would; when it is
// provably over, Wait returns at once. A stop that was in flight is
// resumed (the run is asked to stop again).
//
// The classification is returned in every case; a refusal (owner live or
// unknown, a damaged head, ...) is its *claimstore.Refusal. Adopt returns
// ErrNothingToAdopt when classify left nothing to take over, and a
// *NeverSpawnedError, publishing nothing, for a claim that is reserved
// without a spawn marker: no run of it was ever started, so there is none
// to attach to, and a unit by its name (the one that made a start fail
// before the marker, say) is not its writer.
func Adopt(ctx context.Context, s *claimstore.Store, seat, session claimstore.Key, owner claimstore.Owner, opts *AdoptOptions) (*Run, *claimstore.Result, error) {
	if opts == nil {
		opts = &AdoptOptions{}
	}
	// A dry run first: taking a never-spawned claim over would publish it
	// uncertain, and the decision table's step 9 (reserved, no marker,
	// unit absent) could then never free it.
	res, err := s.Classify(ctx, seat, session, &claimstore.ClassifyOptions{Units: opts.Units, Adopt: &owner, DryRun: true})
	if err != nil {
		return nil, nil, err
	}
	if err := neverSpawned(res); err != nil {
		return nil, res, err
	}
	res, err = s.Classify(ctx, seat, session, &claimstore.ClassifyOptions{Units: opts.Units, Adopt: &owner})
	if err != nil {
		return nil, nil, err
	}
	if err := neverSpawned(res); err != nil {
		// Another never-spawned claim took the pair between the two
		// classifications: taken over (uncertain, held), but never
		// attached to a unit that is not its writer.
		return &Run{Store: s, Claim: res.Claim}, res, err
	}
	if res.Claim == nil {
		if res.Refusal != nil && !res.Free() {
			return nil, res, res.Refusal
		}
		return nil, res, ErrNothingToAdopt
	}
	r := &Run{Store: s, Claim: res.Claim}
	rec := r.Claim.Record
	got := Recorded{Unit: UnitFile(rec.UnitName()), InvocationID: stringField(rec, fieldInvocation), ControlGroup: stringField(rec, fieldControlGroup), ProcessGroup: ProcessGroupOf(rec)}
	att := opts.Attacher
	if got.ProcessGroup > 0 {
		att = opts.Groups
		if att == nil {
			att = GroupAttacher{}
		}
	}
	if att == nil {
		return r, res, fmt.Errorf("claim %s adopted, but no Attacher was given to judge its unit, so it stays held (%s)", r.Claim.ID, rec.State)
	}
	proc, err := att.Attach(ctx, got)
	if err != nil {
		return r, res, fmt.Errorf("claim %s adopted, but its run cannot be judged, so it stays held (%s): %w", r.Claim.ID, rec.State, err)
	}
	r.proc = proc
	if res.Outcome == claimstore.OutcomeStopping || rec.StopRequested() {
		if err := proc.Stop(ctx); err != nil {
			return r, res, fmt.Errorf("claim %s adopted; resuming its stop: %w", r.Claim.ID, err)
		}
		return r, res, nil
	}
	if running, ok := proc.(interface{ Running() bool }); ok && running.Running() && rec.State != claimstore.Active {
		fields := map[string]any{fieldInvocation: proc.ID()}
		if err := s.Advance(ctx, r.Claim, claimstore.Patch{State: claimstore.Active, Fields: fields}); err != nil {
			return r, res, fmt.Errorf("claim %s adopted and its run %s re-attached, but it could not be advanced to active: %w", r.Claim.ID, proc.ID(), err)
		}
	}
	return r, res, nil
}

// NeverSpawnedError is Adopt's error for a claim whose owner is gone but
// that was never spawned: reserved, without a spawn marker. Nothing was
// published (unless the pair changed between Adopt's dry run and its
// classification: the claim is then taken over, uncertain, and Adopt's
// Run has it); the claim stays held, and classify frees a reserved one
// with a no-unit proof once no unit has its name.
type NeverSpawnedError struct {
	ClaimID, Unit string
}

func (e *NeverSpawnedError) Error() string {
	return fmt.Sprintf("claim %s was never spawned (reserved, no spawn marker): there is no run of it to adopt, and unit %s, if loaded, is not its writer; it stays held: once no unit has that name, `claimctl classify` frees it with a no-unit proof", e.ClaimID, e.Unit)
}

// neverSpawned returns a *NeverSpawnedError when a classification would
// hand over a reserved claim without a spawn marker.
func neverSpawned(res *claimstore.Result) error {
	rec := res.Record
	if !res.Adopted || rec == nil || rec.State != claimstore.Reserved || rec.SpawnMarker() {
		return nil
	}
	return &NeverSpawnedError{ClaimID: rec.ClaimID, Unit: UnitFile(rec.UnitName())}
}

// stringField returns a record member that is a JSON string, or "".
func stringField(rec *claimstore.Record, name string) string {
	raw, ok := rec.Fields.Get(name)
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// ProcessGroupOf returns the process group a claim's record names
// (processGroup: a run a GroupStarter started, without a service manager),
// or 0.
func ProcessGroupOf(rec *claimstore.Record) int { return rec.ProcessGroup() }

// maxRef bounds a proof reference written from an error's text: it is
// printed on one line by show and log.
const maxRef = 240

// refOf makes text a proof reference: one line, bounded.
func refOf(text string) string {
	text = strings.Join(strings.Fields(text), " ")
	if len(text) > maxRef {
		cut := maxRef
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "…"
	}
	return text
}
