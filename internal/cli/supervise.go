package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/lifecycle"
	"github.com/claimstore/claimstore/unitctl"
	"github.com/claimstore/claimstore/unitprobe"
)

var runCmd = &command{
	name:       "run",
	args:       "[--root DIR|URL] " + connSyn + " --seat S --project P --workspace W --session ID [--claim-id ID] [--set NAME=JSON]... [--units MODE] [--bus ADDR] [--unit-timeout D] [--no-unit] [--kill-after D] [--conflict-exit-code N] [--wait] [--timeout D] [--adopt] -- CMD [ARG]...",
	summary:    "Run CMD under a claim on the pair, as a transient systemd service, and release the claim with a proof when it ends.",
	noJSON:     true,
	positional: true,
	doc: `
run acquires the pair (refused: exit 3, 4 or 5, and nothing is started),
publishes the spawn marker, starts CMD as the transient service named as the
claim's unitName (mosaic-chat-<claim id>.service) on the service manager
--units chooses, advances the claim to active recording the unit's
InvocationID, waits for the unit to end (following the manager's signals),
publishes stopped with a cohortProof naming the unit, the invocation and its
result, and exits with CMD's exit status (128+N when signal N killed it).
CMD's environment has CLAIMSTORE_CLAIM_ID, CLAIMSTORE_ROOT, CLAIMSTORE_SEAT,
CLAIMSTORE_PROJECT, CLAIMSTORE_WORKSPACE, CLAIMSTORE_SESSION and
CLAIMSTORE_UNIT (empty with --no-unit); its standard input, output and error
are claimctl's (passed to the manager). The unit has KillMode=control-group.
Once the claim is taken, run names it and the root it wrote to on standard
error, before CMD starts.

Before the spawn marker, the unit is looked up: a unit by the claim's name
that the manager has loaded already (another's, or a leftover) is in the way,
and run starts nothing, releases the claim with a no-unit proof naming that
unit, and exits 1. A command that cannot be executed ran none of its code:
the claim is released with a proof saying nothing was started, and run exits
127 (not found) or 126 (not executable), as shells do (under systemd the
manager reports that as exit status 203).

SIGINT, SIGTERM, SIGHUP (a closed terminal, a dropped ssh session) or
SIGQUIT: the claim advances to stopping with the stop request, the unit (or
the process group) is sent SIGTERM, and once it has ended the claim is released
with the proof; run says what it stops and when it will kill it. What is left
of the writer --kill-after D after the stop (default 90s, systemd's own
default) is killed with SIGKILL (the unit's TimeoutStopSec). A second signal
does not skip that. Killed with SIGKILL, run leaves the unit running and the
claim held; run --adopt PAIR takes it back: it adopts the claim through
classify (only when its owner is proven gone), re-attaches to the recorded
invocation (or process group) while it runs, and releases with a proof only
when that run is provably over. A claim that was never spawned (reserved, no
spawn marker: run was killed after a refused start) has no run to adopt: a
unit by its name is not its writer, and run --adopt publishes nothing, exits
6, and leaves it to classify, which frees it once no unit has that name.

--no-unit runs CMD as a direct child in a process group of its own instead
(the claim names no unit: its unitName is null from the first revision, and
the group is recorded as processGroup once it runs), and releases only once
the group is gone: run is the subreaper of CMD's
descendants (an orphan is reparented to run and reaped by it), and waits up
to 5s after CMD exits for what CMD left (a zombie, a finishing child); a
process that stays keeps the claim held, and run exits 6 naming it. When the
manager cannot be reached, run says so and starts nothing (use --no-unit).

--wait waits for the pair to become free instead of refusing (woken by inotify
on the key directories), at most --timeout (exit 8 when it passes).

Exit: CMD's status; 2 usage; 3, 4, 5 refusals; 8 timeout (--wait); 6 when
the claim had to be left held (the writer not proven over, with the reason);
1 on other errors before CMD ran; 126 or 127 when CMD could not be executed.
A command may exit with any of these itself: --conflict-exit-code N (as
flock(1)'s -E) makes every outcome that is run's own, not CMD's, exit N
instead (usage errors still exit 2), so that a script can tell them apart.`,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		var kf keyFlags
		kf.register(fs)
		var uf unitFlags
		uf.register(fs)
		claimID := fs.String("claim-id", "", "the new claim's `id` (default: a fresh random one)")
		sets := setFlags{}
		fs.Var(sets, "set", "record member `NAME=JSON` (repeatable; the whole record at most 1048576 bytes)")
		noUnit := fs.Bool("no-unit", false, "run CMD as a direct child in its own process group, without a service manager")
		killAfter := fs.Duration("kill-after", lifecycle.DefaultKillAfter, "after a stop request, kill what is left of the writer with SIGKILL once `D` has passed")
		conflict := fs.Int("conflict-exit-code", 0, "exit `N` (1-255), instead of run's own code, whenever the outcome is run's and not CMD's (a refusal, a timeout, an error, a claim left held)")
		wait := fs.Bool("wait", false, "wait for the pair to become free instead of refusing")
		timeout := fs.Duration("timeout", 0, "with --wait, give up after `D` (exit 8); 0 waits without bound")
		adopt := fs.Bool("adopt", false, "take over the claim of a run whose claimctl died, and finish its lifecycle (no CMD)")
		return func(e *env) error {
			err := runBody(e, c, fs.Args(), &kf, &uf, runOpts{claimID: *claimID, sets: sets, noUnit: *noUnit, killAfter: *killAfter, wait: *wait, timeout: *timeout, adopt: *adopt, conflict: *conflict})
			var ue usageErr
			var st cmdStatus
			switch {
			case err == nil, errors.As(err, &ue), errors.As(err, &st):
				return err
			case c.set["conflict-exit-code"]:
				// Every outcome of run's own: refusals, a timeout, an error,
				// a claim left held.
				return remapped{err: err, code: exitCode(*conflict)}
			}
			return err
		}
	},
}

// runOpts are run's flags besides the pair and the manager's.
type runOpts struct {
	claimID   string
	sets      setFlags
	noUnit    bool
	killAfter time.Duration
	wait      bool
	timeout   time.Duration
	adopt     bool
	conflict  int
}

// cmdStatus is the exit status of the command run ran: passed through as
// is, whatever --conflict-exit-code says.
type cmdStatus struct{ code exitCode }

func (c cmdStatus) Error() string { return "" }

// remapped is an error reported as err is, but exiting code
// (--conflict-exit-code).
type remapped struct {
	err  error
	code exitCode
}

func (r remapped) Error() string { return r.err.Error() }
func (r remapped) Unwrap() error { return r.err }

// stopSignals are the signals run and wait take as a request to stop: a
// terminal that closes (SIGHUP) or a quit key (SIGQUIT) must not kill run
// without a release, leaving the writer running and the claim active.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

func runBody(e *env, c *common, argv []string, kf *keyFlags, uf *unitFlags, o runOpts) error {
	seat, session, err := kf.pair(c)
	if err != nil {
		return err
	}
	if err := uf.validate(c); err != nil {
		return err
	}
	switch {
	case o.adopt && len(argv) > 0:
		return usagef("--adopt runs no command: it takes over the recorded run; drop %s", quotePrefix(strings.Join(argv, " ")))
	case o.adopt && (o.wait || c.set["claim-id"] || len(o.sets) > 0):
		return usagef("--adopt takes the pair, the manager's flags (--units, --bus, or --no-unit) and --kill-after only")
	case !o.adopt && len(argv) == 0:
		return usagef("no command: give it after --, e.g. claimctl run PAIR -- sleep 60")
	case c.set["timeout"] && !o.wait:
		return usagef("--timeout %v without --wait: run without --wait never waits", o.timeout)
	case o.timeout < 0:
		return usagef("--timeout %v: want a positive duration, or 0 for none", o.timeout)
	case o.noUnit && (c.set["units"] || c.set["bus"]):
		return usagef("--no-unit uses no service manager; drop --units and --bus")
	case !o.noUnit && uf.mode == unitsNone:
		return usagef("--units none: run needs a service manager to start CMD in; use --no-unit to run it as a direct child")
	case o.killAfter <= 0:
		return usagef("--kill-after %v: want a positive duration such as 90s", o.killAfter)
	case c.set["conflict-exit-code"] && (o.conflict < 1 || o.conflict > 255):
		return usagef("--conflict-exit-code %d: want an exit status from 1 to 255", o.conflict)
	}
	if c.set["claim-id"] {
		if err := claimIDFlag("claim-id", o.claimID); err != nil {
			return err
		}
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
	// Signals are taken from here on: a stop requested while the claim is
	// taken or the unit started is acted on once it runs.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, stopSignals...)
	defer signal.Stop(sigs)

	logf := func(msg string) { fmt.Fprintf(e.stderr, "claimctl run: %s\n", escText(msg)) }
	group := lifecycle.GroupStarter{Host: e.host(), Subreaper: true, KillAfter: o.killAfter, Log: logf}
	var starter lifecycle.Starter = group
	var mgr *unitctl.Manager
	var dialErr error
	if !o.noUnit {
		ctx, cancel := context.WithTimeout(context.Background(), uf.timeout)
		mgr, dialErr = unitctl.Dial(ctx, &unitprobe.Options{User: uf.user(), Address: uf.bus})
		cancel()
		switch {
		case dialErr == nil:
			defer mgr.Close()
			starter = mgr
		case !o.adopt:
			return exitErr{code: exitError, msg: fmt.Sprintf("%v; nothing was started and no claim taken (run CMD without a service manager with --no-unit)", dialErr)}
		}
	}
	owner, err := ownerOf(e.host(), os.Getpid())
	if err != nil {
		return fmt.Errorf("cannot identify claimctl run (pid %d) as the owner: %w", os.Getpid(), err)
	}
	if o.adopt {
		units, done := uf.lookup()
		defer done()
		if o.noUnit {
			units = nil
		}
		return adoptRun(e, s, seat, session, owner, units, mgr, dialErr, lifecycle.GroupAttacher{Host: e.host(), KillAfter: o.killAfter, Log: logf}, sigs, o.killAfter)
	}
	if c.set["claim-id"] {
		if err := claimIDInUse(e.ctx, s, o.claimID); err != nil {
			return err
		}
	}
	// A run without a service manager makes no unit, so its claim names
	// none (unitName null from r1): list, show and their advice must not
	// name a unit that never existed.
	f := claimstore.AcquireFields{ClaimID: o.claimID, Owner: owner, NoUnit: o.noUnit}
	if len(o.sets) > 0 {
		f.Fields = o.sets
	}
	var deadline time.Time
	if o.timeout > 0 {
		deadline = time.Now().Add(o.timeout)
	}
	r, err := acquireRun(e, s, seat, session, f, o.wait, deadline, sigs)
	if err != nil {
		return err
	}
	// Every command that writes names the root it wrote to (a relative
	// --root, or the default, must be visible); before CMD runs, so that
	// the line comes before anything CMD prints.
	fmt.Fprintf(e.stderr, "claimctl run: acquired claim %s under root %s\n", r.Claim.ID, esc(s.Root()))
	if testHooks && e.getenv(envTestFail) == "after-start" {
		starter = stallAfterStart{starter}
	}
	spec := lifecycle.Spec{Argv: argv, KillAfter: o.killAfter, Stdin: fileOf(e.stdin), Stdout: fileOf(e.stdout), Stderr: fileOf(e.stderr)}
	ctx := context.Background()
	if err := r.Spawn(ctx, starter, spec); err != nil {
		var ns *lifecycle.NotStartedError
		if errors.As(err, &ns) {
			// Refused before the spawn marker: nothing ran under the claim.
			if rerr := r.Release(e.ctx); rerr != nil {
				return exitErr{code: exitUncertain, msg: fmt.Sprintf("%v; the claim could not be released (%v), so it stays held: release it with `claimctl release --claim %s … --proof no-unit`", err, rerr, r.Claim.ID)}
			}
			return exitErr{code: exitError, msg: fmt.Sprintf("%v; claim %s was released with a no-unit proof", err, r.Claim.ID)}
		}
		if r.Process() == nil {
			return exitErr{code: exitUncertain, msg: fmt.Sprintf("%v; claim %s stays held (spawn-marked): if nothing of it runs, release it with `claimctl release --claim %s … --proof cohortProof:REF`", err, r.Claim.ID, r.Claim.ID)}
		}
		fmt.Fprintf(e.stderr, "claimctl run: %s\n", escText(err.Error()))
	}
	return finishRun(e, r, sigs, o.killAfter)
}

// stallAfterStart is a starter that never returns once its own starter
// has started the writer: the test hook (CLAIMCTL_TEST_FAIL=after-start)
// that leaves run to be killed between the spawn marker and active.
type stallAfterStart struct{ lifecycle.Starter }

func (s stallAfterStart) Start(ctx context.Context, spec lifecycle.Spec) (lifecycle.Process, error) {
	if _, err := s.Starter.Start(ctx, spec); err != nil {
		return nil, err
	}
	for {
		time.Sleep(time.Hour)
	}
}

// fileOf returns the *os.File behind a command's stream, to hand to the
// writer, or nil (the starter's default) for an in-memory one.
func fileOf(v any) *os.File {
	switch x := v.(type) {
	case *os.File:
		return x
	case *outWriter:
		return fileOf(x.w)
	}
	return nil
}

// acquireRun takes the claim, waiting for the pair while --wait says so.
func acquireRun(e *env, s *claimstore.Store, seat, session claimstore.Key, f claimstore.AcquireFields, wait bool, deadline time.Time, sigs <-chan os.Signal) (*lifecycle.Run, error) {
	for {
		r, err := lifecycle.Acquire(e.ctx, s, seat, session, f)
		var ref *claimstore.Refusal
		if !wait || !errors.As(err, &ref) {
			return r, err
		}
		ctx, cancel := waitContext(deadline, sigs)
		_, werr := waitFree(ctx, s, seat, session)
		cancel()
		if werr != nil {
			return nil, werr
		}
	}
}

// waitContext ends at deadline (none when zero) or at the first signal.
func waitContext(deadline time.Time, sigs <-chan os.Signal) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	if !deadline.IsZero() {
		var c2 context.CancelFunc
		ctx, c2 = context.WithDeadline(ctx, deadline)
		prev := cancel
		cancel = func() { c2(); prev() }
	}
	stop := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-stop:
		}
	}()
	return ctx, func() { close(stop); cancel() }
}

// finishRun waits for the writer, stopping it on a signal, and releases
// the claim with the proof once it is over; it exits with the writer's
// status.
func finishRun(e *env, r *lifecycle.Run, sigs <-chan os.Signal, killAfter time.Duration) error {
	type waited struct {
		x   *lifecycle.Exit
		err error
	}
	done := make(chan waited, 1)
	go func() {
		x, err := r.Wait(context.Background())
		done <- waited{x, err}
	}()
	stopping := false
	var w waited
	for wait := true; wait; {
		select {
		case w = <-done:
			wait = false
		case sig := <-sigs:
			if stopping {
				fmt.Fprintf(e.stderr, "claimctl run: %v: still stopping claim %s's writer (%s); the claim is released with its proof once it has ended\n", sig, r.Claim.ID, writerOf(r.Claim.Record))
				continue
			}
			stopping = true
			fmt.Fprintf(e.stderr, "claimctl run: %v: stopping claim %s's writer, %s: SIGTERM to every process of it now, SIGKILL to what is left after %v (at %s); the claim is released with its proof once it has ended\n",
				sig, r.Claim.ID, writerOf(r.Claim.Record), killAfter, time.Now().Add(killAfter).Format("15:04:05"))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := r.Stop(ctx, fmt.Sprintf("claimctl run received %v", sig))
			cancel()
			var se *lifecycle.StopError
			if errors.As(err, &se) {
				// The stop was not taken (the manager unreachable): the
				// writer may run on, and waiting for its end could last
				// forever. Leave the claim held, and say so.
				return exitErr{code: exitUncertain, msg: fmt.Sprintf("%v; claim %s stays held: stop its writer (%s) for certain, then release it with a cohortProof, or run `claimctl run --adopt` with its keys", err, r.Claim.ID, writerOf(r.Claim.Record))}
			}
			if err != nil {
				fmt.Fprintf(e.stderr, "claimctl run: %s\n", escText(err.Error()))
			}
		}
	}
	if w.err != nil {
		return exitErr{code: exitUncertain, msg: fmt.Sprintf("claim %s stays held: %v", r.Claim.ID, w.err)}
	}
	if err := r.Release(e.ctx); err != nil {
		return exitErr{code: exitUncertain, msg: fmt.Sprintf("the writer of claim %s is over (%s), but the release failed, so the claim stays held: %v; release it with `claimctl release --claim %s … --proof %s`", r.Claim.ID, w.x.Ref, err, r.Claim.ID, shellQuote("cohortProof:"+w.x.Ref))}
	}
	status := w.x.Status
	if status < 0 {
		status = 0 // over, its status unknown (collected before it was read)
	}
	return cmdStatus{code: exitCode(status)}
}

// writerOf names a claim's writer for messages: its process group when
// it ran without a service manager (processGroup), else its unit. A claim
// that records neither (a run without a service manager whose supervisor
// died before it recorded the group) is described as such, with the one
// mark its processes carry: claimctl run's CLAIMSTORE_CLAIM_ID.
func writerOf(rec *claimstore.Record) string {
	if pg := lifecycle.ProcessGroupOf(rec); pg > 0 {
		return fmt.Sprintf("process group %d", pg)
	}
	if u := rec.UnitName(); u != "" {
		return "unit " + u
	}
	return fmt.Sprintf("no unit, and no process group recorded: processes claimctl run started for it have %s=%s in their environment", lifecycle.EnvClaimID, rec.ClaimID)
}

// adoptRun is run --adopt: classify's adoption, then the rest of the
// lifecycle on the recorded run: a unit through the manager, a process
// group (a --no-unit run) by itself. mgr is nil when the manager could not
// be reached (dialErr says why): a unit run then stays held.
func adoptRun(e *env, s *claimstore.Store, seat, session claimstore.Key, owner claimstore.Owner, units *unitLookup, mgr *unitctl.Manager, dialErr error, groups lifecycle.GroupAttacher, sigs <-chan os.Signal, killAfter time.Duration) error {
	ctx := context.Background()
	opts := &lifecycle.AdoptOptions{Groups: groups}
	if mgr != nil {
		opts.Attacher = mgr
	}
	if units != nil {
		opts.Units = units
	}
	r, res, err := lifecycle.Adopt(ctx, s, seat, session, owner, opts)
	var never *lifecycle.NeverSpawnedError
	switch {
	case errors.As(err, &never):
		// Held, nothing published: the claim was never spawned, and a
		// unit by its name is not its writer to wait for or stop.
		return exitErr{code: exitUncertain, msg: err.Error()}
	case errors.Is(err, lifecycle.ErrNothingToAdopt):
		what := "free"
		if res.Outcome == claimstore.OutcomeStopped && res.Proof != nil {
			what = fmt.Sprintf("stopped by classify with proof %s", describeProof(proofOut(res.Proof)))
		}
		fmt.Fprintf(e.stderr, "claimctl run: nothing to adopt under root %s: the pair is %s\n", esc(s.Root()), what)
		return nil
	case r == nil && err != nil:
		return err
	case err != nil && dialErr != nil && lifecycle.ProcessGroupOf(r.Claim.Record) == 0:
		return exitErr{code: exitUncertain, msg: fmt.Sprintf("%v: %v", err, dialErr)}
	case err != nil:
		return exitErr{code: exitUncertain, msg: err.Error()}
	}
	fmt.Fprintf(e.stderr, "claimctl run: adopted claim %s (%s, invocation %s) under root %s\n", r.Claim.ID, writerOf(r.Claim.Record), orDash(r.Process().ID()), esc(s.Root()))
	return finishRun(e, r, sigs, killAfter)
}

var waitCmd = &command{
	name:    "wait",
	args:    "[--root DIR|URL] " + connSyn + " [--json] --seat S --project P --workspace W --session ID [--timeout D]",
	summary: "Wait until the pair is free.",
	doc: `
wait returns (exit 0) as soon as neither key of the pair is held, woken by
inotify on the key directories of a directory root, or by etcd's watch on
an etcd root (no polling: a wake-up is a hint, on which the pair is read
again), or exits 8 (timeout) when --timeout passes first. With --json it prints the pair as show does, as it
was when it was found free. A pair held by an owner that died stays held
until classify or a release frees it: wait does not judge owners.

--timeout, and SIGINT, SIGTERM, SIGHUP or SIGQUIT (exit 1, nothing taken), are
honoured from the start, while an etcd root is still being dialled too.`,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		var kf keyFlags
		kf.register(fs)
		timeout := fs.Duration("timeout", 0, "give up after `D` (exit 8); 0 waits without bound")
		return func(e *env) error {
			seat, session, err := kf.pair(c)
			if err != nil {
				return err
			}
			if *timeout < 0 {
				return usagef("--timeout %v: want a positive duration, or 0 for none", *timeout)
			}
			// The deadline and the signals cover opening the root too: an
			// etcd root's dial may take --dial-timeout, and a wait that
			// ignored --timeout or died silently of SIGTERM until then would
			// break its promise before the first watch is armed.
			start := time.Now()
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, stopSignals...)
			defer signal.Stop(sigs)
			e.signalsArmed()
			var deadline time.Time
			if *timeout > 0 {
				deadline = start.Add(*timeout)
			}
			ctx, cancel := waitContext(deadline, sigs)
			defer cancel()
			rc, err := e.resolveRoot(c.rootFlag, c.rootSet)
			if err != nil {
				return err
			}
			base := e.ctx
			e.ctx = ctx
			s, err := e.openStore(rc, false)
			e.ctx = base
			if err != nil {
				switch {
				case errors.Is(ctx.Err(), context.DeadlineExceeded):
					return exitErr{code: exitTimeout, msg: fmt.Sprintf("--timeout %s passed while opening the claim root %s, before the pair could be read; nothing was taken", time.Since(start).Round(time.Millisecond), rc.Path)}
				case ctx.Err() != nil:
					return exitErr{code: exitError, msg: fmt.Sprintf("interrupted while opening the claim root %s, before the pair could be read; nothing was taken", rc.Path)}
				}
				return err
			}
			if _, err := waitFree(ctx, s, seat, session); err != nil {
				return err
			}
			return show(e, c, s, &seat, &session)
		}
	},
}

// timeoutErr is a wait that ran out of time.
func timeoutErr(seat, session claimstore.Key, d string) error {
	return exitErr{code: exitTimeout, msg: fmt.Sprintf("%s + %s is still held after %s; `claimctl show` says by whom", seat, session, d)}
}

// waitFree blocks until the pair reads free, woken by the store's watch
// where its backend has one (etcd: a watch from the revision of a read
// made before the pair is read), else by inotify on both key directories
// (or, while one does not exist, the nearest ancestor that does). Either
// way the watch is made before each read, so a release between the read
// and the wait wakes it, and a wake-up is only a hint: the pair is read
// again and decided on what was read. It returns ctx's end as a timeout
// error, or a signal's as an error, wherever it falls: in the wait, or in
// arming the watch or reading the pair (an etcd read cut by the deadline
// is the deadline, not a failure of the store).
func waitFree(ctx context.Context, s *claimstore.Store, seat, session claimstore.Key) (*claimstore.Pair, error) {
	start := time.Now()
	readHeld := false
	ended := func(err error) error {
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded) && readHeld:
			return timeoutErr(seat, session, time.Since(start).Round(time.Millisecond).String())
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			// Never read held in this wait: saying "still held" would
			// report a state nobody saw.
			return exitErr{code: exitTimeout, msg: fmt.Sprintf("--timeout passed after %s, before %s + %s could be read; nothing was taken", time.Since(start).Round(time.Millisecond), seat, session)}
		case ctx.Err() != nil:
			return exitErr{code: exitError, msg: "interrupted while waiting for the pair; nothing was taken"}
		}
		return err
	}
	wake, stop, err := pairWaker(ctx, s, seat, session)
	if err != nil {
		return nil, ended(err)
	}
	defer stop()
	for {
		p, err := s.Pair(ctx, seat, session)
		if err != nil {
			return nil, ended(err)
		}
		if !p.Held() {
			return p, nil
		}
		readHeld = true
		if err := wake(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, ended(err)
			}
			return nil, fmt.Errorf("waiting for %s + %s: %w", seat, session, err)
		}
	}
}

// pairWaker returns a function that waits until something may have been
// published under the pair's keys, and its stop.
func pairWaker(ctx context.Context, s *claimstore.Store, seat, session claimstore.Key) (wake func(context.Context) error, stop func(), err error) {
	w, err := s.Watch(ctx, seat, session)
	switch {
	case err == nil:
		return w.Wait, func() { w.Close() }, nil
	case !errors.Is(err, claimstore.ErrCannotWatch):
		return nil, nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	// One reader per watcher for the whole wait: a watcher's read,
	// interrupted by its deadline, cannot be resumed by another Wait.
	woke := make(chan error, 2)
	var readers sync.WaitGroup
	stop = func() { cancel(); readers.Wait() }
	for _, k := range []claimstore.Key{seat, session} {
		w, err := newKeyWatcher(s.Root(), s.KeyDir(k))
		if err != nil {
			stop()
			return nil, nil, err
		}
		readers.Add(1)
		go func() {
			defer readers.Done()
			defer w.Close()
			for {
				err := w.Wait(wctx)
				if wctx.Err() != nil {
					return
				}
				select {
				case woke <- err:
				default: // a wake-up is pending already; the read covers both
				}
				if err != nil {
					return
				}
			}
		}()
	}
	wake = func(ctx context.Context) error {
		select {
		case err := <-woke:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return wake, stop, nil
}

var _ io.Writer = (*outWriter)(nil)
