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
	args:       "[--root DIR|URL] " + connSyn + " --seat S --project P --workspace W --session ID [--claim-id ID] [--set NAME=JSON]... [--units MODE] [--bus ADDR] [--unit-timeout D] [--no-unit] [--wait] [--timeout D] [--adopt] -- CMD [ARG]...",
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
CLAIMSTORE_UNIT; its standard input, output and error are claimctl's (passed
to the manager). The unit has KillMode=control-group.

SIGINT or SIGTERM: the claim advances to stopping with the stop request, the
unit is stopped, and once it has ended the claim is released with the proof;
a second signal does not skip that. Killed with SIGKILL, run leaves the unit
running and the claim held; run --adopt PAIR takes it back: it adopts the
claim through classify (only when its owner is proven gone), re-attaches to
the recorded invocation while it runs, and releases with a proof only when that
invocation is provably over.

--no-unit runs CMD as a direct child in a process group of its own instead,
and releases only once the group is verified empty. When the manager cannot be
reached, run says so and starts nothing (use --no-unit).

--wait waits for the pair to become free instead of refusing (woken by inotify
on the key directories), at most --timeout (exit 8 when it passes).

Exit: CMD's status; 2 usage; 3, 4, 5 refusals; 8 timeout (--wait); 6 when
the claim had to be left held (the writer not proven over, with the reason);
1 on other errors before CMD ran.`,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		var kf keyFlags
		kf.register(fs)
		var uf unitFlags
		uf.register(fs)
		claimID := fs.String("claim-id", "", "the new claim's `id` (default: a fresh random one)")
		sets := setFlags{}
		fs.Var(sets, "set", "record member `NAME=JSON` (repeatable)")
		noUnit := fs.Bool("no-unit", false, "run CMD as a direct child in its own process group, without a service manager")
		wait := fs.Bool("wait", false, "wait for the pair to become free instead of refusing")
		timeout := fs.Duration("timeout", 0, "with --wait, give up after `D` (exit 8); 0 waits without bound")
		adopt := fs.Bool("adopt", false, "take over the claim of a run whose claimctl died, and finish its lifecycle (no CMD)")
		return func(e *env) error {
			argv := fs.Args()
			seat, session, err := kf.pair(c)
			if err != nil {
				return err
			}
			if err := uf.validate(c); err != nil {
				return err
			}
			switch {
			case *adopt && len(argv) > 0:
				return usagef("--adopt runs no command: it takes over the recorded run; drop %q", strings.Join(argv, " "))
			case *adopt && (*noUnit || *wait || c.set["claim-id"] || len(sets) > 0):
				return usagef("--adopt takes the pair and the manager's flags only (--units, --bus)")
			case !*adopt && len(argv) == 0:
				return usagef("no command: give it after --, e.g. claimctl run PAIR -- sleep 60")
			case c.set["timeout"] && !*wait:
				return usagef("--timeout %v without --wait: run without --wait never waits", *timeout)
			case *timeout < 0:
				return usagef("--timeout %v: want a positive duration, or 0 for none", *timeout)
			case *noUnit && (c.set["units"] || c.set["bus"]):
				return usagef("--no-unit uses no service manager; drop --units and --bus")
			case !*noUnit && uf.mode == unitsNone:
				return usagef("--units none: run needs a service manager to start CMD in; use --no-unit to run it as a direct child")
			}
			if c.set["claim-id"] {
				if err := claimIDFlag("claim-id", *claimID); err != nil {
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
			// Signals are taken from here on: a stop requested while the
			// claim is taken or the unit started is acted on once it runs.
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sigs)

			var starter lifecycle.Starter
			var mgr *unitctl.Manager
			if !*noUnit {
				ctx, cancel := context.WithTimeout(context.Background(), uf.timeout)
				mgr, err = unitctl.Dial(ctx, &unitprobe.Options{User: uf.user(), Address: uf.bus})
				cancel()
				if err != nil {
					return exitErr{code: exitError, msg: fmt.Sprintf("%v; nothing was started and no claim taken (run CMD without a service manager with --no-unit)", err)}
				}
				defer mgr.Close()
				starter = mgr
			} else {
				starter = lifecycle.GroupStarter{Host: e.host()}
			}
			owner, err := ownerOf(e.host(), os.Getpid())
			if err != nil {
				return fmt.Errorf("cannot identify claimctl run (pid %d) as the owner: %w", os.Getpid(), err)
			}
			if *adopt {
				units, done := uf.lookup()
				defer done()
				return adoptRun(e, s, seat, session, owner, units, mgr, sigs)
			}
			if c.set["claim-id"] {
				if err := claimIDInUse(s, *claimID); err != nil {
					return err
				}
			}
			f := claimstore.AcquireFields{ClaimID: *claimID, Owner: owner}
			if len(sets) > 0 {
				f.Fields = sets
			}
			var deadline time.Time
			if *timeout > 0 {
				deadline = time.Now().Add(*timeout)
			}
			r, err := acquireRun(e, s, seat, session, f, *wait, deadline, sigs)
			if err != nil {
				return err
			}
			spec := lifecycle.Spec{Argv: argv, Stdin: fileOf(e.stdin), Stdout: fileOf(e.stdout), Stderr: fileOf(e.stderr)}
			ctx := context.Background()
			if err := r.Spawn(ctx, starter, spec); err != nil {
				if r.Process() == nil {
					return exitErr{code: exitUncertain, msg: fmt.Sprintf("%v; claim %s stays held (spawn-marked): if nothing of it runs, release it with `claimctl release --claim %s … --proof cohortProof:REF`", err, r.Claim.ID, r.Claim.ID)}
				}
				fmt.Fprintf(e.stderr, "claimctl run: %s\n", escText(err.Error()))
			}
			return finishRun(e, r, sigs)
		}
	},
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
		r, err := lifecycle.Acquire(s, seat, session, f)
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
func finishRun(e *env, r *lifecycle.Run, sigs <-chan os.Signal) error {
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
				fmt.Fprintf(e.stderr, "claimctl run: %v: still stopping claim %s's writer; the claim is released with its proof once it has ended\n", sig, r.Claim.ID)
				continue
			}
			stopping = true
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := r.Stop(ctx, fmt.Sprintf("claimctl run received %v", sig))
			cancel()
			var se *lifecycle.StopError
			if errors.As(err, &se) {
				// The stop was not taken (the manager unreachable): the
				// writer may run on, and waiting for its end could last
				// forever. Leave the claim held, and say so.
				return exitErr{code: exitUncertain, msg: fmt.Sprintf("%v; claim %s stays held: stop its writer (unit %s) for certain, then release it with a cohortProof, or run `claimctl run --adopt` with its keys", err, r.Claim.ID, lifecycle.UnitFile(r.Claim.Record.UnitName()))}
			}
			if err != nil {
				fmt.Fprintf(e.stderr, "claimctl run: %s\n", escText(err.Error()))
			}
		}
	}
	if w.err != nil {
		return exitErr{code: exitUncertain, msg: fmt.Sprintf("claim %s stays held: %v", r.Claim.ID, w.err)}
	}
	if err := r.Release(); err != nil {
		return exitErr{code: exitUncertain, msg: fmt.Sprintf("the writer of claim %s is over (%s), but the release failed, so the claim stays held: %v; release it with `claimctl release --claim %s … --proof %s`", r.Claim.ID, w.x.Ref, err, r.Claim.ID, shellQuote("cohortProof:"+w.x.Ref))}
	}
	status := w.x.Status
	if status < 0 {
		status = 0 // over, its status unknown (collected before it was read)
	}
	return exitErr{code: exitCode(status)}
}

// adoptRun is run --adopt: classify's adoption, then the rest of the
// lifecycle on the recorded run.
func adoptRun(e *env, s *claimstore.Store, seat, session claimstore.Key, owner claimstore.Owner, units *unitLookup, mgr *unitctl.Manager, sigs <-chan os.Signal) error {
	ctx := context.Background()
	opts := &lifecycle.AdoptOptions{Attacher: mgr}
	if units != nil {
		opts.Units = units
	}
	r, res, err := lifecycle.Adopt(ctx, s, seat, session, owner, opts)
	switch {
	case errors.Is(err, lifecycle.ErrNothingToAdopt):
		what := "free"
		if res.Outcome == claimstore.OutcomeStopped && res.Proof != nil {
			what = fmt.Sprintf("stopped by classify with proof %s", describeProof(proofOut(res.Proof)))
		}
		fmt.Fprintf(e.stderr, "claimctl run: nothing to adopt: the pair is %s\n", what)
		return nil
	case r == nil && err != nil:
		return err
	case err != nil:
		return exitErr{code: exitUncertain, msg: err.Error()}
	}
	fmt.Fprintf(e.stderr, "claimctl run: adopted claim %s (invocation %s)\n", r.Claim.ID, orDash(r.Process().ID()))
	return finishRun(e, r, sigs)
}

var waitCmd = &command{
	name:    "wait",
	args:    "[--root DIR|URL] " + connSyn + " [--json] --seat S --project P --workspace W --session ID [--timeout D]",
	summary: "Wait until the pair is free.",
	doc: `
wait returns (exit 0) as soon as neither key of the pair is held, woken by
inotify on the key directories (no polling), or exits 8 (timeout) when
--timeout passes first. With --json it prints the pair as show does, as it
was when it was found free. A pair held by an owner that died stays held
until classify or a release frees it: wait does not judge owners.`,
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
			rc, err := e.resolveRoot(c.rootFlag, c.rootSet)
			if err != nil {
				return err
			}
			s, err := e.openStore(rc, false)
			if err != nil {
				return err
			}
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sigs)
			var deadline time.Time
			if *timeout > 0 {
				deadline = time.Now().Add(*timeout)
			}
			ctx, cancel := waitContext(deadline, sigs)
			defer cancel()
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

// waitFree blocks until the pair reads free, woken by inotify on both key
// directories (or, while one does not exist, the nearest ancestor that
// does). The watches are made before each read, so a release between the
// read and the wait wakes it. It returns ctx's end as a timeout error, or
// a signal's as an error.
func waitFree(ctx context.Context, s *claimstore.Store, seat, session claimstore.Key) (*claimstore.Pair, error) {
	if isEtcdRoot(s.Root()) {
		return nil, usagef("waiting for a pair waits on inotify over the root's directories, which an etcd root (%s) does not have; poll claimctl show instead (waiting on an etcd root is not supported yet)", s.Root())
	}
	start := time.Now()
	wctx, cancel := context.WithCancel(ctx)
	// One reader per watcher for the whole wait: a watcher's read,
	// interrupted by its deadline, cannot be resumed by another Wait.
	woke := make(chan error, 2)
	var readers sync.WaitGroup
	defer readers.Wait()
	defer cancel()
	for _, k := range []claimstore.Key{seat, session} {
		w, err := newKeyWatcher(s.Root(), s.KeyDir(k))
		if err != nil {
			return nil, err
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
	for {
		p, err := s.Pair(seat, session)
		if err != nil {
			return nil, err
		}
		if !p.Held() {
			return p, nil
		}
		select {
		case err := <-woke:
			if err != nil {
				return nil, err
			}
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, timeoutErr(seat, session, time.Since(start).Round(time.Millisecond).String())
			}
			return nil, exitErr{code: exitError, msg: "interrupted while waiting for the pair; nothing was taken"}
		}
	}
}

var _ io.Writer = (*outWriter)(nil)
