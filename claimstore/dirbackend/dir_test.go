package dirbackend

import (
	"path/filepath"
	"testing"

	"github.com/claimstore/claimstore/claimstore/storage"
	"pgregory.net/rapid"
)

// A key's directory is filepath.Join of the root, the kind and the hash,
// whatever the root (the filesystem's own, relative, unclean) and whatever
// the hash: a plain name concatenated, anything else joined.
func TestDirIsJoin(t *testing.T) {
	roots := []string{"/", "/srv/claims", "/srv/claims/", "rel/root", ".", "/a/../b//c"}
	kinds := []storage.Kind{storage.KindSeat, storage.KindSession, "other", ""}
	hashes := []string{"0123456789abcdef0123456789abcdef", "x", "", ".", "..", "a/b", "../up", "/abs", "trailing/", "..."}
	check := func(t interface{ Fatalf(string, ...any) }, root string, loc storage.Loc) {
		b := New(root, nil)
		if got, want := b.dir(loc), filepath.Join(b.root, string(loc.Kind), loc.Hash); got != want {
			t.Fatalf("dir(%+v) under %q = %q, want %q", loc, root, got, want)
		}
	}
	for _, root := range roots {
		for _, kind := range kinds {
			for _, hash := range hashes {
				check(t, root, storage.Loc{Kind: kind, Hash: hash})
			}
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		root := rapid.SampledFrom(roots).Draw(t, "root")
		kind := rapid.SampledFrom(kinds).Draw(t, "kind")
		hash := rapid.StringOfN(rapid.SampledFrom([]rune{'a', '0', '.', '/'}), 0, 6, -1).Draw(t, "hash")
		check(t, root, storage.Loc{Kind: kind, Hash: hash})
	})
}
