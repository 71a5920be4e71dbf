package storage

import (
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

// ErrNothingStaged is returned by Stager.Unstage when no unfinished copy
// is there to remove.
var ErrNothingStaged = errors.New("no unfinished copy to remove")

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
// a key exclusively and durably, read a key's head, list its history, and
// list keys. Everything above it (records, states, the pair, refusals,
// classify) is the same for any backend; a backend on a distributed engine
// implements these same five methods with the same guarantees.
type Backend interface {
	// Head returns the number and contents of loc's highest revision, or
	// 0 and nil when loc has none. data is nil with a non-nil readErr when
	// the revision exists but cannot be read; err is for failures to
	// determine the head at all.
	Head(loc Loc) (n uint64, data []byte, readErr, err error)

	// Read returns the contents of revision n of loc.
	Read(loc Loc, n uint64) ([]byte, error)

	// Publish makes data revision n of loc. Exactly one publisher wins each
	// number: the others get an error wrapping ErrRevisionExists. When
	// Publish returns nil the revision is durable; its name never refers
	// to anything but data. hook is called at the barrier points (nil: no
	// hook) with the barrier only; the store fills in the rest. It is
	// Prepare followed by Commit.
	Publish(loc Loc, n uint64, data []byte, hook func(Barrier) error) error

	// Prepare does what of Publish can be done before the exclusive step
	// (for the directory backend: directories made, a temporary written
	// and fsynced; hook sees temp-written and temp-synced), so that it can
	// overlap other work; Commit on the result does the rest (linked,
	// dir-synced). Nothing is visible to readers before Commit. Prepare
	// and Commit may run concurrently with any other method.
	Prepare(loc Loc, n uint64, data []byte, hook func(Barrier) error) (Prepared, error)

	// List returns the revision numbers of loc in ascending order, and
	// the names in its directory that are not revisions.
	List(loc Loc) (revs []uint64, other []string, err error)

	// Locs returns every key of the given kind that has a history.
	Locs(kind Kind) ([]Loc, error)

	// Sync makes revision n of loc, and every revision below it, durable
	// as they can be read now, whoever published them: a writer that
	// crashed after its link and before its directory fsync leaves a
	// revision that every reader sees and a power cut can still take away.
	// A decision that frees, completes or publishes on the strength of a
	// head it read calls Sync on that head first. A backend whose reads
	// only ever see durable data (a consensus store) returns nil.
	Sync(loc Loc, n uint64) error

	// WriteProof stores a proof under id, exclusively and durably, as
	// Publish stores a revision; an existing id is an error wrapping
	// fs.ErrExist, returned once the existing proof is durable too.
	// ReadProof returns it; Proofs lists the ids.
	WriteProof(id string, data []byte) error
	ReadProof(id string) ([]byte, error)
	Proofs() ([]string, error)
}

// RevisionName returns the file name of revision n: "r" and ten digits.
func RevisionName(n uint64) string { return fmt.Sprintf("r%010d.json", n) }

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
// backend keeps it but neither published nor visible to readers. Exactly
// one of Commit and Abort must be called, once.
type Prepared interface {
	// Commit publishes the revision exactly as Publish would have: one
	// publisher wins each number (the others get an error wrapping
	// ErrRevisionExists), and when Commit returns nil the revision is
	// durable.
	Commit() error
	// Abort discards the prepared revision; nothing of it is published.
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
	Stage() (Staged, error)
	// Unstage removes a staged root that a failed copy left, durably, and
	// nothing else: ErrNothingStaged when there is none.
	Unstage() error
}

// Staged is a root being built by Stager.Stage: a Backend to write it
// with, and its publication.
type Staged interface {
	Backend
	// Commit publishes the staged root as the destination, atomically (a
	// reader sees nothing of it before, all of it after) and durably.
	Commit() error
}
