// Package dirbackend is the directory backend of the claim store: a claim
// root as a directory on one machine's filesystem, in the reference
// implementation's format, behind the vfs.FS seam (the operating system's
// filesystem, or a test's crash-simulating or fault-injecting one).
//
//	<root>/seat/<hash>/r0000000001.json     revisions of a seat key (0400)
//	<root>/session/<hash>/r0000000001.json  revisions of a session key
//	<root>/proofs/boot-<24 hex>.json        boot proofs
//	<root>/proofs/decommission-<machine id>-<10 digits>.json
//	                                        decommission records (claimstore.Decommission)
//	<root>/status/<name>.json               status records (StatusKeeper)
//
// A revision or a proof is published exclusively and durably (a temporary
// written and fsynced, linked to its name, the directory and the parents
// it needs fsynced) and never rewritten; a status record is the one file
// replaced (a temporary fsynced, renamed over it, the directory fsynced),
// and nothing decides on it. Every directory and file under the root must
// belong to the root's owner and not be writable by others; the root's
// ancestors are checked as sshd's StrictModes checks them; nothing is read
// or written through a symlink or opened in a way that can block. A
// batch's fsyncs (a step's two temporaries) are submitted to the kernel
// at once where the filesystem is the operating system's and the kernel
// has io_uring (vfs.SyncBatch), and run on goroutines elsewhere; the
// order of what becomes durable is the same. See Backend, Open and
// ARCHITECTURE.md for the protocol and the crash model.
package dirbackend
