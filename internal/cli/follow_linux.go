package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/claimstore/claimstore/internal/safefile"
)

// keyWatcher waits, on inotify, for entries to appear in a key directory.
// While the directory does not exist yet (a key never claimed, a root not
// made), it watches the nearest ancestor that exists — the kind directory,
// the root, the root's parent — and moves down as each is made. There is no
// polling: between events the follower sleeps in the kernel.
type keyWatcher struct {
	f        *os.File
	fd       int
	chain    []string // the key directory, then its ancestors up to the root's parent
	wd       int      // the current watch, -1 for none
	watching int      // the index in chain of what wd watches
}

// IN_DONT_FOLLOW: a symlink where a directory belongs is not watched
// through (the store never follows one either).
const watchMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF

func newKeyWatcher(root, keyDir string) (*keyWatcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	// Non-blocking, so the runtime's poller waits for it: a read can then
	// be interrupted by a deadline when a signal ends the follow.
	w := &keyWatcher{f: os.NewFile(uintptr(fd), "inotify"), fd: fd, wd: -1,
		chain: []string{keyDir, filepath.Dir(keyDir), root, filepath.Dir(root)}}
	if err := w.arm(); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

func (w *keyWatcher) Close() error { return w.f.Close() }

// arm watches the deepest directory of the chain that exists. A directory
// made between a failed watch and the watch of its parent would be missed,
// so after watching an ancestor it looks again one level down.
func (w *keyWatcher) arm() error {
	for {
		i, wd, err := w.deepest()
		if err != nil {
			return err
		}
		if w.wd >= 0 && w.wd != wd {
			unix.InotifyRmWatch(w.fd, uint32(w.wd))
		}
		w.wd, w.watching = wd, i
		if i == 0 {
			return nil
		}
		// Look one level down again (Lstat: a symlink there is refused by
		// deepest, not followed).
		if _, err := os.Lstat(w.chain[i-1]); err != nil {
			return nil
		}
	}
}

func (w *keyWatcher) deepest() (int, int, error) {
	for i, d := range w.chain {
		wd, err := unix.InotifyAddWatch(w.fd, d, watchMask)
		if err == nil {
			return i, wd, nil
		}
		if errors.Is(err, unix.ENOTDIR) {
			// Something that is not a directory where one belongs (a file
			// planted as seat/, a symlinked key directory): waiting for it to
			// become a directory would arm the same failed watch forever.
			if fi, lerr := os.Lstat(d); lerr == nil && !fi.IsDir() {
				return 0, 0, &os.PathError{Op: "watch", Path: d, Err: fmt.Errorf("it is %s, not a directory: nothing of the claim root can be watched through it (run claimctl fsck)", safefile.Describe(fi.Mode()))}
			}
		}
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
			return 0, 0, &os.PathError{Op: "inotify_add_watch", Path: d, Err: err}
		}
	}
	return 0, 0, fmt.Errorf("none of %s exists", w.chain[len(w.chain)-1])
}

// Wait returns when something may have been added to the key directory,
// or with ctx's error when ctx ends.
func (w *keyWatcher) Wait(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { w.f.SetReadDeadline(time.Now()) })
	defer stop()
	var buf [64 * (unix.SizeofInotifyEvent + unix.NAME_MAX + 1)]byte
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		n, err := w.f.Read(buf[:])
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		rearm := false
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			switch {
			case ev.Mask&unix.IN_Q_OVERFLOW != 0:
				// Events were dropped: look again.
				return nil
			case int(ev.Wd) != w.wd:
				// A watch already replaced.
			case w.watching == 0 && ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0:
				// Nothing in the project removes a key directory.
				return fmt.Errorf("the key directory %s was removed or moved away: nothing in claimstore does that; find out who did", w.chain[0])
			case w.watching == 0:
				return nil
			default:
				rearm = true
			}
		}
		if rearm {
			if ev := w.arm(); ev != nil {
				return ev
			}
			if w.watching == 0 {
				return nil
			}
		}
	}
}
