package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/internal/promtext"
	"github.com/claimstore/claimstore/internal/safefile"
)

var metricsCmd = &command{
	name:    "metrics",
	args:    "[--root DIR|URL] " + connSyn + " [--output FILE]",
	summary: "Write the state of the root as Prometheus metrics (text format), for node_exporter's textfile collector.",
	noJSON:  true,
	doc: `
metrics reads the whole root as list does (each key's head, never a whole
history) and writes, in the Prometheus text exposition format: pairs by
state, held pairs by their owner judged now (live, gone, unknown, invalid,
foreign, unreadable), uncertain pairs by why, orphan keys, the age of the
oldest held claim, the keys, revisions and proofs in the root, and the
outcome and time of this machine's last classify --all of the root, which
classify --all records under <root>/status/. Every sample carries the label
root, so that the files of several roots can sit in one textfile directory.
The metrics and their meaning are in REFERENCE.md ("metrics").

Without --output it writes to standard output. --output FILE replaces FILE
atomically, as node_exporter's textfile collector needs (it must never read
half a file): a temporary in FILE's directory is written, fsynced and renamed
over FILE (mode 0644, for the collector's user), then the directory is
fsynced. FILE must not be a symlink, a directory, a FIFO or anything but a
regular file (exit 2, nothing written); the collector reads only files named
*.prom. The shipped claimstore-metrics.timer runs it every minute (not
enabled by default).

A root that cannot be read whole still gets a file: claimstore_up 0 and
nothing else of the root, so that no reading from before stands in for it;
the error is on standard error. It only reads the root.

Exit: 0 when the root was read and the metrics written; 1 when the root or
the last classify --all record cannot be read, or the output cannot be
written.`,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		output := fs.String("output", "", "replace `FILE` atomically with the metrics (default: standard output)")
		return func(e *env) error {
			var target string
			if c.set["output"] {
				var err error
				if target, err = checkMetricsOutput(*output); err != nil {
					return err
				}
			}
			rc, err := e.resolveRoot(c.rootFlag, c.rootSet)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(e.ctx, stopSignals...)
			defer stop()
			start := time.Now()
			in, gerr := gatherMetrics(ctx, e, rc)
			in.root, in.now, in.took = rc.Path, time.Now(), time.Since(start)
			var buf bytes.Buffer
			if err := writeMetrics(&buf, in); err != nil {
				return err // a metric this file defines breaks the format: a bug, caught by the tests
			}
			if target == "" {
				_, err = e.stdout.Write(buf.Bytes())
			} else {
				// Said here, not with the flags: a command on an etcd root is
				// handed to claimctl-etcd when the store is opened, which
				// would say it again.
				if !strings.HasSuffix(target, ".prom") {
					fmt.Fprintf(e.stderr, "claimctl metrics: note: node_exporter's textfile collector reads only files named *.prom; %s is not one\n", target)
				}
				err = writeFileAtomic(target, buf.Bytes())
			}
			if err != nil {
				if gerr != nil {
					return fmt.Errorf("%w; and the metrics saying so could not be written either: %v", gerr, err)
				}
				return err
			}
			return gerr
		}
	},
}

// checkMetricsOutput checks --output before anything is read: an absolute
// path whose directory exists and which is nothing or a regular file. A
// symlink is refused rather than followed or replaced: the file to keep
// current is the one named, and a link there is someone's mistake or trick.
func checkMetricsOutput(path string) (string, error) {
	if path == "" {
		return "", usagef("--output must not be empty: give the file to write, such as /var/lib/prometheus/node-exporter/claimstore.prom")
	}
	path = abs(path)
	if err := checkOutputTarget(path); err != nil {
		return "", usagef("%v", err)
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", usagef("--output %s: its directory %s does not exist; create it (node_exporter's textfile directory, or another) or name another file", esc(path), esc(dir))
	case err != nil:
		return "", usagef("--output %s: %v", esc(path), err)
	case !fi.IsDir():
		return "", usagef("--output %s: %s is %s, not a directory", esc(path), esc(dir), safefile.Describe(fi.Mode()))
	}
	return path, nil
}

// checkOutputTarget says what is wrong with path as a file to replace:
// nil when it does not exist or is a regular file.
func checkOutputTarget(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("--output %s: %v", esc(path), err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("--output %s is a symlink: metrics replaces the file it is given, never what a link names; give the real file's path", esc(path))
	case fi.IsDir():
		return fmt.Errorf("--output %s is a directory: give the file to write in it, such as %s", esc(path), esc(filepath.Join(path, "claimstore.prom")))
	case !fi.Mode().IsRegular():
		return fmt.Errorf("--output %s is %s: metrics replaces a regular file (or makes one); give another path", esc(path), safefile.Describe(fi.Mode()))
	}
	return nil
}

// writeFileAtomic replaces path with data as the textfile collector needs:
// a temporary in path's directory (named so that the collector, which
// reads *.prom, never reads it), written, fsynced, made 0644 (the
// collector runs as another user), renamed over path, and the directory
// fsynced, so that a reader sees the old file or the new one, whole, also
// after a crash. path is checked again just before the rename (it may have
// changed since the flags were checked). A failure removes the temporary.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := checkOutputTarget(path); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	d, err := safefile.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("writing %s: the file is in place, but its directory cannot be opened to make it durable: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("writing %s: the file is in place, but its directory's fsync failed, so a crash may lose it: %w", path, err)
	}
	return nil
}

// metricsInput is what the metrics are rendered from.
type metricsInput struct {
	root  string
	stats *claimstore.Stats // nil: the root could not be read
	last  *claimstore.ClassifyAllStatus
	boot  string // this boot's id
	now   time.Time
	took  time.Duration
}

// gatherMetrics reads what the metrics say: the store's Stats and its last
// classify --all record. An error leaves in.stats nil (the root reads as
// down) unless only the record could not be read.
func gatherMetrics(ctx context.Context, e *env, rc rootChoice) (metricsInput, error) {
	var in metricsInput
	if e.rootMissing("metrics", rc) && !rc.Default {
		return in, fmt.Errorf("there is no claim root at %s (from %s); pass the root with --root", rc.Path, rc.Source)
	}
	if err := e.checkMachineID(); err != nil {
		return in, err
	}
	boot, err := e.host().BootID()
	if err != nil {
		return in, fmt.Errorf("this machine's boot id cannot be read: %w", err)
	}
	if err := checkClaimRoot(rc); err != nil {
		return in, err
	}
	s, err := e.openStore(rc, false)
	if err != nil {
		return in, err
	}
	st, err := s.Stats(ctx)
	if err != nil {
		return in, fmt.Errorf("reading %s: %w", s.Root(), err)
	}
	in.stats, in.boot = st, boot
	last, err := s.LastClassifyAll(ctx)
	if err != nil {
		return in, fmt.Errorf("the record of the last classify --all cannot be read (the metrics say none is recorded): %w", err)
	}
	in.last = last
	return in, nil
}

// writeMetrics writes the metrics of in in the text exposition format.
func writeMetrics(w io.Writer, in metricsInput) error { return promtext.Write(w, metricFamilies(in)) }

// metricFamilies are the metrics of in, in a fixed order, every family with
// every label value it can have (a zero is a reading; an absent series is
// not). With the root unreadable (in.stats nil) they are claimstore_up 0 and
// the time of the attempt.
func metricFamilies(in metricsInput) []promtext.Family {
	root := promtext.Label{Name: "root", Value: in.root}
	one := func(v float64) []promtext.Sample {
		return []promtext.Sample{{Labels: []promtext.Label{root}, Value: v}}
	}
	by := func(label string, values []string, count func(string) int) []promtext.Sample {
		var out []promtext.Sample
		for _, v := range values {
			out = append(out, promtext.Sample{Labels: []promtext.Label{root, {Name: label, Value: v}}, Value: float64(count(v))})
		}
		return out
	}
	gauge := func(name, help string, s []promtext.Sample) promtext.Family {
		return promtext.Family{Name: name, Help: help, Type: promtext.Gauge, Samples: s}
	}
	up := 0.0
	if in.stats != nil {
		up = 1
	}
	fams := []promtext.Family{
		gauge("claimstore_up", "1 when claimctl metrics read the claim root whole, 0 when it could not (the root's other metrics are then absent, and claimctl says why).", one(up)),
		gauge("claimstore_metrics_timestamp_seconds", "When claimctl metrics read the root, as a Unix time.", one(float64(in.now.UnixMilli())/1000)),
		gauge("claimstore_metrics_duration_seconds", "How long claimctl metrics took to read the root.", one(in.took.Seconds())),
	}
	st := in.stats
	if st == nil {
		return fams
	}
	var states, causes, owners, outcomes []string
	for _, x := range claimstore.States {
		states = append(states, string(x))
	}
	for _, x := range claimstore.UncertainCauses {
		causes = append(causes, string(x))
	}
	for _, x := range claimstore.OwnerClasses {
		owners = append(owners, string(x))
	}
	for _, x := range claimstore.ClassifyAllOutcomes {
		outcomes = append(outcomes, string(x))
	}
	age := 0.0
	if !st.OldestHeld.IsZero() {
		age = max(in.now.Sub(st.OldestHeld).Seconds(), 0)
	}
	fams = append(fams,
		gauge("claimstore_keys", "Keys (seats and sessions) in the root.", one(float64(st.Keys))),
		gauge("claimstore_revisions", "Revisions in the root's key histories.", one(float64(st.Revisions))),
		gauge("claimstore_proofs", "Boot proofs in the root.", one(float64(st.Proofs))),
		gauge("claimstore_pairs", "Pairs by the state the pair reads as (its more conservative key's); a free pair reads stopped.",
			by("state", states, func(v string) int { return st.Pairs[claimstore.State(v)] })),
		gauge("claimstore_uncertain_pairs", "Pairs that read uncertain, by why: damaged (a head that cannot be read or sits above a gap: claimctl fsck), stopped-without-proof, writer-may-run (left uncertain by classify).",
			by("reason", causes, func(v string) int { return st.Uncertain[claimstore.UncertainCause(v)] })),
		gauge("claimstore_held_pairs", "Held pairs by their claim's owner, judged now as classify judges it: live; gone (classify can decide); unknown or invalid (held until proven over); foreign (taken on another machine, judged only there); unreadable (no readable record).",
			by("owner", owners, func(v string) int { return st.HeldByOwner[claimstore.OwnerClass(v)] })),
		gauge("claimstore_orphan_keys", "Held keys of no pair (a half-done acquire or release, or a key no readable revision names), by kind: claimctl list shows them.",
			by("kind", []string{string(claimstore.KindSeat), string(claimstore.KindSession)}, func(v string) int { return st.Orphans[claimstore.Kind(v)] })),
		gauge("claimstore_oldest_held_claim_age_seconds", "Seconds from the writtenAt of the newest record of the longest-unchanged held claim to claimstore_metrics_timestamp_seconds; 0 when nothing is held.", one(age)),
	)
	recorded := 0.0
	if in.last != nil {
		recorded = 1
	}
	fams = append(fams, gauge("claimstore_classify_all_last_recorded", "1 when this machine's last classify --all of the root is recorded (the claimstore_classify_all_last_ metrics describe it), 0 when none is.", one(recorded)))
	last := in.last
	if last == nil {
		return fams
	}
	thisBoot := 0.0
	if last.BootID == in.boot {
		thisBoot = 1
	}
	pairs := map[string]int{"free": last.Free, "stopped": last.Stopped, "uncertain": last.Uncertain, "refused": last.Refused, "owned": last.Owned, "error": last.Errors}
	return append(fams,
		gauge("claimstore_classify_all_last_timestamp_seconds", "When this machine's last classify --all of the root ended, as a Unix time.", one(float64(last.FinishedAt.UnixMilli())/1000)),
		gauge("claimstore_classify_all_last_duration_seconds", "How long this machine's last classify --all of the root took.", one(last.Duration.Seconds())),
		gauge("claimstore_classify_all_last_this_boot", "1 when this machine's last classify --all of the root ran in the current boot, 0 when in an earlier one.", one(thisBoot)),
		gauge("claimstore_classify_all_last_outcome", "How this machine's last classify --all of the root ended (1 for that outcome, 0 for the others): clean (every pair free or stopped with a proof), held (some pair or key left held), error (the walk stopped, or a pair could not be classified).",
			by("outcome", outcomes, func(v string) int {
				if v == string(last.Outcome) {
					return 1
				}
				return 0
			})),
		gauge("claimstore_classify_all_last_pairs", "Pairs this machine's last classify --all of the root judged, by result: free, stopped (by that walk, with a proof), uncertain, refused, owned, error.",
			by("result", []string{"free", "stopped", "uncertain", "refused", "owned", "error"}, func(v string) int { return pairs[v] })),
		gauge("claimstore_classify_all_last_orphan_keys", "Orphan keys (held, of no pair) this machine's last classify --all of the root found.", one(float64(last.Orphans))),
	)
}
