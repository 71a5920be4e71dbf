package fuzz

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/txtar"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/internal/crashfs"
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
	s, err := claimstore.Open("/claims", &claimstore.Options{FS: fsys, Host: fixedHost{}, Now: func() time.Time { return time.Unix(1, 0) }})
	if err != nil {
		tb.Fatal(err)
	}
	c, err := s.Acquire(fuzzSeat, fuzzSession, claimstore.AcquireFields{
		ClaimID: "c" + strings.Repeat("a", 24),
		Owner:   claimstore.Owner{PID: 7, Start: "1", Boot: "b", Incarnation: json.RawMessage(`{"n":1}`)},
		Fields:  map[string]any{"bindingId": "bind-<1>&", "pins": []string{"p\u2028"}, "generation": 3, "future": map[string]any{"x": []any{1.5, nil, true}}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Advance(c, claimstore.Patch{State: claimstore.Active, Fields: map[string]any{"spawnMarker": true}}); err != nil {
		tb.Fatal(err)
	}
	if err := s.Release(c, claimstore.NewProof(claimstore.ProofCohort, "cohort-1")); err != nil {
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

type fixedHost struct{}

func (fixedHost) MachineID() (string, error)        { return "0123456789abcdef0123456789abcdef", nil }
func (fixedHost) BootID() (string, error)           { return "aaaaaaaa-0000-4000-8000-00000000000a", nil }
func (fixedHost) StartTime(pid int) (string, error) { return "1", nil }
func (fixedHost) Signal0(pid int) error             { return nil }
func (fixedHost) ProcState(pid int) (byte, error)   { return 'S', nil }
func (fixedHost) PIDNamespace(int) (string, error)  { return "4:4026531836", nil }

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
		t.Logf("wrote %d FuzzDecodeRecord and %d FuzzKeyJSON seeds", len(want["FuzzDecodeRecord"]), len(want["FuzzKeyJSON"]))
	}
}
