// Package crashfs is an in-memory filesystem behind the store's seam
// (vfs.FS) that simulates power loss.
//
// It models inodes: regular files (contents), directories (entries) and
// symlinks (a target, for tests that plant them). Every mutating call is
// applied at once to the live tree, which is what reads see (the page
// cache), and is also appended to an operation log. An operation becomes
// durable only when the call that makes it durable returns:
//
//   - a Write to a file is durable after Sync of that file;
//   - a directory entry change (Mkdir, Link, Remove, a named temporary's
//     creation or removal, a planted symlink) is durable after SyncDir of
//     the directory holding the entry.
//
// Nothing else makes anything durable: an fsync of a file does not make its
// name durable, an fsync of a directory does not make the contents of the
// files it names durable, and an fsync of a child directory does not make
// the child's own entry in its parent durable. This is the POSIX reading
// that the store's protocol is written against; journaling filesystems
// give more (ext4's journal commits all metadata on any fsync). An ext4
// without a journal gives less in two ways this model does not show: a
// linked O_TMPFILE's link count, and a new directory's own inode and
// block, are written by nothing but their own fsync, so that a name made
// durable by its directory's fsync alone can read as corrupt after a
// crash. The store fsyncs both (vfs.LinkSyncer; dirbackend's
// owedParents; vfs.FileSyncer for a revision another process linked), and
// claimstore's TestPowerCutImages holds it to that on a real ext4
// (internal/diskimage); here a linked temporary and a made directory read
// whole once their entry is durable.
//
// # Crash model
//
// CrashStates returns the filesystems a power cut at this moment can leave.
// Each is the durable state at the last crash (or at New) with the logged
// operations replayed in their original order: every durable operation,
// plus a chosen subset of the operations that were not yet durable. The
// subsets are:
//
//   - ModelSubset (the default): any subset of the pending directory-entry
//     operations, independently of each other and across directories, and
//     for each file a prefix of its pending writes (write-back of one
//     file's appended data is in order), optionally with the first dropped
//     write torn in half (Options.TornWrites). This is the most adversarial
//     model that still respects the durability each call promised: it
//     contains every state of ext4 data=ordered or data=writeback, XFS and
//     btrfs that the author knows of, and also orders that no journaling
//     filesystem produces (a later entry change of one directory surviving
//     an earlier one of the same directory). A store correct under it is
//     correct under any of them.
//   - ModelPrefix: a prefix of all pending operations, in the order they
//     were made, as a single ordered journal (ext4 data=journal) keeps them.
//     A subset of ModelSubset's states, for comparison.
//
// A dropped operation leaves behind whatever the replay makes of the later
// ones: an entry linked into a directory whose own entry was dropped is in
// an unreachable directory (lost, as on a real disk); removing a name whose
// creation was dropped changes nothing. States that come out identical
// (same reachable tree) are returned once; CrashStats reports both counts.
//
// # Crash points
//
// Options.Hook is called before every call into the filesystem, the
// TempFile methods included, with the call's ordinal. A hook error fails
// that call and stops the filesystem: every later call fails too
// (ErrStopped), so the operation in progress changes nothing more, and the
// log is frozen exactly between two calls. StopAfter(k) is the usual hook.
//
// # Caveats
//
// Paths must be absolute; "/" always exists and is durable. Symlinks are
// followed in the middle of a path (absolute targets only) but never by
// Lstat or ReadFile at the end of one. There is no rename (the store does
// not use it), no file offsets (writes append), no permissions enforcement,
// and times are zero. Unnamed temporaries model Linux O_TMPFILE: a file with
// no name until Link; Options.NamedTemps gives them a ".tmp-" name instead,
// which a crash can leave behind, as a store without O_TMPFILE would.
package crashfs
