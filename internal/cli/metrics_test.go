package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/hostid"
	"github.com/claimstore/claimstore/internal/etcdtest"
	"github.com/claimstore/claimstore/internal/storetest"
)

// metricsTestRoot writes a root with a live active pair, a pair whose owner
// is gone (recorded under another boot), a pair left uncertain, a released
// pair and a classify --all record, every record written at a fixed time,
// and returns the store on it, on host (this machine; a boot of its own for
// the golden file, the real one for a command to judge).
func metricsTestRoot(t *testing.T, root string, be claimstore.Backend, host hostid.Host) *claimstore.Store {
	t.Helper()
	ctx := context.Background()
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s, err := storetest.Open(root, &storetest.Options{Backend: be, Host: host, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	self, err := s.Self(1)
	if err != nil {
		t.Fatal(err)
	}
	keys := func(n string) (claimstore.Key, claimstore.Key) {
		seat, err := claimstore.SeatKey("s-"+n, "p", "/w")
		if err != nil {
			t.Fatal(err)
		}
		session, err := claimstore.SessionKey("x-" + n)
		if err != nil {
			t.Fatal(err)
		}
		return seat, session
	}
	acquire := func(n string, o claimstore.Owner) *claimstore.Claim {
		seat, session := keys(n)
		c, err := s.Acquire(ctx, seat, session, claimstore.AcquireFields{Owner: o})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if err := s.Advance(ctx, acquire("live", self), claimstore.Patch{State: claimstore.Active}); err != nil {
		t.Fatal(err)
	}
	acquire("gone", claimstore.Owner{PID: 4200, Start: "1", Boot: bootEarlier})
	if err := s.Advance(ctx, acquire("uncertain", self), claimstore.Patch{State: claimstore.Uncertain}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, acquire("done", self), claimstore.NewProof(claimstore.ProofCohort, "done")); err != nil {
		t.Fatal(err)
	}
	at = at.Add(90 * time.Second)
	sum := &claimstore.Summary{Pairs: 4, Free: 1, Refused: map[claimstore.Code]int{claimstore.AlreadyActive: 2}, Uncertain: map[string]int{"owner gone, writer may run": 1}}
	if _, err := s.RecordClassifyAll(ctx, sum, nil, at.Add(-2500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	return s
}

const (
	bootNow     = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
	bootEarlier = "11111111-2222-4333-8444-555555555555"
)

// The exact metric set, byte for byte, of a root with a claim in each
// interesting state and a recorded classify --all, read one hour after its
// records were written: the golden file of claimctl metrics' format. A
// metric added, removed, renamed or relabelled fails it, as does a HELP
// line changed; the order is fixed.
func TestMetricsGolden(t *testing.T) {
	root := filepath.Join(t.TempDir(), "claims")
	s := metricsTestRoot(t, root, nil, hostid.Override{Host: hostid.System, Boot: bootNow})
	ctx := context.Background()
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last, err := s.LastClassifyAll(ctx)
	if err != nil || last == nil {
		t.Fatalf("LastClassifyAll: %v, %v", last, err)
	}
	now := time.Date(2026, 1, 1, 13, 0, 0, 500_000_000, time.UTC)
	var b strings.Builder
	if err := writeMetrics(&b, metricsInput{root: "/var/lib/claimstore", stats: st, last: last, boot: bootNow, now: now, took: 25 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "metrics.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v; generate it with `go test ./internal/cli -run TestMetricsGolden -update`", err)
	}
	if diff := cmp.Diff(string(want), b.String()); diff != "" {
		t.Errorf("claimctl metrics output (-%s +got):\n%s", golden, diff)
	}
	// The same set, read from another boot: only this_boot changes.
	var other strings.Builder
	if err := writeMetrics(&other, metricsInput{root: "/var/lib/claimstore", stats: st, last: last, boot: bootEarlier, now: now, took: 25 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Replace(other.String(), `claimstore_classify_all_last_this_boot{root="/var/lib/claimstore"} 0`, `claimstore_classify_all_last_this_boot{root="/var/lib/claimstore"} 1`, 1); got != b.String() {
		t.Errorf("read in another boot, more than this_boot changed:\n%s", cmp.Diff(b.String(), other.String()))
	}
}

// The metric names of each output are exactly these, in this order: all
// of them for a root with a recorded walk; without the classify --all
// ones but claimstore_classify_all_last_recorded when none is recorded;
// claimstore_up and the time of the attempt alone for a root that cannot
// be read.
func TestMetricsNames(t *testing.T) {
	st := &claimstore.Stats{}
	last := &claimstore.ClassifyAllStatus{Outcome: claimstore.ClassifyAllHeld, FinishedAt: time.Unix(1, 0)}
	names := func(in metricsInput) []string {
		var out []string
		for _, f := range metricFamilies(in) {
			out = append(out, f.Name)
		}
		return out
	}
	down := []string{"claimstore_up", "claimstore_metrics_timestamp_seconds", "claimstore_metrics_duration_seconds"}
	unrecorded := append(append([]string{}, down...), "claimstore_keys", "claimstore_revisions", "claimstore_proofs",
		"claimstore_pairs", "claimstore_uncertain_pairs", "claimstore_held_pairs", "claimstore_orphan_keys",
		"claimstore_oldest_held_claim_age_seconds", "claimstore_classify_all_last_recorded")
	all := append(append([]string{}, unrecorded...), "claimstore_classify_all_last_timestamp_seconds", "claimstore_classify_all_last_duration_seconds",
		"claimstore_classify_all_last_this_boot", "claimstore_classify_all_last_outcome", "claimstore_classify_all_last_pairs",
		"claimstore_classify_all_last_orphan_keys")
	for _, tc := range []struct {
		in   metricsInput
		want []string
	}{
		{metricsInput{root: "/r"}, down},
		{metricsInput{root: "/r", stats: st}, unrecorded},
		{metricsInput{root: "/r", stats: st, last: last}, all},
	} {
		if diff := cmp.Diff(tc.want, names(tc.in)); diff != "" {
			t.Errorf("metric names (-want +got):\n%s", diff)
		}
	}
}

// promtool is Prometheus's own check of the format and its naming
// conventions (Debian's prometheus package; .ci/run installs it). Without
// it the test cannot check anything: it skips, saying so, and fails under
// CI.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("promtool is not installed (Debian package prometheus), and CI is set: .ci/run installs it")
		}
		t.Skip("promtool is not installed (apt-get install prometheus): the output is not checked by Prometheus's own linter")
	}
	return p
}

// promtoolCheck runs promtool check metrics on text and fails on any
// complaint (promtool exits non-zero on a format error and on a lint
// problem: a counter without _total, a gauge with it, a bad name).
func promtoolCheck(t *testing.T, what, text string) {
	t.Helper()
	cmd := exec.Command(promtool(t), "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("promtool check metrics on %s: %v\n%s\n--- the metrics:\n%s", what, err, out, text)
	}
}

// promtool check metrics accepts what claimctl metrics writes — run as
// the command, on a directory root whose path needs escaping in a label
// (a quote, a backslash, a space), and on an etcd root — and the output
// for a root that cannot be read; and the check itself is not blind: it
// fails a gauge named like a counter.
func TestMetricsPromtool(t *testing.T) {
	promtool(t)
	dir := filepath.Join(t.TempDir(), `odd "root" \ here`)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "claims")
	metricsTestRoot(t, root, nil, hostid.System)
	code, out, errs := runIn(t, nil, "metrics", "--root", root)
	if code != exitOK {
		t.Fatalf("metrics: exit %d: %s", code, errs)
	}
	if !strings.Contains(out, `claimstore_up{root="`+strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(root)+`"} 1`) {
		t.Errorf("the root label is not the root, escaped:\n%s", out)
	}
	promtoolCheck(t, "a directory root", out)

	code, down, errs := runIn(t, nil, "metrics", "--root", filepath.Join(dir, "missing"))
	if code != exitError || !strings.Contains(errs, "there is no claim root at") {
		t.Fatalf("metrics of a missing root: exit %d: %s", code, errs)
	}
	if !regexp.MustCompile(`(?m)^claimstore_up\{root=".*missing"\} 0$`).MatchString(down) || strings.Contains(down, "claimstore_pairs") {
		t.Errorf("metrics of a missing root:\n%s", down)
	}
	promtoolCheck(t, "an unreadable root", down)

	c := etcdtest.Start(t, 1)
	etcdRoot := "etcd://" + strings.Join(c.Hosts(), ",") + "/metrics"
	be, err := testOptions.OpenEtcd(context.Background(), etcdRoot, EtcdConn{DialTimeout: 5 * time.Second, CommandTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	metricsTestRoot(t, etcdRoot, be, hostid.System)
	code, out, errs = runIn(t, nil, "metrics", "--root", etcdRoot)
	if code != exitOK || !strings.Contains(out, `claimstore_keys{root="`+etcdRoot+`"} 8`) {
		t.Fatalf("metrics of an etcd root: exit %d: %s\n%s", code, errs, out)
	}
	promtoolCheck(t, "an etcd root", out)

	bad := strings.Replace(out, "claimstore_revisions", "claimstore_revisions_total", -1)
	cmd := exec.Command(promtool(t), "check", "metrics")
	cmd.Stdin = strings.NewReader(bad)
	if got, err := cmd.CombinedOutput(); err == nil && len(got) == 0 {
		t.Errorf("promtool accepts a gauge named _total: the check above is blind")
	}
}

// The metrics of a root agree with what list and classify --all say of
// it: list's held pairs are the non-stopped pairs, and the classify --all
// metrics are the walk's summary.
func TestMetricsAgreeWithList(t *testing.T) {
	root := filepath.Join(t.TempDir(), "claims")
	metricsTestRoot(t, root, nil, hostid.System)
	_, list, _ := runIn(t, nil, "list", "--root", root, "--json")
	_, metrics, _ := runIn(t, nil, "metrics", "--root", root)
	held := regexp.MustCompile(`"pairs":(\d+)`).FindStringSubmatch(list)
	if held == nil {
		t.Fatalf("list --json: %s", list)
	}
	sum := 0
	for _, m := range regexp.MustCompile(`(?m)^claimstore_pairs\{root="[^"]*",state="(\w+)"\} (\d+)$`).FindAllStringSubmatch(metrics, -1) {
		if m[1] != "stopped" {
			sum += atoi(t, m[2])
		}
	}
	if sum != atoi(t, held[1]) {
		t.Errorf("metrics say %d held pairs, list %s:\n%s", sum, held[1], metrics)
	}
	var owners []string
	for _, m := range regexp.MustCompile(`(?m)^claimstore_held_pairs\{root="[^"]*",owner="(\w+)"\} ([1-9]\d*)$`).FindAllStringSubmatch(metrics, -1) {
		owners = append(owners, m[1]+"="+m[2])
	}
	sort.Strings(owners)
	if diff := cmp.Diff([]string{"gone=1", "live=2"}, owners); diff != "" {
		t.Errorf("held pairs by owner (-want +got):\n%s", diff)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
