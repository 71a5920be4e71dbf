package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/claimstore/claimstore/claimstore"
)

var logCmd = &command{
	name:    "log",
	args:    "[--root DIR|URL] " + connSyn + " [--json] [--full] [-n N] [--reverse] [--since TIME] [--until TIME] [--follow] (--seat S --project P --workspace W | --session ID)",
	summary: "Print the revision history of one key, oldest first.",
	doc: `
One line per revision: number, writtenAt, state, claim and proof. A damaged
revision says why. --full prints each whole record as stored instead.

-n N prints only the newest N revisions (still oldest first; --reverse prints
newest first). Without --since or --until, log reads the key's file names and
only the N records it prints, so -n 10 costs the same on a history of a
million revisions as on ten.

--since and --until keep revisions whose writtenAt is at or after, and at or
before, TIME: an RFC 3339 time (2026-11-30T10:53:54Z), a date (2026-11-30,
midnight UTC), or a duration before now (90s, 15m, 2h, 3d). writtenAt is the
writer's wall clock, informational only: it decides nothing, it may go
backwards between revisions, and the order shown is always revision order. A
revision whose writtenAt cannot be read (damaged) is always shown: a filter
cannot place it, and hiding it would hide what most needs reading. These
filters read every record of the key.

--follow prints the history as above, then each new revision as it is linked,
until interrupted: SIGINT, SIGTERM, SIGHUP or SIGQUIT ends it with exit 0 (following ends only
when asked to), in every phase, while an etcd root is still being dialled too. It waits on inotify (a directory root) or etcd's watch (an
etcd root), not by polling, and follows a key whose directory (or root) does
not exist yet. With --json it writes the log
document on one line, then one revision document per line (NDJSON).
--follow cannot be combined with --reverse or --until.

log only reads. Exit 0, or 1 when the key's history cannot be read.`,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		var kf keyFlags
		kf.register(fs)
		full := fs.Bool("full", false, "print whole records")
		limit := fs.Int("n", 0, "print only the newest `N` revisions")
		reverse := fs.Bool("reverse", false, "print newest first")
		since := fs.String("since", "", "keep revisions written at or after `TIME` (writtenAt; informational)")
		until := fs.String("until", "", "keep revisions written at or before `TIME` (writtenAt; informational)")
		follow := fs.Bool("follow", false, "after the history, print new revisions as they are linked, until SIGINT, SIGTERM, SIGHUP or SIGQUIT")
		return func(e *env) error {
			k, err := kf.oneKey(c)
			if err != nil {
				return err
			}
			now := time.Now()
			var lo, hi time.Time
			if c.set["since"] {
				if lo, err = parseWhen("since", *since, now); err != nil {
					return err
				}
			}
			if c.set["until"] {
				if hi, err = parseWhen("until", *until, now); err != nil {
					return err
				}
			}
			switch {
			case c.set["n"] && *limit < 0:
				return usagef("-n %d: want a count of revisions, 0 or more", *limit)
			case !lo.IsZero() && !hi.IsZero() && hi.Before(lo):
				return usagef("--until %s is before --since %s: no revision can match", quotePrefix(*until), quotePrefix(*since))
			case *follow && *reverse:
				return usagef("--follow prints revisions as they come, oldest first: it cannot be combined with --reverse")
			case *follow && c.set["until"]:
				return usagef("--follow prints revisions written from now on: it cannot be combined with --until")
			}
			rc, err := e.resolveRoot(c.rootFlag, c.rootSet)
			if err != nil {
				return err
			}
			if !*follow {
				e.rootMissing("log", rc)
			}
			// A follower ends on a signal in every phase, opening the root
			// too (an etcd root's dial may take --dial-timeout): not killed
			// silently before its first watch is armed.
			ctx, stop := context.WithCancel(context.Background())
			if *follow {
				ctx, stop = signal.NotifyContext(ctx, stopSignals...)
				e.signalsArmed()
			}
			defer stop()
			base := e.ctx
			e.ctx = ctx
			s, err := e.openStore(rc, false)
			e.ctx = base
			if err != nil {
				if ctx.Err() != nil {
					// Asked to end: exit 0 as a follow ends, saying what
					// was not done.
					fmt.Fprintf(e.stderr, "claimctl log: interrupted while opening the claim root %s; nothing was followed\n", escText(rc.Path))
					return nil
				}
				return err
			}
			lf := &logFollower{e: e, c: c, s: s, k: k, full: *full}
			if *follow {
				// Watch before reading the history: a revision linked in
				// between is then seen by the watch, not lost.
				w, err := keyWaiter(ctx, s, rc, k)
				if err != nil && ctx.Err() != nil {
					fmt.Fprintf(e.stderr, "claimctl log: interrupted while arming the watch of %s; nothing was followed\n", escText(s.KeyDir(k)))
					return nil
				}
				if err != nil {
					return fmt.Errorf("--follow: cannot watch %s: %w", s.KeyDir(k), err)
				}
				defer w.Close()
				if err := lf.history(*limit, c.set["n"], false, lo, hi); err != nil {
					return err
				}
				if _, err := os.Lstat(rc.Path); err != nil && !rc.Etcd {
					// The store reads a missing root as empty and for
					// good: open it again once the root is made.
					lf.reopen = func() (*claimstore.Store, error) {
						if _, err := os.Lstat(rc.Path); err != nil && !rc.Etcd {
							return nil, nil
						}
						return e.openStore(rc, false)
					}
				}
				return lf.follow(ctx, w, lo)
			}
			return lf.history(*limit, c.set["n"], *reverse, lo, hi)
		}
	},
}

// waiter wakes when something may have been published under a key: the
// store's watch (etcd), or inotify on a directory root's key directory.
type waiter interface {
	Wait(ctx context.Context) error
	Close() error
}

// keyWaiter watches k: by the store's watch where its backend has one,
// else by inotify.
func keyWaiter(ctx context.Context, s *claimstore.Store, rc rootChoice, k claimstore.Key) (waiter, error) {
	w, err := s.Watch(ctx, k)
	if !errors.Is(err, claimstore.ErrCannotWatch) {
		return w, err
	}
	return newKeyWatcher(rc.Path, s.KeyDir(k))
}

// parseWhen reads a --since or --until value: an RFC 3339 time, a date
// (midnight UTC, as writtenAt is written in UTC), or a duration before now.
func parseWhen(name, v string, now time.Time) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	d, err := time.ParseDuration(v)
	if days, ok := strings.CutSuffix(v, "d"); ok && err != nil {
		if n, err2 := strconv.ParseUint(days, 10, 16); err2 == nil {
			d, err = time.Duration(n)*24*time.Hour, nil
		}
	}
	if err != nil || d < 0 {
		return time.Time{}, usagef("--%s %s: want an RFC 3339 time (2026-11-30T10:53:54Z), a date (2026-11-30) or a duration before now (90s, 15m, 2h, 3d)", name, quotePrefix(v))
	}
	return now.Add(-d), nil
}

// logFollower prints one key's revisions.
type logFollower struct {
	e    *env
	c    *common
	s    *claimstore.Store
	k    claimstore.Key
	full bool
	last uint64 // the highest revision seen
	// reopen, when set, opens the store again once its root exists.
	reopen func() (*claimstore.Store, error)
}

// revision reads revision n: nil, nil when it does not exist.
func (lf *logFollower) revision(n uint64) (*claimstore.Revision, error) {
	r, err := lf.s.ReadRevision(lf.e.ctx, lf.k, n)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return r, err
}

func (lf *logFollower) toJSON(r *claimstore.Revision) revisionJSON {
	j := revisionJSON{Revision: r.N, Path: lf.s.RevisionPath(lf.k, r.N)}
	if r.Segment != "" {
		j.Path = r.Segment
	}
	if r.Record != nil {
		j.WrittenAt, j.State, j.ClaimID = r.Record.WrittenAt, string(r.Record.State), r.Record.ClaimID
		j.Proof = proofOut(r.Record.Proof)
	} else {
		j.State, j.Damage = "damaged", r.Damage.Error()
	}
	if lf.full {
		if json.Valid(r.Data) {
			j.Record = validJSON(bytes.TrimSpace(r.Data))
		} else {
			j.Record = json.RawMessage("null")
		}
	}
	return j
}

// inWindow reports whether r is to be shown under --since/--until.
func inWindow(r *claimstore.Revision, lo, hi time.Time) bool {
	if lo.IsZero() && hi.IsZero() {
		return true
	}
	if r.Record == nil {
		return true
	}
	t, err := time.Parse(time.RFC3339Nano, r.Record.WrittenAt)
	if err != nil {
		return true
	}
	return (lo.IsZero() || !t.Before(lo)) && (hi.IsZero() || !t.After(hi))
}

// history prints the key's revisions as selected.
func (lf *logFollower) history(limit int, limited, reverse bool, lo, hi time.Time) error {
	s, k := lf.s, lf.k
	nums, err := s.RevisionNumbers(lf.e.ctx, k)
	if err != nil {
		return fmt.Errorf("reading the history of %s in %s: %w", k, s.KeyDir(k), err)
	}
	slices.Sort(nums)
	total := len(nums)
	if total > 0 {
		lf.last = nums[total-1]
	}
	filtered := !lo.IsZero() || !hi.IsZero()
	if limited && !filtered && limit < len(nums) {
		// Only the records printed are read.
		nums = nums[len(nums)-limit:]
	}
	var revs []*claimstore.Revision
	for _, n := range nums {
		r, err := lf.revision(n)
		if err != nil {
			return err
		}
		if r == nil {
			// Listed, then gone: nothing in the project removes a
			// revision, so someone did by hand.
			r = &claimstore.Revision{N: n, Damage: fmt.Errorf("listed, then missing when read: removed by hand? run `claimctl fsck`")}
		}
		if inWindow(r, lo, hi) {
			revs = append(revs, r)
		}
	}
	if limited && limit < len(revs) {
		revs = revs[len(revs)-limit:]
	}
	if reverse {
		slices.Reverse(revs)
	}
	out := logJSON{Root: s.Root(), Key: keyOut(k, s.Root()), Revisions: []revisionJSON{}}
	for _, r := range revs {
		out.Revisions = append(out.Revisions, lf.toJSON(r))
	}
	// What prune removed of the key, from the archive: shown before the
	// live history (the key may have been claimed again since, from r1).
	archived, err := s.Archived(lf.e.ctx, k)
	if err != nil {
		return fmt.Errorf("reading the archived history of %s: %w", k, err)
	}
	var arch []*claimstore.Revision
	for i := range archived {
		if inWindow(&archived[i], lo, hi) {
			arch = append(arch, &archived[i])
		}
	}
	if reverse {
		slices.Reverse(arch)
	}
	for _, r := range arch {
		out.Archived = append(out.Archived, lf.toJSON(r))
	}
	w := lf.e.stdout
	if lf.c.json {
		writeJSON(w, out)
		return nil
	}
	fmt.Fprintf(w, "%s  (%s)\n", k, esc(out.Key.Dir))
	if len(arch) > 0 {
		fmt.Fprintf(w, "archived by claimctl prune (%d revisions):\n", len(arch))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, r := range arch {
			if lf.full {
				lf.printFull(w, r)
			} else {
				lf.printLine(tw, r)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if total > 0 {
			fmt.Fprintln(w, "live:")
		}
	}
	switch {
	case total == 0 && len(arch) > 0:
		fmt.Fprintln(w, "no live revisions: the key is free")
		return nil
	case total == 0:
		fmt.Fprintln(w, "no revisions: the key is free")
		return nil
	case len(revs) == 0 && (filtered || limited):
		fmt.Fprintf(w, "no revisions shown of %d\n", total)
		return nil
	}
	if lf.full {
		for _, r := range revs {
			lf.printFull(w, r)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range revs {
		lf.printLine(tw, r)
	}
	return tw.Flush()
}

func (lf *logFollower) printFull(w io.Writer, r *claimstore.Revision) {
	j := lf.toJSON(r)
	fmt.Fprintf(w, "r%d  %s\n", j.Revision, esc(j.Path))
	if j.Damage != "" {
		fmt.Fprintf(w, "damaged: %s\n", escText(j.Damage))
	}
	fmt.Fprintf(w, "%s\n", escJSONText(bytes.TrimSpace(r.Data)))
}

func (lf *logFollower) printLine(w io.Writer, r *claimstore.Revision) {
	j := lf.toJSON(r)
	if j.Damage != "" {
		fmt.Fprintf(w, "r%d\t-\tdamaged\t-\t-\t%s\n", j.Revision, escText(j.Damage))
		return
	}
	fmt.Fprintf(w, "r%d\t%s\t%s\tclaim %s\tproof %s\n", j.Revision, orDash(esc(j.WrittenAt)), j.State, j.ClaimID, describeProof(j.Proof))
}

// follow prints each revision above lf.last as it appears, until ctx ends
// (exit 0) or standard output fails.
func (lf *logFollower) follow(ctx context.Context, w waiter, lo time.Time) error {
	for {
		if lf.reopen != nil {
			s, err := lf.reopen()
			if err != nil {
				return err
			}
			if s != nil {
				lf.s, lf.reopen = s, nil
			}
		}
		for {
			r, err := lf.revision(lf.last + 1)
			if err != nil {
				return err
			}
			if r == nil {
				break
			}
			lf.last = r.N
			if !inWindow(r, lo, time.Time{}) {
				continue
			}
			if err := lf.emit(r); err != nil {
				return nil // the write error is reported by run
			}
		}
		if err := w.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("--follow: watching %s: %w", lf.s.KeyDir(lf.k), err)
		}
	}
}

// emit prints one new revision and flushes it: a follower's reader wants
// each line as it comes.
func (lf *logFollower) emit(r *claimstore.Revision) error {
	out := lf.e.stdout
	if lf.c.json {
		var b bytes.Buffer
		writeJSON(&b, lf.toJSON(r))
		_, err := out.Write(b.Bytes())
		return err
	}
	var b bytes.Buffer
	if lf.full {
		lf.printFull(&b, r)
	} else {
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		lf.printLine(tw, r)
		tw.Flush()
	}
	_, err := out.Write(b.Bytes())
	return err
}
