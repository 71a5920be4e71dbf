package etcdbackend

import (
	"context"
	"errors"
	"testing"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/internal/etcdtest"
)

// TestFenceStopsALateRequest: the case a proxy cannot stage reliably. A
// transaction whose reply was lost and that has not reached the cluster
// yet is resolved as not published only after the fence is put; the same
// transaction arriving afterwards (a request delayed in the network) then
// fails its compare and publishes nothing, so "not published" stays true.
// Without the fence it would have published.
func TestFenceStopsALateRequest(t *testing.T) {
	c := etcdtest.Start(t, 1)
	b, err := New(c.Client(t), etcdtest.Prefix(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	loc := storage.Loc{Kind: storage.KindSeat, Hash: "0123456789abcdef0123456789abcdef"}
	key, data := b.RevisionKey(loc, 1), []byte("late\n")
	fence := b.currentFence()
	published, err := b.resolveLost(context.Background(), key, data, fence, errors.New("reply lost"))
	if err != nil || published {
		t.Fatalf("resolveLost of a request that never arrived = %v, %v; want not published", published, err)
	}
	if b.currentFence() == fence {
		t.Error("the fence was not replaced after it was put")
	}
	// The lost request arrives now.
	resp, err := b.createTxn(context.Background(), key, data, fence, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded {
		t.Fatal("the late request published after it was resolved as not published")
	}
	if _, err := b.Read(context.Background(), loc, 1); err == nil {
		t.Fatal("revision 1 exists after the late request")
	}
	// Under the new fence, publishing works.
	if err := b.Publish(context.Background(), loc, 1, data, nil); err != nil {
		t.Fatal(err)
	}
	// And a request that was applied before its reply was lost reads as
	// published, another writer's as a lost race.
	if published, err := b.resolveLost(context.Background(), key, data, b.currentFence(), errors.New("reply lost")); err != nil || !published {
		t.Errorf("resolveLost of an applied request = %v, %v; want published", published, err)
	}
	if _, err := b.resolveLost(context.Background(), key, []byte("other\n"), b.currentFence(), errors.New("reply lost")); !errors.Is(err, storage.ErrRevisionExists) {
		t.Errorf("resolveLost against another's revision: %v; want ErrRevisionExists", err)
	}
}
