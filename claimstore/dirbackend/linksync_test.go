package dirbackend

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// linkOrderFS is the OS filesystem noting, in order, the links, SyncLinks
// and closes of its temporaries (each an O_TMPFILE, a vfs.LinkSyncer) and
// the fsyncs of key directories.
type linkOrderFS struct {
	vfs.OSFS
	mu     *sync.Mutex
	events *[]string
}

func (f linkOrderFS) note(e string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	*f.events = append(*f.events, e)
}

func (f linkOrderFS) SyncDir(name string) error {
	if base := filepath.Base(name); len(base) == 32 {
		f.note("syncdir " + base[:2])
	}
	return f.OSFS.SyncDir(name)
}

// SyncDirs keeps every directory's fsync in SyncDir (vfs.DirsSyncer).
func (f linkOrderFS) SyncDirs(names []string) []error { return vfs.SyncDirsEach(f, names) }

func (f linkOrderFS) CreateTemp(dir string, perm fs.FileMode) (vfs.TempFile, error) {
	t, err := f.OSFS.CreateTemp(dir, perm)
	if err != nil {
		return nil, err
	}
	ls, ok := t.(linkSyncTemp)
	if !ok {
		return nil, errors.New("the OS's temporary is not a vfs.LinkSyncer")
	}
	return &orderTemp{linkSyncTemp: ls, f: f, key: filepath.Base(dir)[:2]}, nil
}

type linkSyncTemp interface {
	vfs.TempFile
	vfs.LinkSyncer
}

type orderTemp struct {
	linkSyncTemp
	f   linkOrderFS
	key string
}

func (t *orderTemp) Link(name string) error {
	t.f.note("link " + t.key)
	return t.linkSyncTemp.Link(name)
}

func (t *orderTemp) SyncLink() error {
	t.f.note("synclink " + t.key)
	return t.linkSyncTemp.SyncLink()
}

func (t *orderTemp) Close() error {
	t.f.note("close " + t.key)
	return t.linkSyncTemp.Close()
}

// A temporary that had no name gets its link count made durable after its
// link, beside its directory's fsync, and is closed only then, on every
// way a revision is published: one at a time, and in a batch without
// syncfs. In a batch with syncfs, the second syncfs writes the counts.
// (Sequential: the calls in a fixed order. The key directories are this
// process's to use for the first time, so a batch fsyncs each before
// anything is linked into it.)
func TestLinkCountSyncedAfterTheLink(t *testing.T) {
	aa := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("aa", 16)}
	bb := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("bb", 16)}
	batch := func(b *Backend) error {
		errs, err := b.PublishBatch(context.Background(), []storage.PrepareRequest{{Loc: aa, N: 2, Data: []byte("{}\n")}, {Loc: bb, N: 2, Data: []byte("{}\n")}})
		return errors.Join(append(errs, err)...)
	}
	for _, c := range []struct {
		name    string
		syncFS  bool
		publish func(b *Backend) error
		want    []string
	}{
		{"publish", false, func(b *Backend) error {
			return b.Publish(context.Background(), aa, 2, []byte("{}\n"), nil)
		}, []string{"link aa", "synclink aa", "syncdir aa", "close aa"}},
		{"batch without syncfs", false, batch, []string{
			"syncdir aa", "syncdir bb",
			"link aa", "link bb",
			"synclink aa", "synclink bb", "syncdir aa", "syncdir bb",
			"close aa", "close bb",
		}},
		{"batch with syncfs", true, batch, []string{"link aa", "link bb", "close aa", "close bb"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := newRoot(t)
			warm := New(root, nil)
			publishOne(t, warm, aa, 1, "{}\n")
			publishOne(t, warm, bb, 1, "{}\n")
			var mu sync.Mutex
			var events []string
			var fsys vfs.FS = linkOrderFS{mu: &mu, events: &events}
			if !c.syncFS {
				fsys = withoutSyncFS{fsys}
			}
			fds := openFDs(t)
			if err := c.publish(New(root, &Options{FS: fsys, Sequential: true})); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff(c.want, events); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			if n := openFDs(t); n != fds {
				t.Errorf("%d descriptors open, %d before: a linked temporary left open", n, fds)
			}
		})
	}
}

// A SyncLink that fails is a failed fsync: the publish fails with
// ErrSyncFailed, nothing more is acknowledged by the backend, and the
// temporary is closed all the same.
func TestFailedSyncLinkFailsTheStore(t *testing.T) {
	loc := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("aa", 16)}
	root := newRoot(t)
	efs := errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpSyncLink})
	b := New(root, &Options{FS: efs})
	fds := openFDs(t)
	err := b.Publish(context.Background(), loc, 1, []byte("{}\n"), nil)
	if !errors.Is(err, storage.ErrSyncFailed) {
		t.Fatalf("a publish whose SyncLink failed: %v, want ErrSyncFailed", err)
	}
	if got := efs.Injected(); !slices.ContainsFunc(got, func(i errorfs.Injection) bool { return i.Op == errorfs.OpSyncLink }) {
		t.Fatalf("no SyncLink failed (injected: %v)", got)
	}
	if err := b.Publish(context.Background(), loc, 2, []byte("{}\n"), nil); !errors.Is(err, storage.ErrSyncFailed) {
		t.Errorf("the next publish: %v, want ErrSyncFailed (sticky)", err)
	}
	if n := openFDs(t); n != fds {
		t.Errorf("%d descriptors open, %d before: the temporary left open", n, fds)
	}
}
