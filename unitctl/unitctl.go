package unitctl

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/claimstore/claimstore/lifecycle"
	"github.com/claimstore/claimstore/unitprobe"
)

// Manager is a connection to one systemd manager, for starting and
// following writers' units. Its methods are safe for concurrent use.
type Manager struct {
	conn    *sdbus.Conn
	sys     *dbus.Conn // go-systemd's method connection, for Unit.Ref
	sig     *dbus.Conn // go-systemd's signal connection: its end ends every Wait
	addr    string
	what    string
	endLife context.CancelFunc

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]bool // by unit name
	closed  chan struct{}
}

// CgroupRoot is where the unified (v2) cgroup hierarchy is mounted; a v1
// system has the systemd hierarchy below it, at CgroupRoot/systemd.
var CgroupRoot = "/sys/fs/cgroup"

// DialError says the manager could not be reached: nothing was started.
type DialError struct {
	Manager string // "the user manager at unix:path=..."
	Err     error
}

func (e *DialError) Error() string { return "cannot reach " + e.Manager + ": " + e.Err.Error() }
func (e *DialError) Unwrap() error { return e.Err }

// Dial connects to the manager opts chooses (nil: the system manager; the
// same addresses as unitprobe) and subscribes to its signals. ctx bounds
// the dial only.
func Dial(ctx context.Context, opts *unitprobe.Options) (*Manager, error) {
	what := "the system manager"
	if opts != nil && opts.User {
		what = "the user manager"
	}
	addr, err := unitprobe.BusAddress(opts)
	if err != nil {
		return nil, &DialError{Manager: what, Err: err}
	}
	what += " at " + addr
	// The connection lives until Close (life); ctx bounds only the dial
	// and the handshake: when it ends first, the half-made connection is
	// torn down.
	life, endLife := context.WithCancel(context.Background())
	type dialed struct {
		conn *sdbus.Conn
		err  error
	}
	ch := make(chan dialed, 1)
	var first *dbus.Conn  // NewConnection dials its method connection first,
	var second *dbus.Conn // then its signal connection
	go func() {
		conn, err := sdbus.NewConnection(func() (*dbus.Conn, error) {
			c, err := unitprobe.DialBus(life, addr)
			if err != nil {
				return nil, err
			}
			if first == nil {
				first = c
			} else {
				second = c
			}
			return c, nil
		})
		ch <- dialed{conn, err}
	}()
	var conn *sdbus.Conn
	select {
	case d := <-ch:
		if d.err != nil {
			endLife()
			return nil, &DialError{Manager: what, Err: d.err}
		}
		conn = d.conn
	case <-ctx.Done():
		endLife()
		return nil, &DialError{Manager: what, Err: ctx.Err()}
	}
	m := &Manager{conn: conn, sys: first, sig: second, addr: addr, what: what, endLife: endLife, waiters: map[string]map[chan struct{}]bool{}, closed: make(chan struct{})}
	// Signals first, then every read: a change after the read wakes the
	// waiter, one before it is in the read.
	updates := make(chan *sdbus.PropertiesUpdate, 256)
	lost := make(chan error, 1)
	conn.SetPropertiesSubscriber(updates, lost)
	if err := conn.Subscribe(); err != nil {
		conn.Close()
		endLife()
		return nil, &DialError{Manager: what, Err: fmt.Errorf("subscribing to the manager's signals: %w", err)}
	}
	go m.dispatch(updates, lost)
	return m, nil
}

// Describe names the manager, for messages.
func (m *Manager) Describe() string { return m.what }

// Close drops the connection (and with it the references on the units it
// started: a unit that ended is then collected).
func (m *Manager) Close() error {
	m.mu.Lock()
	select {
	case <-m.closed:
	default:
		close(m.closed)
	}
	m.mu.Unlock()
	m.conn.Close()
	m.endLife()
	return nil
}

func (m *Manager) dispatch(updates <-chan *sdbus.PropertiesUpdate, lost <-chan error) {
	for {
		select {
		case u := <-updates:
			m.wake(u.UnitName)
		case <-lost:
			// A signal was dropped (the channel was full): wake every
			// waiter, each reads its unit again.
			m.wake("")
		case <-m.closed:
			return
		}
	}
}

func (m *Manager) wake(unit string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, set := range m.waiters {
		if unit != "" && name != unit {
			continue
		}
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// watch registers a wake-up channel for unit; call the returned function
// to drop it.
func (m *Manager) watch(unit string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	if m.waiters[unit] == nil {
		m.waiters[unit] = map[chan struct{}]bool{}
	}
	m.waiters[unit][ch] = true
	m.mu.Unlock()
	return ch, func() {
		m.mu.Lock()
		delete(m.waiters[unit], ch)
		if len(m.waiters[unit]) == 0 {
			delete(m.waiters, unit)
		}
		m.mu.Unlock()
	}
}

// StartError is a start the manager refused or that failed.
type StartError struct {
	Unit    string
	Manager string
	Err     error
}

func (e *StartError) Error() string {
	return fmt.Sprintf("starting unit %s on %s: %v", e.Unit, e.Manager, e.Err)
}
func (e *StartError) Unwrap() error { return e.Err }

// Start implements lifecycle.Starter: it starts spec as a transient
// service named spec.Unit and returns once the manager has executed the
// command (Type=exec), or the start failed.
//
// When the manager answers the start with an error reply other than
// "the unit exists", nothing was made, and the returned Process (not nil)
// reports the run over at once: its claim may be released. When the start
// job fails (the command could not be executed), the unit exists and is
// failed: the Process reports that. When the call itself fails (the bus
// broke, ctx ended) it cannot be known whether the unit was made: nil
// Process, and the claim stays held.
func (m *Manager) Start(ctx context.Context, spec lifecycle.Spec) (lifecycle.Process, error) {
	if err := unitprobe.ValidateName(spec.Unit); err != nil {
		return nil, err
	}
	if len(spec.Argv) == 0 {
		return nil, errors.New("no command to start")
	}
	argv0 := spec.Argv[0]
	if !strings.Contains(argv0, "/") {
		// The manager's PATH is not the caller's: resolve here, as the
		// caller would expect the command it named.
		if p, err := lookPath(argv0); err == nil {
			argv0 = p
		}
	}
	props := []sdbus.Property{
		sdbus.PropDescription("claimstore writer: " + strings.Join(spec.Argv, " ")),
		// go-systemd passes its bool as ExecStart's ignore-failure flag.
		sdbus.PropExecStart(literalArgv(append([]string{argv0}, spec.Argv[1:]...)), false),
		sdbus.PropType("exec"),
		{Name: "KillMode", Value: dbus.MakeVariant("control-group")},
		{Name: "AddRef", Value: dbus.MakeVariant(true)},
		// A failed run is collected too once nobody references it: its
		// result was read under AddRef, and no failed unit is left behind.
		{Name: "CollectMode", Value: dbus.MakeVariant("inactive-or-failed")},
	}
	if spec.KillAfter > 0 {
		// What is left of the unit after this long from a stop is killed
		// (SIGKILL to its control group), so that a writer that ignores
		// SIGTERM cannot keep a stop waiting beyond it.
		props = append(props, sdbus.Property{Name: "TimeoutStopUSec", Value: dbus.MakeVariant(uint64(spec.KillAfter / time.Microsecond))})
	}
	if len(spec.Env) > 0 {
		props = append(props, sdbus.Property{Name: "Environment", Value: dbus.MakeVariant(spec.Env)})
	}
	if spec.Dir != "" {
		props = append(props, sdbus.Property{Name: "WorkingDirectory", Value: dbus.MakeVariant(spec.Dir)})
	}
	for _, f := range []struct {
		name string
		file *os.File
	}{{"StandardInputFileDescriptor", spec.Stdin}, {"StandardOutputFileDescriptor", spec.Stdout}, {"StandardErrorFileDescriptor", spec.Stderr}} {
		if f.file != nil {
			props = append(props, sdbus.Property{Name: f.name, Value: dbus.MakeVariant(dbus.UnixFD(f.file.Fd()))})
		}
	}
	// Signals are watched from before the start: the unit may end before
	// the job's reply is read.
	job := make(chan string, 1)
	_, err := m.conn.StartTransientUnitContext(ctx, spec.Unit, "fail", props, job)
	if err != nil {
		var de dbus.Error
		if errors.As(err, &de) && de.Name != "org.freedesktop.systemd1.UnitExists" {
			ref := fmt.Sprintf("unit %s not started: %s refused it (%s)", spec.Unit, m.what, de.Name)
			return &notStarted{unit: spec.Unit, ref: ref}, &StartError{Unit: spec.Unit, Manager: m.what, Err: err}
		}
		return nil, &StartError{Unit: spec.Unit, Manager: m.what, Err: err}
	}
	var result string
	select {
	case result = <-job:
	case <-ctx.Done():
		return nil, &StartError{Unit: spec.Unit, Manager: m.what, Err: fmt.Errorf("waiting for the start job: %w", ctx.Err())}
	}
	st, err := m.read(ctx, spec.Unit)
	if err != nil {
		return nil, &StartError{Unit: spec.Unit, Manager: m.what, Err: fmt.Errorf("the start job %s, but the unit cannot be read: %w", result, err)}
	}
	// A job that did not end "done" with an invocation ran: a command that
	// exits at once may fail the unit before the job completes, and one
	// that cannot be executed exits 203 (systemd's EXIT_EXEC). Either way
	// the run is this invocation, and Wait reports how it ended.
	p := &unitProc{m: m, unit: spec.Unit, id: st.invocation, cgroup: st.cgroup}
	if result != "done" && st.invocation == "" {
		// The unit never ran (no invocation): a failed dependency, a
		// cancelled job. It is failed or gone, and Wait reports that.
		return p, &StartError{Unit: spec.Unit, Manager: m.what, Err: fmt.Errorf("the start job ended %q (unit %s/%s, result %s)", result, st.active, st.sub, st.result)}
	}
	return p, nil
}

// UnitInUseError says a unit by the claim's name is already loaded on the
// manager: a start would be refused, with nothing of the writer run.
type UnitInUseError struct {
	Unit, Manager string
	Active, Sub   string // its ActiveState and SubState
}

func (e *UnitInUseError) Error() string {
	return fmt.Sprintf("unit %s is already loaded on %s (%s/%s): another unit has the claim's name (a run of an earlier claim with the same id, or someone else's); stop or reset it (systemctl stop %s; systemctl reset-failed %s) or take the claim with another id", e.Unit, e.Manager, e.Active, e.Sub, e.Unit, e.Unit)
}

// CheckStart implements lifecycle.StartChecker: it refuses a spec whose
// unit the manager has loaded already (a *UnitInUseError), before anything
// is published or started. A unit the manager cannot be asked about is an
// error too: the start would fail the same way.
func (m *Manager) CheckStart(ctx context.Context, spec lifecycle.Spec) error {
	if err := unitprobe.ValidateName(spec.Unit); err != nil {
		return err
	}
	st, err := m.read(ctx, spec.Unit)
	if err != nil {
		return fmt.Errorf("looking unit %s up on %s before starting it: %w", spec.Unit, m.what, err)
	}
	if st.load != "not-found" {
		return &UnitInUseError{Unit: spec.Unit, Manager: m.what, Active: st.active, Sub: st.sub}
	}
	return nil
}

// literalArgv escapes argv for ExecStart: the manager substitutes $VAR and
// ${VAR} in the arguments it executes (from the unit's environment), and
// "$$" stands for a literal "$". A command is run as given, as a shell or
// flock would run it. (Specifiers, %n and the like, are not expanded in a
// command set over the bus.)
func literalArgv(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, "$", "$$")
	}
	return out
}

// lookPath finds name in the caller's PATH.
func lookPath(name string) (string, error) {
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return filepath.Abs(p)
		}
	}
	return "", fs.ErrNotExist
}

// unitState is what the manager says of a unit.
type unitState struct {
	load, active, sub string
	invocation        string // hex, "" for none
	result            string // the service's Result
	code, status      int32  // ExecMainCode (CLD_*), ExecMainStatus
	cgroup            string
}

func (m *Manager) read(ctx context.Context, unit string) (unitState, error) {
	var st unitState
	props, err := m.conn.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return st, err
	}
	st.load, _ = props["LoadState"].(string)
	st.active, _ = props["ActiveState"].(string)
	st.sub, _ = props["SubState"].(string)
	if b, ok := props["InvocationID"].([]byte); ok && len(b) > 0 {
		st.invocation = hex.EncodeToString(b)
	}
	if st.load == "not-found" {
		return st, nil
	}
	sp, err := m.conn.GetUnitTypePropertiesContext(ctx, unit, "Service")
	if err != nil {
		return st, err
	}
	st.result, _ = sp["Result"].(string)
	st.code, _ = sp["ExecMainCode"].(int32)
	st.status, _ = sp["ExecMainStatus"].(int32)
	st.cgroup, _ = sp["ControlGroup"].(string)
	return st, nil
}

// unitProc is one run (invocation) of a unit.
type unitProc struct {
	m      *Manager
	unit   string
	id     string
	cgroup string

	mu      sync.Mutex
	running bool
}

func (p *unitProc) ID() string           { return p.id }
func (p *unitProc) ControlGroup() string { return p.cgroup }

// Running reports whether the run was running when it was last read.
func (p *unitProc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running
}

// NotOverError says a run could not be proven over.
type NotOverError struct {
	Unit, InvocationID string
	Reason             string
}

func (e *NotOverError) Error() string {
	inv := e.InvocationID
	if inv == "" {
		inv = "(none recorded)"
	}
	return fmt.Sprintf("unit %s invocation %s is not proven over: %s", e.Unit, inv, e.Reason)
}

// judge says whether run id of unit is over, from st, and how it ended.
func (m *Manager) judge(unit, id, cgroup string, st unitState) (*lifecycle.Exit, error) {
	name := strings.TrimSuffix(unit, ".service")
	switch {
	case st.load == "not-found" && st.active == "inactive":
		// Not loaded: it ended and was collected, or never ran here. Only
		// its control group, empty or gone, says nothing of it runs.
		if cgroup == "" {
			return nil, &NotOverError{unit, id, fmt.Sprintf("%s does not know the unit, and no control group was recorded to check (an absent unit is an observation, not a proof)", m.what)}
		}
		empty, why := cgroupEmpty(cgroup)
		if !empty {
			return nil, &NotOverError{unit, id, fmt.Sprintf("%s does not know the unit, and its control group %s %s", m.what, cgroup, why)}
		}
		return &lifecycle.Exit{Status: -1, Result: "collected", Ref: fmt.Sprintf("unit %s invocation %s over: not loaded, control group %s", name, orNone(id), why)}, nil
	case id != "" && st.invocation != "" && st.invocation != id:
		return &lifecycle.Exit{Status: -1, Result: "superseded", Ref: fmt.Sprintf("unit %s invocation %s over: invocation %s is the unit's current one", name, id, st.invocation)}, nil
	case st.active == "inactive" || st.active == "failed":
		x := &lifecycle.Exit{Result: st.result}
		switch st.code {
		case 1: // CLD_EXITED
			x.Status = int(st.status)
		case 2, 3: // CLD_KILLED, CLD_DUMPED
			x.Signal = syscall.Signal(st.status)
			x.Status = 128 + int(st.status)
		default:
			if st.result != "success" {
				x.Status = 1
			}
		}
		x.Ref = fmt.Sprintf("unit %s invocation %s result %s status %d", name, orNone(st.invocation), st.result, x.Status)
		return x, nil
	}
	return nil, nil // still runs
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// cgroupEmpty reports whether the control group (a path as systemd's
// ControlGroup property gives it) has no process: its directory is gone
// while its parent exists, or cgroup.events says "populated 0" (v2), or
// cgroup.procs is empty (v1). The second result says what was seen.
func cgroupEmpty(cg string) (bool, string) {
	for _, base := range []string{CgroupRoot, filepath.Join(CgroupRoot, "systemd")} {
		dir := filepath.Join(base, filepath.Clean("/"+cg))
		if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
			continue // not a hierarchy root
		}
		if ev, err := os.ReadFile(filepath.Join(dir, "cgroup.events")); err == nil {
			if strings.Contains(string(ev), "populated 0") {
				return true, "is empty (populated 0)"
			}
			return false, "still has processes (" + dir + "/cgroup.events)"
		}
		if procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			if len(strings.TrimSpace(string(procs))) == 0 {
				return true, "is empty"
			}
			return false, "still has processes (" + dir + "/cgroup.procs)"
		}
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			if _, perr := os.Stat(filepath.Dir(dir)); perr == nil {
				return true, "is gone (" + dir + " does not exist)"
			}
		}
	}
	return false, "cannot be read under " + CgroupRoot
}

// Wait implements lifecycle.Process: it returns once the manager reports
// the run over (see the package's contract), woken by the unit's signals.
func (p *unitProc) Wait(ctx context.Context) (*lifecycle.Exit, error) {
	wake, done := p.m.watch(p.unit)
	defer done()
	for {
		st, err := p.m.read(ctx, p.unit)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if p.m.connLost(err) {
				// The read can meet the end of the connection before the
				// signal connection reports it: the same fact, worded once.
				return nil, &NotOverError{p.unit, p.id, fmt.Sprintf("the connection to %s was lost (the manager or its bus went away): %v", p.m.what, err)}
			}
			return nil, &NotOverError{p.unit, p.id, fmt.Sprintf("reading the unit from %s: %v", p.m.what, err)}
		}
		x, err := p.m.judge(p.unit, p.id, p.cgroup, st)
		if err != nil || x != nil {
			p.mu.Lock()
			p.running = false
			p.mu.Unlock()
			return x, err
		}
		p.mu.Lock()
		p.running = true
		p.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-p.m.closed:
			return nil, &NotOverError{p.unit, p.id, "the connection to " + p.m.what + " was closed"}
		case <-p.m.lost():
			// No more signals will come: say so rather than wait forever.
			return nil, &NotOverError{p.unit, p.id, "the connection to " + p.m.what + " was lost (the manager or its bus went away)"}
		}
	}
}

// Stop implements lifecycle.Process: it asks the manager to stop the unit
// (every process of its control group) and returns once the stop job is
// queued; Wait reports the end.
func (p *unitProc) Stop(ctx context.Context) error {
	_, err := p.m.conn.StopUnitContext(ctx, p.unit, "replace", nil)
	var de dbus.Error
	if errors.As(err, &de) && de.Name == "org.freedesktop.systemd1.NoSuchUnit" {
		return nil
	}
	return err
}

// Attach implements lifecycle.Attacher: the recorded run, while it still
// runs (the same InvocationID; with none recorded, the unit's current run,
// since the unit is the claim's own), or a run that is over, or an error
// when the manager's answer proves neither.
func (m *Manager) Attach(ctx context.Context, rec lifecycle.Recorded) (lifecycle.Process, error) {
	if err := unitprobe.ValidateName(rec.Unit); err != nil {
		return nil, err
	}
	// A reference first, as Start's AddRef: the unit then stays loaded,
	// with its result, after it ends. A unit not loaded cannot be
	// referenced; it is judged from its control group below.
	m.ref(ctx, rec.Unit)
	st, err := m.read(ctx, rec.Unit)
	if err != nil {
		return nil, &NotOverError{rec.Unit, rec.InvocationID, fmt.Sprintf("reading the unit from %s: %v", m.what, err)}
	}
	cg := rec.ControlGroup
	if cg == "" {
		cg = st.cgroup
	}
	x, err := m.judge(rec.Unit, rec.InvocationID, cg, st)
	if err != nil {
		return nil, err
	}
	if x != nil {
		return &overProc{id: orNone(rec.InvocationID), exit: x}, nil
	}
	id := rec.InvocationID
	if id == "" {
		id = st.invocation
	}
	return &unitProc{m: m, unit: rec.Unit, id: id, cgroup: cg, running: true}, nil
}

// connLost reports whether err (from a call on the connection) means the
// connection itself ended: its end of file, a reset or a broken pipe, or
// the signal connection's context already done.
func (m *Manager) connLost(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	select {
	case <-m.lost():
		return true
	default:
		return false
	}
}

// lost is closed when the signal connection ends (never, if unknown).
func (m *Manager) lost() <-chan struct{} {
	if m.sig == nil {
		return nil
	}
	return m.sig.Context().Done()
}

// ref takes a reference on a loaded unit for this connection (Unit.Ref).
// Failing to is not an error: without it the unit may be collected once it
// ends, and its end is then proven by its control group instead.
func (m *Manager) ref(ctx context.Context, unit string) {
	if m.sys == nil {
		return
	}
	var path dbus.ObjectPath
	if err := m.sys.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").CallWithContext(ctx, "org.freedesktop.systemd1.Manager.GetUnit", 0, unit).Store(&path); err != nil {
		return
	}
	m.sys.Object("org.freedesktop.systemd1", path).CallWithContext(ctx, "org.freedesktop.systemd1.Unit.Ref", 0)
}

// overProc is a run already proven over.
type overProc struct {
	id   string
	exit *lifecycle.Exit
}

func (p *overProc) ID() string                                    { return p.id }
func (p *overProc) Wait(context.Context) (*lifecycle.Exit, error) { return p.exit, nil }
func (p *overProc) Stop(context.Context) error                    { return nil }

// notStarted is a start the manager refused: nothing was made.
type notStarted struct{ unit, ref string }

func (p *notStarted) ID() string { return "" }
func (p *notStarted) Wait(context.Context) (*lifecycle.Exit, error) {
	return &lifecycle.Exit{Status: 1, Result: "not-started", Ref: p.ref}, nil
}
func (p *notStarted) Stop(context.Context) error { return nil }
