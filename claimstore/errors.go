package claimstore

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/claimstore/claimstore/claimstore/storage"
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

	// ErrUnsafeRoot is returned by Open when the claim root is a symlink,
	// not a directory, or writable by another user: a root that cannot
	// promise exclusion is refused, not used.
	ErrUnsafeRoot = errors.New("unsafe claim root")

	// ErrUnsafePath is returned when a path under the root cannot be
	// trusted: a key directory, proofs/ or a revision or proof file that is
	// a symlink, not the kind of file the format says it is, owned by
	// another user than the root's, or writable by group or others. Such a
	// key reads as damaged (held); the store never follows the link and
	// never publishes into such a directory.
	ErrUnsafePath = errors.New("unsafe path in claim root")

	// ErrSyncFailed is returned, wrapping the cause, by every mutation of a
	// store after an fsync failed. A failed fsync may have lost the write
	// while the page cache still shows it (Linux may drop the dirty pages
	// and report the error once, to this process only), so nothing that
	// depends on it is ever acknowledged. Other processes cannot see the
	// loss either: treat the disk as failing, and reboot (which empties the
	// page cache) before trusting what the root shows.
	ErrSyncFailed = errors.New("an fsync failed; the store no longer acknowledges writes")

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

	// ErrNotClaimRoot is returned, wrapped in a *NotClaimRootError naming
	// the directory, when a write would make a claim root of a directory that
	// holds other things and nothing of a claim root (see NotClaimRoot):
	// a mistyped --root must not scatter seat/ and session/ into /etc or
	// a home directory. Nothing is written.
	ErrNotClaimRoot = errors.New("not a claim root")

	// ErrNotOwned is returned when an operation names a claim the store
	// did not issue (a nil claim or one without keys).
	ErrNotOwned = errors.New("not a claim of this store")
)

// KeyError reports a malformed key value. Nothing is touched on disk.
type KeyError struct {
	Field  string // seat, project, workspace, session or kind
	Value  string
	Reason string
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("invalid key: %s %q %s", e.Field, e.Value, e.Reason)
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
	ForeignHost:       "the claim belongs to another machine: classify it there, or release it there with a proof",
}

func refuse(code Code, claimID, reason string, err error, keys ...Key) *Refusal {
	return &Refusal{Code: code, Keys: keys, ClaimID: claimID, Reason: reason, Hint: hints[code], Err: err}
}

// rootEntries are what a claim root holds: its kind directories and its
// proofs. lost+found is what a dedicated filesystem's root holds besides.
var rootEntries = map[string]bool{string(KindSeat): true, string(KindSession): true, ProofDir: true}

// NotClaimRoot says whether a directory holding names (its entries) may be
// used as a claim root: it may when it is empty (nothing claimed yet), when
// it holds seat/, session/ or proofs/ (a claim root, perhaps with stray files
// that fsck reports), or only lost+found (a filesystem made for it). For any
// other directory it returns a *NotClaimRootError.
func NotClaimRoot(root string, names []string) error {
	var others []string
	for _, n := range names {
		if rootEntries[n] {
			return nil
		}
		if n != "lost+found" {
			others = append(others, n)
		}
	}
	if len(others) == 0 {
		return nil
	}
	sort.Strings(others)
	return &NotClaimRootError{Root: root, Entries: others}
}

// NotClaimRootError says a directory is not a claim root: it holds
// Entries (sorted) and none of seat/, session/ or proofs/. It wraps
// ErrNotClaimRoot.
type NotClaimRootError struct {
	Root    string
	Entries []string
}

// Shown quotes the first few entries, for a message: `"apt", "dpkg"`, or
// `"a", "b", "c", … (12 in all)`.
func (e *NotClaimRootError) Shown() string {
	shown := e.Entries
	if len(shown) > 3 {
		shown = shown[:3]
	}
	q := make([]string, len(shown))
	for i, n := range shown {
		q[i] = strconv.Quote(n)
	}
	more := ""
	if len(e.Entries) > len(shown) {
		more = fmt.Sprintf(", … (%d in all)", len(e.Entries))
	}
	return strings.Join(q, ", ") + more
}

func (e *NotClaimRootError) Error() string {
	return fmt.Sprintf("%s is not a claim root: it holds %s and none of seat/, session/ or proofs/; the store writes only into an empty directory (or one it creates) or an existing claim root: pass the claim root with --root (or CLAIMSTORE_ROOT), or an empty directory for a new one; nothing was written", e.Root, e.Shown())
}

func (e *NotClaimRootError) Unwrap() error { return ErrNotClaimRoot }
