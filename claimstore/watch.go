package claimstore

import (
	"context"

	"github.com/claimstore/claimstore/claimstore/storage"
)

// Watch is a wait on keys' histories (storage.Watch): Wait returns when a
// revision may have been added under any of the keys. It is a hint: read
// again after every Wait and decide on what was read.
type Watch = storage.Watch

// Watch starts watching keys' histories from now, when the backend can
// (storage.Watcher: etcd's watch), and returns ErrCannotWatch when it
// cannot (the directory backend, which a caller watches by its own means:
// claimctl with inotify). To wait until a pair is free without missing a
// release: watch, read, and while held, Wait and read again.
func (s *Store) Watch(ctx context.Context, keys ...Key) (Watch, error) {
	w, ok := s.be.(storage.Watcher)
	if !ok {
		return nil, ErrCannotWatch
	}
	locs := make([]Loc, len(keys))
	for i, k := range keys {
		locs[i] = k.Loc()
	}
	return w.WatchLocs(ctx, locs...)
}
