package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/unitprobe"
)

// unitFlags choose the service manager classify asks about claims' units.
type unitFlags struct {
	mode    string
	bus     string
	timeout time.Duration
}

const (
	unitsAuto   = "auto"
	unitsUser   = "user"
	unitsSystem = "system"
	unitsNone   = "none"
)

func (u *unitFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&u.mode, "units", unitsAuto, "the service manager to ask about claims' units, `MODE`: auto (the system manager for root, the user manager for others), user, system, or none (every unit unknown: nothing is freed on a unit observation)")
	fs.StringVar(&u.bus, "bus", "", "the D-Bus message bus `address` of that manager (default: the manager's usual bus, see REFERENCE.md)")
	fs.DurationVar(&u.timeout, "unit-timeout", unitprobe.DefaultTimeout, "bound on each unit lookup; a lookup that times out is unknown")
}

// validate checks the flags before anything is touched.
func (u *unitFlags) validate(c *common) error {
	switch u.mode {
	case unitsAuto, unitsUser, unitsSystem, unitsNone:
	default:
		return usagef("--units %s: want auto, user, system or none", quotePrefix(u.mode))
	}
	if c.set["bus"] {
		if u.mode == unitsNone {
			return usagef("--bus %s with --units none: nothing would be asked; drop one", quotePrefix(u.bus))
		}
		if u.bus == "" || !strings.Contains(u.bus, ":") {
			return usagef("--bus %s: want a D-Bus address such as unix:path=/run/user/0/bus", quotePrefix(u.bus))
		}
	}
	if u.timeout <= 0 {
		return usagef("--unit-timeout %v: want a positive duration such as 5s", u.timeout)
	}
	return nil
}

// user reports whether the chosen manager is a user manager.
func (u *unitFlags) user() bool {
	switch u.mode {
	case unitsUser:
		return true
	case unitsSystem:
		return false
	}
	return os.Geteuid() != 0
}

// describe names the manager asked, for messages.
func (u *unitFlags) describe(p *unitprobe.Prober) string {
	if u.mode == unitsNone {
		return "no service manager (--units none)"
	}
	what := "the system manager"
	if u.user() {
		what = "the user manager"
	}
	if addr := p.Address(); addr != "" {
		what += " at " + addr
	}
	return what
}

// lookup returns the claimstore.UnitLookup the flags choose, or nil for
// --units none, and a function to release it.
func (u *unitFlags) lookup() (*unitLookup, func()) {
	if u.mode == unitsNone {
		return nil, func() {}
	}
	p := unitprobe.NewProber(&unitprobe.Options{User: u.user(), Address: u.bus, Timeout: u.timeout})
	l := &unitLookup{p: p}
	l.manager = u.describe(p)
	return l, func() { p.Close() }
}

// unitLookup adapts a unitprobe.Prober to claimstore.UnitLookup. Every
// answer that is not a clear absent or present is unknown: fail closed.
type unitLookup struct {
	p       *unitprobe.Prober
	manager string
}

// systemdName is the name systemd knows a recorded unit by: the reference
// records "mosaic-chat-<claim id>" without a type, which systemd (like
// systemctl) reads as a service.
func systemdName(name string) string {
	if unitprobe.ValidateName(name) == nil {
		return name
	}
	if dot := strings.LastIndexByte(name, '.'); dot < 0 || unitprobe.ValidateName(name+".service") == nil {
		return name + ".service"
	}
	return name
}

func (l *unitLookup) LookupUnit(ctx context.Context, name string) claimstore.UnitObservation {
	obs := claimstore.UnitObservation{Name: name, State: claimstore.UnitUnknown}
	sys := systemdName(name)
	r, err := l.p.Lookup(ctx, sys)
	if err != nil {
		obs.Detail = fmt.Sprintf("%s cannot name a systemd unit: %v", name, err)
		return obs
	}
	switch r.State {
	case unitprobe.Absent:
		obs.State = claimstore.UnitAbsent
	case unitprobe.Present:
		obs.State = claimstore.UnitPresent
	}
	obs.Detail = fmt.Sprintf("%s on %s: %s", sys, l.manager, r.Reason)
	if r.State == unitprobe.Present {
		obs.Detail = fmt.Sprintf("%s on %s: %s/%s/%s", sys, l.manager, r.LoadState, r.ActiveState, r.SubState)
		if r.MainPID != 0 {
			obs.Detail += fmt.Sprintf(", main pid %d", r.MainPID)
		}
	}
	return obs
}

// proofPath is where the store keeps a boot proof.
func proofPath(root, id string) string { return rootJoin(root, claimstore.ProofDir, id+".json") }
