package unitprobe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// State is the answer of a lookup.
type State string

const (
	// Absent: the manager says it does not know the unit now (LoadState
	// not-found, inactive, no job). An observation, not a proof.
	Absent State = "absent"
	// Present: the manager knows the unit; see LoadState, ActiveState,
	// SubState and MainPID.
	Present State = "present"
	// Unknown: no answer (no manager reachable, timeout, permission, any
	// other error). Callers treat it as Present.
	Unknown State = "unknown"
)

// Result is the answer for one unit.
type Result struct {
	// Name is the unit name that was looked up.
	Name  string
	State State
	// LoadState, ActiveState and SubState are systemd's words, set when
	// the manager answered (State Absent or Present).
	LoadState, ActiveState, SubState string
	// MainPID is the main process of a Present service, 0 when it has
	// none or for other unit types. It is read by a second call after the
	// states, so it may belong to a slightly later moment.
	MainPID uint32
	// Reason says in words what was seen, for an operator.
	Reason string
	// Err is the cause when State is Unknown, or why a detail (MainPID) of
	// a Present answer is missing; nil otherwise.
	Err error
}

// DefaultTimeout bounds a lookup when Options.Timeout is zero, so that no
// lookup is unbounded even under context.Background().
const DefaultTimeout = 5 * time.Second

// Options chooses the manager to ask. A nil *Options means the system
// manager with the default address and DefaultTimeout.
type Options struct {
	// User asks the calling user's manager (systemd --user) instead of the
	// system manager.
	User bool
	// Address is an explicit D-Bus message bus address, for example
	// "unix:path=/run/user/0/bus". Empty means the default: for the system
	// manager $DBUS_SYSTEM_BUS_ADDRESS or unix:path=/run/dbus/system_bus_socket;
	// for a user manager $DBUS_SESSION_BUS_ADDRESS, else
	// $XDG_RUNTIME_DIR/bus, else /run/user/<uid>/bus. It must be a message
	// bus (the connection says Hello), not systemd's private socket.
	Address string
	// Timeout bounds each lookup on top of the caller's context; zero means
	// DefaultTimeout, negative means only the context bounds it.
	Timeout time.Duration
}

// Lookup asks the manager chosen by opts about one unit, on a connection of
// its own that it closes before returning. The error is non-nil only for an
// invalid unit name (see ValidateName), and then nothing was asked; every
// other failure is a Result with State Unknown and Err set. Lookup returns
// by the earlier of ctx's deadline and the timeout of opts, whatever the bus
// does. To look up many units, use a Prober.
func Lookup(ctx context.Context, name string, opts *Options) (Result, error) {
	p := NewProber(opts)
	defer p.Close()
	return p.Lookup(ctx, name)
}

// Prober looks up units over one connection, made on first use and made
// again after it broke or a lookup on it timed out. Its methods are safe for
// concurrent use; lookups in flight share the connection, and a lookup that
// times out drops it, so the others in flight on it at that moment answer
// Unknown too.
type Prober struct {
	opts    Options
	addr    string
	addrErr error
	what    string // "system manager" or "user manager", for reasons

	sem    chan struct{} // guards conn/cancel; a channel so waiting honours ctx
	conn   *sdbus.Conn
	cancel context.CancelFunc // ends conn's lifetime context
	closed bool
}

// NewProber returns a Prober for the manager chosen by opts (nil: system
// manager). It does not connect; the first lookup does.
func NewProber(opts *Options) *Prober {
	p := &Prober{sem: make(chan struct{}, 1), what: "system manager"}
	if opts != nil {
		p.opts = *opts
	}
	if p.opts.User {
		p.what = "user manager"
	}
	p.addr, p.addrErr = busAddress(p.opts)
	return p
}

// Address is the bus address the Prober uses ("" when none could be
// determined).
func (p *Prober) Address() string { return p.addr }

// Close drops the connection. Lookups after Close answer Unknown.
func (p *Prober) Close() error {
	p.sem <- struct{}{}
	defer func() { <-p.sem }()
	p.closed = true
	p.dropLocked()
	return nil
}

func busAddress(o Options) (string, error) {
	addr := o.Address
	if addr == "" {
		if o.User {
			addr = os.Getenv("DBUS_SESSION_BUS_ADDRESS")
			if addr == "" {
				dir := os.Getenv("XDG_RUNTIME_DIR")
				if dir == "" {
					dir = "/run/user/" + strconv.Itoa(os.Getuid())
				}
				addr = "unix:path=" + dir + "/bus"
			}
		} else {
			addr = os.Getenv("DBUS_SYSTEM_BUS_ADDRESS")
			if addr == "" {
				addr = "unix:path=/run/dbus/system_bus_socket"
			}
		}
	}
	// autolaunch would start a bus daemon from a probe; a probe only looks.
	if strings.Contains(addr, "autolaunch:") {
		return "", fmt.Errorf("bus address %q asks for autolaunch, which a probe does not do", addr)
	}
	return addr, nil
}

// Lookup asks about one unit; see the package function Lookup for the
// contract.
func (p *Prober) Lookup(ctx context.Context, name string) (Result, error) {
	rs, err := p.LookupMany(ctx, []string{name})
	if err != nil {
		return Result{}, err
	}
	return rs[0], nil
}

// maxBatch bounds the names sent in one ListUnitsByNames call, so that one
// message stays far below the bus's size limits.
const maxBatch = 256

// LookupMany asks about many units at once (in batches, one round trip per
// batch plus one per Present service for its MainPID) and returns one
// Result per name, in order. The error is non-nil only when a name is
// invalid, and then nothing was asked. The whole call is bounded like
// Lookup: names not answered by the deadline are Unknown.
func (p *Prober) LookupMany(ctx context.Context, names []string) ([]Result, error) {
	for _, n := range names {
		if err := ValidateName(n); err != nil {
			return nil, err
		}
	}
	timeout := p.opts.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if p.addrErr != nil {
		return unknownAll(names, p.addrErr, "no bus address for the "+p.what+": "+p.addrErr.Error()), nil
	}

	// The work runs aside so that nothing the bus does (a dial or write
	// that blocks, a reply that never comes) can hold the caller past ctx.
	var used atomic.Pointer[sdbus.Conn]
	done := make(chan []Result, 1)
	go func() { done <- p.lookup(ctx, names, &used) }()
	select {
	case rs := <-done:
		return rs, nil
	case <-ctx.Done():
		// Closing the connection also unblocks the goroutine. Asynchronously:
		// drop may wait for another lookup's dial, bounded by its own ctx.
		if c := used.Load(); c != nil {
			go p.drop(c)
		}
		return unknownAll(names, ctx.Err(), p.timeoutReason(ctx)), nil
	}
}

func (p *Prober) timeoutReason(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Sprintf("the %s at %s did not answer before the deadline", p.what, p.addr)
	}
	return fmt.Sprintf("lookup on the %s at %s was cancelled", p.what, p.addr)
}

func (p *Prober) lookup(ctx context.Context, names []string, used *atomic.Pointer[sdbus.Conn]) []Result {
	conn, err := p.connect(ctx)
	if err != nil {
		reason := fmt.Sprintf("cannot reach the %s at %s: %v", p.what, p.addr, err)
		if ctx.Err() != nil {
			reason = p.timeoutReason(ctx)
			err = fmt.Errorf("%w (while connecting: %v)", ctx.Err(), err)
		}
		return unknownAll(names, err, reason)
	}
	used.Store(conn)
	out := make([]Result, 0, len(names))
	for len(names) > 0 {
		batch := names[:min(len(names), maxBatch)]
		names = names[len(batch):]
		rs, err := p.lookupBatch(ctx, conn, batch)
		if err != nil {
			if !isManagerError(err) {
				// The transport failed or ctx ended mid-call: the
				// connection is in an unknown state, start afresh next time.
				go p.drop(conn)
			}
			out = append(out, unknownAll(batch, err, p.errorReason(ctx, err))...)
			out = append(out, unknownAll(names, err, p.errorReason(ctx, err))...)
			return out
		}
		out = append(out, rs...)
	}
	return out
}

func (p *Prober) lookupBatch(ctx context.Context, conn *sdbus.Conn, names []string) ([]Result, error) {
	// ListUnitsByNames loads every name, so it answers for units that are
	// not loaded too (LoadState not-found), in the order asked.
	sts, err := conn.ListUnitsByNamesContext(ctx, names)
	if err != nil {
		return nil, err
	}
	if len(sts) != len(names) {
		return nil, fmt.Errorf("the %s answered %d units for %d names", p.what, len(sts), len(names))
	}
	out := make([]Result, len(names))
	for i, st := range sts {
		r := Result{Name: names[i], LoadState: st.LoadState, ActiveState: st.ActiveState, SubState: st.SubState}
		// A unit whose file was removed while it ran stays not-found but
		// active; only a not-found unit with nothing running or queued is
		// one the manager does not know.
		if st.LoadState == "not-found" && st.ActiveState == "inactive" && st.JobId == 0 {
			r.State = Absent
			r.Reason = fmt.Sprintf("the %s does not know unit %s (not-found, inactive)", p.what, names[i])
			out[i] = r
			continue
		}
		r.State = Present
		if strings.HasSuffix(names[i], ".service") {
			prop, err := conn.GetServicePropertyContext(ctx, names[i], "MainPID")
			if err == nil {
				if pid, ok := prop.Value.Value().(uint32); ok {
					r.MainPID = pid
				} else {
					err = fmt.Errorf("MainPID is %s, not a uint32", prop.Value.Signature())
				}
			}
			if err != nil {
				r.Err = fmt.Errorf("reading MainPID: %w", err)
			}
		}
		r.Reason = presentReason(p.what, r)
		out[i] = r
	}
	return out, nil
}

func presentReason(what string, r Result) string {
	s := fmt.Sprintf("the %s has unit %s: %s, %s (%s)", what, r.Name, r.LoadState, r.ActiveState, r.SubState)
	switch {
	case r.Err != nil:
		s += "; main pid unknown: " + r.Err.Error()
	case r.MainPID != 0:
		s += fmt.Sprintf(", main pid %d", r.MainPID)
	}
	return s
}

// isManagerError reports whether err is an error reply from the other end,
// after which the connection itself is still sound.
func isManagerError(err error) bool {
	var derr dbus.Error
	var pderr *dbus.Error
	return errors.As(err, &derr) || errors.As(err, &pderr)
}

func (p *Prober) errorReason(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		return p.timeoutReason(ctx)
	}
	var name string
	var derr dbus.Error
	var pderr *dbus.Error
	switch {
	case errors.As(err, &derr):
		name = derr.Name
	case errors.As(err, &pderr):
		name = pderr.Name
	}
	switch name {
	case "org.freedesktop.DBus.Error.AccessDenied", "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired":
		return fmt.Sprintf("the %s at %s refused the lookup: %v", p.what, p.addr, err)
	case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner":
		return fmt.Sprintf("no systemd %s on the bus at %s: %v", p.what, p.addr, err)
	}
	return fmt.Sprintf("lookup on the %s at %s failed: %v", p.what, p.addr, err)
}

func unknownAll(names []string, err error, reason string) []Result {
	out := make([]Result, len(names))
	for i, n := range names {
		out[i] = Result{Name: n, State: Unknown, Reason: reason, Err: err}
	}
	return out
}

// connect returns the live connection, dialling one if needed, bounded by
// ctx.
func (p *Prober) connect(ctx context.Context) (*sdbus.Conn, error) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-p.sem }()
	if p.closed {
		return nil, errors.New("prober is closed")
	}
	if p.conn != nil && p.conn.Connected() {
		return p.conn, nil
	}
	p.dropLocked()
	conn, cancel, err := dial(ctx, p.addr)
	if err != nil {
		return nil, err
	}
	p.conn, p.cancel = conn, cancel
	return conn, nil
}

// dial connects to the bus at addr. The connection lives until its cancel
// function is called, but while dialling it is also ended by ctx: godbus
// closes a connection when its context ends, which is what unblocks a
// handshake or Hello that the other end never answers.
func dial(ctx context.Context, addr string) (*sdbus.Conn, context.CancelFunc, error) {
	life, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	conn, err := sdbus.NewConnection(func() (*dbus.Conn, error) { return DialBus(life, addr) })
	if !stop() {
		// ctx ended while dialling: life is cancelled, so conn (if any)
		// is already closing.
		if conn != nil {
			conn.Close()
		}
		if err == nil {
			err = ctx.Err()
		}
		return nil, nil, err
	}
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return conn, cancel, nil
}

// drop closes c if it is still the Prober's connection.
func (p *Prober) drop(c *sdbus.Conn) {
	p.sem <- struct{}{}
	defer func() { <-p.sem }()
	if p.conn == c {
		p.dropLocked()
	}
}

func (p *Prober) dropLocked() {
	if p.conn != nil {
		p.conn.Close()
		p.cancel()
		p.conn, p.cancel = nil, nil
	}
}

// BusAddress is the bus address a Prober for opts (nil: the system manager)
// uses, or why there is none. Package unitctl dials the same address, so
// that the manager a writer is started on is the one classify asks.
func BusAddress(opts *Options) (string, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	return busAddress(o)
}

// DialBus opens one connection to the bus at addr, authenticated and
// greeted (Hello), that lives until life ends: what go-systemd's
// NewConnection asks of its dial function, for this package and unitctl.
func DialBus(life context.Context, addr string) (*dbus.Conn, error) {
	c, err := dbus.Dial(addr, dbus.WithContext(life))
	if err != nil {
		return nil, err
	}
	// EXTERNAL with the numeric uid, as go-systemd does: no user database
	// lookup, and the only method systemd's buses accept from a local
	// peer anyway.
	if err := c.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.Hello(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
