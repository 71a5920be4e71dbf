package fuzz

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/txtar"
	"pgregory.net/rapid"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/hostid/hostidtest"
	"github.com/claimstore/claimstore/internal/crashfs"
	"github.com/claimstore/claimstore/internal/storetest"
)

var writeCorpus = flag.Bool("fuzz.writecorpus", false, "regenerate the committed seed corpora under testdata/fuzz")

// recSeed is one FuzzDecodeRecord input.
type recSeed struct {
	name       string
	data       []byte
	session    bool
	a, b, c    string
	n          uint64
	fromRecord bool
}

func seedFor(name string, data []byte, k claimstore.Key, n uint64) recSeed {
	s := recSeed{name: name, data: data, n: n, session: k.Kind == claimstore.KindSession}
	if s.session {
		s.a = k.Session
	} else {
		s.a, s.b, s.c = k.Seat, k.Project, k.Workspace
	}
	return s
}

// storeRecords returns the revisions the store itself writes in a claim's
// life, with every kind of member it writes.
func storeRecords(tb testing.TB) []recSeed {
	tb.Helper()
	fsys := crashfs.New(nil)
	if err := fsys.MkdirAll("/", 0o755); err != nil {
		tb.Fatal(err)
	}
	s, err := storetest.Open("/claims", &storetest.Options{FS: fsys, Host: &hostidtest.Host{Procs: map[int]string{7: "1", os.Getpid(): "1"}}, Now: func() time.Time { return time.Unix(1, 0) }})
	if err != nil {
		tb.Fatal(err)
	}
	c, err := s.Acquire(context.Background(), fuzzSeat, fuzzSession, claimstore.AcquireFields{
		ClaimID: "c" + strings.Repeat("a", 24),
		Owner:   claimstore.Owner{PID: 7, Start: "1", Boot: "b", Incarnation: json.RawMessage(`{"n":1}`)},
		Fields:  map[string]any{"bindingId": "bind-<1>&", "pins": []string{"p\u2028"}, "generation": 3, "future": map[string]any{"x": []any{1.5, nil, true}}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Advance(context.Background(), c, claimstore.Patch{State: claimstore.Active, Fields: map[string]any{"spawnMarker": true}}); err != nil {
		tb.Fatal(err)
	}
	if err := s.Release(context.Background(), c, claimstore.NewProof(claimstore.ProofCohort, "cohort-1")); err != nil {
		tb.Fatal(err)
	}
	var out []recSeed
	for p, data := range fsys.Files("/claims") {
		n, ok := claimstore.ParseRevisionName(path.Base(p))
		if !ok {
			continue
		}
		k := fuzzSeat
		if strings.Contains(p, "/session/") {
			k = fuzzSession
		}
		out = append(out, seedFor(fmt.Sprintf("store-%s-%d", k.Kind, n), data, k, n))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// referenceRecords returns every revision file of the reference
// implementation's fixtures (testdata/reference), valid and damaged alike,
// with the key its directory belongs to.
func referenceRecords(tb testing.TB) []recSeed {
	tb.Helper()
	files, err := filepath.Glob("../testdata/reference/*.txtar")
	if err != nil || len(files) == 0 {
		tb.Fatalf("no reference fixtures: %v", err)
	}
	var out []recSeed
	seen := map[string]bool{}
	for _, file := range files {
		ar, err := txtar.ParseFile(file)
		if err != nil {
			tb.Fatal(err)
		}
		for _, f := range ar.Files {
			n, ok := claimstore.ParseRevisionName(path.Base(f.Name))
			if !ok || seen[string(f.Data)] {
				continue
			}
			seen[string(f.Data)] = true
			// The key comes from the record when it names one that hashes
			// to its directory; damaged records keep a plausible key.
			var r struct {
				Key map[string]string `json:"key"`
			}
			_ = json.Unmarshal(f.Data, &r)
			k, ok := keyFrom(r.Key["kind"] == "session", firstNonEmpty(r.Key["session"], r.Key["seat"]), r.Key["project"], r.Key["workspace"])
			if !ok {
				k = fuzzSeat
			}
			name := strings.TrimSuffix(filepath.Base(file), ".txtar") + "-" + strings.ReplaceAll(path.Dir(f.Name), "/", "-")[:12] + "-" + strconv.FormatUint(n, 10)
			out = append(out, seedFor("ref-"+name, f.Data, k, n))
		}
	}
	return out
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// keyVectors returns the key hash vectors shared with the reference.
func keyVectors(tb testing.TB) []struct {
	Name string            `json:"name"`
	Key  map[string]string `json:"key"`
	Hash string            `json:"hash"`
} {
	tb.Helper()
	data, err := os.ReadFile("../testdata/keyhash.json")
	if err != nil {
		tb.Fatal(err)
	}
	var vs []struct {
		Name string            `json:"name"`
		Key  map[string]string `json:"key"`
		Hash string            `json:"hash"`
	}
	if err := json.Unmarshal(data, &vs); err != nil {
		tb.Fatal(err)
	}
	return vs
}

// corpusFile renders values in the native fuzzing corpus format.
func corpusFile(vals ...any) []byte {
	var b strings.Builder
	b.WriteString("go test fuzz v1\n")
	for _, v := range vals {
		switch v := v.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%s)\n", strconv.Quote(string(v)))
		case string:
			fmt.Fprintf(&b, "string(%s)\n", strconv.Quote(v))
		case bool:
			fmt.Fprintf(&b, "bool(%v)\n", v)
		case uint64:
			fmt.Fprintf(&b, "uint64(%d)\n", v)
		default:
			panic(fmt.Sprintf("corpusFile: %T", v))
		}
	}
	return []byte(b.String())
}

func corpusName(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// TestSeedCorpus checks that the committed seed corpora exist, and with
// -fuzz.writecorpus regenerates them.
func TestSeedCorpus(t *testing.T) {
	want := map[string][][]byte{}
	for _, s := range append(storeRecords(t), referenceRecords(t)...) {
		want["FuzzDecodeRecord"] = append(want["FuzzDecodeRecord"], corpusFile(s.data, s.session, s.a, s.b, s.c, s.n))
	}
	for _, v := range keyVectors(t) {
		k := v.Key
		if k["kind"] == "session" {
			want["FuzzKeyJSON"] = append(want["FuzzKeyJSON"], corpusFile(true, k["session"], "", ""))
		} else {
			want["FuzzKeyJSON"] = append(want["FuzzKeyJSON"], corpusFile(false, k["seat"], k["project"], k["workspace"]))
		}
	}
	for target, files := range want {
		dir := filepath.Join("testdata", "fuzz", target)
		if *writeCorpus {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				if err := os.WriteFile(filepath.Join(dir, "seed-"+corpusName(string(f))), f, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		for _, f := range files {
			if _, err := os.Stat(filepath.Join(dir, "seed-"+corpusName(string(f)))); err != nil {
				t.Errorf("seed missing (run go test ./fuzz -run TestSeedCorpus -fuzz.writecorpus): %v", err)
				break
			}
		}
	}
	if *writeCorpus {
		writeModelCorpus(t)
		t.Logf("wrote %d FuzzDecodeRecord and %d FuzzKeyJSON seeds", len(want["FuzzDecodeRecord"]), len(want["FuzzKeyJSON"]))
	}
}

// The FuzzModel corpus. rapid.MakeFuzz reads the fuzzer's bytes as rapid's
// random bitstream, eight bytes a draw (a draw of n bits keeps the low n
// bits of its little-endian word); when the bytes run out mid-run, rapid
// reports invalid data ("overrun") and the entry is skipped, having checked
// nothing past that point. So the seeds are long: pseudo-random bytes, kept
// when their run takes many steps and adds an action outcome the seeds so
// far lacked, cut to exactly the words the run draws.

// modelCorpusDir holds the committed FuzzModel entries.
var modelCorpusDir = filepath.Join("testdata", "fuzz", "FuzzModel")

// modelOutcomes are the action outcomes the FuzzModel seeds must exercise
// together (modelStats' names).
var modelOutcomes = []string{
	"named temporaries", "anonymous temporaries",
	"acquire", "acquire refused", "acquire cut",
	"advance", "advance cut", "advance stopping", "advance stopping cut", "advance idle",
	"release", "release cut", "release idle",
	"classify free", "classify stopped", "classify reserved", "classify active",
	"classify stopping", "classify uncertain", "classify cut",
}

const (
	modelSeedCandidates = 1200 // pseudo-random inputs tried
	modelSeedMinSteps   = 20   // of modelFuzzSteps
	modelSeedMax        = 8    // seeds written at most
)

// runsEveryOp reports whether the run acquired, advanced, released and
// classified (not merely drew the op with no claim to act on).
func (st *modelStats) runsEveryOp() bool {
	ran := func(prefix string) bool {
		for a, n := range st.actions {
			if n > 0 && strings.HasPrefix(a, prefix) && !strings.HasSuffix(a, " idle") && !strings.HasSuffix(a, " cut") && a != "acquire refused" {
				return true
			}
		}
		return false
	}
	return ran("acquire") && ran("advance") && ran("release") && ran("classify")
}

// modelRun runs the model on data as FuzzModel does, in a subtest, and
// returns what it did and whether rapid skipped it for lack of data.
func modelRun(t *testing.T, name string, data []byte) (st *modelStats, skipped bool) {
	t.Helper()
	st = newModelStats()
	var sub *testing.T
	t.Run(name, func(t *testing.T) {
		sub = t
		rapid.MakeFuzz(modelProp(modelFuzzSteps, st))(t, data)
	})
	return st, sub.Skipped()
}

// modelSeedBytes returns n pseudo-random bytes for seed i, drawn from the
// printable ASCII characters strconv.Quote leaves alone (so the corpus
// file is no bigger than the input). Every bit that rapid's narrow draws
// read (the low five of a byte) is still uniform.
func modelSeedBytes(i uint64, n int) []byte {
	const alphabet = ` !#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[]^_` + "`" + `abcdefghijklmnopqrstuvwxyz{|}~`
	r := rand.New(rand.NewPCG(i, 0xc1a1))
	b := make([]byte, n)
	for j := range b {
		b[j] = alphabet[r.IntN(len(alphabet))]
	}
	return b
}

// writeModelCorpus replaces the seed-* entries of testdata/fuzz/FuzzModel
// (entries the fuzzer found are kept).
func writeModelCorpus(t *testing.T) {
	type cand struct {
		data []byte
		st   *modelStats
	}
	var cands []cand
	for i := range uint64(modelSeedCandidates) {
		data := modelSeedBytes(i, 16<<10)
		st, skipped := modelRun(t, fmt.Sprintf("try-%d", i), data)
		if skipped || st.steps < modelSeedMinSteps || !st.runsEveryOp() {
			continue
		}
		// Cut to the words the run draws: the shortest prefix that does
		// not run out, which runs exactly as the whole input does.
		lo, hi := 0, len(data)/8 // words: lo runs out, hi does not
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if _, skipped := modelRun(t, fmt.Sprintf("cut-%d-%d", i, mid), data[:mid*8]); skipped {
				lo = mid
			} else {
				hi = mid
			}
		}
		cands = append(cands, cand{data[:hi*8], st})
	}
	reachable := map[string]bool{}
	for _, c := range cands {
		for a := range c.st.actions {
			reachable[a] = true
		}
	}
	// Greedy cover: each seed is the candidate whose outcomes the seeds so
	// far exercise least (an outcome in k of them scores 1/(k+1)); ties go
	// to the shorter input.
	covered := map[string]int{}
	var seeds []cand
	for len(seeds) < modelSeedMax && len(cands) > 0 {
		best, bestScore := -1, 0.0
		for i, c := range cands {
			score := 0.0
			for a := range c.st.actions {
				score += 1 / float64(covered[a]+1)
			}
			if best < 0 || score > bestScore || score == bestScore && len(c.data) < len(cands[best].data) {
				best, bestScore = i, score
			}
		}
		for a := range cands[best].st.actions {
			covered[a]++
		}
		seeds = append(seeds, cands[best])
		cands = append(cands[:best], cands[best+1:]...)
	}
	for a := range reachable {
		if covered[a] == 0 {
			t.Errorf("no seed exercises %q", a)
		}
	}
	for _, a := range modelOutcomes {
		if !reachable[a] {
			t.Errorf("no candidate exercises %q: raise modelSeedCandidates", a)
		}
	}
	old, _ := filepath.Glob(filepath.Join(modelCorpusDir, "seed-*"))
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(modelCorpusDir, 0o755); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, s := range seeds {
		f := corpusFile(s.data)
		total += len(f)
		name := "seed-" + corpusName(string(f))
		if err := os.WriteFile(filepath.Join(modelCorpusDir, name), f, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d bytes, %v", name, len(s.data), s.st)
	}
	names := make([]string, 0, len(reachable))
	for a := range reachable {
		names = append(names, a)
	}
	sort.Strings(names)
	t.Logf("wrote %d FuzzModel seeds (%d bytes) from the %d of %d candidates that ran %d+ steps of every op; outcomes seen: %q", len(seeds), total, len(cands)+len(seeds), modelSeedCandidates, modelSeedMinSteps, names)
}

// readCorpusEntries returns the []byte inputs of a target's committed
// corpus, by file name.
func readCorpusEntries(t *testing.T, dir string) (names []string, inputs map[string][]byte) {
	t.Helper()
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	inputs = map[string][]byte{}
	for _, f := range files {
		raw, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		if len(lines) != 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "[]byte(") || !strings.HasSuffix(lines[1], ")") {
			t.Fatalf("%s: not a go test fuzz v1 file of one []byte", f.Name())
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", f.Name(), err)
		}
		names = append(names, f.Name())
		inputs[f.Name()] = []byte(s)
	}
	return names, inputs
}

// TestModelCorpus runs every committed FuzzModel entry as FuzzModel does
// and fails if rapid skipped one (it ran out of bytes: it checks nothing
// past that point; regenerate the seeds with -fuzz.writecorpus, or pad an
// input the fuzzer found with bytes until it runs to its end), and if the
// entries together leave an action outcome unexercised.
func TestModelCorpus(t *testing.T) {
	names, inputs := readCorpusEntries(t, modelCorpusDir)
	covered := map[string]int{}
	steps, ran := 0, 0
	for _, name := range names {
		st, skipped := modelRun(t, name, inputs[name])
		if skipped {
			t.Errorf("FuzzModel corpus entry %s (%d bytes) was skipped: rapid ran out of input after %d steps", name, len(inputs[name]), st.steps)
			continue
		}
		t.Logf("%s: %d bytes, %v", name, len(inputs[name]), st)
		ran++
		steps += st.steps
		for a, n := range st.actions {
			covered[a] += n
		}
	}
	t.Logf("%d of %d entries ran to their end, %d steps in all", ran, len(names), steps)
	for _, a := range modelOutcomes {
		if covered[a] == 0 {
			t.Errorf("no FuzzModel corpus entry exercises %q (regenerate: go test ./fuzz -run TestSeedCorpus -fuzz.writecorpus)", a)
		}
	}
}
