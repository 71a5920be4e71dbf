// Package claimstore keeps crash-safe, append-only writer claims on the
// local filesystem.
//
// A session supervisor runs at most one writer per seat and per session.
// Before it spawns a writer it takes a claim on both keys (Store.Acquire),
// advances it as the writer moves through its life (Store.Advance), and
// releases it with a proof that nothing still runs (Store.Release). After a
// crash or a reboot, Store.Classify decides from durable evidence which
// claims are provably over. A machine that will never run again is freed by
// an operator's decommission record (Store.Decommission): classify on other
// machines then frees that machine's claims of the boots the record names,
// and the machine itself acquires nothing until the record is lifted.
//
// # Format
//
// A key's history is a directory <root>/<kind>/<hash>, where hash is the
// first 32 hex digits of SHA-256 over the key serialised as ECMAScript
// JSON.stringify does it (Key.JSON). Each revision is a file r<10 digits>.json
// holding one JSON record and a newline, numbered densely from 1, mode 0400.
// The format is the reference implementation's (claim.mjs): a root written
// by either reads the same in the other, and both may share one root.
//
// # Publication
//
// A revision is published by writing a temporary file in the key
// directory, fsyncing it, link()ing it to the revision name, and fsyncing
// the directory. link fails when the name exists, so exactly one writer wins
// each number, and a revision name only ever refers to complete, synced
// contents. Revisions are never rewritten; only Prune removes them, the
// history of keys free for longer than its retention, archived first and
// never racing a writer (see Prune). Every step of a claim
// publishes on the seat key and then on the session key, fenced on the
// revisions the claim last published: a head that moved is a refusal.
//
// # States
//
// A key is held unless its highest revision is stopped with a proof; a
// stopped head without a proof reads as uncertain, and so does a damaged
// head. The pair state is the more conservative of the two keys', in the
// order uncertain > stopping > active > reserved > stopped.
//
// # Errors
//
// A refusal (*Refusal, with one of the Codes) means the store cannot promise
// exclusion and declines; it is not a failure. Malformed input is a
// *KeyError or an error wrapping ErrBadPatch, and touches nothing on disk.
// I/O failures carry their path (*fs.PathError). After a failed fsync a
// store acknowledges no further writes (ErrSyncFailed). A released claim is
// over (ErrReleased). The sentinel errors are documented together in
// errors.go.
//
// # Concurrency
//
// A Store is safe for concurrent use; a Claim is not. Exclusion between
// writers, in one process or many, comes from link alone: there are no
// locks to leak and nothing to clean up after a crash but what Classify
// judges.
//
// # Caveats
//
// Head probes revision names instead of listing the directory, so its
// cost on a held key does not grow with the history; it relies on the
// history being dense, as the protocol keeps it. A head that reads free,
// and a head read to publish on (once per key per store), is confirmed by
// one listing, so a revision beyond a gap is never missed where it matters;
// a plain read of a held head may stop short below a gap (it is still
// held), and Check reports every gap. The store assumes a local POSIX filesystem
// where link is atomic and fails on an existing name, and where an fsync of
// a directory makes its entries durable (see ARCHITECTURE.md, "Crash
// model"). Storage beyond that is the Backend interface's business.
//
// # Monitoring
//
// Store.Stats reads a whole root's counts through one walk (pairs by state,
// held pairs by their owner judged now, uncertain pairs by cause, orphans,
// keys, revisions, proofs, the oldest held record); it only reads.
// RecordClassifyAll keeps, in the root's status records, how this
// machine's last ClassifyAll walk ended, and LastClassifyAll reads it back:
// the one file the store replaces rather than appends, and one that no
// operation decides on (claimctl metrics reports both).
//
// # Backends
//
// The directory backend is the default. Options.Backend takes another:
// claimstore/etcdbackend keeps the same records in an etcd v3 cluster, for
// supervisors on several machines sharing one store (a claim of another
// machine is foreign-host: only its own machine judges it). The seam's
// types are in claimstore/storage, so that this package never imports a
// backend's client. Copy copies a whole root between backends.
package claimstore
