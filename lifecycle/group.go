package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/claimstore/claimstore/hostid"
)

// DefaultSettle is how long a group run's Wait waits, after the writer
// exited, for the rest of its process group to be gone: processes that were
// killed with it and are not yet reaped (zombies), or a child that is
// finishing.
const DefaultSettle = 5 * time.Second

// DefaultKillAfter is how long a stopped run is given to end after SIGTERM
// before its whole process group gets SIGKILL: systemd's default stop
// timeout (DefaultTimeoutStopSec), so that a writer behaves the same with
// and without a service manager.
const DefaultKillAfter = 90 * time.Second

// GroupStarter starts the writer as a direct child of the calling process,
// in a process group of its own (no service manager). Its Process's Wait
// reports the run over only when the child has exited and its process
// group is verified gone: kill(-pgid, 0) answers ESRCH, which it does only
// once no process, running or zombie, is left in the group. A zombie runs
// no code, but it keeps the group's id in use until its parent reaps it, so
// Wait waits for that, up to Settle, reaping what it may (see Subreaper);
// a process still in the group after that keeps the claim held, with the
// reason.
//
// Caveat: a descendant that left the group (setsid, setpgid) is not seen;
// a service manager's control group is the evidence that sees everything,
// which is why unitctl is the default.
type GroupStarter struct {
	// Host identifies the child (its start time) for its run id; nil
	// means hostid.System.
	Host hostid.Host
	// Subreaper makes the calling process the child subreaper of its
	// descendants (PR_SET_CHILD_SUBREAPER): a writer's process whose parent
	// dies is then reparented to the caller instead of to PID 1, and Wait
	// reaps it once it has exited, so that an orphaned zombie never depends
	// on another process to be collected. It is a property of the whole
	// calling process (every orphan of its descendants comes to it, and only
	// those of the writer's group are reaped here): claimctl run sets it; a
	// supervisor that runs other children should leave it off.
	Subreaper bool
	// Settle bounds the wait for the group to be gone once the writer
	// exited; 0 means DefaultSettle.
	Settle time.Duration
	// KillAfter is how long a Stop waits after SIGTERM before it sends
	// SIGKILL to the whole group; 0 means DefaultKillAfter, a negative
	// value never escalates.
	KillAfter time.Duration
	// Log, when set, is told what Stop and Wait do while they wait (the
	// signal sent, what remains), for a supervisor to show.
	Log func(msg string)
}

func (g GroupStarter) settle() time.Duration {
	if g.Settle > 0 {
		return g.Settle
	}
	return DefaultSettle
}

func (g GroupStarter) killAfter() time.Duration {
	if g.KillAfter == 0 {
		return DefaultKillAfter
	}
	return g.KillAfter
}

func (g GroupStarter) log(format string, a ...any) {
	if g.Log != nil {
		g.Log(fmt.Sprintf(format, a...))
	}
}

// ExecStatus is the exit status a shell gives a command it could not
// execute: 127 when it does not exist, 126 when it exists but cannot be
// executed (permissions, not an executable, a directory).
func ExecStatus(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return 127
	}
	return 126
}

// Start implements Starter. A command that cannot be executed (not found,
// not executable, its working directory missing) never ran any of its own
// code: Start then returns a Process that is already over — its Exit has
// ExecStatus's status, result "exec-failed" and a Ref saying that nothing
// was started — together with the error, so that the claim is released on
// that proof.
func (g GroupStarter) Start(ctx context.Context, spec Spec) (Process, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("no command to start")
	}
	if g.Subreaper {
		if err := setSubreaper(); err != nil {
			return nil, fmt.Errorf("becoming the writer's subreaper (nothing was started): %w", err)
		}
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Dir = spec.Dir
	if spec.Stdin != nil {
		cmd.Stdin = spec.Stdin
	}
	if spec.Stdout != nil {
		cmd.Stdout = spec.Stdout
	}
	if spec.Stderr != nil {
		cmd.Stderr = spec.Stderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		// The child (if one was forked) failed before execve succeeded, or
		// at it, and is reaped: none of the command's code ran.
		status := ExecStatus(err)
		ref := fmt.Sprintf("nothing was started: executing %s failed: %v", spec.Argv[0], unwrapExec(err))
		return &overProc{exit: &Exit{Status: status, Result: "exec-failed", Ref: ref}}, &ExecError{Argv0: spec.Argv[0], Status: status, Err: err}
	}
	pid := cmd.Process.Pid
	h := g.Host
	if h == nil {
		h = hostid.System
	}
	start, err := h.StartTime(pid)
	if err != nil {
		start = "?"
	}
	if spec.KillAfter != 0 {
		g.KillAfter = spec.KillAfter
	}
	p := &groupProc{g: g, cmd: cmd, pgid: pid, id: "pid " + strconv.Itoa(pid) + " start " + start, done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// unwrapExec drops os/exec's "exec: \"x\": " prefix, which the Ref already
// names.
func unwrapExec(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err // "fork/exec PATH: " names what the message names already
	}
	return err
}

// ExecError says the command could not be executed: nothing was started.
// Status is the conventional exit status for it (ExecStatus).
type ExecError struct {
	Argv0  string
	Status int
	Err    error
}

func (e *ExecError) Error() string {
	return fmt.Sprintf("cannot execute %s: %v (nothing was started)", strconv.Quote(e.Argv0), unwrapExec(e.Err))
}
func (e *ExecError) Unwrap() error { return e.Err }

type groupProc struct {
	g    GroupStarter
	cmd  *exec.Cmd
	pgid int
	id   string
	done chan struct{}
	err  error // cmd.Wait's, set before done is closed

	stopOnce sync.Once
	stopped  chan struct{} // closed by the first Stop
}

func (p *groupProc) ID() string { return p.id }

// ProcessGroup is the writer's process group id, which the claim records
// (processGroup) so that a later supervisor can adopt the run.
func (p *groupProc) ProcessGroup() int { return p.pgid }

// GroupNotEmptyError says the writer's process group still has members
// after its leader exited: the run is not proven over.
type GroupNotEmptyError struct {
	PGID int
	Err  error // kill(-pgid, 0)'s answer: nil (members) or EPERM
	// Members describes what remains, as /proc shows it ("pid 12 sleep
	// (sleeping)"), when it could be read.
	Members []string
	// Waited is how long the group was waited for.
	Waited time.Duration
}

func (e *GroupNotEmptyError) Error() string {
	why := "processes remain in it"
	if e.Err != nil {
		why = "kill(-" + strconv.Itoa(e.PGID) + ", 0): " + e.Err.Error()
	}
	if len(e.Members) > 0 {
		why += ": " + strings.Join(e.Members, ", ")
	}
	waited := ""
	if e.Waited > 0 {
		waited = " after " + e.Waited.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("the writer exited, but its process group %d is not verified gone%s (%s); the claim stays held: stop what remains (kill -TERM -- -%d), then release with a cohortProof", e.PGID, waited, why, e.PGID)
}

func (p *groupProc) Wait(ctx context.Context) (*Exit, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	x := &Exit{Result: "exit-code"}
	var xe *exec.ExitError
	switch {
	case p.err == nil:
		x.Result = "success"
	case errors.As(p.err, &xe):
		ws := xe.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			x.Signal, x.Status, x.Result = ws.Signal(), 128+int(ws.Signal()), "signal"
		} else {
			x.Status = ws.ExitStatus()
		}
	default:
		return nil, p.err
	}
	if err := waitGroupGone(ctx, p.pgid, p.g.settle(), p.stopped, p.g.killAfter()); err != nil {
		return nil, err
	}
	x.Ref = fmt.Sprintf("process group of %s is empty; result %s status %d", p.id, x.Result, x.Status)
	return x, nil
}

// waitGroupGone waits until kill(-pgid, 0) answers ESRCH: no process,
// running or zombie, has the group's id. The leader is reaped already; its
// pid stays reserved as long as the group has a member, so ESRCH means the
// group is gone for good. Zombies that are the caller's children (orphans
// reparented to it as a subreaper, whoever made it one) are reaped as they
// come; an orphan reparented to another process is that process's to reap. It gives up after
// settle, or, once a stop was requested (stopped closed), after the stop's
// kill bound plus settle, since the stop's SIGKILL may still have to come.
func waitGroupGone(ctx context.Context, pgid int, settle time.Duration, stopped <-chan struct{}, killAfter time.Duration) error {
	start := time.Now()
	deadline := start.Add(settle)
	delay := time.Millisecond
	for {
		reapGroup(pgid)
		err := syscall.Kill(-pgid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		if stopped != nil {
			select {
			case <-stopped:
				if killAfter > 0 {
					deadline = maxTime(deadline, start.Add(killAfter+settle))
				}
				stopped = nil
			default:
			}
		}
		if errors.Is(err, syscall.EPERM) || time.Now().After(deadline) {
			return &GroupNotEmptyError{PGID: pgid, Err: nonNil(err), Members: groupMembers(pgid), Waited: time.Since(start)}
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		}
		delay = min(delay*2, 50*time.Millisecond)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// nonNil keeps kill's EPERM (a member another user owns) and drops a nil.
func nonNil(err error) error {
	if errors.Is(err, syscall.EPERM) {
		return err
	}
	return nil
}

// reapGroup reaps every exited child of the caller in process group pgid,
// without waiting: the writer's orphans, reparented to the caller as their
// subreaper. Only that group's: another child of the caller is left to
// whoever waits for it.
func reapGroup(pgid int) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-pgid, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
	}
}

// Stop sends SIGTERM to the whole group and, if the group is still there
// after the starter's KillAfter, SIGKILL.
func (p *groupProc) Stop(ctx context.Context) error {
	err := syscall.Kill(-p.pgid, syscall.SIGTERM)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	if err != nil {
		return err
	}
	p.stopOnce.Do(func() {
		close(p.stopped)
		after := p.g.killAfter()
		if after < 0 {
			p.g.log("sent SIGTERM to process group %d; it is not killed if it does not end", p.pgid)
			return
		}
		p.g.log("sent SIGTERM to process group %d (%s); SIGKILL in %v (at %s) if any of it remains", p.pgid, p.id, after, time.Now().Add(after).Format("15:04:05"))
		go func() {
			t := time.NewTimer(after)
			defer t.Stop()
			select {
			case <-t.C:
			case <-p.done:
				// The leader is gone; the group may not be: keep the bound.
				<-t.C
			}
			if syscall.Kill(-p.pgid, 0) == nil {
				p.g.log("process group %d did not end within %v of SIGTERM: sent SIGKILL", p.pgid, after)
				_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
			}
		}()
	})
	return nil
}

// Running reports whether the leader still runs.
func (p *groupProc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// overProc is a run already proven over (a command that could not be
// executed, an adopted group that is gone).
type overProc struct {
	id   string
	exit *Exit
}

func (p *overProc) ID() string                          { return p.id }
func (p *overProc) Wait(context.Context) (*Exit, error) { return p.exit, nil }
func (p *overProc) Stop(context.Context) error          { return nil }

// GroupAttacher re-attaches to a run a GroupStarter started, for Adopt: the
// claim recorded its process group (Recorded.ProcessGroup) and its leader's
// identity (the invocationId "pid N start S"). The group is not the
// adopter's child, so nothing tells it when a member exits: its Wait looks
// at the group (kill(-pgid, 0)) at a growing interval, at most every
// PollEvery, until it is gone.
type GroupAttacher struct {
	// Host reads process start times; nil means hostid.System.
	Host hostid.Host
	// KillAfter is as GroupStarter's, for a stop the adopter makes or
	// resumes.
	KillAfter time.Duration
	// PollEvery bounds the interval between looks; 0 means 200ms.
	PollEvery time.Duration
	// Log is as GroupStarter's.
	Log func(msg string)
}

// Attach implements Attacher for a recorded process group.
func (a GroupAttacher) Attach(ctx context.Context, rec Recorded) (Process, error) {
	if rec.ProcessGroup <= 0 {
		return nil, errors.New("the claim recorded no process group: it was not started by a process-group run (adopt it with the service manager it ran under)")
	}
	pgid := rec.ProcessGroup
	err := syscall.Kill(-pgid, 0)
	if errors.Is(err, syscall.ESRCH) {
		return &overProc{id: rec.InvocationID, exit: &Exit{Status: -1, Result: "gone", Ref: fmt.Sprintf("process group of %s is gone (no process has group id %d)", rec.InvocationID, pgid)}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("process group %d cannot be judged: kill(-%d, 0): %w", pgid, pgid, err)
	}
	// The group exists. Its id is its leader's pid: if that pid now names
	// another process (another start time), the group may be another's
	// whose leader took the number, and waiting for it proves nothing.
	if want := recordedStart(rec.InvocationID, pgid); want != "" {
		h := a.Host
		if h == nil {
			h = hostid.System
		}
		if got, err := h.StartTime(pgid); err == nil && got != want {
			return nil, fmt.Errorf("process group %d exists, but pid %d is now another process (start %s, the run recorded %s): whether the writer's processes remain cannot be told", pgid, pgid, got, want)
		}
	}
	g := GroupStarter{KillAfter: a.KillAfter, Log: a.Log}
	return &attachedGroup{a: a, p: &groupProc{g: g, pgid: pgid, id: rec.InvocationID, done: make(chan struct{}), stopped: make(chan struct{})}}, nil
}

// recordedStart returns the start time in a group run's invocation id
// ("pid N start S"), when it names pgid.
func recordedStart(id string, pgid int) string {
	f := strings.Fields(id)
	if len(f) == 4 && f[0] == "pid" && f[1] == strconv.Itoa(pgid) && f[2] == "start" && f[3] != "?" {
		return f[3]
	}
	return ""
}

// attachedGroup is an adopted group run.
type attachedGroup struct {
	a GroupAttacher
	p *groupProc
}

func (g *attachedGroup) ID() string { return g.p.id }

func (g *attachedGroup) ProcessGroup() int { return g.p.pgid }

// Running reports whether any process of the group is left.
func (g *attachedGroup) Running() bool { return syscall.Kill(-g.p.pgid, 0) == nil }

func (g *attachedGroup) Stop(ctx context.Context) error { return g.p.Stop(ctx) }

func (g *attachedGroup) Wait(ctx context.Context) (*Exit, error) {
	every := g.a.PollEvery
	if every <= 0 {
		every = 200 * time.Millisecond
	}
	delay := 5 * time.Millisecond
	for {
		err := syscall.Kill(-g.p.pgid, 0)
		switch {
		case errors.Is(err, syscall.ESRCH):
			return &Exit{Status: -1, Result: "gone", Ref: fmt.Sprintf("process group of %s is gone (adopted; no process has group id %d)", g.p.id, g.p.pgid)}, nil
		case err != nil:
			return nil, &GroupNotEmptyError{PGID: g.p.pgid, Err: err, Members: groupMembers(g.p.pgid)}
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		delay = min(delay*2, every)
	}
}
