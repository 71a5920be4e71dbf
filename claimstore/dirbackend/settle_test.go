package dirbackend

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
)

// holdSyncDir passes every call through to FS but two directory fsyncs:
// the one of a directory named fail is held until release is closed, then
// fails with EIO; the one of a directory named watch says it began.
type holdSyncDir struct {
	vfs.FS
	fail, watch      string
	failing, watched chan struct{}
	release          chan struct{}
}

func (h *holdSyncDir) SyncDir(name string) error {
	switch {
	case strings.HasSuffix(name, "/"+h.fail):
		close(h.failing)
		<-h.release
		return syscall.EIO
	case strings.HasSuffix(name, "/"+h.watch):
		close(h.watched)
	}
	return h.FS.SyncDir(name)
}

// A key directory's fsync that fails while another publish's fsyncs are
// under way may have lost entries that the other's later, successful
// fsync never writes (the kernel reports a writeback error once): the
// other publish, already linked, is not acknowledged either. Here B's link
// and its own directory fsync succeed while A's directory fsync, begun
// before B's, is still in flight; A's then fails, and B must fail with
// ErrSyncFailed rather than report its revision durable.
func TestNoAcknowledgementWhileAFailingFsyncIsInFlight(t *testing.T) {
	a := testLoc
	bLoc := storage.Loc{Kind: storage.KindSession, Hash: "0123456789abcdef0123456789abcdef"}
	h := &holdSyncDir{FS: vfs.OS, fail: a.Hash, watch: bLoc.Hash,
		failing: make(chan struct{}), watched: make(chan struct{}), release: make(chan struct{})}
	b := New(newRoot(t), &Options{FS: h})
	ctx := context.Background()
	data := []byte("{}\n")
	errA, errB := make(chan error, 1), make(chan error, 1)
	go func() { errA <- b.Publish(ctx, a, 1, data, nil) }()
	wait := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(time.Minute):
			close(h.release)
			t.Fatalf("%s never began", what)
		}
	}
	wait(h.failing, "A's key directory fsync")
	go func() { errB <- b.Publish(ctx, bLoc, 1, data, nil) }()
	// B has taken the fsyncs in flight (A's) before its own began.
	wait(h.watched, "B's key directory fsync")
	close(h.release)
	if err := <-errA; !errors.Is(err, storage.ErrSyncFailed) && !errors.Is(err, syscall.EIO) {
		t.Errorf("A, whose directory fsync failed: %v; want it failed", err)
	}
	if err := <-errB; !errors.Is(err, storage.ErrSyncFailed) {
		t.Errorf("B, whose fsyncs ran while A's failing one was in flight: %v; want ErrSyncFailed (an entry of its directory may be lost)", err)
	}
}
