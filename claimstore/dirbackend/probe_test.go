package dirbackend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/google/go-cmp/cmp"
)

// probeCountFS is the OS filesystem whose ProbeDir counts its existence
// checks and fails the failAt-th one (from 1; 0: none) with EIO. It says
// the directory's size is size, as ext4 would for about that many
// entries, so that the probe's path does not depend on the filesystem the
// test runs on.
type probeCountFS struct {
	vfs.OSFS
	calls  *int
	failAt int
	size   int64
}

func (f probeCountFS) ProbeDir(dir string) (func(string) (bool, error), int64, func() error, error) {
	exists, _, closeDir, err := f.OSFS.ProbeDir(dir)
	if err != nil {
		return nil, 0, nil, err
	}
	return func(base string) (bool, error) {
		*f.calls++
		if *f.calls == f.failAt {
			return false, &os.PathError{Op: "fstatat", Path: base, Err: syscall.EIO}
		}
		return exists(base)
	}, f.size, closeDir, nil
}

// lstatCountFS is a filesystem without ProbeDir (so the probe checks names
// with Lstat), counting the Lstats of revision names and failing the
// failAt-th one with EIO.
type lstatCountFS struct {
	vfs.FS
	calls  *int
	failAt int
}

func (f lstatCountFS) Lstat(name string) (os.FileInfo, error) {
	if strings.HasSuffix(name, ".json") || filepath.Base(name) == BaseName {
		*f.calls++
		if *f.calls == f.failAt {
			return nil, &os.PathError{Op: "lstat", Path: name, Err: syscall.EIO}
		}
	}
	return f.FS.Lstat(name)
}

// TestProbe checks the probe's answer and cost on dense histories of many
// lengths, from every kind of start: no hint (cold: from revision 1, or
// from the directory size's estimate, above or below the head), a hint
// below, at and above the head (a history that shrank). The number of
// existence checks is pinned: the probe is what keeps a held head's cost
// from growing with its history. Every check failing in turn makes the
// probe fail with it, never answer.
func TestProbe(t *testing.T) {
	type tc struct {
		n, made uint64 // the head; made > n: revisions above n were made, then removed (a large directory)
		hint    uint64
		top     bool // only revisions n-1 and n exist (n near storage.MaxRevision)
		want    int  // existence checks with the OS filesystem (ProbeDir, with the size estimate)
	}
	cases := []tc{
		{n: 0, want: 1}, {n: 1, want: 2}, {n: 2, want: 4}, {n: 3, want: 4}, {n: 5, want: 6},
		{n: 8, want: 8}, {n: 9, want: 8}, {n: 17, want: 10},
		{n: 8, hint: 8, want: 2}, {n: 8, hint: 7, want: 3}, {n: 8, hint: 1, want: 7},
		{n: 8, hint: 9, want: 9}, {n: 8, hint: 30, want: 9}, {n: 0, hint: 3, want: 2},
		// Large directories: the size's estimate starts the probe near
		// the head, or above it when revisions were removed.
		{n: 300, want: 13}, {n: 300, hint: 300, want: 2}, {n: 300, hint: 100, want: 17},
		{n: 150, made: 900, want: 18}, {n: 1, made: 900, want: 18}, {n: 899, made: 900, want: 17},
		{n: 700, made: 900, want: 12},
		// The last number a name can carry: the probe stops there.
		{n: storage.MaxRevision, hint: storage.MaxRevision - 1, top: true, want: 2},
		{n: storage.MaxRevision, hint: storage.MaxRevision, top: true, want: 1},
	}
	t.Run("no-directory", func(t *testing.T) {
		root := newRoot(t)
		if err := os.MkdirAll(filepath.Join(root, string(storage.KindSeat)), 0o700); err != nil {
			t.Fatal(err)
		}
		calls := 0
		for _, fsys := range []vfs.FS{probeCountFS{calls: &calls}, lstatCountFS{FS: vfs.OS, calls: &calls}} {
			b := New(root, &Options{FS: fsys})
			if n, missing, distrust, err := b.probe(storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("cd", 16)}); n != 0 || !missing || distrust != nil || err != nil || calls != 0 {
				t.Errorf("%T: probe of a key with no directory = %d, missing %v, %v, %v after %d checks; want 0, missing, nil, nil after none", fsys, n, missing, distrust, err, calls)
			}
		}
	})
	for _, c := range cases {
		name := fmt.Sprintf("n=%d,made=%d,hint=%d,top=%v", c.n, c.made, c.hint, c.top)
		t.Run(name, func(t *testing.T) {
			root := newRoot(t)
			loc := storage.Loc{Kind: storage.KindSession, Hash: strings.Repeat("ab", 16)}
			dir := filepath.Join(root, string(loc.Kind), loc.Hash)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			from := uint64(1)
			if c.top {
				from = c.n - 1
			}
			for i := from; i <= max(c.n, c.made); i++ {
				if err := os.WriteFile(filepath.Join(dir, storage.RevisionName(i)), nil, 0o400); err != nil {
					t.Fatal(err)
				}
			}
			for i := c.n + 1; i <= c.made; i++ {
				if err := os.Remove(filepath.Join(dir, storage.RevisionName(i))); err != nil {
					t.Fatal(err)
				}
			}
			for _, plain := range []bool{false, true} {
				probe := func(failAt int) (uint64, int, error) {
					calls := 0
					// ext4: 24 bytes an entry, blocks about 80 % full.
					size := max(4096, int64(max(c.n, c.made))*30)
					if c.top {
						size = 4096
					}
					var fsys vfs.FS = probeCountFS{calls: &calls, failAt: failAt, size: size}
					if plain {
						fsys = lstatCountFS{FS: vfs.OS, calls: &calls, failAt: failAt}
					}
					b := New(root, &Options{FS: fsys})
					if c.hint > 0 {
						b.hints[loc] = c.hint
					}
					got, _, distrust, err := b.probe(loc)
					if distrust != nil {
						t.Fatalf("distrust: %v", distrust)
					}
					if err == nil {
						// The answer is remembered: probing again from it
						// takes two checks (the head, the next name), and
						// one for a base pointer (none here).
						before := calls
						again, _, _, err := b.probe(loc)
						if err != nil || again != got {
							t.Fatalf("second probe = %d, %v; want %d", again, err, got)
						}
						want := 3
						if got == 0 || got == storage.MaxRevision {
							want = 2 // nothing below, or no name above
						}
						if warm := calls - before; warm != want {
							t.Errorf("plain=%v: a probe from the last head made %d checks, want %d", plain, warm, want)
						}
						calls = before
					}
					return got, calls, err
				}
				got, calls, err := probe(0)
				if err != nil || got != c.n {
					t.Fatalf("plain=%v: probe = %d, %v; want %d", plain, got, err, c.n)
				}
				// c.want counts the revisions probed; one more is the
				// base pointer's check.
				if !plain && calls != c.want+1 {
					t.Errorf("probe made %d existence checks, want %d", calls, c.want+1)
				}
				for k := 1; k <= calls; k++ {
					if got, _, err := probe(k); !errors.Is(err, syscall.EIO) {
						t.Errorf("plain=%v: check %d of %d failing: probe = %d, %v; want EIO", plain, k, calls, got, err)
					}
				}
			}
		})
	}
}

// pathLstatFailFS is the OS filesystem whose nth Lstat of path fails with
// EIO.
type pathLstatFailFS struct {
	vfs.OSFS
	path  string
	nth   int
	calls *int
}

func (f pathLstatFailFS) Lstat(name string) (os.FileInfo, error) {
	if name == f.path {
		*f.calls++
		if *f.calls == f.nth {
			return nil, &os.PathError{Op: "lstat", Path: name, Err: syscall.EIO}
		}
	}
	return f.OSFS.Lstat(name)
}

// scanFailFS is the OS filesystem whose directory scans fail with EIO.
type scanFailFS struct{ vfs.OSFS }

func (scanFailFS) ScanDir(dir string, each func(name []byte)) error {
	return &os.PathError{Op: "getdents", Path: dir, Err: syscall.EIO}
}

// A free head rests on the probe and on a listing of the whole key: an I/O
// error in either (a revision's existence check, the key directory's check
// before the listing, the listing itself) is an error, never a free (or
// any) head.
func TestHeadReadFaultsAreErrors(t *testing.T) {
	root := newRoot(t)
	s0 := openStore(t, New(root, nil))
	seat, _ := claimstore.SeatKey("s", "project", "workspace")
	session, _ := claimstore.SessionKey("x")
	o, err := s0.Self(1)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s0.Acquire(context.Background(), seat, session, claimstore.AcquireFields{Owner: o})
	if err != nil {
		t.Fatal(err)
	}
	if err := s0.Release(context.Background(), c, claimstore.NewProof(claimstore.ProofCohort, "done")); err != nil {
		t.Fatal(err)
	}
	dir := s0.KeyDir(session)
	for name, fsys := range map[string]vfs.FS{
		"revision-check":       lstatCountFS{FS: vfs.OS, calls: new(int), failAt: 1},
		"later-revision-check": lstatCountFS{FS: vfs.OS, calls: new(int), failAt: 2},
		// The first Lstat of the key directory is the probe's check; the
		// second is the listing's.
		"directory-check":                pathLstatFailFS{OSFS: vfs.OSFS{}, path: dir, nth: 1, calls: new(int)},
		"directory-check-before-listing": pathLstatFailFS{OSFS: vfs.OSFS{}, path: dir, nth: 2, calls: new(int)},
		"listing":                        scanFailFS{},
	} {
		t.Run(name, func(t *testing.T) {
			s := openStore(t, New(root, &Options{FS: fsys}))
			h, err := s.Head(context.Background(), session)
			if !errors.Is(err, syscall.EIO) {
				t.Fatalf("Head = %+v, %v; want EIO", h, err)
			}
		})
	}
}

// TestProbeCompacted: a compacted key's probe starts at its base, whatever
// a cut compaction left below it and wherever the last head seen was, and
// every check it makes (the base pointer's included) can fail it; a base
// pointer whose revision is missing reads as damaged, never as no history.
func TestProbeCompacted(t *testing.T) {
	loc := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("cd", 16)}
	cases := []struct {
		name    string
		present []uint64 // revisions on disk
		base    uint64
		hint    uint64
		want    uint64
		damaged bool
		checks  int
	}{
		{"cold, leftovers below", []uint64{1, 3, 5, 6, 7, 8, 9}, 5, 0, 9, false, 8},
		{"hint on a leftover", []uint64{1, 3, 5, 6, 7, 8, 9}, 5, 3, 9, false, 8},
		{"hint below the base, gone", []uint64{5, 6, 7}, 5, 2, 7, false, 6},
		{"hint inside", []uint64{5, 6, 7, 8, 9}, 5, 7, 9, false, 6},
		{"hint at the head", []uint64{5, 6, 7, 8, 9}, 5, 9, 9, false, 3},
		{"hint above the head, gone", []uint64{5, 6, 7}, 5, 12, 7, false, 7},
		{"base only", []uint64{4}, 4, 0, 4, false, 3},
		{"base missing", []uint64{1, 2, 6, 7}, 5, 0, 5, true, 2},
		{"base missing, hint gone", []uint64{6, 7}, 5, 9, 5, true, 3},
		{"at the last number", []uint64{storage.MaxRevision - 1, storage.MaxRevision}, storage.MaxRevision - 1, 0, storage.MaxRevision, false, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := newRoot(t)
			dir := filepath.Join(root, string(loc.Kind), loc.Hash)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			for _, n := range c.present {
				if err := os.WriteFile(filepath.Join(dir, storage.RevisionName(n)), nil, 0o400); err != nil {
					t.Fatal(err)
				}
			}
			ptr := fmt.Sprintf(`{"version":1,"kind":%q,"key":%q,"base":%d,"writtenAt":"2026-01-01T00:00:00.000Z"}`+"\n", BaseKind, loc.String(), c.base)
			if err := os.WriteFile(filepath.Join(dir, BaseName), []byte(ptr), 0o400); err != nil {
				t.Fatal(err)
			}
			for _, plain := range []bool{false, true} {
				probe := func(failAt int) (uint64, error, error, int) {
					calls := 0
					var fsys vfs.FS = probeCountFS{calls: &calls, failAt: failAt, size: 4096}
					if plain {
						fsys = lstatCountFS{FS: vfs.OS, calls: &calls, failAt: failAt}
					}
					b := New(root, &Options{FS: fsys})
					if c.hint > 0 {
						b.hints[loc] = c.hint
					}
					got, _, damage, err := b.probe(loc)
					return got, damage, err, calls
				}
				got, damage, err, calls := probe(0)
				if err != nil || got != c.want || (damage != nil) != c.damaged {
					t.Fatalf("plain=%v: probe = %d, damage %v, %v; want %d, damaged=%v", plain, got, damage, err, c.want, c.damaged)
				}
				// The cost: the base pointer's check, then a gallop from
				// the base or the hint, whichever is higher.
				if !plain && calls != c.checks {
					t.Errorf("probe made %d checks, want %d", calls, c.checks)
				}
				if c.damaged && !strings.Contains(damage.Error(), "base pointer names revision") {
					t.Errorf("damage %q does not say the base revision is missing", damage)
				}
				for k := 1; k <= calls; k++ {
					if got, _, err, _ := probe(k); !errors.Is(err, syscall.EIO) {
						t.Errorf("plain=%v: check %d of %d failing: probe = %d, %v; want EIO", plain, k, calls, got, err)
					}
				}
			}
		})
	}
	// A base pointer that does not check is an error naming it.
	root := newRoot(t)
	dir := filepath.Join(root, string(loc.Kind), loc.Hash)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, BaseName), []byte(`{"version":1,"kind":"claimstore-base","key":"seat/other","base":3}`), 0o400); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := New(root, nil).probe(loc); err == nil || !strings.Contains(err.Error(), "not a base pointer of") {
		t.Errorf("probe with a base pointer of another key: %v; want an error naming it", err)
	}
}

// readDirFailFS fails every ReadDir and ScanDir with EIO.
type readDirFailFS struct{ vfs.OSFS }

func (readDirFailFS) ReadDir(name string) ([]string, error) {
	return nil, &os.PathError{Op: "readdir", Path: name, Err: syscall.EIO}
}

func (readDirFailFS) ScanDir(dir string, each func([]byte)) error {
	return &os.PathError{Op: "getdents", Path: dir, Err: syscall.EIO}
}

// TestCensusFromBase: the census counts the revisions from the key's base
// up (the base itself included, what a cut compaction left below it not),
// whether the filesystem streams names (ScanDir) or only lists them, and
// an error listing is the census's error.
func TestCensusFromBase(t *testing.T) {
	loc := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("ef", 16)}
	root := newRoot(t)
	dir := filepath.Join(root, string(loc.Kind), loc.Hash)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, n := range []uint64{1, 2, 5, 6, 7} {
		if err := os.WriteFile(filepath.Join(dir, storage.RevisionName(n)), nil, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	ptr := fmt.Sprintf(`{"version":1,"kind":%q,"key":%q,"base":5,"writtenAt":"2026-01-01T00:00:00.000Z"}`+"\n", BaseKind, loc.String())
	if err := os.WriteFile(filepath.Join(dir, BaseName), []byte(ptr), 0o400); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	calls := 0
	for _, fsys := range []vfs.FS{vfs.OS, lstatCountFS{FS: vfs.OS, calls: &calls}} {
		b := New(root, &Options{FS: fsys})
		top, count, base, err := b.Census(ctx, loc)
		if err != nil || top != 7 || count != 3 || base != 5 {
			t.Errorf("%T: Census = top %d, count %d, base %d, %v; want 7, 3, 5", fsys, top, count, base, err)
		}
		base, revs, other, err := b.ListFrom(ctx, loc)
		if err != nil || base != 5 || fmt.Sprint(revs) != "[5 6 7]" || len(other) != 0 {
			t.Errorf("%T: ListFrom = %d %v %v, %v; want 5 [5 6 7] []", fsys, base, revs, other, err)
		}
	}
	b := New(root, &Options{FS: readDirFailFS{}})
	if _, _, _, err := b.Census(ctx, loc); !errors.Is(err, syscall.EIO) {
		t.Errorf("Census on a directory that cannot be read: %v, want EIO", err)
	}
	b = New(root, &Options{FS: lstatCountFS{FS: readDirFailFS{}, calls: &calls}})
	if _, _, _, err := b.Census(ctx, loc); !errors.Is(err, syscall.EIO) {
		t.Errorf("Census (listing) on a directory that cannot be read: %v, want EIO", err)
	}
	// A key directory that is a symlink is never listed through.
	linked := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("23", 16)}
	if err := os.Symlink(dir, filepath.Join(root, string(linked.Kind), linked.Hash)); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := New(root, nil).Census(ctx, linked); !errors.Is(err, storage.ErrUnsafePath) {
		t.Errorf("Census through a symlinked key directory: %v, want ErrUnsafePath", err)
	}
	empty := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("01", 16)}
	if err := os.MkdirAll(filepath.Join(root, string(empty.Kind), empty.Hash), 0o700); err != nil {
		t.Fatal(err)
	}
	b = New(root, &Options{FS: lstatCountFS{FS: vfs.OS, calls: &calls}})
	if top, count, _, err := b.Census(ctx, empty); top != 0 || count != 0 || err != nil {
		t.Errorf("Census of an empty key = %d, %d, %v", top, count, err)
	}
}

// CountedHead brings a census only where its first look settles one: a key
// with no directory has no revision (the census Census gives it). A key
// directory, empty or not, gets none (a probe sees names, not the whole
// directory); a missing directory in a kind directory others can write is
// distrusted, with no census either.
func TestCountedHeadOfAMissingKey(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	b := New(root, nil)
	missing := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("01", 16)}
	empty := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("02", 16)}
	written := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("03", 16)}
	publishOne(t, b, written, 1, "{}\n")
	if err := os.Mkdir(b.dir(empty), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		loc   storage.Loc
		n     uint64
		count *storage.Count
	}{
		{missing, 0, &storage.Count{Top: 0, Count: 0, Base: 1}},
		{empty, 0, nil},
		{written, 1, nil},
	} {
		n, _, count, err := b.CountedHead(ctx, tc.loc)
		if err != nil || n != tc.n {
			t.Errorf("%s: CountedHead = r%d, %v; want r%d", tc.loc.Hash, n, err, tc.n)
		}
		if diff := cmp.Diff(tc.count, count); diff != "" {
			t.Errorf("%s: census (-want +got):\n%s", tc.loc.Hash, diff)
		}
		if tc.count != nil {
			top, c, base, err := b.Census(ctx, tc.loc)
			if diff := cmp.Diff(*tc.count, storage.Count{Top: top, Count: c, Base: base}); err != nil || diff != "" {
				t.Errorf("%s: the census CountedHead gave is not Census's (%v; -CountedHead +Census):\n%s", tc.loc.Hash, err, diff)
			}
		}
	}
	if err := os.Chmod(filepath.Join(root, string(storage.KindSeat)), 0o777); err != nil {
		t.Fatal(err)
	}
	n, _, count, err := New(root, nil).CountedHead(ctx, missing)
	if err == nil || count != nil || n != 0 {
		t.Errorf("a missing key in a kind directory others can write: r%d, census %v, %v; want an error and no census", n, count, err)
	}
}
