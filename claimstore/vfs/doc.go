// Package vfs is the filesystem seam the directory backend runs on: every
// call it makes of a filesystem, each method stating what is durable when it
// returns (nothing is durable that a method does not say is). OS is the
// operating system's; the crash-simulating and fault-injecting filesystems
// of the tests implement the same interface, optional methods included, so
// that they run exactly the paths production runs. One exception: crashfs's
// temporaries are no LinkSyncer (an O_TMPFILE's link count made durable
// after its link), a rule of the kernel's that its model does not have and
// claimstore's power-cut images check instead; errorfs passes it through.
// Its FileSyncer (a file fsynced by name, for a revision another process
// linked) makes what was written to the file durable, as its temporary's
// Sync does.
//
// It imports nothing of the store (the core, the seam claimstore/storage,
// either backend), so that a test's filesystem depends on nothing above it;
// it is not a leaf: it uses hostid for the owner a named temporary's name
// records (TempOwner) and internal/safefile to open without following a
// symlink or blocking on a FIFO (and, reading, without updating an access
// time where the kernel allows: a walk writes nothing).
// TestVFSImportsNothingOfTheStore keeps it so.
//
// SyncBatch (Linux) fsyncs a batch of its own temporaries with one io_uring
// submission and one wait, rather than a goroutine, and a thread blocked
// in the kernel, per fsync. It takes no other temporary, so a test's
// wrapper is never bypassed; where the kernel refuses io_uring (too old,
// kernel.io_uring_disabled, or three ring setups failing in a row, as
// where rings are charged to a small RLIMIT_MEMLOCK), the process runs under a seccomp filter (which
// may kill a caller of io_uring_setup rather than refuse it: a systemd
// unit's SystemCallFilter=), or the environment says
// CLAIMSTORE_IO_URING=off, NewSyncBatch refuses and callers fsync on
// goroutines as before. OSFS.SyncDirs (DirsSyncer) submits several
// directories' fsyncs alike, each directory opened as SyncDir opens it,
// and fsyncs them on goroutines where io_uring is off; a wrapper lacks the
// capability unless it says how its own SyncDir is to see each directory
// (SyncDirsEach).
package vfs
