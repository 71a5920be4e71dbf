package claimstore

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/hostid"
)

// testMachine and testBoot are what thisHost presents, so that tests do not
// depend on this machine's ids and can tell their records apart.
const (
	testMachine  = "0123456789abcdef0123456789abcdef"
	otherMachine = "fedcba9876543210fedcba9876543210"
	testBoot     = "11111111-2222-3333-4444-555555555555"
)

// thisHost is the real host (so process identities are real) with a fixed
// machine id and boot id; foreignHost is another machine in the same way.
var (
	thisHost    hostid.Host = hostid.Override{Host: hostid.System, Machine: testMachine, Boot: testBoot}
	foreignHost hostid.Host = hostid.Override{Host: hostid.System, Machine: otherMachine, Boot: testBoot}
)

// onEtcd reports whether s is on an etcd root (the etcd backend case of
// the behavioural suite), whose keys a test reads through the backend.
func onEtcd(s *Store) bool { return strings.HasPrefix(s.Root(), "etcd://") }

// fixedNow is the clock of test stores, so that records are reproducible.
func fixedNow() time.Time { return time.Date(2024, 5, 6, 7, 8, 9, 10_000_000, time.UTC) }

// newRoot returns a claim root that does not exist yet, in a fresh temporary
// directory: the store creates it on first write.
func newRoot(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "claims")
}

// openStore opens a store on root with the test host and clock; opts may
// set anything else.
func openStore(t testing.TB, root string, opts *TOpts) *Store {
	t.Helper()
	if opts == nil {
		opts = &TOpts{}
	}
	if opts.Host == nil {
		opts.Host = thisHost
	}
	if opts.Now == nil {
		opts.Now = fixedNow
	}
	if opts.Backend == nil {
		opts.Backend = backendFor(t, root)
	}
	s, err := OpenRoot(root, opts)
	if err != nil {
		t.Fatalf("OpenRoot(%q): %v", root, err)
	}
	return s
}

func seatKey(t testing.TB, seat string) Key {
	t.Helper()
	k, err := SeatKey(seat, "project", "workspace")
	if err != nil {
		t.Fatalf("SeatKey(%q): %v", seat, err)
	}
	return k
}

func sessionKey(t testing.TB, session string) Key {
	t.Helper()
	k, err := SessionKey(session)
	if err != nil {
		t.Fatalf("SessionKey(%q): %v", session, err)
	}
	return k
}

// fields returns acquire fields owned by this process.
func fields(t testing.TB, s *Store) AcquireFields {
	t.Helper()
	o, err := s.Self(1)
	if err != nil {
		t.Fatalf("Self: %v", err)
	}
	return AcquireFields{Owner: o}
}

func mustAcquire(t testing.TB, s *Store, seat, session Key) *Claim {
	t.Helper()
	c, err := s.Acquire(context.Background(), seat, session, fields(t, s))
	if err != nil {
		t.Fatalf("Acquire(%v, %v): %v", seat, session, err)
	}
	return c
}

// dirFiles returns every entry of k's directory with its contents (nil for
// anything that is not a regular file), read without the store.
func dirFiles(t testing.TB, s *Store, k Key) map[string][]byte {
	t.Helper()
	if onEtcd(s) {
		// A backend's key: its revisions and other names, as a directory
		// listing would show them.
		revs, other, err := s.be.List(context.Background(), k.Loc())
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		out := map[string][]byte{}
		for _, n := range revs {
			if out[RevisionName(n)], err = s.be.Read(context.Background(), k.Loc(), n); err != nil {
				t.Fatalf("Read: %v", err)
			}
		}
		for _, name := range other {
			out[name] = nil
		}
		return out
	}
	dir := s.KeyDir(k)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string][]byte{}
	}
	if err != nil {
		t.Fatalf("ReadDir: %v", err)
	}
	out := map[string][]byte{}
	for _, e := range ents {
		var data []byte
		if e.Type().IsRegular() {
			if data, err = os.ReadFile(filepath.Join(dir, e.Name())); err != nil {
				t.Fatalf("ReadFile: %v", err)
			}
		}
		out[e.Name()] = data
	}
	return out
}

// dirNames returns the sorted names in k's directory.
func dirNames(t testing.TB, s *Store, k Key) []string {
	t.Helper()
	var names []string
	for name := range dirFiles(t, s, k) {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// revNames returns RevisionName(1..n).
func revNames(n uint64) []string {
	var out []string
	for i := uint64(1); i <= n; i++ {
		out = append(out, RevisionName(i))
	}
	return out
}

// readRev reads revision n of k's directory without the store.
func readRev(t testing.TB, s *Store, k Key, n uint64) []byte {
	t.Helper()
	if onEtcd(s) {
		data, err := s.be.Read(context.Background(), k.Loc(), n)
		if err != nil {
			t.Fatalf("read revision %d of %v: %v", n, k, err)
		}
		return data
	}
	data, err := os.ReadFile(filepath.Join(s.KeyDir(k), RevisionName(n)))
	if err != nil {
		t.Fatalf("read revision %d of %v: %v", n, k, err)
	}
	return data
}

// writeRev writes revision n of k by hand, as another implementation or an
// operator might, creating the key directory.
func writeRev(t testing.TB, s *Store, k Key, n uint64, data []byte) {
	t.Helper()
	if onEtcd(s) {
		if err := s.be.Publish(context.Background(), k.Loc(), n, data, nil); err != nil {
			t.Fatal(err)
		}
		return
	}
	dir := s.KeyDir(k)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, RevisionName(n)), data, 0o400); err != nil {
		t.Fatal(err)
	}
}

// member is one member of a hand-built JSON object, its value raw JSON.
type member struct{ name, raw string }

// obj is a hand-built JSON object whose member order is kept.
type obj []member

func (o obj) set(name, raw string) obj {
	out := append(obj(nil), o...)
	for i := range out {
		if out[i].name == name {
			out[i].raw = raw
			return out
		}
	}
	return append(out, member{name, raw})
}

func (o obj) del(name string) obj {
	var out obj
	for _, m := range o {
		if m.name != name {
			out = append(out, m)
		}
	}
	return out
}

// bytes returns the object as JSON.stringify writes a record: no spaces,
// and a newline.
func (o obj) bytes() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Quote(m.name))
		b.WriteByte(':')
		b.WriteString(m.raw)
	}
	b.WriteString("}\n")
	return b.Bytes()
}

const testClaimID = "c0123456789abcdef01234567"

// refRecord is revision n of k as the reference implementation's acquire
// writes it (claim.mjs: the members in the order of its object literal,
// then key, revision, writtenAt), with every field of the reference record
// given a value.
func refRecord(k Key, n uint64, claimID, state string) obj {
	return obj{
		{"version", "1"},
		{"kind", `"writer-claim"`},
		{"claimId", strconv.Quote(claimID)},
		{"bindingId", `"b-1"`},
		{"harness", `"claude"`},
		{"conversation", `"conv-1"`},
		{"branch", `"main"`},
		{"leaf", `"leaf-9"`},
		{"pins", `{"model":"m","tools":["a","b"]}`},
		{"host", `{"machineId":"` + testMachine + `","bootId":"` + testBoot + `"}`},
		{"owner", `{"pid":4242,"start":"123456","boot":"` + testBoot + `","incarnation":3}`},
		{"unitName", strconv.Quote(UnitNameFor(claimID))},
		{"spawnMarker", "false"},
		{"invocationId", "null"},
		{"engine", "null"},
		{"shim", "null"},
		{"generation", "7"},
		{"state", strconv.Quote(state)},
		{"proof", "null"},
		{"stop", "null"},
		{"prior", "null"},
		{"execution", "null"},
		{"cohortRef", "null"},
		{"key", string(k.JSON())},
		{"revision", strconv.FormatUint(n, 10)},
		{"writtenAt", `"2024-01-02T03:04:05.678Z"`},
	}
}

// barrierLog records every barrier point a store meets.
type barrierLog struct {
	mu     sync.Mutex
	points []Point
}

func (l *barrierLog) hook(p Point) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.points = append(l.points, p)
	return nil
}

func (l *barrierLog) take() []Point {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.points
	l.points = nil
	return out
}

// noTemps fails when k's directory holds a temporary name: O_TMPFILE leaves
// none, even when an operation is stopped half way.
func noTemps(t testing.TB, s *Store, k Key) {
	t.Helper()
	for _, name := range dirNames(t, s, k) {
		if strings.HasPrefix(name, vfs.TempPrefix) {
			t.Errorf("%v: temporary %s left in the key directory", k, name)
		}
	}
}

var errCrash = errors.New("simulated crash")

// releasedPair makes a new root whose pair (seat "s", session "x") was
// acquired and released with a cohort proof: both keys free at revision 2.
func releasedPair(t *testing.T) (root string, s *Store, seat, session Key) {
	t.Helper()
	root = newRoot(t)
	s = openStore(t, root, nil)
	seat, session = seatKey(t, "s"), sessionKey(t, "x")
	c := mustAcquire(t, s, seat, session)
	if err := s.Release(context.Background(), c, NewProof(ProofCohort, "done")); err != nil {
		t.Fatal(err)
	}
	return root, s, seat, session
}

// rootPaths returns every path under root, directories included, relative
// to it and sorted: what a refused operation must leave unchanged.
func rootPaths(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
