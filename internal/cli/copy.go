package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/claimstore/claimstore/claimstore"
)

var copyCmd = &command{
	name:    "copy",
	args:    "(--from ROOT --to ROOT | --abort --to ROOT) " + connSyn + " [--json]",
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
destination that holds anything before it starts (exit 1). Names under a key
that are not revisions (a temporary, an operator's note) are not copied, and
are listed. A source revision that cannot be read stops the copy (exit 1):
leaving it out could make a held key read free on the destination. Copy a
root no supervisor is writing: copy takes no claims.

A copy is all or nothing. Into a directory, it is built in a staging
directory beside the destination (.NAME.claimctl-copy) and renamed into place
once everything in it is durable; into etcd, the prefix is marked unfinished
(PREFIX/copying) first, every command refuses a marked root, and the mark is
deleted last. A copy that failed leaves nothing any reader takes for a root:
run the same command again (into a directory it starts anew; into etcd it
resumes, keeping what matches the source byte for byte), or remove what it
left with copy --abort --to ROOT.`,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		from := fs.String("from", "", "the `root` to copy from: a directory or an etcd:// URL")
		to := fs.String("to", "", "the `root` to copy to, which must be empty")
		abort := fs.Bool("abort", false, "remove what a copy into --to that failed left staged, and nothing else")
		registerConnFlags(fs, &c.conn)
		return func(e *env) error {
			e.conn = c.conn
			if *abort {
				if *from != "" || *to == "" {
					return usagef("copy --abort takes --to ROOT only: the root a failed copy was copying into")
				}
				return abortCopy(e, c, *to)
			}
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
			rep, err := claimstore.Copy(e.ctx, ds.Backend(), ss.Backend())
			j := copyJSON{From: ss.Root(), To: ds.Root(), Skipped: []string{}}
			if rep != nil {
				j.Keys, j.Revisions, j.Proofs = rep.Keys, rep.Revisions, rep.Proofs
				j.Skipped = append(j.Skipped, rep.Skipped...)
			}
			if err != nil {
				if rep != nil && rep.Staged && !errors.Is(err, claimstore.ErrNotEmpty) {
					return fmt.Errorf("%w (copied before it: %d keys, %d revisions, %d proofs); nothing of the copy is visible at %s: run the same command again, or remove what it left with `claimctl copy --abort --to %s`", err, j.Keys, j.Revisions, j.Proofs, ds.Root(), shellQuote(ds.Root()))
				}
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

// abortCopy is copy --abort: it removes what a failed copy into root left.
func abortCopy(e *env, c *common, root string) error {
	dst, err := e.copyRoot(root, "--to")
	if err != nil {
		return err
	}
	ds, err := e.openStore(dst, true)
	if err != nil {
		return err
	}
	if err := claimstore.Unstage(e.ctx, ds.Backend()); err != nil {
		if errors.Is(err, claimstore.ErrNothingStaged) {
			return fmt.Errorf("no unfinished copy into %s to remove (nothing was changed): %w", ds.Root(), err)
		}
		return err
	}
	e.done = "the unfinished copy into " + ds.Root() + " was removed"
	if c.json {
		writeJSON(e.stdout, copyJSON{To: ds.Root(), Skipped: []string{}})
		return nil
	}
	fmt.Fprintf(e.stdout, "removed the unfinished copy into %s\n", esc(ds.Root()))
	return nil
}
