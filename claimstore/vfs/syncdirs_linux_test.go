package vfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/claimstore/claimstore/internal/safefile"
)

// syncDirsFixture returns three directories, then a symlink to the first,
// a regular file, a FIFO, a name that does not exist and a name below the
// regular file, all in a new directory.
func syncDirsFixture(t *testing.T) (dirs, refused []string) {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"a", "b", "c"} {
		p := filepath.Join(root, d)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, p)
	}
	link, file, fifo := filepath.Join(root, "link"), filepath.Join(root, "file"), filepath.Join(root, "fifo")
	if err := os.Symlink(dirs[0], link); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	return dirs, []string{link, file, fifo, filepath.Join(root, "missing"), filepath.Join(file, "below")}
}

// openUnder returns what this process's open descriptors name under root
// (a failed ring closes its own descriptor, so counting them all would not
// do).
func openUnder(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var under []string
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(target, root+"/") {
			under = append(under, target)
		}
	}
	return under
}

// TestSyncDirs: the directories are fsynced in one submission, each result
// in its own place; a name that is not a directory is refused as SyncDir
// refuses it (never followed, never waited on) and not submitted; no
// descriptor is left open.
func TestSyncDirs(t *testing.T) {
	withRings(t)
	needRing(t)
	if _, ok := OS.(DirsSyncer); !ok {
		t.Fatal("the OS filesystem is no DirsSyncer")
	}
	dirs, refused := syncDirsFixture(t)
	names := append(append([]string(nil), dirs...), refused...)
	before, beforeSyncs := SyncBatches(), SyncsSubmitted()
	errs := OSFS{}.SyncDirs(names)
	if open := openUnder(t, filepath.Dir(dirs[0])); len(open) != 0 {
		t.Errorf("descriptors left open on %v", open)
	}
	if len(errs) != len(names) {
		t.Fatalf("%d results for %d directories", len(errs), len(names))
	}
	if err := errors.Join(errs[:3]...); err != nil {
		t.Errorf("directories: %v", err)
	}
	for i, name := range refused {
		err := errs[3+i]
		if want := OS.SyncDir(name); err == nil || want == nil || err.Error() != want.Error() {
			t.Errorf("%s: %v, want SyncDir's refusal %v", name, err, want)
		}
		var pe *fs.PathError
		if !errors.As(err, &pe) || pe.Path != name {
			t.Errorf("%s: %v does not name the path", name, err)
		}
	}
	var te *safefile.TypeError
	if !errors.As(errs[3], &te) || !errors.As(errs[4], &te) || !errors.As(errs[5], &te) || !errors.Is(errs[6], fs.ErrNotExist) || !errors.Is(errs[7], unix.ENOTDIR) {
		t.Errorf("refusals %v: want what is there named for the symlink, the file and the FIFO, ErrNotExist for the missing name, ENOTDIR below the file", errs[3:])
	}
	if got := SyncBatches() - before; got != 1 {
		t.Errorf("%d batches submitted, want 1", got)
	}
	if got := SyncsSubmitted() - beforeSyncs; got != 3 {
		t.Errorf("%d fsyncs submitted, want the three directories'", got)
	}

	// The ring used is put back for the next batch.
	rings.mu.Lock()
	idle := len(rings.idle)
	rings.mu.Unlock()
	if idle != 1 {
		t.Errorf("%d idle rings after the batch, want the one it used back", idle)
	}

	// As many directories as a ring holds go in one submission; one more,
	// on goroutines.
	many := make([]string, ringEntries+1)
	for i := range many {
		many[i] = dirs[i%len(dirs)]
	}
	for _, n := range []int{ringEntries, ringEntries + 1} {
		before, beforeSyncs := SyncBatches(), SyncsSubmitted()
		if err := errors.Join(OSFS{}.SyncDirs(many[:n])...); err != nil {
			t.Fatal(err)
		}
		want := uint64(n)
		if n > ringEntries {
			want = 0
		}
		if got := SyncsSubmitted() - beforeSyncs; got != want || SyncBatches()-before != min(want, 1) {
			t.Errorf("%d directories: %d fsyncs submitted in %d batches, want %d", n, got, SyncBatches()-before, want)
		}
	}

	// A lone directory is fsynced on the caller's goroutine.
	before = SyncBatches()
	if err := errors.Join(OSFS{}.SyncDirs(dirs[:1])...); err != nil {
		t.Fatal(err)
	}
	if got := SyncBatches() - before; got != 0 {
		t.Errorf("a lone directory: %d batches submitted, want none", got)
	}
	if errs := (OSFS{}).SyncDirs(nil); len(errs) != 0 {
		t.Errorf("no directories: %v", errs)
	}
}

// TestSyncDirsWithoutARing: where io_uring is off, or the kernel refuses
// the submission whole, every directory is still fsynced, each on its
// own; where the wait fails, each in flight says that its outcome is
// unknown, naming io_uring. No descriptor is left open either way.
func TestSyncDirsWithoutARing(t *testing.T) {
	withRings(t)
	needRing(t)
	dirs, _ := syncDirsFixture(t)
	defer func() {
		if open := openUnder(t, filepath.Dir(dirs[0])); len(open) != 0 {
			t.Errorf("descriptors left open on %v", open)
		}
	}()

	rings.off.Store(true)
	before := SyncBatches()
	if err := errors.Join(OSFS{}.SyncDirs(dirs)...); err != nil {
		t.Fatalf("io_uring off: %v", err)
	}
	if got := SyncBatches() - before; got != 0 {
		t.Errorf("io_uring off: %d batches submitted", got)
	}
	rings.off.Store(false)

	// A ring that failed is closed, not kept: the rings open beyond the
	// idle ones (those other tests' pools hold) stay as many as before.
	held := func() int {
		t.Helper()
		rings.mu.Lock()
		defer rings.mu.Unlock()
		return len(openRings(t)) - len(rings.idle)
	}
	base := held()
	ringsHeld := func(when string) {
		t.Helper()
		if n := held(); n != base {
			t.Errorf("%s: %d rings open beyond the idle ones, %d before", when, n, base)
		}
	}
	var entered int
	ringEnter = func(r *ring, submit, wait uint32) (int, error) { entered++; return 0, unix.EBUSY }
	if err := errors.Join(OSFS{}.SyncDirs(dirs)...); err != nil || entered == 0 {
		t.Fatalf("refused whole: %v (io_uring_enter called %d times)", err, entered)
	}
	ringsHeld("refused whole")

	// Only pretended submitted, so that no completion can arrive before
	// the failing wait (as TestRingFailures).
	ringEnter = func(r *ring, submit, wait uint32) (int, error) {
		if submit == 0 {
			return 0, unix.EFAULT
		}
		return int(submit), nil
	}
	errs := OSFS{}.SyncDirs(dirs)
	for i, err := range errs {
		var pe *fs.PathError
		if !errors.Is(err, unix.EFAULT) || !strings.Contains(err.Error(), "io_uring") || !errors.As(err, &pe) || pe.Path != dirs[i] {
			t.Errorf("failed wait: %s: %v, want a failure naming the directory, io_uring and EFAULT", dirs[i], err)
		}
	}
	ringsHeld("failed wait")
}

// openRings returns this process's descriptors that are io_uring
// instances.
func openRings(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == "anon_inode:[io_uring]" {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestFsyncFDsReportsEach: each descriptor's fsync result is in its own
// place, submitted at once or on goroutines alike (a pipe's fsync fails
// with EINVAL among directories that succeed).
func TestFsyncFDsReportsEach(t *testing.T) {
	withRings(t)
	needRing(t)
	dirs, _ := syncDirsFixture(t)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(p[0]); _ = unix.Close(p[1]) })
	var fds []int32
	for _, d := range dirs {
		fd, err := safefile.OpenDirFD(d)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Close(fd) })
		fds = append(fds, int32(fd))
	}
	fds = append(fds[:1], append([]int32{int32(p[1])}, fds[1:]...)...)
	for _, off := range []bool{false, true} {
		rings.off.Store(off)
		errs := fsyncFDs(fds)
		if len(errs) != 4 || errs[0] != nil || !errors.Is(errs[1], unix.EINVAL) || errs[2] != nil || errs[3] != nil {
			t.Errorf("io_uring off %v: %v, want EINVAL for the pipe (second) alone", off, errs)
		}
	}
}

// countedDirs is the OS filesystem counting its SyncDir calls.
type countedDirs struct {
	OSFS
	mu    sync.Mutex
	names []string
}

func (f *countedDirs) SyncDir(name string) error {
	f.mu.Lock()
	f.names = append(f.names, name)
	f.mu.Unlock()
	return f.OSFS.SyncDir(name)
}

// TestSyncDirsEach: a wrapper's SyncDirs made of its own SyncDir calls it
// once for each directory and reports each result in its own place.
func TestSyncDirsEach(t *testing.T) {
	dirs, refused := syncDirsFixture(t)
	names := append(append([]string(nil), dirs...), refused[3])
	f := &countedDirs{}
	errs := SyncDirsEach(f, names)
	if len(f.names) != len(names) {
		t.Errorf("SyncDir called for %v, want each of %v", f.names, names)
	}
	if errors.Join(errs[:3]...) != nil || !errors.Is(errs[3], fs.ErrNotExist) {
		t.Errorf("%v: want the directories fsynced and the missing name refused", errs)
	}
	if errs := SyncDirsEach(f, nil); len(errs) != 0 {
		t.Errorf("no directories: %v", errs)
	}
}
