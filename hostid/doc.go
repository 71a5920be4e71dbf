// Package hostid reads the identity of this machine, this boot and a
// process, and judges whether a recorded process owner is still running.
//
// # Facts
//
// The machine id is the 32 lowercase hex digits of /etc/machine-id, or of
// /var/lib/dbus/machine-id when the first is missing or malformed. The boot
// id is the lowercase UUID in /proc/sys/kernel/random/boot_id; the kernel
// draws a new one at every boot. A process is identified by its pid, its
// start time (field 22 of /proc/<pid>/stat: clock ticks since boot, kept as
// the decimal string the kernel prints) and the boot id it ran under; Self
// returns that triple for the calling process, in the form a claim record
// keeps as owner.pid, owner.start and owner.boot.
//
// A malformed or unreadable id file is an error naming the file (a
// *fs.PathError, or several joined when the machine-id fallback failed too),
// never an empty or "best effort" id: an id that is wrong only in its
// spelling would compare unequal to the real one, and an unequal boot id is
// read as proof that a process is gone.
//
// # Judging an owner
//
// Judge answers one of four states, and only one of them is a proof:
//
//   - Gone is a proof that the recorded process has ended: the record names
//     another boot (every process of an earlier boot is gone), kill(pid, 0)
//     answers ESRCH (no such process), or the process now holding the pid
//     started at a different tick (the number was reused). Each of these,
//     once observed, stays true for ever, which is what lets a caller act
//     on it later.
//   - Live is an observation: same boot, the pid exists and its start time
//     matches. The process may exit right after. A zombie (exited, not yet
//     reaped by its parent) still reads as Live, the conservative side.
//   - Unknown is anything that could not be decided: no start time
//     recorded, no boot recorded, /proc unreadable or hiding the pid
//     (hidepid, another user's process) while a signal probe says it
//     exists, the boot id unreadable. kill(pid, 0) failing with EPERM means
//     the pid exists and belongs to someone else, never that it is gone.
//   - Invalid is a record that is not in the form Self writes: pid <= 0 or
//     above the kernel's limit, a start that is not a canonical decimal, a
//     boot that is not a lowercase UUID.
//
// Unknown and Invalid fail closed: callers must treat them exactly like
// Live, because the only thing a wrong "not running" can buy is two writers
// at once, while a wrong "running" costs an operator a refusal they can
// clear.
//
// # Caveats
//
// Pids and /proc are those of the caller's pid namespace, and the boot id
// that of the kernel: a record written in another pid namespace on the same
// boot cannot be judged here (its pid names a different process or none),
// so callers must record and judge owners from the same namespace. The
// start time has the resolution of one clock tick (usually 10ms); a pid
// reused within the same tick would read as Live, which requires cycling
// through the whole pid space inside one tick. No pidfd is used: every
// Gone rests on a single observation that cannot be reversed by a later
// event (see Judge), so opening a pidfd first would not remove any race in
// the direction that matters.
//
// The Host interface is the seam for tests: System reads this machine,
// FromFiles reads the ids from other files, and Override presents another
// machine id or boot id on top of any Host.
package hostid
