package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"github.com/claimstore/claimstore/hostid"
)

// GroupStarter starts the writer as a direct child of the calling process,
// in a process group of its own (no service manager). Its Process's Wait
// reports the run over only when the child has exited and its process
// group is verified empty (kill(-pgid, 0) answers ESRCH): a grandchild left
// in the group keeps the claim held, with the reason.
//
// Caveat: a descendant that left the group (setsid, setpgid) is not seen;
// a service manager's control group is the evidence that sees everything,
// which is why unitctl is the default.
type GroupStarter struct {
	// Host identifies the child (its start time) for its run id; nil
	// means hostid.System.
	Host hostid.Host
}

// Start implements Starter.
func (g GroupStarter) Start(ctx context.Context, spec Spec) (Process, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("no command to start")
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
		// exec failed: the child never ran the command, and it is reaped.
		return nil, err
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
	p := &groupProc{cmd: cmd, pgid: pid, id: "pid " + strconv.Itoa(pid) + " start " + start, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

type groupProc struct {
	cmd  *exec.Cmd
	pgid int
	id   string
	once sync.Once
	done chan struct{}
	err  error // cmd.Wait's, set before done is closed
}

func (p *groupProc) ID() string { return p.id }

// GroupNotEmptyError says the writer's process group still has members
// after its leader exited: the run is not proven over.
type GroupNotEmptyError struct {
	PGID int
	Err  error // kill(-pgid, 0)'s answer: nil (members) or EPERM
}

func (e *GroupNotEmptyError) Error() string {
	why := "processes remain in it"
	if e.Err != nil {
		why = "kill(-" + strconv.Itoa(e.PGID) + ", 0): " + e.Err.Error()
	}
	return fmt.Sprintf("the writer exited, but its process group %d is not verified empty (%s); the claim stays held: stop what remains (kill -TERM -- -%d), then release with a cohortProof", e.PGID, why, e.PGID)
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
	// The leader is reaped; its pid stays reserved as long as the group
	// has a member, so ESRCH here means no process is left in the group.
	if err := syscall.Kill(-p.pgid, 0); !errors.Is(err, syscall.ESRCH) {
		return nil, &GroupNotEmptyError{PGID: p.pgid, Err: err}
	}
	x.Ref = fmt.Sprintf("process group of %s is empty; result %s status %d", p.id, x.Result, x.Status)
	return x, nil
}

func (p *groupProc) Stop(ctx context.Context) error {
	select {
	case <-p.done:
		// The leader is gone; the group may not be. Signal what remains.
	default:
	}
	err := syscall.Kill(-p.pgid, syscall.SIGTERM)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
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
