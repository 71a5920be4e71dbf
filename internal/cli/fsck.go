package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"text/tabwriter"

	"github.com/claimstore/claimstore/claimstore"
)

var fsckCmd = &command{
	name:    "fsck",
	args:    "[--root DIR|URL] " + connSyn + " [--json] [--repair]",
	summary: "Check a claim root: revisions, numbering, key directories, proofs, stray temporaries.",
	doc: `
fsck reads the whole root: every revision valid, revisions numbered densely
from 1, each key directory holding revisions of the key it is named after,
the boot proofs that stopped revisions name present and matching, and no stray
files. Each finding names its path, its kind, its severity and what to do.

--repair does only what is provably safe: it removes temporaries left by
writers proven gone (another boot, no such process, or a reused pid), and says
so for each. Nothing else is ever changed: a damaged revision or a gap is
reported, never rewritten, and its key stays held until an operator repairs
it by hand.

Exit: 0 when there are no findings of severity error (warnings are listed);
7 when there are; 1 when the root cannot be read, or when --repair could
not repair what it tried to (each such finding says why).`,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		repair := fs.Bool("repair", false, "remove temporaries of writers proven gone")
		return func(e *env) error {
			rc, err := e.resolveRoot(c.rootFlag, c.rootSet)
			if err != nil {
				return err
			}
			if rc.Default && e.rootMissing("fsck", rc) {
				// Nothing was ever claimed under the default root: an empty
				// root, checked (the note says so).
			} else if rc.Etcd {
				if *repair && !c.json {
					fmt.Fprintf(e.stderr, "claimctl fsck: note: --repair removes temporaries a writer on a directory root left behind; an etcd root has none (a revision is published in one transaction), so there is nothing for it to repair there\n")
				}
			} else if _, err := os.Lstat(rc.Path); err != nil {
				return fmt.Errorf("claim root %s (from %s): %w; pass the root to check with --root", rc.Path, rc.Source, err)
			}
			if err := checkClaimRoot(rc); err != nil {
				return err
			}
			s, err := e.openStore(rc, false)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
			defer stop()
			rep, err := checkWithProgress(ctx, e, c, s, *repair)
			if err != nil {
				return fmt.Errorf("checking %s: %w", s.Root(), err)
			}
			j := fsckJSON{Root: s.Root(), Repair: *repair, Keys: rep.Keys, Revisions: rep.Revisions, Proofs: rep.Proofs, Findings: []findingJSON{}}
			for _, f := range rep.Findings {
				j.Findings = append(j.Findings, findingJSON{Path: f.Path, Kind: f.Kind, Severity: string(f.Severity), Message: f.Message, Repairable: f.Repairable, Repaired: f.Repaired, RepairFailed: f.RepairFailed})
				switch {
				case f.Severity == claimstore.SeverityError:
					j.Errors++
				default:
					j.Warnings++
				}
				if f.Repaired {
					j.Repaired++
				}
				if f.RepairFailed {
					j.RepairFailed++
				}
			}
			if c.json {
				writeJSON(e.stdout, j)
			} else {
				tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
				for _, f := range j.Findings {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Severity, f.Kind, esc(f.Path), escText(f.Message))
				}
				tw.Flush()
				fmt.Fprintf(e.stdout, "%s: %d keys, %d revisions, %d proofs; %d errors, %d warnings", j.Root, j.Keys, j.Revisions, j.Proofs, j.Errors, j.Warnings)
				if *repair {
					fmt.Fprintf(e.stdout, ", %d repaired", j.Repaired)
				} else if n := repairable(j.Findings); n > 0 {
					fmt.Fprintf(e.stdout, "; %d repairable with --repair", n)
				}
				fmt.Fprintln(e.stdout)
			}
			if j.RepairFailed > 0 {
				if !c.json {
					fmt.Fprintf(e.stderr, "claimctl fsck: %d repair(s) under %s could not be done; each finding above says why\n", j.RepairFailed, j.Root)
				}
				return exitErr{code: exitError}
			}
			if j.Errors > 0 {
				if !c.json {
					fmt.Fprintf(e.stderr, "claimctl fsck: %d error finding(s) under %s: each breaks the format (a damaged or gapped key reads as held; a stopped revision whose boot proof does not check was freed on evidence that cannot be verified); fix each path by hand (fsck never rewrites revisions), then run fsck again\n", j.Errors, j.Root)
				}
				return exitErr{code: exitFsckErrors}
			}
			return nil
		}
	},
}

func repairable(fs []findingJSON) int {
	n := 0
	for _, f := range fs {
		if f.Repairable && !f.Repaired {
			n++
		}
	}
	return n
}

// checkWithProgress runs fsck's check, showing on a terminal (and without
// --json) the keys checked of the total and the rate.
func checkWithProgress(ctx context.Context, e *env, c *common, s *claimstore.Store, repair bool) (*claimstore.CheckReport, error) {
	opts := &claimstore.CheckOptions{Repair: repair}
	if !c.json && isTerminal(e.stderr) {
		opts.Progress = func(done, total int) { e.progress("fsck", "keys checked", done, total) }
	}
	rep, err := s.Check(ctx, opts)
	e.progressDone()
	return rep, err
}
