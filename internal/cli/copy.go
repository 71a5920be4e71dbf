package cli

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/claimstore/claimstore/claimstore"
)

var copyCmd = &command{
	name:    "copy",
	args:    "--from ROOT --to ROOT " + connSyn + " [--json]",
	summary: "Copy a whole claim root to another, between backends (directory, etcd), byte for byte.",
	noRoot:  true,
	doc: `
copy copies every revision of every key and every boot proof from the root
--from to the root --to, each published on the destination exclusively and
durably as a store publishes it, with the very bytes of the source: a record
copied from a directory to etcd and back is the file it was. Either root may
be a directory or etcd://host:2379[,host:2379...]/prefix (the connection
flags apply to both).

The destination must be empty: copy never overwrites, and refuses a
destination that holds any key or proof before it starts (exit 1). Names
under a key that are not revisions (a temporary, an operator's note) are not
copied, and are listed. A source revision that cannot be read stops the
copy (exit 1): leaving it out could make a held key read free on the
destination. Copy a root no supervisor is writing: copy takes no claims.`,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		from := fs.String("from", "", "the `root` to copy from: a directory or an etcd:// URL")
		to := fs.String("to", "", "the `root` to copy to, which must be empty")
		registerConnFlags(fs, &c.conn)
		return func(e *env) error {
			e.conn = c.conn
			if *from == "" || *to == "" {
				return usagef("copy needs both --from ROOT and --to ROOT")
			}
			src, err := e.copyRoot(*from, "--from")
			if err != nil {
				return err
			}
			if !src.Etcd {
				if _, err := os.Lstat(src.Path); err != nil {
					return fmt.Errorf("claim root %s (from --from): %w; pass an existing root to copy", src.Path, err)
				}
			}
			dst, err := e.copyRoot(*to, "--to")
			if err != nil {
				return err
			}
			if src.Path == dst.Path {
				return usagef("--from and --to name the same root %s", src.Path)
			}
			ss, err := e.openStore(src, false)
			if err != nil {
				return err
			}
			ds, err := e.openStore(dst, true)
			if err != nil {
				return err
			}
			if err := refuseNonEmpty(ds); err != nil {
				return err
			}
			rep, err := claimstore.Copy(ds.Backend(), ss.Backend())
			j := copyJSON{From: ss.Root(), To: ds.Root(), Skipped: []string{}}
			if rep != nil {
				j.Keys, j.Revisions, j.Proofs = rep.Keys, rep.Revisions, rep.Proofs
				j.Skipped = append(j.Skipped, rep.Skipped...)
			}
			if err != nil {
				return fmt.Errorf("%w (copied before it: %d keys, %d revisions, %d proofs)", err, j.Keys, j.Revisions, j.Proofs)
			}
			e.done = fmt.Sprintf("%s was copied to %s", j.From, j.To)
			if c.json {
				writeJSON(e.stdout, j)
				return nil
			}
			fmt.Fprintf(e.stdout, "copied %d keys (%d revisions) and %d proofs from %s to %s\n", j.Keys, j.Revisions, j.Proofs, esc(j.From), esc(j.To))
			for _, s := range j.Skipped {
				fmt.Fprintf(e.stderr, "claimctl copy: note: not copied (not a revision): %s\n", esc(s))
			}
			return nil
		}
	},
}

func init() {
	jsonTypes = append(jsonTypes, jsonType{"copy", copyJSON{}, "`copy --json`", map[string]string{
		"from":      "the root copied from",
		"to":        "the root copied to",
		"keys":      "keys copied",
		"revisions": "revisions copied",
		"proofs":    "boot proofs copied",
		"skipped":   "names under a key that are not revisions, not copied (kind/hash/name)",
	}})
}

type copyJSON struct {
	From      string   `json:"from"`
	To        string   `json:"to"`
	Keys      int      `json:"keys"`
	Revisions int      `json:"revisions"`
	Proofs    int      `json:"proofs"`
	Skipped   []string `json:"skipped"`
}

// copyRoot resolves --from or --to as --root is resolved.
func (e *env) copyRoot(v, flagName string) (rootChoice, error) {
	rc, err := e.resolveRoot(v, true)
	if err != nil {
		var u usageErr
		if errors.As(err, &u) {
			return rc, usagef("%s: %s", flagName, strings.TrimPrefix(strings.TrimPrefix(u.msg, "--root "), "--root: "))
		}
		return rc, err
	}
	rc.Source = flagName
	return rc, nil
}

// refuseNonEmpty refuses a destination that holds any key or proof.
func refuseNonEmpty(s *claimstore.Store) error {
	be := s.Backend()
	n := 0
	for _, kind := range []claimstore.Kind{claimstore.KindSeat, claimstore.KindSession} {
		locs, err := be.Locs(kind)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("reading the destination %s: %w", s.Root(), err)
		}
		n += len(locs)
	}
	ids, err := be.Proofs()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reading the destination %s: %w", s.Root(), err)
	}
	if n > 0 || len(ids) > 0 {
		return fmt.Errorf("the destination %s already holds %d keys and %d proofs; copy never overwrites: copy into an empty root", s.Root(), n, len(ids))
	}
	return nil
}
