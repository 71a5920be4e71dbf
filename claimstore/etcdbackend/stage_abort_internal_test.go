package etcdbackend

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/internal/etcdtest"
)

// abortSetup starts a one-member cluster and returns its client, a fresh
// prefix and a backend on it that has made no request yet.
func abortSetup(t *testing.T) (*clientv3.Client, string, *Backend) {
	t.Helper()
	cli := etcdtest.Start(t, 1).Client(t)
	prefix := etcdtest.Prefix(t)
	b, err := New(cli, prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cli, prefix, b
}

// stageFor stages a copy into b's prefix and returns the backend it
// writes with.
func stageFor(t *testing.T, b *Backend) *Backend {
	t.Helper()
	st, err := b.Stage(context.Background())
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	return st.(*staged).Backend
}

// keysUnder lists every key under prefix, for a comparison.
func keysUnder(t *testing.T, cli *clientv3.Client, prefix string) []string {
	t.Helper()
	resp, err := cli.Get(context.Background(), prefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

// TestAbortStopsALateCopyRequest: a copy into a fresh prefix dies with a
// request in flight (a member or the network holds it); `copy --abort`
// removes the unfinished root; the request arrives only then. Every key it
// compares is gone — its revision, its fence, and the epoch, never written,
// read 0 as before — so it would land in the emptied prefix, as a lone
// revision of a claim no one holds. Unstage moves the epoch instead of
// deleting it: the request fails on it. The prefix then holds only the
// epoch, and a new copy may begin there; a prefix with any other key is
// still refused.
func TestAbortStopsALateCopyRequest(t *testing.T) {
	cli, prefix, b := abortSetup(t)
	ctx := context.Background()
	sb := stageFor(t, b)
	if err := sb.Publish(ctx, fenceLoc, 1, []byte("copied r1\n"), nil); err != nil {
		t.Fatal(err)
	}
	// The request the dead copier left in flight, under the fence and
	// epoch it would have sent r2 with, and one for a proof.
	fence := sb.currentFence()
	if err := b.Unstage(ctx); err != nil {
		t.Fatalf("Unstage: %v", err)
	}
	if diff := cmp.Diff([]string{b.epochKey()}, keysUnder(t, cli, prefix)); diff != "" {
		t.Fatalf("after Unstage, keys under the prefix (-want +got):\n%s", diff)
	}
	for _, key := range []string{sb.RevisionKey(fenceLoc, 2), sb.ProofKey("boot-0123456789abcdef01234567")} {
		resp, err := sb.createTxn(ctx, key, []byte("late\n"), fence, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Succeeded {
			t.Errorf("the aborted copy's late request for %s applied in the emptied prefix", key)
		}
	}
	if diff := cmp.Diff([]string{b.epochKey()}, keysUnder(t, cli, prefix)); diff != "" {
		t.Fatalf("after the late requests, keys under the prefix (-want +got):\n%s", diff)
	}

	// A prefix holding only the epoch is empty for a new copy; the new
	// copy's writes publish under the moved epoch.
	again := stageFor(t, b)
	if err := again.Publish(ctx, fenceLoc, 1, []byte("copied again\n"), nil); err != nil {
		t.Fatalf("publish of a copy begun after an abort: %v", err)
	}
	if err := b.Unstage(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, prefix+"/someone-elses", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stage(ctx); !errors.Is(err, storage.ErrNotEmpty) {
		t.Errorf("Stage on a prefix holding the epoch and another key: %v; want ErrNotEmpty", err)
	}
}

// TestAbortStopsARunningCopy: `copy --abort` while the copy still runs
// (another operator's shell). The copy's next write meets the moved epoch,
// finds its mark gone, and stops with ErrCopyAborted, writing nothing —
// also when a third copy has begun there since, whose mark is not its own.
func TestAbortStopsARunningCopy(t *testing.T) {
	cli, prefix, b := abortSetup(t)
	ctx := context.Background()
	for _, restage := range []bool{false, true} {
		sb := stageFor(t, b)
		if err := sb.Publish(ctx, fenceLoc, 1, []byte("copied r1\n"), nil); err != nil {
			t.Fatal(err)
		}
		if err := b.Unstage(ctx); err != nil {
			t.Fatalf("Unstage: %v", err)
		}
		want := []string{b.epochKey()}
		if restage {
			stageFor(t, b)
			want = []string{b.markKey(), b.epochKey()}
		}
		err := sb.Publish(ctx, fenceLoc, 2, []byte("copied r2\n"), nil)
		if !errors.Is(err, storage.ErrCopyAborted) {
			t.Errorf("restage=%v: the aborted copy's next publish: %v; want ErrCopyAborted", restage, err)
		}
		if err := sb.WriteProof(ctx, "boot-0123456789abcdef01234567", []byte("{}\n")); !errors.Is(err, storage.ErrCopyAborted) {
			t.Errorf("restage=%v: the aborted copy's proof: %v; want ErrCopyAborted", restage, err)
		}
		if diff := cmp.Diff(want, keysUnder(t, cli, prefix)); diff != "" {
			t.Errorf("restage=%v: keys under the prefix (-want +got):\n%s", restage, diff)
		}
		if restage {
			if err := b.Unstage(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}
