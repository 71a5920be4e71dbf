package cli

import (
	"fmt"
	"strings"

	"github.com/claimstore/claimstore/claimstore"
)

// A gap is a revision missing below a key's newest one: lost in a crash of
// the disk, deleted or planted by hand. The store reads such a key as held
// (damaged) wherever the gap could matter. What an operator needs to read
// is which revisions are missing — "damaged head revision 3" for a valid
// revision 3 sends them looking at the wrong file.

// gap is what a listing of one key showed when its history is not dense.
type gap struct {
	key  claimstore.Key
	dir  string
	gaps []claimstore.Gap // ascending
	top  uint64
}

// gapOf returns k's gap, or nil when the history is dense (or cannot be
// listed: the store reports that itself).
func gapOf(s *claimstore.Store, k claimstore.Key) *gap {
	top, gaps, err := s.Gaps(bg, k)
	if err != nil || len(gaps) == 0 {
		return nil
	}
	return &gap{key: k, dir: s.KeyDir(k), gaps: gaps, top: top}
}

// what names the missing revisions, whole: "revision 2 is missing",
// "revisions 2-4 and 7 are missing", "revisions 5-9999999998 are missing",
// with at most five runs named and the rest counted.
func (g *gap) what() string {
	var ranges []string
	var count uint64
	for i, r := range g.gaps {
		count += r.Count()
		switch {
		case i >= 5:
		case r.From == r.To:
			ranges = append(ranges, fmt.Sprint(r.From))
		default:
			ranges = append(ranges, fmt.Sprintf("%d-%d", r.From, r.To))
		}
	}
	if more := len(g.gaps) - len(ranges); more > 0 {
		ranges = append(ranges, fmt.Sprintf("%d more runs (%d revisions in all)", more, count))
	}
	list := ranges[0]
	if len(ranges) > 1 {
		list = strings.Join(ranges[:len(ranges)-1], ", ") + " and " + ranges[len(ranges)-1]
	}
	if count == 1 {
		return "revision " + list + " is missing"
	}
	return "revisions " + list + " are missing"
}

// reason is the whole sentence for a refusal or a show line.
func (g *gap) reason() string {
	return fmt.Sprintf("%s has a gap in its history: %s below revision %d (%s); the key reads as held until an operator restores them", g.key, g.what(), g.top, g.dir)
}

// gapHint is what to do about a gap.
func gapHint(s *claimstore.Store) string {
	return fmt.Sprintf("run `claimctl fsck --root %s` for every gap and `claimctl log` for the history; restore the missing revisions from a backup, or retire the key, by hand (nothing in claimstore rewrites history)", shellQuote(s.Root()))
}

// gapError is the damage of a head read above a gap.
type gapError struct{ g *gap }

func (e gapError) Error() string { return e.g.reason() }

// headAboveGap returns h, or when k's history has a gap, the head as the
// store reads it for a write: the newest revision, damaged by the gap. A
// plain read of a held head may stop below a gap; show must not.
func headAboveGap(s *claimstore.Store, h *claimstore.Head) *claimstore.Head {
	g := gapOf(s, h.Key)
	if g == nil {
		return h
	}
	return &claimstore.Head{Key: h.Key, N: g.top, Damage: gapError{g}}
}

// gapRefusal rewrites a refusal about a damaged head to name the missing
// revisions when the damage is a gap in one of keys.
func gapRefusal(s *claimstore.Store, r *claimstore.Refusal, keys ...claimstore.Key) bool {
	if r == nil || r.Code != claimstore.UnsafeReplacement {
		return false
	}
	for _, k := range keys {
		if g := gapOf(s, k); g != nil {
			r.Reason, r.Hint, r.Err = g.reason(), gapHint(s), nil
			return true
		}
	}
	return false
}
