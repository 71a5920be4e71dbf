package storage

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Kind names the two kinds of key. A key's history lives under <kind>/.
type Kind string

const (
	KindSeat    Kind = "seat"
	KindSession Kind = "session"
)

// ErrUnsafeRoot is returned when the claim root is a symlink, not a
// directory, or writable by another user: a root that cannot promise
// exclusion is refused, not used.
var ErrUnsafeRoot = errors.New("unsafe claim root")

// ErrUnsafePath is returned when a path under the root cannot be trusted: a
// key directory, proofs/ or a revision or proof file that is a symlink, not
// the kind of file the format says it is, owned by another user than the
// root's, or writable by group or others. Such a key reads as damaged
// (held); the store never follows the link and never publishes into such a
// directory.
var ErrUnsafePath = errors.New("unsafe path in claim root")

// ErrSyncFailed is returned, wrapping the cause, by every write of a
// backend after an fsync failed. A failed fsync may have lost the write
// while the page cache still shows it (Linux may drop the dirty pages and
// report the error once, to this process only), so nothing that depends on
// it is ever acknowledged. Other processes cannot see the loss either:
// treat the disk as failing, and reboot (which empties the page cache)
// before trusting what the root shows.
var ErrSyncFailed = errors.New("an fsync failed; the store no longer acknowledges writes")

// DamageError says why a revision (or a proof) is damaged. The key holding
// it reads as Uncertain until an operator repairs it.
type DamageError struct {
	Reason string
	Err    error // the cause, when the damage comes from outside the record (a proof)
}

func (e *DamageError) Error() string { return "damaged revision: " + e.Reason }

func (e *DamageError) Unwrap() error { return e.Err }

// ErrRevisionExists is returned by Backend.Publish when the revision
// number is already taken by another writer's record. The store treats it
// as a lost race: it re-reads and re-decides, or refuses.
var ErrRevisionExists = errors.New("revision already published by another writer")

// ErrNotEmpty is returned by Stager.Stage when the destination already
// holds a root: a copy never overwrites.
var ErrNotEmpty = errors.New("the destination is not empty")

// ErrUnfinishedCopy is returned by every operation of a backend whose root
// is a copy that was begun and never finished (a failed or interrupted
// claimctl copy): part of the source is missing from it, and a key missing
// there would read free while the source holds it.
var ErrUnfinishedCopy = errors.New("the root is an unfinished copy")

// ErrCannotWatch is returned by the store's Watch when its backend has no
// Watcher: the caller waits by its own means (claimctl watches a
// directory root's key directories with inotify), or reads again.
var ErrCannotWatch = errors.New("this backend cannot watch keys")

// ErrNothingStaged is returned by Stager.Unstage when no unfinished copy
// is there to remove.
var ErrNothingStaged = errors.New("no unfinished copy to remove")

// ErrCopyAborted is returned by a write of a Staged backend whose copy
// was removed (Unstage, `claimctl copy --abort`) while it ran, whether or
// not another copy has begun there since: nothing more of it is written.
var ErrCopyAborted = errors.New("the unfinished copy was removed while it ran")

// MaxRecordSize bounds what a store reads of a revision or a proof: a
// record is a few hundred bytes; a larger one is damaged (its key reads as
// held), so that a planted giant value cannot make every reader allocate
// without bound.
const MaxRecordSize = 1 << 20

// Loc locates a key's history in a backend: its kind and its hash. A store
// maps a Key to a Loc; ClassifyAll finds Locs by listing.
type Loc struct {
	Kind Kind
	Hash string
}

func (l Loc) String() string { return string(l.Kind) + "/" + l.Hash }

// Barrier names a point in the publication of a revision, in order:
// temp-written, temp-synced, linked, dir-synced; and between-keys, after a
// step's seat revision and before its session revision.
type Barrier string

const (
	BarrierTempWritten Barrier = "temp-written"
	BarrierTempSynced  Barrier = "temp-synced"
	BarrierLinked      Barrier = "linked"
	BarrierDirSynced   Barrier = "dir-synced"
	BarrierBetweenKeys Barrier = "between-keys"
)

// Barriers lists the barrier points in the order an operation meets them.
var Barriers = []Barrier{BarrierTempWritten, BarrierTempSynced, BarrierLinked, BarrierDirSynced, BarrierBetweenKeys}

// Backend is what a claim store needs of its storage: publish revision n of
// a key exclusively and durably, read a key's head, list its history, list
// keys, store proofs, and name things. Everything above it (records,
// states, the pair, refusals, classify) is the same for any backend; a
// backend on another engine implements these methods with the same
// guarantees, and the behavioural suite (forBackends in claimstore's tests)
// is what it must pass.
//
// Every method takes a context first: its deadline bounds the call, and
// cancelling it stops what is in flight. A cancelled write leaves what a
// crash at that point leaves (nothing published, or published and
// durable, or — on a backend whose request may still land — decided later
// by reading back, never guessed). The methods are safe for concurrent use.
//
// Optional capabilities are the named interfaces below, found by
// assertion; each says what the store does without it:
//
//   - reads and walks: Censuser, CountedHeader, OwnHeadChecker,
//     HeadAtReader, WalkSyncer, LayoutChecker;
//   - publishing: Stager (and Staged), GuardedPublisher, BatchPreparer,
//     BatchPublisher;
//   - prune: Compacter, KeyRemover, RemovalMarker, KeyBatchRemover,
//     Sweeper, ArchiveLocator, FenceCollector;
//   - waiting and status: Watcher (and Watch), StatusKeeper.
//
// TestBackendDocListsEveryCapability keeps this list whole.
type Backend interface {
	// Root names the root as a person gives it: a directory's path, or an
	// etcd:// URL.
	Root() string

	// Path names something under the root, as errors and findings show
	// it: elem joined to the root (a file path, or the root URL and the
	// key path under it).
	Path(elem ...string) string

	// Head returns the number and contents of loc's highest revision, or
	// 0 and nil when loc has none. When the revision exists but cannot be
	// read (damaged, untrusted, too large), the error is a *ReadError
	// naming its number; any other error means the head could not be
	// determined at all.
	Head(ctx context.Context, loc Loc) (n uint64, data []byte, err error)

	// Read returns the contents of revision n of loc; an absent revision
	// is an error wrapping fs.ErrNotExist.
	Read(ctx context.Context, loc Loc, n uint64) ([]byte, error)

	// Publish makes data revision n of loc. Exactly one publisher wins each
	// number: the others get an error wrapping ErrRevisionExists. When
	// Publish returns nil the revision is durable; its name never refers
	// to anything but data. hook is called at the barrier points (nil: no
	// hook) with the barrier only; the store fills in the rest. It is
	// Prepare followed by Commit.
	Publish(ctx context.Context, loc Loc, n uint64, data []byte, hook func(Barrier) error) error

	// Prepare does what of Publish can be done before the exclusive step
	// (for the directory backend: directories made, a temporary written
	// and fsynced; hook sees temp-written and temp-synced), so that it can
	// overlap other work; Commit on the result does the rest (linked,
	// dir-synced). Nothing is visible to readers before Commit. Prepare
	// and Commit may run concurrently with any other method.
	Prepare(ctx context.Context, loc Loc, n uint64, data []byte, hook func(Barrier) error) (Prepared, error)

	// List returns the revision numbers of loc in ascending order, and
	// the names in its directory that are not revisions.
	List(ctx context.Context, loc Loc) (revs []uint64, other []string, err error)

	// Locs returns every key of the given kind that has a history.
	Locs(ctx context.Context, kind Kind) ([]Loc, error)

	// Sync makes revision n of loc, and every revision below it, durable
	// as they can be read now, whoever published them: a writer that
	// crashed after its link and before its directory fsync leaves a
	// revision that every reader sees and a power cut can still take away,
	// and one that crashed before its file's own fsync after the link (the
	// directory backend's O_TMPFILE) a name that a power cut can leave on
	// a file the disk counts no link to.
	// A decision that frees, completes or publishes on the strength of a
	// head it read calls Sync on that head first. A backend whose reads
	// only ever see durable data (a consensus store) returns nil.
	Sync(ctx context.Context, loc Loc, n uint64) error

	// WriteProof stores a proof under id, exclusively and durably, as
	// Publish stores a revision; an existing id is an error wrapping
	// fs.ErrExist, returned once the existing proof is durable too.
	// ReadProof returns it (absent: an error wrapping fs.ErrNotExist);
	// Proofs lists the ids.
	WriteProof(ctx context.Context, id string, data []byte) error
	ReadProof(ctx context.Context, id string) ([]byte, error)
	Proofs(ctx context.Context) ([]string, error)
}

// ReadError is Head's error when the head revision N exists but cannot be
// read: the key reads as damaged (held) at N.
type ReadError struct {
	N   uint64
	Err error
}

func (e *ReadError) Error() string { return e.Err.Error() }
func (e *ReadError) Unwrap() error { return e.Err }

// Censuser is an optional capability: counting a key's revisions and
// finding the highest without keeping their names, which is most of what a
// free head's confirming listing costs on a long history. Without it, the
// store uses List.
//
// base is the lowest revision the key keeps (see Compacter; 1 for a key
// never compacted), read so that it agrees with the count: the history is
// dense exactly when count is top-base+1.
type Censuser interface {
	Census(ctx context.Context, loc Loc) (top uint64, count int, base uint64, err error)
}

// Count is a census of a key's history: Count revisions from Base up (1
// for a key never compacted), the highest Top. The history is dense
// exactly when Count is Top-Base+1.
type Count struct {
	Top   uint64
	Count int
	Base  uint64
}

// CountedHeader is an optional capability: reading loc's head (as Head)
// and a census of its history (as Censuser) in one snapshot of the store,
// where the backend can take both for about the price of the head alone.
// count is nil where the backend cannot vouch for a census taken with the
// head (the store then takes one with Census or List); when it is not,
// count.Top is n and count describes the history at the very instant the
// head was read. Without it, the store reads the head, then takes the
// census a free head's confirmation needs.
type CountedHeader interface {
	CountedHead(ctx context.Context, loc Loc) (n uint64, data []byte, count *Count, err error)
}

// OwnHeadChecker is an optional capability: telling, without reading it,
// that revision n is still loc's head and the very revision this backend
// published there (a step fenced on a store's own last revision). Any
// doubt is false. Without it, the store reads the head.
type OwnHeadChecker interface {
	IsOwnHead(ctx context.Context, loc Loc, n uint64) bool
}

// HeadAtReader is an optional capability: reading revision n of loc as
// its head, where the caller read n as the head a moment ago (prune reads
// again the heads its walk found): n+1 missing, then n read, without the
// search Head makes. A revision above n, n gone or the key gone is an
// error wrapping ErrHeadMoved; n unreadable, or the key not trusted, a
// *ReadError, as from Head. It reads exactly what Head would when n is
// the head, and never answers for another revision. Without it, the store
// reads the head with Head.
type HeadAtReader interface {
	HeadAt(ctx context.Context, loc Loc, n uint64) ([]byte, error)
}

// WalkSyncer is an optional capability: making durable at once every head
// a walk of the whole root read (heads: each key's highest revision seen),
// as Sync would one by one. Without it, each decision syncs its own key
// (Sync), which is nothing on a backend whose reads are durable.
type WalkSyncer interface {
	SyncWalk(ctx context.Context, heads map[Loc]uint64) error
}

// LayoutChecker is an optional capability: the checks of fsck that only a
// backend's own layout has — names that are not part of the format, the
// types, owners and modes of files, temporaries, and the repair of those a
// dead writer left. Without it (etcd, whose keys have no types, owners or
// temporaries), fsck checks what every backend lists: keys, revisions,
// gaps, damaged records and proofs.
type LayoutChecker interface {
	// CheckLayout reports what is wrong with the root itself and its kind
	// directories: foreign names, wrong types, untrusted modes.
	CheckLayout(ctx context.Context, report func(Finding)) error
	// CheckKey reports what is wrong with loc's directory and its files;
	// with repair, it removes the temporaries whose writer judge proves
	// gone, and says so in each finding. It is called for several keys at
	// once (never for one key twice at once), and calls report from the
	// calling goroutine only.
	CheckKey(ctx context.Context, loc Loc, repair bool, judge TempJudge, report func(Finding))
	// CheckProof reports what is wrong with the file of proof id.
	CheckProof(ctx context.Context, id string, report func(Finding))
}

// TempJudge judges the writer of a temporary whose name records it: gone
// (with why) means it can never publish it.
type TempJudge func(writer TempWriter) (gone bool, why string)

// TempWriter is who made a temporary, as its name records it.
type TempWriter struct {
	PID                int
	Start, Boot, PIDNS string
}

// Severity grades a finding.
type Severity string

const (
	// SeverityError: the root breaks the format: a damaged or gapped key
	// (which reads as held), a key directory that is not one, or a stopped
	// revision whose boot proof does not check.
	SeverityError Severity = "error"
	// SeverityWarning: something the format does not name, harmless to
	// exclusion (a foreign file, a temporary whose writer may live).
	SeverityWarning Severity = "warning"
)

// Finding kinds.
const (
	FindingDamaged     = "damaged-revision"
	FindingGap         = "gap"
	FindingKeyMismatch = "key-mismatch"
	FindingForeign     = "foreign-file"
	FindingUnsafePath  = "unsafe-path"
	FindingTemporary   = "temporary"
	FindingProof       = "proof"
	FindingUnreadable  = "unreadable"
	// FindingUntrusted: a directory or file under the root that another
	// user owns or may write. Its key reads as held; fsck --repair never
	// changes ownership or modes.
	FindingUntrusted = "untrusted"
	// FindingUnusedProof: a boot proof that no revision names.
	FindingUnusedProof = "unused-proof"
)

// Finding is one problem fsck found, with its path.
type Finding struct {
	Path     string
	Kind     string
	Severity Severity
	Message  string
	// Repairable is true when a repair may act: only for temporaries whose
	// writer is proven gone.
	Repairable bool
	Repaired   bool
	// RepairFailed is set when a repair tried and could not (a read-only
	// filesystem, a temporary that is a non-empty directory); Message says
	// why.
	RepairFailed bool
}

// RevisionName returns the file name of revision n: "r" and ten digits
// (as fmt's "r%010d.json": more where n is above MaxRevision).
func RevisionName(n uint64) string {
	if n > MaxRevision {
		return fmt.Sprintf("r%010d.json", n)
	}
	// Every publish names its revision: the digits are written directly.
	b := [16]byte{0: 'r', 11: '.', 12: 'j', 13: 's', 14: 'o', 15: 'n'}
	for i := 10; i >= 1; i-- {
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[:])
}

// ParseRevisionNameBytes is ParseRevisionName on bytes, allocating nothing.
func ParseRevisionNameBytes(name []byte) (uint64, bool) {
	if len(name) != 16 || name[0] != 'r' || string(name[11:]) != ".json" {
		return 0, false
	}
	var n uint64
	for _, c := range name[1:11] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, n > 0
}

// ParseRevisionName returns the number in a revision file name.
func ParseRevisionName(name string) (uint64, bool) {
	if len(name) != 16 || name[0] != 'r' || !strings.HasSuffix(name, ".json") {
		return 0, false
	}
	digits := name[1:11]
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	return n, err == nil && n > 0
}

// MaxRevision is the highest revision number the file name can carry.
const MaxRevision = 9_999_999_999

// Prepared is a revision readied by Backend.Prepare: written where the
// backend keeps it but neither published nor visible to readers. One
// of Commit and Abort must be called; Abort may always be called after
// Commit, and does nothing then.
type Prepared interface {
	// Commit publishes the revision exactly as Publish would have: one
	// publisher wins each number (the others get an error wrapping
	// ErrRevisionExists), and when Commit returns nil the revision is
	// durable.
	Commit(ctx context.Context) error
	// Abort discards the prepared revision; nothing of it is published.
	// After Commit (whatever it returned) it does nothing, so that it can
	// be deferred (as renameio's Cleanup).
	Abort()
}

// IsKeyHash reports whether name is a key's hash: 32 lowercase hex digits.
// Anything else under a kind is not a key's history.
func IsKeyHash(name string) bool {
	if len(name) != 32 {
		return false
	}
	for _, c := range name {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Stager is an optional capability of a Backend that a whole root is copied
// into (claimstore.Copy): the root is built where no reader takes it for
// one, and published at once, so that a copy is all or nothing. Without it,
// Copy writes the destination in place, and a copy that fails half way
// leaves a partial root that reads as if it were whole.
type Stager interface {
	// Stage returns where to build the root. The destination must hold no
	// root (else an error wrapping ErrNotEmpty). A staged root left by an
	// earlier copy that failed is taken up again: the caller's writes of
	// what it already holds then fail with ErrRevisionExists (or fs.ErrExist
	// for a proof), and the caller compares the bytes.
	Stage(ctx context.Context) (Staged, error)
	// Unstage removes a staged root that a failed copy left, durably, and
	// nothing else: ErrNothingStaged when there is none.
	Unstage(ctx context.Context) error
}

// Staged is a root being built by Stager.Stage: a Backend to write it
// with, and its publication.
type Staged interface {
	Backend
	// Commit publishes the staged root as the destination, atomically (a
	// reader sees nothing of it before, all of it after) and durably.
	Commit(ctx context.Context) error
}

// ErrEarlierTaken is returned by BatchPreparer.PrepareBatch for a
// revision after one whose number was found taken: it was not prepared,
// since the caller never links it once an earlier revision lost.
var ErrEarlierTaken = errors.New("not prepared: an earlier revision of the batch lost its number")

// ErrHeadMoved is returned by a GuardedPublisher's Commit when revision
// n-1 of the key is no longer the one the caller read (removed by prune,
// or removed and written again): nothing was published, and the caller
// re-reads and re-decides, as after a lost race.
var ErrHeadMoved = errors.New("the head this revision was to follow is no longer there")

// GuardedPublisher is an optional capability, required of a backend that
// removes keys (KeyRemover): publishing revision n only while revision n-1
// is still exactly prev. A key removed and written again from revision 1
// can come back to the same number with another claim in it (ABA); a
// publish that checked only that n is free would then land in the other
// claim's history. Without it (a backend that never removes a key), the
// store uses Prepare.
type GuardedPublisher interface {
	// PrepareOver is Prepare for a revision that follows prev: its
	// Commit publishes only while revision n-1 holds exactly prev, else it
	// fails with an error wrapping ErrHeadMoved and publishes nothing.
	// The check and the publication are one step as the key's remover
	// sees them: no removal falls between them.
	PrepareOver(ctx context.Context, loc Loc, n uint64, data, prev []byte, hook func(Barrier) error) (Prepared, error)
}

// PrepareRequest is one revision of a PrepareBatch or a PublishBatch:
// what Prepare (or, with Prev, PrepareOver) would be given.
type PrepareRequest struct {
	Loc  Loc
	N    uint64
	Data []byte
	// Prev, when non-nil and N > 1, is revision N-1 as the caller read it:
	// the revision is prepared as PrepareOver prepares it (GuardedPublisher).
	Prev []byte
	Hook func(Barrier) error
	// Fence, when set, is the caller's own check that the revision may
	// still be published (a step's: that the revisions below are still
	// the claim's heads and the numbers above them free). PrepareBatch
	// and PublishBatch call every request's Fence exactly once, after
	// every request of the batch is staged and before any is linked,
	// whatever its staging's outcome (a PublishBatch whose context is done
	// once its requests are staged returns that error, publishing nothing
	// and calling none); an error it returns becomes the request's, in
	// place of any other, and nothing of the request is then published.
	// A batch's fences are called one after another, in order, on one
	// goroutine, which need not be the caller's: the call returns only
	// after the last of them. The directory backend calls the fences of a
	// PrepareBatch while the temporaries' fsyncs are in flight, so that
	// the checks take no time of their own: on a goroutine beside the
	// caller's own fsync where the fsyncs are submitted at once
	// (io_uring), fsyncing a temporary whose fence then fails for
	// nothing; on the caller where they run on goroutines; and first,
	// fsyncing none whose fence failed, where a new directory's parent is
	// owed an fsync. A fenced request's name is not looked at before its
	// fsync: its fence is to say whether the number is still free (the
	// link decides in the end, as always).
	Fence func() error
}

// BatchPreparer is an optional capability: preparing several revisions (a
// step's seat and session revisions) so that every temporary is written
// before any is made durable, and then all are made durable at once. A
// journaling filesystem then commits them together: a sync issued while
// the other revision was still being written commits again for it.
//
// Each revision is prepared, or fails, as its own Prepare (PrepareOver)
// would: ps[i] is non-nil exactly when errs[i] is nil, and the caller
// commits or aborts each. Nothing is published. Without it, the store
// prepares the revisions with Prepare, overlapping them on goroutines.
//
// reqs are in the order the caller links them, and the caller links one
// only once every earlier one is linked. So a request after one whose
// number was found taken (ErrRevisionExists) is not prepared at all — no
// directory made, no temporary written or fsynced: it could never be
// linked — and its error wraps ErrEarlierTaken. A racer that lost the
// first key then pays nothing durable for the second.
type BatchPreparer interface {
	PrepareBatch(ctx context.Context, reqs []PrepareRequest) (ps []Prepared, errs []error)
}

// BatchPublisher is an optional capability: publishing revisions of many
// keys at once, each on its own terms, with the work that makes them
// durable shared. Request i is published exactly as Prepare (with Prev,
// PrepareOver) and Commit would publish it — its temporary durable before
// its link, one publisher winning its number, a guarded one only over
// Prev — and errs[i] is its own outcome: nil when it is published and
// durable, an error wrapping ErrRevisionExists or ErrHeadMoved when it
// lost (nothing of it published), or another error (nothing of it
// published, unless the error is a barrier hook's after the link). A
// request's barrier hooks are called in the order Prepare and Commit
// call them; those of different requests interleave.
//
// err, when not nil, fails the whole batch: a durability barrier failed,
// so a revision linked by then may not be durable and none may be relied
// on (the backend refuses to publish more, as after any failed fsync),
// or ctx was cancelled before the links. Without it, the store publishes
// the revisions one by one, several at once (prune's tombstones).
type BatchPublisher interface {
	PublishBatch(ctx context.Context, reqs []PrepareRequest) (errs []error, err error)
}

// Compacter is an optional capability: dropping the revisions of a key
// below a base revision while keeping its numbering, so that the key
// reads exactly as before (the same head, the same next number) and its
// history is dense from the base up. List, Census and Head see only the
// revisions from the base up; Read of a revision below it is absent.
// Without it, a store never compacts (prune removes nothing of seats).
type Compacter interface {
	// Base returns the lowest revision loc keeps: 1 for a key never
	// compacted (or without revisions).
	Base(ctx context.Context, loc Loc) (uint64, error)
	// ListFrom is List with the base it was taken against, read so that
	// the two agree: a compaction between them is not seen as a gap.
	ListFrom(ctx context.Context, loc Loc) (base uint64, revs []uint64, other []string, err error)
	// Compact makes base the lowest revision loc keeps, durably, then
	// removes the revisions below it: a crash in between leaves revisions
	// below the base, which no reader sees and a later Compact removes.
	// base must exist and must not be above the head; it never lowers
	// an existing base. Prune calls it for several keys at once, never
	// for one key twice at once.
	Compact(ctx context.Context, loc Loc, base uint64) error
}

// KeyRemover is an optional capability: removing a key's whole history,
// guarded so that it never races a writer. Without it, prune removes no
// key (sessions are compacted, if the backend can, instead).
type KeyRemover interface {
	// RemoveKey removes loc's history if and only if its head is still
	// revision n holding exactly head: else it fails with an error
	// wrapping ErrHeadMoved and removes nothing. A publish of n+1 (or of
	// n+1 over a tombstone) and the removal are ordered: exactly one of
	// them takes effect. The removal is durable when RemoveKey returns.
	RemoveKey(ctx context.Context, loc Loc, n uint64, head []byte) error
}

// RemovalMarker is an optional capability of a KeyRemover whose removal
// is not atomic with a check of the head (a directory): before RemoveKey,
// the store publishes a tombstone revision above the head (exclusively, as
// any revision), which every reader of the format then reads: the
// reference implementation as damaged (held), so that it cannot link
// above it, this store as free and being pruned. RemoveKey's head is then
// the tombstone. Without it, RemoveKey is called on the free head itself
// (etcd: one transaction compares and deletes).
type RemovalMarker interface {
	NeedsTombstone() bool
}

// Removal is one key of a KeyBatchRemover's batch: RemoveKey's arguments.
type Removal struct {
	Loc  Loc
	N    uint64
	Head []byte
}

// KeyBatchRemover is an optional capability of a KeyRemover: removing
// many keys at the cost of few durability barriers. Without it, the store
// calls RemoveKey once per key (a directory root then pays a directory
// fsync, and takes its prune lock, per key).
type KeyBatchRemover interface {
	// RemoveKeys is RemoveKey for each of rs, in order: errs[i] is what
	// RemoveKey(rs[i]) would have returned (ErrHeadMoved for a head that
	// moved; that key is left as it was and the others go on). Each
	// removal is guarded exactly as RemoveKey's is; they are durable when
	// RemoveKeys returns, and a crash before that leaves each key either
	// whole or removed, never half. err, when not nil, is a failure that
	// stopped the batch (an fsync, the lock): then no removal of rs may
	// be counted on, and errs is nil.
	RemoveKeys(ctx context.Context, rs []Removal) (errs []error, err error)
}

// Sweeper is an optional capability of a KeyRemover: finishing what
// removals left when they were cut short (a crash), durably. Prune calls
// it first and last (not in a dry run), and reports what it removed.
// Without it, prune sweeps nothing: a backend whose removal leaves nothing
// behind when it is cut short (etcd: one transaction deletes the key or
// does not) needs none; one whose removal does (a directory's renamed-away
// trash) and lacks it leaves that trash until something else removes it.
// Sweep removes only what a removal left, never a key's history.
type Sweeper interface {
	Sweep(ctx context.Context) (removed int, err error)
}

// FenceCollector is an optional capability of a backend whose requests
// can land after their reply was lost, and which fences such a request off
// with keys it writes (etcd: a fence key per lost reply): removing the
// fence keys that no request still in flight, anywhere, can get past once
// they are gone. Prune calls it after its removals (in a dry run, to count
// what it would collect) and reports what it did. Without it, prune
// collects nothing: a backend that writes no fences (a directory: a link
// whose reply was lost is decided by looking at the inode) needs none.
type FenceCollector interface {
	// CollectFences removes the fence keys no lost request can still
	// need, and reports how many it removed (in a dry run: how many it
	// would) and how many it left, with why. What cannot be collected
	// now for a reason that is not a failure (a cluster out of space
	// refuses the write that collection needs) is kept, with why, and is
	// not an error.
	CollectFences(ctx context.Context, dryRun bool) (FenceReport, error)
}

// FenceReport is what FenceCollector.CollectFences did.
type FenceReport struct {
	Collected int    // fence keys removed (or, in a dry run, that would be)
	Kept      int    // fence keys left
	Why       string // why the kept ones are left, when any are
}

// ArchiveLocator is an optional capability: where prune archives what it
// removes when the operator names no place (a directory root's archive/).
// Without it, prune needs an archive directory, or the explicit choice of
// none.
type ArchiveLocator interface {
	ArchiveDir() string
}

// Watcher is an optional capability: waiting without polling until a
// revision may have been added under some keys. Without it the store's
// Watch returns ErrCannotWatch, and a caller that waits uses its own
// means (claimctl: inotify on a directory root's key directories).
type Watcher interface {
	// WatchLocs starts watching locs' histories from now: everything
	// published under them after it returns, and possibly some of what
	// was published just before, wakes a Wait. So a caller that watches,
	// then reads, then waits misses nothing between its read and its
	// wait.
	WatchLocs(ctx context.Context, locs ...Loc) (Watch, error)
}

// Watch is a wait on keys' histories, made by Watcher.WatchLocs. What it
// reports is a hint, never a decision: after every Wait the caller reads
// again and decides on what it read.
type Watch interface {
	// Wait returns nil when something under the keys may have changed
	// since the watch began or the previous Wait returned (a wake-up may
	// be spurious, and a change seen by an earlier read may wake it
	// once more); ctx's error when ctx ends first; another error when
	// the watch cannot go on (the backend could not watch anew after
	// losing its watch). A watch that was lost and made again (a
	// compacted history, a member gone) wakes Wait, so that the caller
	// reads again: what happened in between is in what it reads.
	Wait(ctx context.Context) error
	// Close ends the watch.
	Close() error
}

// StatusDir is the name under the root (a directory, or a key component
// under an etcd prefix) that holds status records (StatusKeeper).
const StatusDir = "status"

// StatusKeeper is an optional capability: keeping small status records
// beside a root's history — what a tool last did there (classify --all's
// outcome, for monitoring) — under <root>/status/<name>.json. A status
// record decides nothing: no operation of the store reads one, so it is
// outside the claim protocol, and the rule that nothing is ever rewritten
// is about revisions and proofs. Unlike them, a status record is replaced
// by each write: atomically (a reader sees the old record or the new one,
// whole, never a part) and durably (when WriteStatus returns nil the new
// record survives a crash). A copy of a root (claimstore.Copy) does not
// carry them: they describe what was done to the source. Without this
// capability a store keeps no status.
type StatusKeeper interface {
	// WriteStatus replaces status record name (lowercase letters, digits
	// and '-') with data, at most MaxRecordSize bytes.
	WriteStatus(ctx context.Context, name string, data []byte) error
	// ReadStatus returns status record name; an absent one is an error
	// wrapping fs.ErrNotExist. It reads as revisions are read: bounded,
	// never through a symlink, only when trusted.
	ReadStatus(ctx context.Context, name string) ([]byte, error)
}

// ValidStatusName reports whether name may name a status record: 1 to 100
// lowercase letters, digits and '-', so that it is one file name (or key
// component) everywhere and never a temporary's or a path.
func ValidStatusName(name string) bool {
	if name == "" || len(name) > 100 {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// ListFromBase is Compacter.ListFrom for a backend whose base is read by
// base and whose listing is list (the base pointer named baseName among
// its other names): the base is read before and after the listing, which
// is taken again, up to three times, when a compaction moved the base in
// between; the revisions below the base and the pointer's own name are
// left out.
func ListFromBase(base func() (uint64, error), list func() ([]uint64, []string, error), baseName string) (uint64, []uint64, []string, error) {
	for attempt := 0; ; attempt++ {
		before, err := base()
		if err != nil {
			return 0, nil, nil, err
		}
		revs, other, err := list()
		if err != nil {
			return 0, nil, nil, err
		}
		after, err := base()
		if err != nil {
			return 0, nil, nil, err
		}
		if before != after && attempt < 3 {
			continue
		}
		names := other[:0]
		for _, name := range other {
			if name != baseName {
				names = append(names, name)
			}
		}
		return after, DropBelow(revs, after), names, nil
	}
}

// DropBelow returns revs (ascending) without those below base.
func DropBelow(revs []uint64, base uint64) []uint64 {
	i := 0
	for i < len(revs) && revs[i] < base {
		i++
	}
	return revs[i:]
}
