package claimstore

import (
	"errors"
	"fmt"
	"strings"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/internal/quote"
)

// Sentinel errors. Each is returned wrapped, with the path or key involved;
// test for them with errors.Is.
var (
	// ErrRevisionExists is returned by Backend.Publish when the revision
	// number is already taken by another writer's file. The store treats it
	// as a lost race: it re-reads and re-decides, or refuses.
	ErrRevisionExists = storage.ErrRevisionExists

	// ErrNotEmpty is returned by Copy when the destination holds a root
	// already: a copy never overwrites.
	ErrNotEmpty = storage.ErrNotEmpty

	// ErrUnfinishedCopy is returned by every operation on a root that a
	// copy began and did not finish (see Copy): keys of the source may be
	// missing from it, and a missing key would read free.
	ErrUnfinishedCopy = storage.ErrUnfinishedCopy

	// ErrNothingStaged is returned by Unstage when there is no unfinished
	// copy to remove.
	ErrNothingStaged = storage.ErrNothingStaged

	// ErrCopyAborted is returned by a copy whose unfinished root was
	// removed (copy --abort) while it ran.
	ErrCopyAborted = storage.ErrCopyAborted

	// ErrCannotWatch is returned by Store.Watch when the backend has no
	// storage.Watcher (the directory backend: claimctl waits on it with
	// inotify).
	ErrCannotWatch = storage.ErrCannotWatch

	// ErrUnsafeRoot is returned by the directory backend (dirbackend.Open,
	// and before a first write) when the claim root is a symlink, not a
	// directory, or writable by another user: a root that cannot promise
	// exclusion is refused, not used.
	ErrUnsafeRoot = storage.ErrUnsafeRoot

	// ErrUnsafePath is returned when a path under the root cannot be
	// trusted: a key directory, proofs/ or a revision or proof file that is
	// a symlink, not the kind of file the format says it is, owned by
	// another user than the root's, or writable by group or others. Such a
	// key reads as damaged (held); the store never follows the link and
	// never publishes into such a directory.
	ErrUnsafePath = storage.ErrUnsafePath

	// ErrSyncFailed is returned, wrapping the cause, by every mutation of a
	// store after an fsync failed. A failed fsync may have lost the write
	// while the page cache still shows it (Linux may drop the dirty pages
	// and report the error once, to this process only), so nothing that
	// depends on it is ever acknowledged. Other processes cannot see the
	// loss either: treat the disk as failing, and reboot (which empties the
	// page cache) before trusting what the root shows.
	ErrSyncFailed = storage.ErrSyncFailed

	// ErrBadPatch is returned by Advance when a patch names a member the
	// store owns (claimId, key, revision, writtenAt, version, kind, host) or
	// an invalid state.
	ErrBadPatch = errors.New("invalid patch")

	// ErrReleased is returned by Advance and Release for a claim that was
	// already released: a claim whose records say stopped with a proof is
	// over, and a new one must be taken.
	ErrReleased = errors.New("the claim was released")

	// ErrRecordTooLarge is returned by Acquire, Advance, Release and
	// Classify, before anything is published, when a revision would be
	// larger than MaxFileSize: every reader refuses a larger file as
	// damaged, so publishing it would hold the key forever, its owner's own
	// steps included. The error names the size and the limit.
	ErrRecordTooLarge = errors.New("record too large")

	// ErrNotOwned is returned when an operation names a claim the store
	// did not issue (a nil claim or one without keys).
	ErrNotOwned = errors.New("not a claim of this store")

	// ErrNoStatus is returned by RecordClassifyAll on a backend that keeps
	// no status records (no storage.StatusKeeper).
	ErrNoStatus = errors.New("this root keeps no status records")

	// ErrBadDecommission is returned, wrapped, by Decommission and
	// LiftDecommission for input that names no valid record (a machine id that
	// is not 32 lowercase hex digits, an evidence kind outside Evidences, an
	// empty, oversized or non-UTF-8 reason): nothing is written.
	ErrBadDecommission = errors.New("invalid decommission")

	// ErrOwnMachine is returned, wrapped, by Decommission when the machine named
	// is the one the store runs on: a machine cannot assert its own death, and
	// the claims of this machine are judged here on better evidence (its
	// processes and boots). Nothing is written.
	ErrOwnMachine = errors.New("this is the machine to be decommissioned")

	// ErrUnknownMachine is returned, wrapped, by Decommission when no head
	// under the root names the machine: a typo would otherwise quarantine a
	// machine that never took a claim here, and free nothing. Nothing is
	// written.
	ErrUnknownMachine = errors.New("the store has never seen this machine")

	// ErrQuarantined is returned, as a *QuarantinedError, by Acquire on a
	// machine whose newest decommission record is a decommission: it
	// takes no claims until the record is lifted (LiftDecommission).
	ErrQuarantined = errors.New("this machine is decommissioned")
)

// MaxFileSize bounds what a store reads of a revision or a proof, and what
// it writes: a record is a few hundred bytes; a larger one is damaged (its
// key reads as held), so that a planted giant value cannot make every
// reader allocate without bound.
const MaxFileSize = storage.MaxRecordSize

// DamageError says why a revision is damaged. The key holding it reads as
// Uncertain until an operator repairs it.
type DamageError = storage.DamageError

// KeyError reports a malformed key value. Nothing is touched on disk.
type KeyError struct {
	Field string // seat, project, workspace, session or kind
	// Value is the value as given, whole; a message quotes at most a
	// bounded prefix of it (quote.Prefix), however long it is.
	Value  string
	Reason string
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("invalid key: %s %s %s", e.Field, quote.Prefix(e.Value), e.Reason)
}

// Code is the code of a refusal. The vocabulary is closed: these three are
// all there are.
type Code string

const (
	// AlreadyActive: a live or possibly live owner holds the key.
	AlreadyActive Code = "already-active"
	// UnsafeReplacement: the key is held in a state nobody can prove over:
	// damaged, held by two claims, moved under the caller, stopping, or
	// uncertain.
	UnsafeReplacement Code = "unsafe-replacement"
	// ForeignHost: the key is held by a claim taken on another machine.
	ForeignHost Code = "foreign-host"
)

// Codes lists every refusal code.
var Codes = []Code{AlreadyActive, UnsafeReplacement, ForeignHost}

// Refusal is the store declining an operation because exclusion cannot be
// promised. It is not a failure of the store: the keys are held, and Hint
// says what an operator can do. Use errors.As to inspect it.
type Refusal struct {
	Code    Code
	Keys    []Key  // the keys involved
	ClaimID string // the claim holding them, when one is known
	Reason  string // what the store saw
	Hint    string // what to do
	Err     error  // the underlying cause, if any (an I/O error, a damaged revision)
}

func (r *Refusal) Error() string {
	var b strings.Builder
	b.WriteString("refused (")
	b.WriteString(string(r.Code))
	b.WriteString("): ")
	b.WriteString(r.Reason)
	if r.Err != nil {
		b.WriteString(": ")
		b.WriteString(r.Err.Error())
	}
	if r.Hint != "" {
		b.WriteString("; ")
		b.WriteString(r.Hint)
	}
	return b.String()
}

func (r *Refusal) Unwrap() error { return r.Err }

// hints per code, for operators.
var hints = map[Code]string{
	AlreadyActive:     "wait for the owner to release it; if its supervisor died, run `claimctl classify` to judge the owner",
	UnsafeReplacement: "nothing proves the writer is over: run `claimctl show` for the evidence, and `claimctl classify` after a crash or reboot; if a key is damaged, run `claimctl fsck`",
	ForeignHost:       "the claim belongs to another machine: classify it there, or release it there with a proof; if that machine will never run again, see `claimctl help decommission`",
}

func refuse(code Code, claimID, reason string, err error, keys ...Key) *Refusal {
	return &Refusal{Code: code, Keys: keys, ClaimID: claimID, Reason: reason, Hint: hints[code], Err: err}
}
