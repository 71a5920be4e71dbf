package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"text/tabwriter"

	"github.com/claimstore/claimstore/claimstore"
)

var logCmd = &command{
	name:    "log",
	args:    "[--root DIR] [--json] [--full] (--seat S --project P --workspace W | --session ID)",
	summary: "Print the revision history of one key, oldest first.",
	doc: `
One line per revision: number, writtenAt, state, claim and proof. A damaged
revision says why. --full prints each whole record as stored instead.

log only reads. Exit 0, or 1 when the key's history cannot be read.`,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		var kf keyFlags
		kf.register(fs)
		full := fs.Bool("full", false, "print whole records")
		return func(e *env) error {
			k, err := kf.oneKey(c)
			if err != nil {
				return err
			}
			rc, err := e.resolveRoot(c.rootFlag, c.rootSet)
			if err != nil {
				return err
			}
			e.rootMissing("log", rc)
			s, err := e.openStore(rc, false)
			if err != nil {
				return err
			}
			revs, err := s.Revisions(k)
			if err != nil {
				return fmt.Errorf("reading the history of %s in %s: %w", k, s.KeyDir(k), err)
			}
			out := logJSON{Root: s.Root(), Key: keyOut(k, s.Root()), Revisions: []revisionJSON{}}
			for _, r := range revs {
				j := revisionJSON{Revision: r.N, Path: filepath.Join(s.KeyDir(k), claimstore.RevisionName(r.N))}
				if r.Record != nil {
					j.WrittenAt, j.State, j.ClaimID = r.Record.WrittenAt, string(r.Record.State), r.Record.ClaimID
					j.Proof = proofOut(r.Record.Proof)
				} else {
					j.State, j.Damage = "damaged", r.Damage.Error()
				}
				if *full {
					if json.Valid(r.Data) {
						j.Record = validJSON(bytes.TrimSpace(r.Data))
					} else {
						j.Record = json.RawMessage("null")
					}
				}
				out.Revisions = append(out.Revisions, j)
			}
			if c.json {
				writeJSON(e.stdout, out)
				return nil
			}
			fmt.Fprintf(e.stdout, "%s  (%s)\n", k, esc(out.Key.Dir))
			if len(revs) == 0 {
				fmt.Fprintln(e.stdout, "no revisions: the key is free")
				return nil
			}
			if *full {
				for i, j := range out.Revisions {
					fmt.Fprintf(e.stdout, "r%d  %s\n", j.Revision, esc(j.Path))
					if j.Damage != "" {
						fmt.Fprintf(e.stdout, "damaged: %s\n", escText(j.Damage))
					}
					fmt.Fprintf(e.stdout, "%s\n", escJSONText(bytes.TrimSpace(revs[i].Data)))
				}
				return nil
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
			for _, j := range out.Revisions {
				if j.Damage != "" {
					fmt.Fprintf(tw, "r%d\t-\tdamaged\t-\t-\t%s\n", j.Revision, escText(j.Damage))
					continue
				}
				fmt.Fprintf(tw, "r%d\t%s\t%s\tclaim %s\tproof %s\n", j.Revision, orDash(esc(j.WrittenAt)), j.State, j.ClaimID, describeProof(j.Proof))
			}
			return tw.Flush()
		}
	},
}
