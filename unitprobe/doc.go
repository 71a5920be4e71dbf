// Package unitprobe asks systemd, over D-Bus, whether it knows a unit.
//
// A lookup names a unit ("writer-7.service") and a manager (the system
// manager, or a user manager for a supervisor that runs as systemd --user)
// and answers one of three states:
//
//   - Absent: the manager says it does not know the unit now (LoadState
//     "not-found", ActiveState "inactive", no job queued). This is an
//     observation, not a proof that no process of the unit runs: a
//     transient unit that exited is collected and then reads as Absent, a
//     process may have left the unit's cgroup, a unit may be started right
//     after the answer, and another manager (or another user's) may run a
//     unit of the same name. Callers may use Absent to close a claim only
//     where nothing was ever spawned for it.
//   - Present: the manager knows the unit. LoadState, ActiveState and
//     SubState are systemd's words (loaded/masked/error/not-found;
//     active, activating, deactivating, reloading, inactive, failed;
//     running, exited, dead, ...), MainPID the main process of a service.
//     A failed unit stays loaded (and Present) until it is reset or
//     collected; a not-found unit that still runs (its file was removed)
//     is Present.
//   - Unknown: no answer. No manager reachable at the bus address, the
//     deadline passed, the manager or bus refused the call, or any other
//     error; Result.Err keeps the cause and Result.Reason says it in words.
//     Unknown fails closed: callers must treat it as Present.
//
// Every lookup is bounded: by the caller's context and by Options.Timeout
// (DefaultTimeout when zero). The connection, the handshake and each call
// run under that bound, and the caller gets its answer at the deadline even
// if the bus never replies; what is still pending is then torn down in the
// background by closing the connection.
//
// The only error a lookup returns is for an invalid unit name
// (ValidateName), checked before anything is sent; everything else is a
// Result. Lookup dials a connection per call; a Prober keeps one for many
// lookups (and LookupMany batches names into few round trips), which is
// what a tool classifying thousands of claims should use.
//
// The D-Bus client is github.com/coreos/go-systemd/v22/dbus over
// github.com/godbus/dbus/v5; the address must be a message bus (the
// client says Hello), not systemd's private socket.
package unitprobe
