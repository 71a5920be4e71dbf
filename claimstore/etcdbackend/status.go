package etcdbackend

import (
	"context"
	"errors"
	"fmt"

	"github.com/claimstore/claimstore/claimstore/storage"
)

var _ storage.StatusKeeper = (*Backend)(nil)

// StatusKey returns the etcd key of status record name, as the directory
// backend's status/<name>.json.
func (b *Backend) StatusKey(name string) string {
	return b.prefix + "/" + storage.StatusDir + "/" + name + ".json"
}

// WriteStatus implements storage.StatusKeeper with one put: atomic, and
// durable once a quorum acknowledged it. Unlike a revision it needs no
// fence: a status record is meant to be replaced, and a put whose reply was
// lost and lands later writes the same bytes or an older walk's record over
// a newer one — a status is informational and decides nothing, and the
// error was returned, so the caller has said it may not be recorded.
func (b *Backend) WriteStatus(ctx context.Context, name string, data []byte) error {
	key := b.StatusKey(name)
	if !storage.ValidStatusName(name) {
		return pathErr("write status", key, errors.New("not a status record name (lowercase letters, digits and '-')"))
	}
	if len(data) > storage.MaxRecordSize {
		return pathErr("write status", key, fmt.Errorf("%d bytes, more than the %d a record may have", len(data), storage.MaxRecordSize))
	}
	if err := b.checkCopy(ctx); err != nil {
		return err
	}
	rctx, cancel := b.ctx(ctx)
	defer cancel()
	if _, err := b.cli.Put(rctx, key, string(data)); err != nil {
		return pathErr("write status", key, err)
	}
	return nil
}

// ReadStatus implements storage.StatusKeeper: one read, bounded as a
// revision's.
func (b *Backend) ReadStatus(ctx context.Context, name string) ([]byte, error) {
	key := b.StatusKey(name)
	if !storage.ValidStatusName(name) {
		return nil, pathErr("read status", key, errors.New("not a status record name (lowercase letters, digits and '-')"))
	}
	if err := b.checkCopy(ctx); err != nil {
		return nil, err
	}
	return b.get(ctx, key)
}
