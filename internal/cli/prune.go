package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/claimstore/claimstore/claimstore"
)

var pruneCmd = &command{
	name:    "prune",
	args:    "[--root DIR|URL] " + connSyn + " [--older-than DURATION] [--dry-run] [--json] [--no-archive] [--archive-dir DIR] [--archive-older-than DURATION]",
	summary: "Remove the history of keys that have long been free, archiving it first.",
	doc: `
prune removes what a root no longer needs, so that it costs what is live, not
everything ever claimed. A session key whose head has been free for longer than
--older-than (default 30d) is removed whole; a seat, whose revision numbers are
fencing tokens, is never removed: its history below its newest free revision
older than that is compacted, and the seat reads exactly as before (the same
head, the same next number). Nothing else is touched: a held key, a key whose
pair is held or whose claim another key holds, a damaged or gapped key (fsck's
to report), anything dated within the retention time or in the future.

No removal races an acquirer: a session gets a tombstone above its head first
(the reference implementation reads it as held, this one as free), and is
removed only if that tombstone is still its head; on etcd each removal is one
guarded transaction, and works while the cluster's NOSPACE alarm is raised.
On etcd prune also collects the fence keys of lost requests that none can
still need ("fences collected: N"); those it must keep, it counts and says why.

Before anything is removed it is appended to an archive segment, fsynced: under
the root's archive/ on a directory root; an etcd root needs --archive-dir (or
--no-archive, the explicit choice of no audit trail). claimctl log finds a
pruned key's history there. Segments older than --archive-older-than (default
365d; 0 keeps all) are removed.

--dry-run prints what would be removed and changes nothing. Durations are Go
durations (36h) or days (30d).

Exit: 0 when the prune finished (kept keys are listed with their reasons); 1
when it could not (it stopped where it was: what was removed is archived and
durable; run it again).`,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		olderThan := fs.String("older-than", "30d", "remove history free for longer than `DURATION`")
		dryRun := fs.Bool("dry-run", false, "print what would be removed; change nothing")
		noArchive := fs.Bool("no-archive", false, "remove without archiving (no audit trail)")
		archiveDir := fs.String("archive-dir", "", "write archive segments to `DIR` (required on an etcd root)")
		archiveOlder := fs.String("archive-older-than", "365d", "remove archive segments older than `DURATION` (0: keep all)")
		return func(e *env) error {
			retention, err := parseRetention("older-than", *olderThan, false)
			if err != nil {
				return err
			}
			archiveKeep, err := parseRetention("archive-older-than", *archiveOlder, true)
			if err != nil {
				return err
			}
			if *noArchive && *archiveDir != "" {
				return usagef("--no-archive and --archive-dir %s contradict each other: choose one", quotePrefix(*archiveDir))
			}
			rc, err := e.resolveRoot(c.rootFlag, c.rootSet)
			if err != nil {
				return err
			}
			if rc.Default && e.rootMissing("prune", rc) {
				return nil
			}
			if err := checkClaimRoot(rc); err != nil {
				return err
			}
			s, err := e.openStore(rc, !*dryRun)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
			defer stop()
			pruneGC(e.getenv)
			opts := &claimstore.PruneOptions{OlderThan: retention, DryRun: *dryRun, NoArchive: *noArchive, ArchiveDir: *archiveDir, ArchiveOlderThan: archiveKeep}
			j := pruneJSON{Root: s.Root(), DryRun: *dryRun, OlderThan: *olderThan}
			stream := &pruneStream{w: bufio.NewWriter(e.stdout)}
			defer stream.w.Flush()
			opts.Each = func(a claimstore.PruneAction) {
				pa := pruneActionJSON{Action: string(a.Action), Kind: string(a.Key.Kind), Key: keyOut(a.Key, ""), Dir: s.KeyDir(a.Key), From: a.From, To: a.To, Reason: a.Reason}
				if c.json {
					stream.action(&j, pa)
					return
				}
				verb := string(a.Action)
				if *dryRun && a.Action != claimstore.PruneKept {
					verb = "would be " + verb
				}
				switch a.Action {
				case claimstore.PruneKept:
					fmt.Fprintf(e.stdout, "kept\t%s: %s\n", escText(a.Key.String()), escText(a.Reason))
				case claimstore.PruneCompacted:
					fmt.Fprintf(e.stdout, "%s\t%s: revisions %d-%d (it keeps %d and above)\n", verb, escText(a.Key.String()), a.From, a.To, a.To+1)
				default:
					fmt.Fprintf(e.stdout, "%s\t%s: revisions %d-%d\n", verb, escText(a.Key.String()), a.From, a.To)
				}
			}
			if !c.json && isTerminal(e.stderr) {
				opts.Progress = func(phase string, done, total int) {
					what := "keys read"
					if phase == "prune" {
						what = "keys pruned"
					}
					e.progress("prune", what, done, total)
				}
			}
			rep, err := s.Prune(ctx, opts)
			e.progressDone()
			if rep != nil {
				j.Keys, j.Removed, j.Compacted, j.Revisions, j.Kept, j.Young = rep.Keys, rep.Removed, rep.Compacted, rep.Revisions, rep.Kept, rep.Young
				j.Archives, j.ArchivesRemoved, j.Swept, j.Blocked = append([]string{}, rep.Archives...), rep.ArchivesRemoved, rep.Swept, rep.Blocked
				j.FencesCollected, j.FencesKept, j.FencesKeptWhy = rep.FencesCollected, rep.FencesKept, rep.FencesKeptWhy
			}
			if err != nil {
				if errors.Is(err, claimstore.ErrNoArchive) {
					return usageErr{err.Error()}
				}
				err = fmt.Errorf("pruning %s: %w", s.Root(), err)
				if c.json && stream.started {
					// What it did before it stopped is on record: the
					// document is ended, with why.
					j.Error = err.Error()
					stream.end(&j)
				}
				return err
			}
			if c.json {
				stream.end(&j)
				return nil
			}
			verb := "removed"
			if *dryRun {
				verb = "would remove"
			}
			fmt.Fprintf(e.stdout, "%s: %d keys; %s %d keys whole and compacted %d (%d revisions); kept %d old enough, %d not yet %s old\n", j.Root, j.Keys, verb, j.Removed, j.Compacted, j.Revisions, j.Kept, j.Young, *olderThan)
			for _, a := range j.Archives {
				fmt.Fprintf(e.stdout, "archived to %s\n", esc(a))
			}
			if j.Blocked != "" {
				fmt.Fprintf(e.stdout, "no session was removed: %s\n", escText(j.Blocked))
			}
			if j.FencesCollected > 0 {
				fverb := "fences collected"
				if *dryRun {
					fverb = "fences that would be collected"
				}
				fmt.Fprintf(e.stdout, "%s: %d\n", fverb, j.FencesCollected)
			}
			if j.FencesKept > 0 {
				fmt.Fprintf(e.stdout, "fences kept: %d: %s\n", j.FencesKept, escText(j.FencesKeptWhy))
			}
			return nil
		}
	},
}

// pruneGCPercent is the collector's target while prune runs, unless GOGC
// is set. A first prune of an old root holds what its walk keeps of every
// key (docs/PROTOCOL.md, "What the walk keeps") while its batches make
// garbage; at the runtime's default (100) the heap grows to twice what is
// live before each collection. Half that headroom took a quarter off
// prune's peak memory at no measurable cost in time: prune waits on the
// disk, not on the processor (docs/BENCHMARKS.md, "Walks and prune on an
// unpruned root").
const pruneGCPercent = 50

// pruneGC sets the collector's target for prune, and leaves a GOGC the
// operator set alone.
func pruneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(pruneGCPercent)
	}
}

// parseRetention reads a retention: a Go duration or whole days ("30d").
// Zero is allowed only where it means "keep all" (zeroKeeps), and then
// returns -1.
func parseRetention(name, v string, zeroKeeps bool) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if days, ok := strings.CutSuffix(v, "d"); ok && err != nil {
		if n, err2 := strconv.ParseUint(days, 10, 16); err2 == nil {
			d, err = time.Duration(n)*24*time.Hour, nil
		}
	}
	switch {
	case err != nil || d < 0:
		return 0, usagef("--%s %s: want a duration (36h) or days (30d)", name, quotePrefix(v))
	case d == 0 && zeroKeeps:
		return -1, nil
	case d == 0:
		return 0, usagef("--%s 0: a retention of nothing would remove history that a decision may still rest on; give a duration (30d)", name)
	}
	return d, nil
}

// pruneStream writes prune --json's document as prune acts: its head (root,
// dryRun, olderThan) and each action as it is taken, then the counts once
// prune is done. The document is byte for byte the one writeJSON writes of
// the whole pruneJSON; a prune of a year's history kept every action until
// the end to write it.
type pruneStream struct {
	w       *bufio.Writer
	started bool
}

// actionsOpen is where a pruneJSON with no actions is split: what comes
// before it is the head, written before the first action; what comes after
// "[" closes the actions. A JSON string escapes its quotes, so the first
// match is the member itself.
const actionsOpen = `"actions":[`

func (p *pruneStream) action(j *pruneJSON, a pruneActionJSON) {
	if !p.started {
		doc := pruneDoc(j)
		p.w.Write(doc[:bytes.Index(doc, []byte(actionsOpen))+len(actionsOpen)])
		p.started = true
	} else {
		p.w.WriteByte(',')
	}
	var b bytes.Buffer
	writeJSON(&b, a)
	p.w.Write(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

func (p *pruneStream) end(j *pruneJSON) {
	doc := pruneDoc(j)
	i := bytes.Index(doc, []byte(actionsOpen)) + len(actionsOpen)
	if p.started {
		doc = doc[i:] // the "]" and what follows: the actions were written
	}
	p.w.Write(doc)
	p.w.Flush()
}

// pruneDoc is j with an empty actions list (the actions themselves are
// streamed, never kept in j), as writeJSON writes it.
func pruneDoc(j *pruneJSON) []byte {
	var b bytes.Buffer
	c := *j
	c.Actions = []pruneActionJSON{}
	writeJSON(&b, c)
	return b.Bytes()
}
