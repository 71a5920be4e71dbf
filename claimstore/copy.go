package claimstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/claimstore/claimstore/claimstore/storage"
)

// CopyReport is what Copy did.
type CopyReport struct {
	Keys, Revisions, Proofs int
	// Skipped names what was not copied: names under a key that are not
	// revisions (temporaries, an operator's notes), which no backend
	// reads as part of the history.
	Skipped []string
	// Resumed counts the revisions and proofs an earlier, unfinished copy
	// had made already, found identical and kept (counted in Revisions and
	// Proofs too).
	Resumed int
	// Staged says the copy was built where no reader takes it for a root
	// and published at once (the destination is a storage.Stager): a copy
	// that failed left nothing visible.
	Staged bool
}

// ErrCopyConflict is returned by Copy when the destination already holds
// a revision or proof that the source has: Copy never overwrites.
var ErrCopyConflict = errors.New("the destination already holds it; copy never overwrites (copy into an empty root)")

// Copy copies a whole root from src to dst, byte for byte: every revision
// of every key, in ascending order per key, then every proof, each
// published on dst exclusively and durably as a store publishes. A
// revision of src that cannot be read (damaged, untrusted) is an error: a
// copy that silently dropped it could turn a held key free. Copy is meant
// for a root no writer uses: it takes no claims.
//
// A copy is all or nothing where dst can stage it (storage.Stager, which
// both backends are): the root is built where no reader takes it for one
// (a staging directory renamed into place; on etcd, the prefix marked
// unfinished so that every reader refuses it) and published at once when
// everything is durable. A copy that fails leaves nothing a reader takes for
// a root; running it again starts it anew (directory) or resumes it (etcd:
// what is there already must be byte for byte the source's), and
// Unstage removes what it left. dst must hold no root: anything it holds
// is an error wrapping storage.ErrNotEmpty (or ErrCopyConflict, for a
// backend that cannot stage), and nothing is overwritten.
func Copy(ctx context.Context, dst, src Backend) (*CopyReport, error) {
	rep := &CopyReport{}
	to := dst
	var staged storage.Staged
	if st, ok := dst.(storage.Stager); ok {
		var err error
		if staged, err = st.Stage(ctx); err != nil {
			return rep, fmt.Errorf("copy: %w", err)
		}
		to, rep.Staged = staged, true
	} else if err := refuseNonEmpty(ctx, dst); err != nil {
		return rep, err
	}
	for _, kind := range []Kind{KindSeat, KindSession} {
		locs, err := src.Locs(ctx, kind)
		if err != nil {
			return rep, fmt.Errorf("copy: list %s keys: %w", kind, err)
		}
		for _, loc := range locs {
			// A compacted key is copied from its base, and the copy is
			// compacted to the same base: it reads as the source does.
			base := uint64(1)
			var revs []uint64
			var other []string
			var err error
			if c, ok := src.(storage.Compacter); ok {
				base, revs, other, err = c.ListFrom(ctx, loc)
			} else {
				revs, other, err = src.List(ctx, loc)
			}
			if err != nil {
				return rep, fmt.Errorf("copy: list %v: %w", loc, err)
			}
			rep.Keys++
			for _, name := range other {
				rep.Skipped = append(rep.Skipped, loc.String()+"/"+name)
			}
			for _, n := range revs {
				data, err := src.Read(ctx, loc, n)
				if err != nil {
					return rep, fmt.Errorf("copy: read %v revision %d: %w", loc, n, err)
				}
				err = to.Publish(ctx, loc, n, data, nil)
				if errors.Is(err, ErrRevisionExists) && staged != nil {
					// Left by the unfinished copy this one resumes: kept only
					// if it is the source's, byte for byte.
					have, rerr := to.Read(ctx, loc, n)
					if rerr == nil && bytes.Equal(have, data) {
						rep.Revisions++
						rep.Resumed++
						continue
					}
				}
				if err != nil {
					if errors.Is(err, ErrRevisionExists) {
						return rep, fmt.Errorf("copy: %v revision %d: %w: %w", loc, n, ErrCopyConflict, err)
					}
					return rep, fmt.Errorf("copy: %v revision %d: %w", loc, n, err)
				}
				rep.Revisions++
			}
			if base > 1 && len(revs) > 0 {
				c, ok := to.(storage.Compacter)
				if !ok {
					return rep, fmt.Errorf("copy: %v is compacted (its history starts at revision %d) and the destination cannot hold a compacted key", loc, base)
				}
				if err := c.Compact(ctx, loc, base); err != nil {
					return rep, fmt.Errorf("copy: %v: its base revision %d: %w", loc, base, err)
				}
			}
		}
	}
	ids, err := src.Proofs(ctx)
	if err != nil {
		return rep, fmt.Errorf("copy: list proofs: %w", err)
	}
	for _, id := range ids {
		data, err := src.ReadProof(ctx, id)
		if err != nil {
			return rep, fmt.Errorf("copy: read proof %s: %w", id, err)
		}
		err = to.WriteProof(ctx, id, data)
		if errors.Is(err, fs.ErrExist) && staged != nil {
			if have, rerr := to.ReadProof(ctx, id); rerr == nil && bytes.Equal(have, data) {
				rep.Proofs++
				rep.Resumed++
				continue
			}
		}
		if err != nil {
			if errors.Is(err, fs.ErrExist) {
				return rep, fmt.Errorf("copy: proof %s: %w: %w", id, ErrCopyConflict, err)
			}
			return rep, fmt.Errorf("copy: proof %s: %w", id, err)
		}
		rep.Proofs++
	}
	if staged != nil {
		if err := staged.Commit(ctx); err != nil {
			return rep, fmt.Errorf("copy: publishing the copied root: %w", err)
		}
	}
	return rep, nil
}

// Unstage removes what a copy into dst that failed left staged (see Copy),
// and nothing else: an error wrapping storage.ErrNothingStaged when there
// is none, or when dst cannot stage.
func Unstage(ctx context.Context, dst Backend) error {
	st, ok := dst.(storage.Stager)
	if !ok {
		return storage.ErrNothingStaged
	}
	return st.Unstage(ctx)
}

// refuseNonEmpty refuses a destination that holds any key or proof.
func refuseNonEmpty(ctx context.Context, be Backend) error {
	n := 0
	for _, kind := range []Kind{KindSeat, KindSession} {
		locs, err := be.Locs(ctx, kind)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("copy: reading the destination: %w", err)
		}
		n += len(locs)
	}
	ids, err := be.Proofs(ctx)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("copy: reading the destination: %w", err)
	}
	if n > 0 || len(ids) > 0 {
		return fmt.Errorf("copy: %w: the destination already holds %d keys and %d proofs; copy never overwrites: copy into an empty root", storage.ErrNotEmpty, n, len(ids))
	}
	return nil
}
