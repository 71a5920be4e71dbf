// Package etcdbackend keeps a claim root in an etcd v3 cluster: the same
// records, states, fencing, refusals and proofs as the directory backend,
// shared by supervisors on several machines. Use it through
// claimstore.Options.Backend; claimctl takes --root etcd://host:2379/prefix.
//
// # Layout
//
// Everything lives under a key prefix (e.g. /claims), with the names the
// directory backend gives its files, so that a record is interchangeable
// between the two and a root copies between them name for name:
//
//	<prefix>/seat/<hash>/r0000000001.json     revision 1 of a seat key
//	<prefix>/session/<hash>/r0000000001.json  revision 1 of a session key
//	<prefix>/proofs/<id>.json                 a boot proof
//	<prefix>/status/<name>.json               a status record (claimctl metrics)
//	<prefix>/fences/e<epoch>/<id>             a fenced-off lost request (below)
//	<prefix>/fences/epoch                     the fence epoch (below; never deleted)
//
// The value is the exact JSON record bytes the directory backend writes to
// the file (with its trailing newline).
//
// # Contract
//
//   - Publish is one transaction, If(CreateRevision(k) == 0) Then(Put(k,
//     record)): exactly one writer wins each number; the others get an error
//     wrapping claimstore.ErrRevisionExists. It returns nil once the cluster
//     acknowledged it, which is raft's quorum commit with each member's
//     write-ahead log fsynced: the link and the fsync of the directory
//     backend in one step.
//   - Head of a short history is one range over the key's revision names,
//     sorted descending, limit 1; of a longer one (etcd sorts a sorted range
//     whole before its limit, reading every value) a count of the names
//     with the base pointer, then at most two keys in key order from the
//     counted top. Census counts the same way, and a counted head brings
//     its census along (storage.CountedHeader: the count of the same store
//     revision), so a free head is confirmed without counting twice; a gap
//     or a name put there by hand takes the sorted range or the listing (a
//     name put by hand that stands in for a missing revision passes the
//     census as dense: fsck, which lists every name, reports both). List,
//     Locs and Proofs are keys-only, paginated ranges.
//   - Sync is nil: reads are linearizable (served from what a quorum
//     committed), so a reader never sees a revision that can still be lost.
//   - Proofs are stored under <prefix>/proofs/ with the same
//     create-if-absent exclusivity; an existing id wraps fs.ErrExist. So
//     are an operator's decommission records (decommission-<machine>-<n>),
//     whose numbers the same exclusivity gives to exactly one operator
//     each.
//   - A status record (storage.StatusKeeper: what classify --all last did,
//     for monitoring; it decides nothing) is one put, replacing the last:
//     atomic, durable when acknowledged, and without the lost-reply rule,
//     since a late put of it changes no claim.
//   - Keys under a key's prefix that are not revision names are reported by
//     List as other names and never taken as revisions; a gap in the
//     numbers (a hand-written or hand-deleted key) makes the store read the
//     key as damaged, exactly as it reads the directory backend's.
//
// # The lost-reply rule
//
// A transaction whose reply is lost (a deadline, a leader change, a reset
// connection after the request was sent) may have been applied or may
// still be. Publish then reads the revision back and compares bytes: ours
// means published, another's means a lost race (ErrRevisionExists), absent
// means not published — but only once the lost request can no longer be
// applied, which the fence key guarantees: every transaction also requires
// that this backend's current fence key was never created; an absent read
// is followed by creating the fence and reading again (raft applies in
// order, so the lost request has then either been applied, or will fail its
// compare). A not-published revision is tried again (three times in all,
// then ErrNotPublished); a cluster that cannot be read back in time gives
// an *IndeterminateError. Nothing is ever guessed.
//
// # Collecting fence keys
//
// Fence keys are created on lost replies only, one per incident, and are
// collected by prune (CollectFences, storage.FenceCollector) once no lost
// request can still apply — which no delay proves: a frozen member may
// forward a proposal it held arbitrarily late. So every transaction also
// requires ModRevision(<prefix>/fences/epoch) == E, the epoch it was sent
// under (0 while the key is absent, as on every root before its first
// collection), and its fence key lies under that epoch. Collection first
// moves the epoch (a put: the key's ModRevision never takes an old value
// again), in the transaction that deletes the current epoch's fences, and
// deletes an older epoch's fences only in a transaction guarded by
// ModRevision(epoch) > E: whatever a fence stopped, the moved epoch stops
// from then on. A publish whose transaction failed on the epoch alone
// learns the new one from its Else and is sent again: not a lost race, not
// a lost reply, and not one of its three attempts. Under the NOSPACE alarm
// older epochs' fences are still collected (delete-only); the current
// epoch's wait for the next prune, which says so. An older claimstore's
// fences (<prefix>/fences/<id>, 24 hex digits) compare no epoch and are
// never collected. The epoch key must never be deleted: its ModRevision
// would read 0 again. docs/PROTOCOL.md ("Collecting fence keys") has the
// argument edge by edge.
//
// # Errors etcd gives in production
//
// This package's sentinels, each wrapped with the key in an *fs.PathError
// whose message says what to do: ErrNotPublished (above), ErrNoSpace,
// ErrAccessDenied and ErrUnavailable; and *IndeterminateError.
//
//   - Space quota (NOSPACE, `mvcc: database space exceeded`). etcd answers
//     NOSPACE only once the request is over: its API's quota check and,
//     while the alarm is raised, its capped applier refuse a transaction
//     unapplied, but its quota applier applies one that passed the check
//     and then reports NOSPACE. So a publish answered NOSPACE is read back
//     once (reads work under the alarm): ours is published, another's a
//     lost race, absent is not published, for good — no fence is needed
//     (and none could be put). The error (ErrNoSpace) says to compact,
//     defragment and disarm the alarm. A step cut between its keys by it
//     is reported by claimctl with the command that finishes it.
//   - Access control. A transaction refused for permission is refused
//     before it is applied: not published, said at once (ErrAccessDenied,
//     naming the user, the prefix and the role it needs); a read-back
//     refused the same way makes a lost reply indeterminate at once.
//     Open authenticates (Config.User, Config.Password): a wrong password
//     fails there. An expired client certificate is refused before
//     connecting, naming when it expired; one the cluster's CA did not
//     sign is named when the cluster refuses it.
//   - No quorum, every member unreachable. Every request requires a
//     leader (clientv3.WithRequireLeader): a member without one refuses it
//     at once, before proposing it. A read is retried by the client until
//     the request timeout, a transaction by this package (an election ends
//     within it); then the request fails with ErrUnavailable and a survey
//     of every endpoint (unreachable, up without a leader, up with one).
//     A lost reply whose read-back finds no member with a leader is
//     indeterminate at once, with that survey, rather than at
//     ResolveTimeout: nothing is guessed, and the next read decides.
//
// # Caveats
//
// The directory backend's trust checks (ownership and modes of every
// directory) have no counterpart: who may write under the prefix is etcd's
// access control (its users and roles, and TLS client certificates), which
// must let only the supervisors' identities write there. Temporaries do not
// exist, so fsck --repair has nothing to repair. Leases and TTLs are never
// used: a claim is freed only by evidence, never by time.
package etcdbackend
