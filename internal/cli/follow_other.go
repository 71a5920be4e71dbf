//go:build !linux

package cli

import (
	"context"
	"errors"
)

// keyWatcher needs inotify: --follow is Linux-only.
type keyWatcher struct{}

func newKeyWatcher(root, keyDir string) (*keyWatcher, error) {
	return nil, errors.New("--follow needs Linux (inotify)")
}

func (*keyWatcher) Close() error { return nil }
func (*keyWatcher) Wait(ctx context.Context) error {
	return errors.New("--follow needs Linux (inotify)")
}
