package dirbackend

import (
	"context"
	"encoding/json"
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
	"github.com/claimstore/claimstore/internal/errorfs"
)

// The base pointer as readers take it: which pointers Base accepts (and
// the base it reads), which it refuses as damage, Base on a canceled
// context, and Census canceled, or around a base that cannot be read or
// keeps moving.

// plantBase writes data as loc's base pointer, as an operator or a
// damaged disk would leave it (owner-only, like the backend's own).
func plantBase(t *testing.T, b *Backend, loc storage.Loc, data []byte) {
	t.Helper()
	path := filepath.Join(b.dir(loc), BaseName)
	_ = os.Remove(path)
	if err := os.WriteFile(path, data, 0o400); err != nil {
		t.Fatal(err)
	}
}

func pointerJSON(t *testing.T, p basePointer) []byte {
	t.Helper()
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return append(data, '\n')
}

// A base pointer is accepted only whole: version 1, its kind, its own
// key, a base from 1 to storage.MaxRevision (both ends included); any
// other is damage, and the key reads as held.
func TestBasePointerChecked(t *testing.T) {
	_, b, loc := sixRevisions(t)
	good := func() basePointer {
		return basePointer{Version: 1, Kind: BaseKind, Key: loc.String(), Base: 3, WrittenAt: "2026-12-03T00:00:00.000Z"}
	}
	for _, tc := range []struct {
		name string
		edit func(p *basePointer)
		raw  string // instead of the pointer, when set
		want uint64 // 0: damage
	}{
		{"base 3", func(p *basePointer) {}, "", 3},
		{"base 1", func(p *basePointer) { p.Base = 1 }, "", 1},
		{"base at the highest revision", func(p *basePointer) { p.Base = storage.MaxRevision }, "", storage.MaxRevision},
		{"base 0", func(p *basePointer) { p.Base = 0 }, "", 0},
		{"base above the highest revision", func(p *basePointer) { p.Base = storage.MaxRevision + 1 }, "", 0},
		{"version 2", func(p *basePointer) { p.Version = 2 }, "", 0},
		{"another kind", func(p *basePointer) { p.Kind = "claimstore-revision" }, "", 0},
		{"another key", func(p *basePointer) { p.Key = seatLoc('b').String() }, "", 0},
		{"not JSON", nil, "base 3\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.raw)
			if tc.edit != nil {
				p := good()
				tc.edit(&p)
				data = pointerJSON(t, p)
			}
			plantBase(t, b, loc, data)
			got, err := b.Base(context.Background(), loc)
			if tc.want != 0 {
				if err != nil || got != tc.want {
					t.Errorf("Base: %d, %v; want %d", got, err, tc.want)
				}
				return
			}
			var damage *storage.DamageError
			if !errors.As(err, &damage) {
				t.Errorf("Base: %d, %v; want the pointer refused as damage", got, err)
			}
		})
	}
}

// A canceled Base reads nothing, whether the key is there or not.
func TestBaseCanceled(t *testing.T) {
	_, b, loc := sixRevisions(t)
	if err := b.Compact(context.Background(), loc, 3); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, l := range []storage.Loc{loc, seatLoc('b')} {
		if got, err := b.Base(ctx, l); !errors.Is(err, context.Canceled) {
			t.Errorf("Base of %s on a canceled context: %d, %v; want context.Canceled", l, got, err)
		}
	}
}

// A key directory that is a symlink is never read through: its base is
// the key's problem (ErrUnsafePath), not base 1.
func TestBaseThroughASymlinkedKeyDirectory(t *testing.T) {
	root, b, loc := sixRevisions(t)
	if err := b.Compact(context.Background(), loc, 3); err != nil {
		t.Fatal(err)
	}
	linked := storage.Loc{Kind: loc.Kind, Hash: strings.Repeat("23", 16)}
	if err := os.Symlink(b.dir(loc), filepath.Join(root, string(linked.Kind), linked.Hash)); err != nil {
		t.Fatal(err)
	}
	if got, err := New(root, nil).Base(context.Background(), linked); !errors.Is(err, storage.ErrUnsafePath) {
		t.Errorf("Base through a symlinked key directory: %d, %v; want ErrUnsafePath", got, err)
	}
}

// Census reads the base before and after its scan: when the second read
// fails, that is Census's error, not a count from a base it could not
// confirm.
func TestCensusBaseUnreadableAfterTheScan(t *testing.T) {
	root, b, loc := sixRevisions(t)
	if err := b.Compact(context.Background(), loc, 3); err != nil {
		t.Fatal(err)
	}
	efs := errorfs.Wrap(b.fs, &errorfs.Rule{Op: errorfs.OpReadFile, Path: errorfs.Suffix("/" + BaseName), Nth: 2, Times: 1})
	fb := New(root, &Options{FS: efs})
	top, count, base, err := fb.Census(context.Background(), loc)
	if err == nil {
		t.Fatalf("Census with the second base read failing: %d, %d, %d, nil; want the error", top, count, base)
	}
	want := []errorfs.Injection{{Op: errorfs.OpReadFile, Path: filepath.Join(b.dir(loc), BaseName), Kind: errorfs.Fail}}
	if d := cmp.Diff(want, efs.Injected()); d != "" {
		t.Errorf("injected (-want +got):\n%s", d)
	}
	// Without the fault: r3-r6 from base 3.
	top, count, base, err = b.Census(context.Background(), loc)
	if d := cmp.Diff([]any{uint64(6), 4, uint64(3), nil}, []any{top, count, base, err}); d != "" {
		t.Errorf("Census (-want +got):\n%s", d)
	}
}

// A canceled Census counts nothing and says why, for a key that has a
// directory and for one that has none (whose census takes a single look).
func TestCensusCanceled(t *testing.T) {
	_, b, loc := sixRevisions(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, l := range []storage.Loc{loc, seatLoc('b')} {
		if top, count, base, err := b.Census(ctx, l); !errors.Is(err, context.Canceled) {
			t.Errorf("Census of %s on a canceled context: %d, %d, %d, %v; want context.Canceled", l, top, count, base, err)
		}
	}
}

// When the base read before the scan fails, that is Census's error: a
// count from a base it could not read would be a guess.
func TestCensusBaseUnreadableBeforeTheScan(t *testing.T) {
	root, b, loc := sixRevisions(t)
	if err := b.Compact(context.Background(), loc, 3); err != nil {
		t.Fatal(err)
	}
	efs := errorfs.Wrap(b.fs, &errorfs.Rule{Op: errorfs.OpReadFile, Path: errorfs.Suffix("/" + BaseName), Nth: 1, Times: 1})
	top, count, base, err := New(root, &Options{FS: efs}).Census(context.Background(), loc)
	if err == nil {
		t.Fatalf("Census with the first base read failing: %d, %d, %d, nil; want the error", top, count, base)
	}
	want := []errorfs.Injection{{Op: errorfs.OpReadFile, Path: filepath.Join(b.dir(loc), BaseName), Kind: errorfs.Fail}}
	if d := cmp.Diff(want, efs.Injected()); d != "" {
		t.Errorf("injected (-want +got):\n%s", d)
	}
}

// removedAtBase removes a key's directory when its base pointer is first
// read, as a prune's removal landing between Census's base read and its
// scan would.
type removedAtBase struct {
	*errorfs.FS
	dir  string
	once sync.Once
}

func (r *removedAtBase) ReadFile(name string) ([]byte, fs.FileInfo, error) {
	data, fi, err := r.FS.ReadFile(name)
	if strings.HasSuffix(name, string(filepath.Separator)+BaseName) {
		r.once.Do(func() { _ = os.RemoveAll(r.dir) })
	}
	return data, fi, err
}

// A key directory removed while Census counts (a prune's removal between
// its base read and its scan) reads as a key with no revisions, as it
// would had it been gone before: not an error from scanning what is gone.
func TestCensusOfAKeyRemovedMeanwhile(t *testing.T) {
	root, b, loc := sixRevisions(t)
	r := &removedAtBase{FS: errorfs.Wrap(b.fs), dir: b.dir(loc)}
	top, count, base, err := New(root, &Options{FS: r}).Census(context.Background(), loc)
	if d := cmp.Diff([]any{uint64(0), 0, uint64(1), nil}, []any{top, count, base, err}); d != "" {
		t.Errorf("Census of a key removed after its base read: top, count, base, error (-want +got):\n%s", d)
	}
	if _, err := os.Lstat(b.dir(loc)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the key directory was not removed: %v", err)
	}
}

// movingBase serves a key's base pointer as a base one higher at every
// read, as a run of compactions racing a Census would.
type movingBase struct {
	*errorfs.FS
	loc storage.Loc

	mu    sync.Mutex
	reads int
}

func (m *movingBase) ReadFile(name string) ([]byte, fs.FileInfo, error) {
	if !strings.HasSuffix(name, string(filepath.Separator)+BaseName) {
		return m.FS.ReadFile(name)
	}
	m.mu.Lock()
	m.reads++
	n := m.reads
	m.mu.Unlock()
	return []byte(fmt.Sprintf(`{"version":1,"kind":%q,"key":%q,"base":%d,"writtenAt":"2026-12-03T00:00:00.000Z"}`+"\n", BaseKind, m.loc.String(), n+1)), nil, nil
}

// A base that moves at every read does not keep Census retrying: it makes
// four attempts and answers from the last, counting from the base read
// before its scan and reporting the base read after it.
func TestCensusGivesUpOnAMovingBase(t *testing.T) {
	root := newRoot(t)
	b := New(root, nil)
	loc := seatLoc('a')
	for n := uint64(1); n <= 20; n++ {
		publishRaw(t, b, loc, n, "revision")
	}
	if err := b.Compact(context.Background(), loc, 2); err != nil {
		t.Fatal(err)
	}
	m := &movingBase{FS: errorfs.Wrap(b.fs), loc: loc}
	mb := New(root, &Options{FS: m})
	top, count, base, err := mb.Census(context.Background(), loc)
	// Reads 1-8 give bases 2-9: the fourth attempt scans from 8 (r8-r20)
	// and reads 9 after.
	if d := cmp.Diff([]any{uint64(20), 13, uint64(9), nil, 8}, []any{top, count, base, err, m.reads}); d != "" {
		t.Errorf("Census: top, count, base, error, base reads (-want +got):\n%s", d)
	}
}
