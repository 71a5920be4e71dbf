package dirbackend

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/claimstore/claimstore/claimstore/storage"
)

// ProofDir is the directory under the root that holds proof files.
const ProofDir = "proofs"

// ArchiveDir is the directory under the root that holds the archive
// segments claimctl prune writes before it removes anything.
const ArchiveDir = "archive"

// ErrNotClaimRoot is returned, wrapped in a *NotClaimRootError naming the
// directory, when a write would make a claim root of a directory that
// holds other things and nothing of a claim root (see NotClaimRoot): a
// mistyped --root must not scatter seat/ and session/ into /etc or a home
// directory. Nothing is written.
var ErrNotClaimRoot = errors.New("not a claim root")

// rootEntryNames are what a claim root holds, in the order messages name
// them: its kind directories, its proofs, its status records and its
// archive. lost+found is what a dedicated filesystem's root holds besides.
var rootEntryNames = []string{string(storage.KindSeat), string(storage.KindSession), ProofDir, storage.StatusDir, ArchiveDir}

var rootEntries = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range rootEntryNames {
		m[n] = true
	}
	return m
}()

// RootEntries returns the entries a claim root holds (a fresh slice, the
// caller's to keep): a directory holding any of them is a claim root.
func RootEntries() []string { return slices.Clone(rootEntryNames) }

// RootEntriesWords names the entries a claim root holds, as messages say
// them: "seat/, session/, proofs/, status/ or archive/".
func RootEntriesWords() string {
	var b strings.Builder
	for i, n := range rootEntryNames {
		switch {
		case i == len(rootEntryNames)-1:
			b.WriteString(" or ")
		case i > 0:
			b.WriteString(", ")
		}
		b.WriteString(n + "/")
	}
	return b.String()
}

// NotClaimRoot says whether a directory holding names (its entries) may be
// used as a claim root: it may when it is empty (nothing claimed yet), when
// it holds any of RootEntries (a claim root, perhaps with stray files that
// fsck reports), or only lost+found (a filesystem made for it). For any
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
// Entries (sorted) and none of RootEntries. It wraps
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
	return fmt.Sprintf("%s is not a claim root: it holds %s and none of %s; the store writes only into an empty directory (or one it creates) or an existing claim root: pass the claim root with --root (or CLAIMSTORE_ROOT), or an empty directory for a new one; nothing was written", e.Root, e.Shown(), RootEntriesWords())
}

func (e *NotClaimRootError) Unwrap() error { return ErrNotClaimRoot }
