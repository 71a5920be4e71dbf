package hostid

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/claimstore/claimstore/internal/safefile"
)

// State is the judgement of a recorded owner.
type State string

const (
	// Live: same boot and PID namespace, the pid exists, its start time
	// matches the record and it is not a zombie. An observation: the
	// process may exit right after it was made.
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
// (owner.pid, owner.start, owner.boot, owner.pidns). Start is the process
// start time in clock ticks since boot as a decimal string; "" means not
// recorded. Boot is the boot id the process ran under; "" means not
// recorded. PIDNS is the PID namespace PID is a number of, as
// Host.PIDNamespace spells it ("<dev>:<ino>"); "" means not recorded, which
// Judge reads as the initial PID namespace (the one records were written in
// before the namespace was recorded), and so only judges from there.
type Owner struct {
	PID   int
	Start string
	Boot  string
	PIDNS string
}

// Host presents the facts of one machine. System is the real one; tests wrap
// it to present another boot or another machine (see Override).
//
// Implementations must be safe for concurrent use.
type Host interface {
	// MachineID returns the machine id: 32 lowercase hex digits.
	MachineID() (string, error)
	// BootID returns the current boot id (a lowercase UUID).
	BootID() (string, error)
	// StartTime returns field 22 of /proc/<pid>/stat as a decimal string.
	// The error wraps fs.ErrNotExist when there is no /proc entry for pid.
	StartTime(pid int) (string, error)
	// ProcState returns field 3 of /proc/<pid>/stat: the one-letter state
	// of the process ('R', 'S', 'Z' for a zombie, ...). The error wraps
	// fs.ErrNotExist when there is no /proc entry for pid.
	ProcState(pid int) (byte, error)
	// PIDNamespace returns the identity of a PID namespace as
	// "<dev>:<ino>", the device and inode numbers (decimal) of the
	// namespace file: the caller's own namespace when pid is 0 or
	// os.Getpid(), else the namespace of process pid as the caller's /proc
	// shows it. Device and inode together identify a namespace for the
	// life of the boot (namespaces(7)); compare ids only under the same boot
	// id. An error (no such process, permission, no namespace files, or a
	// /proc mounted for another PID namespace than the caller's) means the
	// namespace is not known: never guess one.
	PIDNamespace(pid int) (string, error)
	// Signal0 probes pid with signal 0: nil or an error wrapping
	// unix.EPERM means the pid exists; unix.ESRCH means it does not.
	Signal0(pid int) error
}

// System is the Host of the running machine. It reads MachineIDFiles at
// every call, and BootIDFile once per process (see systemHost.BootID).
var System Host = systemHost{}

// MachineIDFiles are read in order by System.MachineID: the first file that
// holds a well-formed id wins. Treat it as read-only; to read other files,
// use FromFiles.
var MachineIDFiles = []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}

// BootIDFile is read by System.BootID.
const BootIDFile = "/proc/sys/kernel/random/boot_id"

// FromFiles returns a Host that reads the machine id from machineIDFiles (in
// order, first well-formed one wins) and the boot id from bootIDFile, and
// otherwise behaves like System (process facts come from this machine's
// /proc and kill(2)). It exists for tests of the id parsing and for hosts
// that keep these files elsewhere. A nil machineIDFiles or an empty
// bootIDFile means the System default. The slice is copied.
func FromFiles(machineIDFiles []string, bootIDFile string) Host {
	h := systemHost{bootIDFile: bootIDFile}
	if machineIDFiles != nil {
		h.machineIDFiles = append([]string{}, machineIDFiles...)
		h.fixedFiles = true
	}
	return h
}

// systemHost reads this machine. The zero value is System.
type systemHost struct {
	machineIDFiles []string
	fixedFiles     bool // machineIDFiles was given, even if empty
	bootIDFile     string
}

// The id forms are checked by hand rather than by regular expressions,
// which a process would otherwise compile at start-up, on every claimctl
// call.

// isLowerHex reports whether s is n lowercase hex digits.
func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// isBootID reports whether s is a lowercase UUID: 8-4-4-4-12 hex digits.
func isBootID(s string) bool {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return false
	}
	return isLowerHex(s[0:8], 8) && isLowerHex(s[9:13], 4) && isLowerHex(s[14:18], 4) && isLowerHex(s[19:23], 4) && isLowerHex(s[24:], 12)
}

func isMachineID(s string) bool { return isLowerHex(s, 32) }

// maxPID is the kernel's PID_MAX_LIMIT: pid_max is at most this, and pids are
// allocated below pid_max, so a recorded pid of maxPID or more is malformed
// rather than merely absent.
const maxPID = 1 << 22

// maxIDFile bounds how much of an id file is read; a real one is 33 or 37
// bytes, and a file much longer than that is malformed whatever it holds.
const maxIDFile = 256

func (h systemHost) MachineID() (string, error) {
	files := MachineIDFiles
	if h.fixedFiles {
		files = h.machineIDFiles
	}
	if len(files) == 0 {
		return "", errors.New("hostid: no machine-id files configured")
	}
	var errs []error
	for _, name := range files {
		id, err := readID(name, isMachineID)
		if err == nil {
			return id, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 1 {
		return "", errs[0]
	}
	// Every file is named: an operator fixing this needs to know that the
	// fallback was tried too, and why it did not help.
	return "", errors.Join(errs...)
}

// BootID reads the kernel's boot id once per process, and any other boot
// id file (FromFiles) at every call. The kernel's cannot change while this
// process runs (a reboot ends it), and it used to be read several times
// per classified pair (the owner's judgement, the boot proof, the writer's
// own identity): three opens, reads and poller registrations of a /proc
// file per pair, 30,000 for a classify --all of 10,000 pairs. A failed
// read is not remembered: the next call reads again.
func (h systemHost) BootID() (string, error) {
	name := h.bootIDFile
	if name == "" {
		name = BootIDFile
	}
	if name != BootIDFile {
		return readID(name, isBootID)
	}
	bootMemo.Lock()
	defer bootMemo.Unlock()
	if bootMemo.id != "" {
		return bootMemo.id, nil
	}
	id, err := readID(name, isBootID)
	if err == nil {
		bootMemo.id = id
	}
	return id, err
}

// bootMemo is this process's boot id, once read from BootIDFile.
var bootMemo struct {
	sync.Mutex
	id string
}

// readIDFile reads an id file: safefile's bounded, non-blocking read of a
// regular file. A variable so that tests can count the reads.
var readIDFile = func(name string) ([]byte, error) {
	return safefile.ReadFile(name, maxIDFile, &safefile.Options{Follow: true})
}

// readID reads a one-line id file. Only the exact form systemd and the
// kernel write is accepted (the id, optionally one trailing newline):
// a lenient reader would turn "UNINITIALIZED" or an uppercase copy into an
// id that compares unequal to the real one, and an unequal boot id is read
// as proof that a process is gone.
func readID(name string, valid func(string) bool) (string, error) {
	// A FIFO or a device where the id belongs must not hang every command.
	b, err := readIDFile(name)
	if err != nil {
		return "", err
	}
	if len(b) > maxIDFile {
		return "", &fs.PathError{Op: "parse", Path: name, Err: errors.New("id file too long")}
	}
	id := strings.TrimSuffix(string(b), "\n")
	if !valid(id) {
		return "", &fs.PathError{Op: "parse", Path: name, Err: fmt.Errorf("malformed id %q", id)}
	}
	return id, nil
}

func (systemHost) StartTime(pid int) (string, error) {
	st, err := readStat(pid)
	return st.start, err
}

func (systemHost) ProcState(pid int) (byte, error) {
	st, err := readStat(pid)
	return st.state, err
}

// procStat is what Judge needs of one /proc/<pid>/stat line.
type procStat struct {
	state byte   // field 3
	start string // field 22
}

// maxStatLine bounds a read of /proc/<pid>/stat, whose line is a few
// hundred bytes (the command name is at most 16 of them).
const maxStatLine = 1 << 16

func readStat(pid int) (procStat, error) {
	name := "/proc/" + strconv.Itoa(pid) + "/stat"
	// Through a bare descriptor (safefile): os.ReadFile's *os.File adds a
	// second fstat and a poller registration and removal to every
	// judgement and every identity taken (each acquire reads its owner's).
	b, err := safefile.ReadFile(name, maxStatLine, &safefile.Options{Follow: true})
	if err != nil {
		return procStat{}, err
	}
	if len(b) > maxStatLine {
		return procStat{}, &fs.PathError{Op: "parse", Path: name, Err: errors.New("stat line too long")}
	}
	return parseStat(name, pid, string(b))
}

// parseStartTime reads field 22 of a /proc/<pid>/stat line.
func parseStartTime(name string, pid int, stat string) (string, error) {
	st, err := parseStat(name, pid, stat)
	return st.start, err
}

// parseStat reads fields 3 and 22 of a /proc/<pid>/stat line. The command
// name (field 2) is in parentheses and may itself hold spaces, parentheses
// and even newlines (a process can name itself anything but NUL), so the
// fields are counted from the last ')': nothing after the command name can
// contain one.
func parseStat(name string, pid int, stat string) (procStat, error) {
	bad := func(format string, args ...any) (procStat, error) {
		return procStat{}, &fs.PathError{Op: "parse", Path: name, Err: fmt.Errorf(format, args...)}
	}
	prefix := strconv.Itoa(pid) + " ("
	if !strings.HasPrefix(stat, prefix) {
		return bad("line does not start with %q", prefix)
	}
	i := strings.LastIndexByte(stat, ')')
	if i < len(prefix)-1 {
		return bad("no end of command name")
	}
	rest := strings.Fields(stat[i+1:])
	// rest[0] is field 3 (state); field 22 is rest[19].
	if len(rest) < 20 {
		return bad("%d fields after the command name, want at least 20", len(rest))
	}
	if c := rest[0]; len(c) != 1 || !('A' <= c[0] && c[0] <= 'Z' || 'a' <= c[0] && c[0] <= 'z') {
		return bad("state %q is not one letter", rest[0])
	}
	if !canonicalUint(rest[19]) {
		return bad("start time %q is not a decimal tick count", rest[19])
	}
	return procStat{state: rest[0][0], start: rest[19]}, nil
}

// initPIDNSIno is the inode number of the initial PID namespace's file,
// PROC_PID_INIT_INO (0xEFFFFFFC) in include/linux/proc_ns.h. The kernel
// fixes it at build time (since Linux 3.8, when the namespace files got
// their own inodes) and allocates every other namespace an inode from
// PROC_DYNAMIC_FIRST (0xF0000000) up, so no other PID namespace can carry
// it. The device number of nsfs, by contrast, is allocated at boot, so
// only the inode is compared.
const initPIDNSIno = 0xEFFFFFFC

func (systemHost) PIDNamespace(pid int) (string, error) {
	switch {
	case pid == 0 || pid == os.Getpid():
		// Our own pid is not enough to name our /proc entry: with a /proc
		// mounted for another PID namespace (unshare -p without
		// --mount-proc), /proc/<getpid()> is some other process, and every
		// pid judged through that /proc names the wrong process. The
		// kernel resolves /proc/self to our pid as that /proc counts
		// pids, so the two agree only when /proc is our namespace's.
		self, err := os.Readlink("/proc/self")
		if err != nil {
			return "", err
		}
		if self != strconv.Itoa(os.Getpid()) {
			return "", fmt.Errorf("/proc is mounted for another PID namespace than this process's (/proc/self is %s, getpid() is %d): its pids name other processes; mount a /proc for this namespace (unshare --mount-proc, or a container's own /proc)", self, os.Getpid())
		}
		return nsID("/proc/self/ns/pid")
	case pid < 0:
		return "", fmt.Errorf("pid %d is not a process id", pid)
	default:
		return nsID("/proc/" + strconv.Itoa(pid) + "/ns/pid")
	}
}

// nsID stats a namespace file (following the magic link) into
// "<dev>:<ino>".
func nsID(name string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(name, &st); err != nil {
		return "", &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	return strconv.FormatUint(uint64(st.Dev), 10) + ":" + strconv.FormatUint(st.Ino, 10), nil
}

// ValidPIDNamespace reports whether id has the form PIDNamespace returns:
// two canonical decimal numbers joined by a colon.
func ValidPIDNamespace(id string) bool {
	dev, ino, ok := strings.Cut(id, ":")
	return ok && canonicalUint(dev) && canonicalUint(ino)
}

// InitialPIDNamespace reports whether id, as PIDNamespace returns it, names
// the initial PID namespace (the host's, where pid 1 is the boot's init).
// A malformed id is not the initial namespace.
func InitialPIDNamespace(id string) bool {
	_, ino, _ := strings.Cut(id, ":")
	return ValidPIDNamespace(id) && ino == strconv.FormatUint(initPIDNSIno, 10)
}

// canonicalUint reports whether s is a uint64 written the way the kernel
// writes one. Start times are compared as strings, so "0123" must not pass
// for "123".
func canonicalUint(s string) bool {
	if _, err := strconv.ParseUint(s, 10, 64); err != nil {
		return false
	}
	return s == "0" || s[0] != '0'
}

func (systemHost) Signal0(pid int) error {
	if pid <= 0 {
		// kill(0, 0) and kill(-n, 0) address process groups: never a pid.
		return unix.EINVAL
	}
	return unix.Kill(pid, 0)
}

// Override presents another machine, another boot or another PID namespace
// on top of Host: its MachineID and BootID return Machine and Boot when
// they are non-empty, and its PIDNamespace returns PIDNS for the caller's
// own namespace (pid 0 or os.Getpid()) when it is non-empty; each asks Host
// otherwise. The override strings are returned as given, not checked, so
// tests can also present malformed ids. Facts of other processes
// (StartTime, ProcState, Signal0, PIDNamespace of another pid) always come
// from Host. Override is safe for concurrent use when Host is.
type Override struct {
	Host
	Machine string
	Boot    string
	PIDNS   string
}

// MachineID returns o.Machine, or the machine id of o.Host when it is empty.
func (o Override) MachineID() (string, error) {
	if o.Machine != "" {
		return o.Machine, nil
	}
	return o.Host.MachineID()
}

// BootID returns o.Boot, or the boot id of o.Host when it is empty.
func (o Override) BootID() (string, error) {
	if o.Boot != "" {
		return o.Boot, nil
	}
	return o.Host.BootID()
}

// PIDNamespace returns o.PIDNS for the caller's own namespace when it is
// non-empty, and asks o.Host otherwise.
func (o Override) PIDNamespace(pid int) (string, error) {
	if o.PIDNS != "" && (pid == 0 || pid == os.Getpid()) {
		return o.PIDNS, nil
	}
	return o.Host.PIDNamespace(pid)
}

// The parts of a process's identity, as IdentifyError names them.
const (
	PartStart = "start time"
	PartBoot  = "boot id"
	PartPIDNS = "PID namespace"
)

// IdentifyError says which part of a process's identity Identify could not
// read, and why (Err, which it wraps: fs.ErrNotExist for a start time of a
// process that does not exist, fs.ErrPermission for a namespace another
// user's).
type IdentifyError struct {
	PID  int
	Part string // PartStart, PartBoot or PartPIDNS
	Err  error
}

func (e *IdentifyError) Error() string {
	return fmt.Sprintf("cannot read the %s of process %d: %v", e.Part, e.PID, e.Err)
}

func (e *IdentifyError) Unwrap() error { return e.Err }

// Identify returns the identity of process pid on h, as an owner records
// it: its start time, this boot and its PID namespace. As Self, it fails
// with an *IdentifyError rather than record less: an owner recorded without
// its namespace would be judged as one of the judge's own, where its pid
// may name another process.
func Identify(h Host, pid int) (Owner, error) {
	start, err := h.StartTime(pid)
	if err != nil {
		return Owner{}, &IdentifyError{PID: pid, Part: PartStart, Err: err}
	}
	boot, err := h.BootID()
	if err != nil {
		return Owner{}, &IdentifyError{PID: pid, Part: PartBoot, Err: err}
	}
	ns, err := h.PIDNamespace(pid)
	if err != nil {
		return Owner{}, &IdentifyError{PID: pid, Part: PartPIDNS, Err: err}
	}
	return Owner{PID: pid, Start: start, Boot: boot, PIDNS: ns}, nil
}

// Self returns the identity of the calling process on h, its PID namespace
// included. It fails, rather than record less, when any part cannot be
// read: an owner recorded without its namespace is judged as one of the
// initial namespace.
func Self(h Host) (Owner, error) {
	pid := os.Getpid()
	ns, err := h.PIDNamespace(0)
	if err != nil {
		return Owner{}, fmt.Errorf("cannot read this process's PID namespace: %w", err)
	}
	start, err := h.StartTime(pid)
	if err != nil {
		return Owner{}, err
	}
	boot, err := h.BootID()
	if err != nil {
		return Owner{}, err
	}
	return Owner{PID: pid, Start: start, Boot: boot, PIDNS: ns}, nil
}

// Judge decides the state of a recorded owner on h, with a reason for an
// operator. It fails closed: whatever it cannot decide is Unknown, and a
// record it cannot read as written by Self is Invalid.
//
// Every Gone rests on one observation that, once true, stays true: the boot
// differs, kill(pid, 0) found no process, or the process holding the pid
// started at another tick than the recorded one (a process never changes its
// start time, so the recorded process was not holding its pid at that
// instant and, pids being unique among live processes, had exited). No later
// event can bring the recorded process back, so there is no window in which
// Gone can become wrong, and a pidfd would not make it sounder. Live is the
// opposite: the process may exit the moment after it was seen.
//
// A pid means something only in its PID namespace: after the boot is
// compared (another boot ends every process whatever its namespace), an
// owner recorded in another namespace than the judge's is Unknown, and so
// is an owner recorded without a namespace when the judge does not run in
// the initial one (such records were written there, or by a writer that
// did not record it). A judge whose own namespace cannot be read fails
// closed the same way.
//
// Judge is safe for concurrent use when h is.
func Judge(h Host, o Owner) (State, string) {
	if o.PID <= 0 || o.PID >= maxPID {
		return Invalid, fmt.Sprintf("recorded pid %d is not a process id", o.PID)
	}
	if o.Start != "" && !canonicalUint(o.Start) {
		return Invalid, fmt.Sprintf("recorded start %q is not a decimal tick count", o.Start)
	}
	// A boot id that is merely spelled differently must not compare unequal
	// and so pass for proof of another boot.
	if o.Boot != "" && !isBootID(o.Boot) {
		return Invalid, fmt.Sprintf("recorded boot %q is not a lowercase boot id", o.Boot)
	}
	if o.PIDNS != "" && !ValidPIDNamespace(o.PIDNS) {
		return Invalid, fmt.Sprintf("recorded pidns %q is not a PID namespace id (\"<dev>:<ino>\", decimal)", o.PIDNS)
	}
	boot, err := h.BootID()
	if err != nil {
		return Unknown, "cannot read this boot's id: " + err.Error()
	}
	if o.Boot != "" && o.Boot != boot {
		return Gone, fmt.Sprintf("recorded under boot %s; this is boot %s", o.Boot, boot)
	}
	// Every conclusion below rests on the pid, which names a process only
	// in the namespace it was recorded in: from any other, it names another
	// process or none, and "no process N" would be no proof at all.
	ns, err := h.PIDNamespace(0)
	switch {
	case err != nil:
		return Unknown, fmt.Sprintf("pid %d cannot be judged: this judge's PID namespace is unreadable: %v", o.PID, err)
	case o.PIDNS != "" && o.PIDNS != ns:
		return Unknown, fmt.Sprintf("the owner ran in another PID namespace (pidns %s; this judge runs in %s): its pid %d cannot be judged from here; run classify in the owner's namespace", o.PIDNS, ns, o.PID)
	case o.PIDNS == "" && !InitialPIDNamespace(ns):
		return Unknown, fmt.Sprintf("the owner was recorded without a PID namespace and this judge runs in a non-initial PID namespace (%s): its pid %d cannot be judged from here; run classify in the host's initial namespace", ns, o.PID)
	}
	start, err := h.StartTime(o.PID)
	if err != nil {
		// No start time: /proc may hide other users' processes (hidepid),
		// be unreadable, or the process may have just exited. Only a signal
		// probe that finds no process at all is proof.
		switch perr := h.Signal0(o.PID); {
		case errors.Is(perr, unix.ESRCH):
			return Gone, fmt.Sprintf("no process %d", o.PID)
		case perr == nil || errors.Is(perr, unix.EPERM):
			return Unknown, fmt.Sprintf("pid %d exists but its start time is unreadable: %v", o.PID, err)
		default:
			return Unknown, fmt.Sprintf("cannot read pid %d (%v) nor probe it (%v)", o.PID, err, perr)
		}
	}
	if o.Start == "" {
		return Unknown, fmt.Sprintf("pid %d exists and no start time was recorded", o.PID)
	}
	if start != o.Start {
		return Gone, fmt.Sprintf("pid %d was reused: started at tick %s, recorded %s", o.PID, start, o.Start)
	}
	// A zombie has exited but still holds its pid until its parent reaps
	// it; the parent may yet act on its exit. It is also how the kernel
	// shows a thread group whose main thread exited while other threads
	// still run. Neither is proof that the owner's work is over, so it is
	// held, as Unknown: "running" would be wrong in the first case.
	switch st, err := h.ProcState(o.PID); {
	case err != nil:
		return Unknown, fmt.Sprintf("pid %d started at the recorded tick %s but its state is unreadable: %v", o.PID, start, err)
	case st == 'Z':
		return Unknown, fmt.Sprintf("pid %d exited, not yet reaped by its parent (zombie; or only its main thread exited)", o.PID)
	}
	if o.Boot == "" {
		// Same pid and start tick under another boot is plausible for
		// services started early at boot, so without a recorded boot a
		// match proves nothing either way.
		return Unknown, fmt.Sprintf("pid %d started at the recorded tick %s, but no boot was recorded", o.PID, start)
	}
	return Live, fmt.Sprintf("pid %d is running (started at tick %s)", o.PID, start)
}

// ValidBootID reports whether id has the form of a boot id: a lowercase
// UUID, as /proc/sys/kernel/random/boot_id holds it.
func ValidBootID(id string) bool { return isBootID(id) }

// ValidMachineID reports whether id has the form of a machine id: 32
// lowercase hex digits.
func ValidMachineID(id string) bool { return isMachineID(id) }
