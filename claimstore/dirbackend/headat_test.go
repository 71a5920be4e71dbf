package dirbackend

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
)

// callCountFS is the OS filesystem counting, by path, the calls that a
// head's check, a removal's check and a batch's directories make.
type callCountFS struct {
	vfs.OSFS
	mu                     sync.Mutex
	mkdirs, reads, readDir map[string]int
}

func newCallCountFS() *callCountFS {
	return &callCountFS{mkdirs: map[string]int{}, reads: map[string]int{}, readDir: map[string]int{}}
}

func (f *callCountFS) count(m map[string]int, name string) {
	f.mu.Lock()
	m[name]++
	f.mu.Unlock()
}

func (f *callCountFS) Mkdir(name string, perm fs.FileMode) error {
	f.count(f.mkdirs, name)
	return f.OSFS.Mkdir(name, perm)
}

func (f *callCountFS) ReadFile(name string) ([]byte, fs.FileInfo, error) {
	f.count(f.reads, name)
	return f.OSFS.ReadFile(name)
}

func (f *callCountFS) ReadDir(name string) ([]string, error) {
	f.count(f.readDir, name)
	return f.OSFS.ReadDir(name)
}

func (f *callCountFS) total(m map[string]int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// TestHeadAt: revision n is read as the head exactly when n+1 is missing,
// and reads then what Head reads; any other state of the key is a moved
// head, a damaged one (untrusted, not a file), or a refusal — never
// another revision's bytes.
func TestHeadAt(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	b := New(root, nil)
	two, planted, open, widest := sessionLoc('a'), sessionLoc('b'), sessionLoc('c'), sessionLoc('d')
	publishRaw(t, b, two, 1, "one\n")
	publishRaw(t, b, two, 2, "two\n")
	publishRaw(t, b, planted, 1, "one\n")
	if err := os.Symlink(filepath.Join(b.dir(two), storage.RevisionName(2)), filepath.Join(b.dir(planted), storage.RevisionName(2))); err != nil {
		t.Fatal(err)
	}
	publishRaw(t, b, open, 1, "one\n")
	if err := os.Chmod(b.dir(open), 0o777); err != nil {
		t.Fatal(err)
	}
	publishRaw(t, b, widest, storage.MaxRevision, "the widest number\n")
	// A name past the widest number is no revision: nothing is above it.
	if err := os.WriteFile(filepath.Join(b.dir(widest), fmt.Sprintf("r%010d.json", uint64(storage.MaxRevision)+1)), []byte("planted\n"), 0o400); err != nil {
		t.Fatal(err)
	}

	type result struct {
		Data                     string
		Moved, Damaged, Rejected bool
	}
	read := func(loc storage.Loc, n uint64, ctx context.Context) result {
		data, err := New(root, nil).HeadAt(ctx, loc, n)
		var re *storage.ReadError
		switch {
		case err == nil:
			return result{Data: string(data)}
		case errors.Is(err, storage.ErrHeadMoved):
			return result{Moved: true}
		case errors.As(err, &re):
			if re.N != n {
				t.Errorf("HeadAt(%s, %d): damage at revision %d", loc, n, re.N)
			}
			return result{Damaged: true}
		default:
			return result{Rejected: true}
		}
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []struct {
		name string
		loc  storage.Loc
		n    uint64
		ctx  context.Context
		want result
	}{
		{"the head", two, 2, ctx, result{Data: "two\n"}},
		{"below the head", two, 1, ctx, result{Moved: true}},
		{"above the head", two, 3, ctx, result{Moved: true}},
		{"a key never written", sessionLoc('e'), 1, ctx, result{Moved: true}},
		{"a symlink where the head was", planted, 2, ctx, result{Damaged: true}},
		{"a directory others can write", open, 1, ctx, result{Damaged: true}},
		{"the widest number", widest, storage.MaxRevision, ctx, result{Data: "the widest number\n"}},
		{"revision 0", two, 0, ctx, result{Rejected: true}},
		{"past the widest number", widest, storage.MaxRevision + 1, ctx, result{Rejected: true}},
		{"canceled", two, 2, canceled, result{Rejected: true}},
	} {
		if diff := cmp.Diff(c.want, read(c.loc, c.n, c.ctx)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
		if c.want.Data == "" || c.loc == widest {
			continue // (the widest number alone is a history Head reads as a gap)
		}
		// What Head reads of the same key.
		n, data, err := New(root, nil).Head(ctx, c.loc)
		if err != nil || n != c.n || string(data) != c.want.Data {
			t.Errorf("%s: Head = %d, %q, %v; HeadAt read %d, %q", c.name, n, data, err, c.n, c.want.Data)
		}
	}
}

// TestRemoveKeysTakesItsOwnTombstoneByIdentity: a head this backend linked
// with exactly the bytes the removal names is checked by its identity,
// without being read; the same name holding another file (even the same
// bytes), or the backend's own file named with other bytes, is read and
// compared, and removed only if its bytes are the ones named.
func TestRemoveKeysTakesItsOwnTombstoneByIdentity(t *testing.T) {
	ctx := context.Background()
	fsys := newCallCountFS()
	b := New(newRoot(t), &Options{FS: fsys})
	own, sameBytes, otherBytes, otherNamed := sessionLoc('a'), sessionLoc('b'), sessionLoc('c'), sessionLoc('d')
	for _, loc := range []storage.Loc{own, sameBytes, otherBytes, otherNamed} {
		publishRaw(t, b, loc, 1, "free\n")
		publishRaw(t, b, loc, 2, "tombstone of "+loc.Hash+"\n")
	}
	replace := func(loc storage.Loc, data string) {
		t.Helper()
		path := filepath.Join(b.dir(loc), storage.RevisionName(2))
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	replace(sameBytes, "tombstone of "+sameBytes.Hash+"\n")
	replace(otherBytes, "another tombstone\n")
	rs := []storage.Removal{
		{Loc: own, N: 2, Head: []byte("tombstone of " + own.Hash + "\n")},
		{Loc: sameBytes, N: 2, Head: []byte("tombstone of " + sameBytes.Hash + "\n")},
		{Loc: otherBytes, N: 2, Head: []byte("tombstone of " + otherBytes.Hash + "\n")},
		{Loc: otherNamed, N: 2, Head: []byte("not what was linked\n")},
	}
	errs, err := b.RemoveKeys(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		Removed bool
		Reads   int
	}
	got := map[string]outcome{}
	for i, r := range rs {
		if errs[i] != nil && !errors.Is(errs[i], storage.ErrHeadMoved) {
			t.Fatalf("%s: %v", r.Loc, errs[i])
		}
		fsys.mu.Lock()
		reads := fsys.reads[filepath.Join(b.dir(r.Loc), storage.RevisionName(2))]
		fsys.mu.Unlock()
		got[r.Loc.Hash[:1]] = outcome{Removed: errs[i] == nil, Reads: reads}
		_, serr := os.Lstat(b.dir(r.Loc))
		if gone := errors.Is(serr, fs.ErrNotExist); gone != (errs[i] == nil) {
			t.Errorf("%s: removal says %v, its directory: %v", r.Loc, errs[i], serr)
		}
	}
	want := map[string]outcome{
		"a": {Removed: true, Reads: 0},
		"b": {Removed: true, Reads: 1},
		"c": {Removed: false, Reads: 1},
		"d": {Removed: false, Reads: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("removals by key (-want +got):\n%s", diff)
	}
}

// TestPublishBatchChecksTheDirectoriesAboveOnce: a batch makes and checks
// the root and each kind directory once for all its requests, and does not
// try to make the directory of a key it publishes over (a head read a
// moment ago); a new key's directory is made. A kind directory that cannot
// be written into fails each of its requests, and no other.
func TestPublishBatchChecksTheDirectoriesAboveOnce(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	writer := New(root, nil)
	var reqs []storage.PrepareRequest
	for i := range 6 {
		loc := batchLoc(i)
		publishRaw(t, writer, loc, 1, fmt.Sprintf("r1 of %d\n", i))
		reqs = append(reqs, storage.PrepareRequest{Loc: loc, N: 2, Data: []byte("r2\n"), Prev: []byte(fmt.Sprintf("r1 of %d\n", i))})
	}
	fresh := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("f", 32)}
	reqs = append(reqs, storage.PrepareRequest{Loc: fresh, N: 1, Data: []byte("r1\n")})

	// A backend of another process: nothing of the root is known durable.
	fsys := newCallCountFS()
	b := New(root, &Options{FS: fsys})
	errs, err := b.PublishBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("request %d: %v", i, e)
		}
	}
	kinds := map[string]bool{}
	for _, r := range reqs {
		kinds[filepath.Dir(b.dir(r.Loc))] = true
	}
	wantMkdirs := map[string]int{root: 1, b.dir(fresh): 1}
	for k := range kinds {
		wantMkdirs[k] = 1
	}
	if diff := cmp.Diff(wantMkdirs, fsys.mkdirs); diff != "" {
		t.Errorf("mkdirs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{root: 1}, fsys.readDir); diff != "" {
		t.Errorf("listings: the root is checked once (-want +got):\n%s", diff)
	}

	// A key's own directory, looked at rather than made: one others can
	// write into, or a symlink in its place, fails its request, and the
	// batch's others are published.
	opened, swapped, fine := batchLoc(0), batchLoc(1), batchLoc(2)
	if err := os.Chmod(b.dir(opened), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(b.dir(swapped), b.dir(swapped)+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(b.dir(swapped)+".moved", b.dir(swapped)); err != nil {
		t.Fatal(err)
	}
	errs, err = New(root, nil).PublishBatch(ctx, []storage.PrepareRequest{
		{Loc: opened, N: 3, Data: []byte("r3\n"), Prev: []byte("r2\n")},
		{Loc: swapped, N: 3, Data: []byte("r3\n"), Prev: []byte("r2\n")},
		{Loc: fine, N: 3, Data: []byte("r3\n"), Prev: []byte("r2\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !isTrustError(errs[0]) || !errors.Is(errs[1], storage.ErrUnsafePath) || errs[2] != nil {
		t.Errorf("errs = %v; want a trust refusal, an unsafe path, and the third published", errs)
	}
	for _, loc := range []storage.Loc{opened, swapped} {
		if _, err := os.Lstat(filepath.Join(b.dir(loc)+".moved", storage.RevisionName(3))); err == nil {
			t.Errorf("%s: revision 3 was written through the symlink", loc)
		}
		if _, err := os.Lstat(filepath.Join(b.dir(loc), storage.RevisionName(3))); err == nil {
			t.Errorf("%s: revision 3 was written", loc)
		}
	}

	// A batch whose context is done makes nothing, not even the root.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	unmade := newRoot(t)
	if _, err := New(unmade, nil).PublishBatch(canceled, reqs); !errors.Is(err, context.Canceled) {
		t.Errorf("PublishBatch with its context done: %v; want it canceled", err)
	}
	if _, err := os.Lstat(unmade); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the root of a canceled batch: %v; want nothing made", err)
	}

	// The session kind directory swapped for a symlink: its requests fail
	// with it, the seats' are published.
	sessions := filepath.Join(root, string(storage.KindSession))
	seat := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("e", 32)}
	session := storage.Loc{Kind: storage.KindSession, Hash: strings.Repeat("e", 32)}
	if err := os.Rename(sessions, sessions+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sessions+".moved", sessions); err != nil {
		t.Fatal(err)
	}
	errs, err = New(root, nil).PublishBatch(ctx, []storage.PrepareRequest{
		{Loc: session, N: 1, Data: []byte("r1\n")},
		{Loc: seat, N: 1, Data: []byte("r1\n")},
		{Loc: sessionLoc('9'), N: 1, Data: []byte("r1\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(errs[0], storage.ErrUnsafePath) || errs[1] != nil || !errors.Is(errs[2], storage.ErrUnsafePath) {
		t.Errorf("errs = %v; want the sessions refused (unsafe path), the seat published", errs)
	}
	if _, err := os.Lstat(filepath.Join(sessions+".moved", session.Hash)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a session was written through the symlink: %v", err)
	}
}
