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
	key     claimstore.Key
	dir     string
	missing []uint64 // ascending
	top     uint64
}

// gapOf lists k's history and returns its gap, or nil when the history is
// dense (or cannot be listed: the store reports that itself).
func gapOf(s *claimstore.Store, k claimstore.Key) *gap {
	revs, _, err := s.Backend().List(k.Loc())
	if err != nil || len(revs) == 0 || revs[0] == 1 && revs[len(revs)-1] == uint64(len(revs)) {
		return nil
	}
	g := &gap{key: k, dir: s.KeyDir(k), top: revs[len(revs)-1]}
	want := uint64(1)
	for _, n := range revs {
		for ; want < n && len(g.missing) < 1000; want++ {
			g.missing = append(g.missing, want)
		}
		want = n + 1
	}
	return g
}

// what names the missing revisions: "revision 2 is missing" or "revisions
// 2-4 and 7 are missing", with at most five ranges.
func (g *gap) what() string {
	var ranges []string
	count := 0
	for i := 0; i < len(g.missing); {
		j := i
		for j+1 < len(g.missing) && g.missing[j+1] == g.missing[j]+1 {
			j++
		}
		count += j - i + 1
		if len(ranges) < 5 {
			if i == j {
				ranges = append(ranges, fmt.Sprint(g.missing[i]))
			} else {
				ranges = append(ranges, fmt.Sprintf("%d-%d", g.missing[i], g.missing[j]))
			}
		} else if len(ranges) == 5 {
			ranges = append(ranges, "more")
		}
		i = j + 1
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
