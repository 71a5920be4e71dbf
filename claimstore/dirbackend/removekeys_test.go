package dirbackend

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// publishRaw publishes data as revision n of loc through the backend.
func publishRaw(t *testing.T, b *Backend, loc storage.Loc, n uint64, data string) {
	t.Helper()
	p, err := b.Prepare(context.Background(), loc, n, []byte(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(context.Background()); err != nil {
		t.Fatalf("publishing %s revision %d: %v", loc, n, err)
	}
}

func sessionLoc(c byte) storage.Loc {
	return storage.Loc{Kind: storage.KindSession, Hash: strings.Repeat(string([]byte{c}), 32)}
}

// TestRemoveKeysGuardsEachKey: a batch removes exactly the keys whose head
// is still the one named, reports a moved head for each other key and
// leaves it whole, and leaves no trash behind.
func TestRemoveKeysGuardsEachKey(t *testing.T) {
	root := newRoot(t)
	b := New(root, nil)
	gone, wrongBytes, wrongN := sessionLoc('a'), sessionLoc('b'), sessionLoc('c')
	for _, loc := range []storage.Loc{gone, wrongBytes, wrongN} {
		publishRaw(t, b, loc, 1, "head of "+loc.Hash)
	}
	publishRaw(t, b, wrongN, 2, "second of "+wrongN.Hash)
	errs, err := b.RemoveKeys(context.Background(), []storage.Removal{
		{Loc: gone, N: 1, Head: []byte("head of " + gone.Hash)},
		{Loc: wrongBytes, N: 1, Head: []byte("another head")},
		{Loc: wrongN, N: 1, Head: []byte("head of " + wrongN.Hash)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || !errors.Is(errs[1], storage.ErrHeadMoved) || !errors.Is(errs[2], storage.ErrHeadMoved) {
		t.Fatalf("RemoveKeys errs = %v; want nil, then ErrHeadMoved twice", errs)
	}
	if _, err := os.Lstat(b.dir(gone)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the removed key's directory: %v; want it gone", err)
	}
	for loc, want := range map[storage.Loc]uint64{wrongBytes: 1, wrongN: 2} {
		if n, _, err := b.Head(context.Background(), loc); err != nil || n != want {
			t.Errorf("%s: head %d, %v; want %d, whole", loc, n, err, want)
		}
	}
	names, err := os.ReadDir(filepath.Join(root, string(storage.KindSession)))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range names {
		if strings.HasPrefix(e.Name(), TrashPrefix) {
			t.Errorf("trash left behind: %s", e.Name())
		}
	}
}

// TestRemoveKeysFailedFsync: when the kind directory's fsync fails, the
// batch fails as a whole (no removal may be counted on), and the backend's
// failure is sticky, as every failed fsync's is.
func TestRemoveKeysFailedFsync(t *testing.T) {
	root := newRoot(t)
	b := New(root, nil)
	loc := sessionLoc('d')
	publishRaw(t, b, loc, 1, "head")
	efs := errorfs.Wrap(b.fs, &errorfs.Rule{Op: errorfs.OpSyncDir, Path: errorfs.Suffix(string(storage.KindSession)), Kind: errorfs.Fail})
	fb := New(root, &Options{FS: efs})
	errs, err := fb.RemoveKeys(context.Background(), []storage.Removal{{Loc: loc, N: 1, Head: []byte("head")}})
	if !errors.Is(err, syscall.EIO) || errs != nil {
		t.Fatalf("RemoveKeys = %v, %v; want no per-key results and EIO", errs, err)
	}
	if _, err := fb.RemoveKeys(context.Background(), []storage.Removal{{Loc: loc, N: 1, Head: []byte("head")}}); !errors.Is(err, storage.ErrSyncFailed) {
		t.Fatalf("a backend whose fsync failed removes again (%v); want its failure sticky", err)
	}
}
