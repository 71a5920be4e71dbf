package claimstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestStoreWatch: on a backend with a Watcher (etcd) Store.Watch wakes on
// a publish under the keys, and a read after the wake-up sees it; on one
// without (the directory backend) it says so with ErrCannotWatch, and the
// caller waits by its own means.
func TestStoreWatch(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		root := newRoot(t)
		s := openStore(t, root, nil)
		seat, session := testKeys(t)
		ctx := context.Background()
		w, err := s.Watch(ctx, seat, session)
		if !strings.HasPrefix(root, "etcd://") {
			if !errors.Is(err, ErrCannotWatch) || w != nil {
				t.Fatalf("Watch on a directory root = %v, %v; want ErrCannotWatch", w, err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		c := mustAcquire(t, s, seat, session)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := w.Wait(wctx); err != nil {
			t.Fatalf("Wait after an acquire: %v", err)
		}
		p, err := s.Pair(ctx, seat, session)
		if err != nil || !p.Held() {
			t.Fatalf("the pair after the wake-up: %+v, %v; want held by %s", p, err, c.ID)
		}
	})
}
