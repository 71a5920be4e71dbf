// Package errorfs wraps any vfs.FS and injects faults into chosen
// calls, in the manner of pebble's vfs/errorfs: a fault is a Rule that
// names the kind of call (Op), which paths it applies to (a predicate),
// which matching calls it hits (Nth, Times) and what happens (Kind):
//
//   - Fail: the call fails with Err and does nothing (EIO on fsync,
//     ENOSPC on write, EACCES on read, a spurious EEXIST on link).
//   - FailAfter: the call is done, then reports Err (a lost reply: a link
//     that happened but answered EEXIST, an fsync that answered EIO after
//     writing back).
//   - Torn: a Write passes the first half of its data through, then fails
//     with Err (ENOSPC part-way).
//   - Hide: the entry looks absent: Lstat, ReadFile and TempFile.Is fail
//     with ENOENT and ReadDir leaves the name out (a lost directory entry).
//   - ShortWrite: a Write passes half its data through and reports success
//     with the short count, which io.Writer forbids; it tests whether the
//     store trusts a writer's count.
//
// A rule's OnInject is called after each injection, for example to drop
// the page cache of a crashfs file whose fsync failed (crashfs.DropPending)
// so that the "lost write" a failed fsync may mean is real.
//
// TempFile calls are matched on the path of their directory joined with
// "(temp)" (Write, Sync, Close) or on the name they are given (Link, Is).
//
// # Caveats
//
// Faults are deterministic: there is no probability knob. Every rule counts
// every call it matches (for Nth and Times); of the rules that hit a call,
// the first added wins.
package errorfs
