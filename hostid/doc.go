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
// the decimal string the kernel prints), the boot id it ran under and the
// PID namespace its pid counts in ("<dev>:<ino>": the device and inode
// numbers of /proc/<pid>/ns/pid, which namespaces(7) says identify a
// namespace; unique within a boot, so always read with the boot id); Self
// returns these for the calling process, in the form a claim record keeps
// as owner.pid, owner.start, owner.boot and owner.pidns.
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
//   - Live is an observation: same boot, same PID namespace, the pid exists
//     and its start time matches, and it is not a zombie. The process may
//     exit right after.
//   - Unknown is anything that could not be decided: no start time
//     recorded, no boot recorded, /proc unreadable or hiding the pid
//     (hidepid, another user's process) while a signal probe says it
//     exists, the boot id unreadable; an owner recorded in another PID
//     namespace than the judge's, or recorded without one while the judge
//     runs outside the initial namespace, or a judge whose own namespace is
//     unreadable; a zombie (exited, not yet reaped by its parent: the
//     parent may still act on its exit, and a thread group whose main
//     thread exited reads the same while its other threads run). kill(pid,
//     0) failing with EPERM means the pid exists and belongs to someone
//     else, never that it is gone.
//   - Invalid is a record that is not in the form Self writes: pid <= 0 or
//     above the kernel's limit, a start that is not a canonical decimal, a
//     boot that is not a lowercase UUID, a pidns that is not two canonical
//     decimals joined by a colon.
//
// Unknown and Invalid fail closed: callers must treat them exactly like
// Live, because the only thing a wrong "not running" can buy is two writers
// at once, while a wrong "running" costs an operator a refusal they can
// clear.
//
// # Caveats
//
// Pids and /proc are those of the caller's PID namespace, and the boot id
// that of the kernel: a record written in another PID namespace on the same
// boot cannot be judged here (its pid names a different process or none).
// Judge therefore compares the recorded namespace with its own before any
// pid-based conclusion, and reads an owner recorded without one (by the
// reference implementation, or before namespaces were recorded) as one of
// the initial namespace, recognised by its fixed inode number
// PROC_PID_INIT_INO (4026531836, 0xEFFFFFFC; the kernel allocates every
// other namespace an inode from 0xF0000000 up). A judge that may read a
// pid judges it only from the namespace it was recorded in; everywhere else
// the owner is Unknown, and held. A /proc mounted for another namespace
// than the caller's (unshare -p without --mount-proc) is detected and
// refused, since every pid read through it would name another process. The
// start time has the resolution of one clock tick (usually 10ms); a pid
// reused within the same tick would read as Live, which requires cycling
// through the whole pid space inside one tick. No pidfd is used: every
// Gone rests on a single observation that cannot be reversed by a later
// event (see Judge), so opening a pidfd first would not remove any race in
// the direction that matters.
//
// The Host interface is the seam for tests: System reads this machine,
// FromFiles reads the ids from other files, and Override presents another
// machine id or boot id on top of any Host; hostid/hostidtest is a whole
// machine made up for tests (ids and a process table, nothing read here).
package hostid
