package hostid

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// State is the judgement of a recorded owner.
type State string

const (
	// Live: same boot, the pid exists and its start time matches the record.
	Live State = "live"
	// Gone: another boot, no such pid, or a pid whose start time differs
	// (the number was reused). Gone is the only state that is proof.
	Gone State = "gone"
	// Unknown: anything that cannot be decided. Callers treat it as live.
	Unknown State = "unknown"
	// Invalid: the recorded owner is malformed. Callers treat it as live.
	Invalid State = "invalid"
)

// Owner is a recorded process identity, in the form the claim record keeps
// (owner.pid, owner.start, owner.boot). Start is the process start time in
// clock ticks since boot as a decimal string; "" means not recorded. Boot is
// the boot id the process ran under; "" means not recorded.
type Owner struct {
	PID   int
	Start string
	Boot  string
}

// Host presents the facts of one machine. System is the real one; tests wrap
// it to present another boot or another machine.
type Host interface {
	// MachineID returns the machine id: 32 lowercase hex digits.
	MachineID() (string, error)
	// BootID returns the current boot id (a lowercase UUID).
	BootID() (string, error)
	// StartTime returns field 22 of /proc/<pid>/stat as a decimal string.
	// The error wraps fs.ErrNotExist when there is no /proc entry for pid.
	StartTime(pid int) (string, error)
	// Signal0 probes pid with signal 0: nil or an error wrapping
	// unix.EPERM means the pid exists; unix.ESRCH means it does not.
	Signal0(pid int) error
}

// System is the Host of the running machine.
var System Host = systemHost{}

type systemHost struct{}

var (
	machineIDRe = regexp.MustCompile(`^[0-9a-f]{32}$`)
	bootIDRe    = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// MachineIDFiles are read in order by System.MachineID.
var MachineIDFiles = []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}

// BootIDFile is read by System.BootID.
const BootIDFile = "/proc/sys/kernel/random/boot_id"

func (systemHost) MachineID() (string, error) {
	var firstErr error
	for _, name := range MachineIDFiles {
		id, err := readID(name, machineIDRe)
		if err == nil {
			return id, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return "", firstErr
}

func (systemHost) BootID() (string, error) { return readID(BootIDFile, bootIDRe) }

func readID(name string, re *regexp.Regexp) (string, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if !re.MatchString(id) {
		return "", &fs.PathError{Op: "parse", Path: name, Err: fmt.Errorf("malformed id %q", id)}
	}
	return id, nil
}

func (systemHost) StartTime(pid int) (string, error) {
	name := "/proc/" + strconv.Itoa(pid) + "/stat"
	b, err := os.ReadFile(name)
	if err != nil {
		return "", err
	}
	return parseStartTime(name, string(b))
}

// parseStartTime reads field 22 of a /proc/<pid>/stat line. The command
// name (field 2) is in parentheses and may itself hold spaces and
// parentheses, so fields are counted from the last ')'.
func parseStartTime(name, stat string) (string, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return "", &fs.PathError{Op: "parse", Path: name, Err: errors.New("no command name")}
	}
	rest := strings.Fields(stat[i+1:])
	// rest[0] is field 3 (state); field 22 is rest[19].
	if len(rest) < 20 {
		return "", &fs.PathError{Op: "parse", Path: name, Err: errors.New("too few fields")}
	}
	if _, err := strconv.ParseUint(rest[19], 10, 64); err != nil {
		return "", &fs.PathError{Op: "parse", Path: name, Err: fmt.Errorf("start time %q", rest[19])}
	}
	return rest[19], nil
}

func (systemHost) Signal0(pid int) error { return unix.Kill(pid, 0) }

// Self returns the identity of the calling process on h.
func Self(h Host) (Owner, error) {
	pid := os.Getpid()
	start, err := h.StartTime(pid)
	if err != nil {
		return Owner{}, err
	}
	boot, err := h.BootID()
	if err != nil {
		return Owner{}, err
	}
	return Owner{PID: pid, Start: start, Boot: boot}, nil
}

// Judge decides the state of a recorded owner on h, with the reason. It
// fails closed: whatever it cannot decide is Unknown.
func Judge(h Host, o Owner) (State, string) {
	if o.PID <= 0 {
		return Invalid, fmt.Sprintf("recorded pid %d is not a process id", o.PID)
	}
	if o.Start != "" {
		if _, err := strconv.ParseUint(o.Start, 10, 64); err != nil {
			return Invalid, fmt.Sprintf("recorded start %q is not a decimal tick count", o.Start)
		}
	}
	boot, err := h.BootID()
	if err != nil {
		return Unknown, "cannot read this boot's id: " + err.Error()
	}
	if o.Boot != "" && o.Boot != boot {
		return Gone, fmt.Sprintf("recorded under boot %s; this is boot %s", o.Boot, boot)
	}
	start, err := h.StartTime(o.PID)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return Unknown, fmt.Sprintf("cannot read pid %d: %v", o.PID, err)
		}
		switch perr := h.Signal0(o.PID); {
		case errors.Is(perr, unix.ESRCH):
			return Gone, fmt.Sprintf("no process %d", o.PID)
		case perr == nil || errors.Is(perr, unix.EPERM):
			return Unknown, fmt.Sprintf("pid %d exists but its start time is unreadable", o.PID)
		default:
			return Unknown, fmt.Sprintf("probing pid %d: %v", o.PID, perr)
		}
	}
	if o.Start == "" {
		return Unknown, fmt.Sprintf("pid %d exists and no start time was recorded", o.PID)
	}
	if start != o.Start {
		return Gone, fmt.Sprintf("pid %d was reused: started at tick %s, recorded %s", o.PID, start, o.Start)
	}
	return Live, fmt.Sprintf("pid %d is running (started at tick %s)", o.PID, start)
}
