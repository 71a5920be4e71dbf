package claimstore

import (
	"errors"
	"fmt"
	"io/fs"
)

// CopyReport is what Copy did.
type CopyReport struct {
	Keys, Revisions, Proofs int
	// Skipped names what was not copied: names under a key that are not
	// revisions (temporaries, an operator's notes), which no backend
	// reads as part of the history.
	Skipped []string
}

// ErrCopyConflict is returned by Copy when the destination already holds
// a revision or proof that the source has: Copy never overwrites.
var ErrCopyConflict = errors.New("the destination already holds it; copy never overwrites (copy into an empty root)")

// Copy copies a whole root from src to dst, byte for byte: every revision
// of every key, in ascending order per key, then every proof, each
// published on dst exclusively and durably as a store publishes. A
// revision or proof that dst already holds is an error wrapping
// ErrCopyConflict (nothing is overwritten, and what was copied before it
// stays). A revision of src that cannot be read (damaged, untrusted) is
// an error too: a copy that silently dropped it could turn a held key
// free. Copy is meant for a root no writer uses: it takes no claims.
func Copy(dst, src Backend) (*CopyReport, error) {
	rep := &CopyReport{}
	for _, kind := range []Kind{KindSeat, KindSession} {
		locs, err := src.Locs(kind)
		if err != nil {
			return rep, fmt.Errorf("copy: list %s keys: %w", kind, err)
		}
		for _, loc := range locs {
			revs, other, err := src.List(loc)
			if err != nil {
				return rep, fmt.Errorf("copy: list %v: %w", loc, err)
			}
			rep.Keys++
			for _, name := range other {
				rep.Skipped = append(rep.Skipped, loc.String()+"/"+name)
			}
			for _, n := range revs {
				data, err := src.Read(loc, n)
				if err != nil {
					return rep, fmt.Errorf("copy: read %v revision %d: %w", loc, n, err)
				}
				if err := dst.Publish(loc, n, data, nil); err != nil {
					if errors.Is(err, ErrRevisionExists) {
						return rep, fmt.Errorf("copy: %v revision %d: %w: %w", loc, n, ErrCopyConflict, err)
					}
					return rep, fmt.Errorf("copy: %v revision %d: %w", loc, n, err)
				}
				rep.Revisions++
			}
		}
	}
	ids, err := src.Proofs()
	if err != nil {
		return rep, fmt.Errorf("copy: list proofs: %w", err)
	}
	for _, id := range ids {
		data, err := src.ReadProof(id)
		if err != nil {
			return rep, fmt.Errorf("copy: read proof %s: %w", id, err)
		}
		if err := dst.WriteProof(id, data); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return rep, fmt.Errorf("copy: proof %s: %w: %w", id, ErrCopyConflict, err)
			}
			return rep, fmt.Errorf("copy: proof %s: %w", id, err)
		}
		rep.Proofs++
	}
	return rep, nil
}
