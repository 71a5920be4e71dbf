package dirbackend

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// cancelledCtx returns a context that has already ended.
func cancelledCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// cancelledRoot returns a claim root holding revision 1 of testLoc and a
// proof "p1", written by a healthy backend.
func cancelledRoot(t *testing.T) string {
	t.Helper()
	root := newRoot(t)
	b := New(root, nil)
	if err := b.Publish(context.Background(), testLoc, 1, []byte(`{"n":1}`), nil); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteProof(context.Background(), "p1", []byte(`{"p":1}`)); err != nil {
		t.Fatal(err)
	}
	return root
}

// A call whose context has already ended returns the context's error
// without touching the filesystem: on a filesystem that hangs (a dead NFS
// server) a cancelled caller must not wait on it. Every call below meets a
// filesystem that fails (and records) any call it is given, so that one
// filesystem call made is seen, whatever the method does with its result.
func TestCancelledCallTouchesNothing(t *testing.T) {
	root := cancelledRoot(t)
	calls := map[string]func(ctx context.Context, b *Backend) error{
		"Head": func(ctx context.Context, b *Backend) error {
			_, _, err := b.Head(ctx, testLoc)
			return err
		},
		"List": func(ctx context.Context, b *Backend) error {
			_, _, err := b.List(ctx, testLoc)
			return err
		},
		"WriteProof": func(ctx context.Context, b *Backend) error {
			return b.WriteProof(ctx, "p2", []byte(`{"p":2}`))
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			efs := errorfs.Wrap(vfs.OS, &errorfs.Rule{Kind: errorfs.Fail})
			b := New(root, &Options{FS: efs})
			if err := call(cancelledCtx(t), b); !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a cancelled context: %v, want context.Canceled", name, err)
			}
			if diff := cmp.Diff([]errorfs.Injection(nil), efs.Injected()); diff != "" {
				t.Errorf("%s with a cancelled context called the filesystem (-want +got):\n%s", name, diff)
			}
		})
	}
}

// On a healthy store a cancelled Head or List reports the cancellation,
// not the key's revisions, and a cancelled WriteProof writes no proof.
func TestCancelledReadsAndProofWrite(t *testing.T) {
	root := cancelledRoot(t)
	b := New(root, nil)
	ctx := cancelledCtx(t)
	if n, data, err := b.Head(ctx, testLoc); !errors.Is(err, context.Canceled) || n != 0 || data != nil {
		t.Errorf("Head with a cancelled context: %d, %q, %v; want 0, nil, context.Canceled", n, data, err)
	}
	if revs, other, err := b.List(ctx, testLoc); !errors.Is(err, context.Canceled) || revs != nil || other != nil {
		t.Errorf("List with a cancelled context: %v, %v, %v; want nil, nil, context.Canceled", revs, other, err)
	}
	if err := b.WriteProof(ctx, "p2", []byte(`{"p":2}`)); !errors.Is(err, context.Canceled) {
		t.Errorf("WriteProof with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := os.Lstat(filepath.Join(root, ProofDir, "p2.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a cancelled WriteProof left its proof: %v", err)
	}
	// The same calls with a live context see what is there.
	if n, data, err := b.Head(context.Background(), testLoc); err != nil || n != 1 || string(data) != `{"n":1}` {
		t.Errorf("Head: %d, %q, %v; want 1, {\"n\":1}", n, data, err)
	}
}

// A Commit whose context ended after Prepare publishes nothing, as a crash
// before the link would leave: it reports the cancellation, passes no
// barrier after the temporary's fsync, and aborts the prepared revision,
// which no later Commit can then publish.
func TestCancelledCommitPublishesNothing(t *testing.T) {
	root := newRoot(t)
	b := New(root, nil)
	var barriers []storage.Barrier
	hook := func(b storage.Barrier) error {
		barriers = append(barriers, b)
		return nil
	}
	p, err := b.Prepare(context.Background(), testLoc, 1, []byte(`{"n":1}`), hook)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Abort)
	if err := p.Commit(cancelledCtx(t)); !errors.Is(err, context.Canceled) {
		t.Errorf("Commit with a cancelled context: %v, want context.Canceled", err)
	}
	if err := p.Commit(context.Background()); err == nil {
		t.Error("a Commit after a cancelled one published the revision")
	}
	if diff := cmp.Diff([]storage.Barrier{storage.BarrierTempWritten, storage.BarrierTempSynced}, barriers); diff != "" {
		t.Errorf("barriers passed (-want +got):\n%s", diff)
	}
	revs, other, err := b.List(context.Background(), testLoc)
	if err != nil {
		t.Fatal(err)
	}
	if len(revs) != 0 || len(other) != 0 {
		t.Errorf("after a cancelled Commit the key holds revisions %v and %v; want nothing", revs, other)
	}
}
