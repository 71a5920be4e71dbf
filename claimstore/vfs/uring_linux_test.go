package vfs

import (
	"errors"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// needRing skips where the kernel refuses io_uring (a seccomp filter, the
// sysctl), saying so, and fails instead under CI, whose machine has it.
// The kernel is asked directly, not through newRing: a ring this package
// fails to set up where the kernel would is a failure, not a skip.
func needRing(t *testing.T) {
	t.Helper()
	needKernelRing(t)
	r, err := getRing()
	if err != nil {
		t.Fatalf("the kernel has io_uring, but no ring was set up: %v", err)
	}
	putRing(r)
}

// needKernelRing is needRing's question to the kernel alone.
func needKernelRing(t *testing.T) {
	t.Helper()
	if err := kernelHasIOURing(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("io_uring refused on CI's machine, which has it: %v", err)
		}
		t.Skipf("the kernel refuses io_uring here (%v): SyncBatch is not used, and the directory backend's tests cover the goroutines' path", err)
	}
}

// kernelHasIOURing asks the kernel for a ring of one entry, and closes it.
func kernelHasIOURing() error {
	var p [unsafe.Sizeof(ringParams{})]byte
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&p[0])), 0)
	if errno != 0 {
		return errno
	}
	return unix.Close(int(fd))
}

// withRings gives the test a pool of its own and restores the seams.
func withRings(t *testing.T) {
	t.Helper()
	rings.mu.Lock()
	idle := rings.idle
	rings.idle = nil
	failed := rings.failed
	rings.failed = 0
	rings.mu.Unlock()
	off := rings.off.Load()
	setup, call, enter, mmap, status := ringSetup, ringSetupCall, ringEnter, ringMmap, procStatus
	t.Cleanup(func() {
		rings.mu.Lock()
		for _, r := range rings.idle {
			r.close()
		}
		rings.idle, rings.failed = idle, failed
		rings.mu.Unlock()
		rings.off.Store(off)
		ringSetup, ringSetupCall, ringEnter, ringMmap, procStatus = setup, call, enter, mmap, status
	})
}

// written returns n unnamed temporaries in a new directory, each holding
// a line.
func written(t *testing.T, n int) []TempFile {
	t.Helper()
	dir := t.TempDir()
	var temps []TempFile
	for range n {
		tf, err := CreateUnnamed(dir, 0o400)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tf.Close() })
		if _, err := tf.Write([]byte("line\n")); err != nil {
			t.Fatal(err)
		}
		temps = append(temps, tf)
	}
	return temps
}

// syncAll is NewSyncBatch and Sync of temps.
func syncAll(temps []TempFile, during func()) ([]error, error) {
	sb, err := NewSyncBatch(temps)
	if err != nil {
		return nil, err
	}
	return sb.Sync(temps, during), nil
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	names, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(names)
}

// pipeTemp is a temporary of this package whose descriptor is a pipe's,
// which fsync refuses (EINVAL): a submission that did nothing, or put
// results in the wrong places, shows.
func pipeTemp(t *testing.T, dir string) TempFile {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(p[0]); _ = unix.Close(p[1]) })
	return &unnamedTemp{fd: p[1], dir: dir}
}

// TestSyncBatchReportsEachFsync: each temporary's fsync is done and its
// own result reported in its own place, a refusal among successes
// included, and during runs once, before Sync returns; a closed
// temporary's fsync fails on its own (EBADF).
func TestSyncBatchReportsEachFsync(t *testing.T) {
	withRings(t)
	needRing(t)
	for _, at := range []int{0, 1, 2} {
		temps := written(t, 2)
		temps = append(temps[:at], append([]TempFile{pipeTemp(t, "/the/pipe")}, temps[at:]...)...)
		calls := 0
		errs, err := syncAll(temps, func() { calls++ })
		if err != nil {
			t.Fatal(err)
		}
		if calls != 1 {
			t.Fatalf("during ran %d times, want once", calls)
		}
		for i, e := range errs {
			if i != at {
				if e != nil {
					t.Errorf("pipe at %d: temporary %d: %v, want success", at, i, e)
				}
				continue
			}
			var pe *fs.PathError
			if !errors.As(e, &pe) || !errors.Is(e, unix.EINVAL) || pe.Op != "sync" || pe.Path != "/the/pipe/(unnamed)" {
				t.Errorf("pipe at %d: its fsync reported %v, want sync /the/pipe/(unnamed): EINVAL", at, e)
			}
		}
		// Submitted and waited for in one call where nothing runs between.
		errs, err = syncAll(temps, nil)
		if err != nil || len(errs) != 3 || !errors.Is(errs[at], unix.EINVAL) || errors.Join(append(errs[:at:at], errs[at+1:]...)...) != nil {
			t.Fatalf("without during: %v, %v", errs, err)
		}
	}
	temps := written(t, 2)
	sb, err := NewSyncBatch(temps)
	if err != nil {
		t.Fatal(err)
	}
	_ = temps[0].Close()
	if errs := sb.Sync(temps, nil); !errors.Is(errs[0], unix.EBADF) || errs[1] != nil {
		t.Fatalf("a temporary closed before its fsync: %v, want EBADF for it alone", errs)
	}
	// Some of the batch's temporaries, or none, are fsynced as well.
	for _, some := range [][]TempFile{temps[1:], nil} {
		sb, err := NewSyncBatch(temps)
		if err != nil {
			t.Fatal(err)
		}
		called := false
		if errs := sb.Sync(some, func() { called = true }); len(errs) != len(some) || errors.Join(errs...) != nil || !called {
			t.Fatalf("%d of the batch: %v, during called %v", len(some), errs, called)
		}
	}
}

// TestNewSyncBatchRefusesWhatItCannotTake: a wrapper's temporary (its Sync
// must run) and more than one submission holds are refused with
// errors.ErrUnsupported, nothing reserved.
func TestNewSyncBatchRefusesWhatItCannotTake(t *testing.T) {
	withRings(t)
	needRing(t)
	type wrapped struct{ TempFile }
	for name, temps := range map[string][]TempFile{
		"a wrapper's": {written(t, 1)[0], wrapped{written(t, 1)[0]}},
		"too many":    written(t, ringEntries+1),
	} {
		setups := 0
		ringSetup = func() (*ring, error) { setups++; return newRing() }
		if sb, err := NewSyncBatch(temps); !errors.Is(err, errors.ErrUnsupported) || sb != nil || setups != 0 {
			t.Errorf("%s: %v, %v, after %d ring setups; want errors.ErrUnsupported alone", name, sb, err, setups)
		}
	}
	errs, err := syncAll(written(t, ringEntries), nil)
	if err != nil || errors.Join(errs...) != nil || len(errs) != ringEntries {
		t.Errorf("%d temporaries: %v, %v", ringEntries, errs, err)
	}
}

// TestRingsAreReused: rings are kept for later batches, at most
// maxIdleRings of them, however many callers ran at once; none leaks.
func TestRingsAreReused(t *testing.T) {
	withRings(t)
	needRing(t)
	temps := written(t, 2)
	if _, err := syncAll(temps, nil); err != nil {
		t.Fatal(err)
	}
	rings.mu.Lock()
	first := rings.idle
	rings.mu.Unlock()
	if len(first) != 1 {
		t.Fatalf("%d idle rings after one batch, want 1", len(first))
	}
	if _, err := syncAll(temps, nil); err != nil {
		t.Fatal(err)
	}
	rings.mu.Lock()
	again := rings.idle
	rings.mu.Unlock()
	if len(again) != 1 || again[0] != first[0] {
		t.Fatal("the second batch set up a ring of its own")
	}
	fds := func() int { return openFDs(t) }
	before := fds()
	var wg sync.WaitGroup
	for range 3 * maxIdleRings {
		wg.Go(func() {
			mine := written(t, 2)
			for range 20 {
				if errs, err := syncAll(mine, func() {}); err != nil || errors.Join(errs...) != nil {
					t.Error(errs, err)
					return
				}
			}
		})
	}
	wg.Wait()
	rings.mu.Lock()
	idle := len(rings.idle)
	rings.mu.Unlock()
	if idle > maxIdleRings || idle < 1 {
		t.Errorf("%d idle rings, want 1..%d", idle, maxIdleRings)
	}
	// Each caller's temporaries are closed by t.Cleanup, later: count
	// them out (two each), and the rings kept.
	if got, want := fds(), before+3*maxIdleRings*2+idle-1; got > want {
		t.Errorf("%d descriptors open, want at most %d: rings leak", got, want)
	}
}

// TestKernelRefusingIOURing: a kernel that refuses io_uring itself
// (permission: a seccomp filter, the sysctl) turns it off for good, and
// every later batch is refused at once; one that is short of memory now
// is refused this time only.
func TestKernelRefusingIOURing(t *testing.T) {
	withRings(t)
	temps := written(t, 2)
	setups := 0
	ringSetup = func() (*ring, error) { setups++; return nil, unix.ENOMEM }
	if _, err := NewSyncBatch(temps); !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("ENOMEM: %v", err)
	}
	if rings.off.Load() {
		t.Fatal("a ring short of memory once turned io_uring off")
	}
	ringSetup = func() (*ring, error) { setups++; return nil, unix.EPERM }
	if _, err := NewSyncBatch(temps); !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, unix.EPERM) {
		t.Fatalf("EPERM: %v", err)
	}
	if _, err := NewSyncBatch(temps); !errors.Is(err, errors.ErrUnsupported) || setups != 2 {
		t.Fatalf("after EPERM: %v, with %d setups (want no third)", err, setups)
	}
	for _, errno := range []unix.Errno{unix.ENOSYS, unix.EACCES, unix.EINVAL} {
		rings.off.Store(false)
		ringSetup = func() (*ring, error) { return nil, errno }
		_, _ = NewSyncBatch(temps)
		if !rings.off.Load() {
			t.Errorf("%v from io_uring_setup left io_uring on", errno)
		}
	}
}

// TestSetupFailingInARowTurnsIOURingOff: a setup that fails for a
// reason that may pass (ENOMEM, EMFILE) leaves io_uring on, unless
// maxSetupFailures fail in a row: a kernel that charges rings to
// RLIMIT_MEMLOCK would otherwise cost a failed setup on every batch. A
// ring set up between starts the count again.
func TestSetupFailingInARowTurnsIOURingOff(t *testing.T) {
	withRings(t)
	temps := written(t, 2)
	rings.off.Store(false)
	fail := func(errno unix.Errno) {
		t.Helper()
		ringSetup = func() (*ring, error) { return nil, errno }
		if _, err := NewSyncBatch(temps); !errors.Is(err, errno) {
			t.Fatalf("setup failing with %v: NewSyncBatch returned %v", errno, err)
		}
	}
	for range maxSetupFailures - 1 {
		fail(unix.ENOMEM)
	}
	if rings.off.Load() {
		t.Fatalf("%d failed setups turned io_uring off, want %d", maxSetupFailures-1, maxSetupFailures)
	}
	// A ring set up (here one with no descriptor, closed at once) starts
	// the count again.
	ringSetup = func() (*ring, error) { return &ring{fd: -1}, nil }
	sb, err := NewSyncBatch(temps)
	if err != nil {
		t.Fatal(err)
	}
	sb.r.close()
	for range maxSetupFailures - 1 {
		fail(unix.EMFILE)
	}
	if rings.off.Load() {
		t.Fatal("failed setups on both sides of a ring set up turned io_uring off")
	}
	fail(unix.ENOMEM)
	if !rings.off.Load() {
		t.Fatalf("%d setups failed in a row and io_uring stayed on", maxSetupFailures)
	}
	if _, err := NewSyncBatch(temps); !errors.Is(err, errors.ErrUnsupported) || errors.Is(err, unix.ENOMEM) {
		t.Fatalf("after io_uring was turned off: %v, want the refusal of a process with io_uring off", err)
	}
}

// TestRingFailures: a submission the kernel refuses whole falls back to
// each temporary's own Sync, during still run once; one refused after
// part of it was taken, or a wait that fails, waits for what is in flight
// and then reports every fsync failed, since how each went is not known;
// either way the ring is not used again.
func TestRingFailures(t *testing.T) {
	withRings(t)
	needRing(t)
	temps := written(t, 3)
	pipe := pipeTemp(t, "/the/pipe")
	real := ringEnter
	fds := openFDs(t)
	defer func() {
		if n := openFDs(t); n != fds {
			t.Errorf("%d descriptors open, %d before: a failed ring was not closed", n, fds)
		}
	}()
	idle := func() []*ring {
		rings.mu.Lock()
		defer rings.mu.Unlock()
		return append([]*ring(nil), rings.idle...)
	}

	ringEnter = func(r *ring, submit, wait uint32) (int, error) { return 0, unix.EBUSY }
	calls := 0
	errs, err := syncAll(append(temps, pipe), func() { calls++ })
	if err != nil || calls != 1 || len(errs) != 4 || errors.Join(errs[:3]...) != nil || !errors.Is(errs[3], unix.EINVAL) {
		t.Fatalf("refused whole: %v, %v, during called %d times; want each Sync's own result, during once", errs, err, calls)
	}
	if len(idle()) != 0 {
		t.Fatal("a ring holding entries the kernel never took was kept")
	}

	calls = 0
	ringEnter = func(r *ring, submit, wait uint32) (int, error) {
		calls++
		if calls == 1 {
			return real(r, 1, 0) // the kernel takes one
		}
		if submit > 0 {
			return 0, unix.EAGAIN
		}
		return real(r, submit, wait)
	}
	called := 0
	errs, err = syncAll(temps, func() { called++ })
	if err != nil || called != 1 || len(errs) != 3 {
		t.Fatalf("refused in part: %v, %v, during called %d times", errs, err, called)
	}
	for i, e := range errs {
		if !errors.Is(e, unix.EAGAIN) || !strings.Contains(e.Error(), "io_uring") {
			t.Errorf("refused in part: temporary %d: %v, want a failure naming io_uring and EAGAIN", i, e)
		}
	}
	if len(idle()) != 0 {
		t.Fatal("a ring whose submission failed was kept")
	}

	// The submission is only pretended (the kernel is not called), so
	// that no completion can arrive before the wait: the kernel's fsyncs
	// may finish before reap's first look, and a wait never made cannot
	// fail. The ring is closed with its entries unread.
	ringEnter = func(r *ring, submit, wait uint32) (int, error) {
		if submit == 0 {
			return 0, unix.EFAULT
		}
		return int(submit), nil
	}
	errs, err = syncAll(temps, func() {})
	if err != nil || len(errs) != 3 {
		t.Fatalf("failed wait: %v, %v", errs, err)
	}
	for i, e := range errs {
		if !errors.Is(e, unix.EFAULT) {
			t.Errorf("failed wait: temporary %d: %v, want EFAULT", i, e)
		}
	}
	if len(idle()) != 0 {
		t.Fatal("a ring whose wait failed was kept")
	}

	// Interrupted calls are made again.
	calls = 0
	ringEnter = func(r *ring, submit, wait uint32) (int, error) {
		calls++
		if calls%2 == 1 {
			return 0, unix.EINTR
		}
		return real(r, submit, wait)
	}
	errs, err = syncAll(temps, func() {})
	if err != nil || errors.Join(errs...) != nil || calls < 2 {
		t.Fatalf("interrupted: %v, %v after %d calls", errs, err, calls)
	}
}

// TestIOURingOffByEnvironment: CLAIMSTORE_IO_URING=off keeps io_uring
// unused; any other value changes nothing.
func TestIOURingOffByEnvironment(t *testing.T) {
	withRings(t)
	temps := written(t, 2)
	rings.off.Store(false)
	for _, v := range []string{"", "on", "OFF"} {
		ringsFromEnv(v)
		if rings.off.Load() {
			t.Errorf("%s=%q turned io_uring off", IOURingEnv, v)
		}
	}
	ringsFromEnv("off")
	setups := 0
	ringSetup = func() (*ring, error) { setups++; return newRing() }
	if _, err := NewSyncBatch(temps); !errors.Is(err, errors.ErrUnsupported) || setups != 0 {
		t.Fatalf("%s=off: %v after %d ring setups", IOURingEnv, err, setups)
	}
}

// TestRingCallsTheKernelOnceOrTwice: with nothing to run between, a batch
// is submitted and waited for in one io_uring_enter; with something, it
// is submitted without waiting, so that what runs between overlaps the
// fsyncs, then waited for. Either way the caller sleeps in the kernel
// rather than asking again and again.
func TestRingCallsTheKernelOnceOrTwice(t *testing.T) {
	withRings(t)
	needRing(t)
	temps := written(t, 2)
	real := ringEnter
	type call struct{ submit, wait uint32 }
	var calls []call
	ringEnter = func(r *ring, submit, wait uint32) (int, error) {
		calls = append(calls, call{submit, wait})
		return real(r, submit, wait)
	}
	before, beforeSyncs := SyncBatches(), SyncsSubmitted()
	if errs, err := syncAll(temps, nil); err != nil || errors.Join(errs...) != nil {
		t.Fatal(errs, err)
	}
	// A wait interrupted after the submission returns early; what follows
	// is only waits.
	if len(calls) == 0 || calls[0] != (call{2, 2}) || slices.ContainsFunc(calls[1:], func(c call) bool { return c.submit != 0 }) {
		t.Errorf("nothing between: calls %v, want one submitting 2 and waiting for 2 (then waits only, if interrupted)", calls)
	}
	calls = nil
	var during []call
	if errs, err := syncAll(temps, func() { during = append([]call(nil), calls...) }); err != nil || errors.Join(errs...) != nil {
		t.Fatal(errs, err)
	}
	if len(during) != 1 || during[0] != (call{2, 0}) {
		t.Errorf("before during: calls %v, want one submitting 2 and waiting for none", during)
	}
	// Interrupted waits are asked again; nothing else makes more calls.
	if len(calls) > 10 {
		t.Errorf("%d calls of io_uring_enter for one batch: %v", len(calls), calls)
	}
	if got := SyncBatches() - before; got != 2 {
		t.Errorf("SyncBatches counted %d batches, want 2", got)
	}
	if got := SyncsSubmitted() - beforeSyncs; got != 2+2 {
		t.Errorf("SyncsSubmitted counted %d fsyncs, want 4", got)
	}
}

// TestRingEnterReportsErrors: io_uring_enter's failure is returned.
func TestRingEnterReportsErrors(t *testing.T) {
	r := &ring{fd: -1}
	if _, err := r.enter(1, 0); err != unix.EBADF {
		t.Fatalf("enter on no ring: %v, want EBADF", err)
	}
	if _, err := r.enter(0, 1); err != unix.EBADF {
		t.Fatalf("waiting on no ring: %v, want EBADF", err)
	}
}

// TestIdleRingsAreBounded: at most maxIdleRings rings are kept; those
// given back beyond that are closed.
func TestIdleRingsAreBounded(t *testing.T) {
	withRings(t)
	needRing(t)
	var held []*ring
	for range maxIdleRings + 2 {
		r, err := getRing()
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	for _, r := range held {
		putRing(r)
	}
	rings.mu.Lock()
	idle := len(rings.idle)
	rings.mu.Unlock()
	if idle != maxIdleRings {
		t.Fatalf("%d idle rings, want %d", idle, maxIdleRings)
	}
	for _, r := range held[maxIdleRings:] {
		if _, err := unix.FcntlInt(uintptr(r.fd), unix.F_GETFD, 0); err != unix.EBADF {
			t.Errorf("a ring beyond the bound is still open (%v)", err)
		}
	}
}

// ringMappings counts this process's mappings of io_uring instances.
func ringMappings(t *testing.T) int {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(maps), "io_uring")
}

// TestRingSetupFailures: a ring that cannot be set up or whose queues
// cannot be mapped is refused with the error, for this batch only; one
// that lacks what this package needs is refused for good; none leaves a
// descriptor or a mapping behind.
func TestRingSetupFailures(t *testing.T) {
	withRings(t)
	needRing(t)
	if n := ringMappings(t); n < 2 {
		t.Fatalf("%d io_uring mappings in /proc/self/maps with a ring kept, want its two", n)
	}
	rings.mu.Lock()
	for _, r := range rings.idle {
		r.close()
	}
	rings.idle = nil
	rings.mu.Unlock()
	temps := written(t, 2)
	fds, maps := openFDs(t), ringMappings(t)
	real := ringMmap
	for _, failAt := range []int{1, 2} {
		calls := 0
		ringMmap = func(fd int, off int64, n, prot, flags int) ([]byte, error) {
			calls++
			if calls == failAt {
				return nil, unix.ENOMEM
			}
			return real(fd, off, n, prot, flags)
		}
		if _, err := NewSyncBatch(temps); !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, unix.ENOMEM) {
			t.Fatalf("mapping %d failing: %v, want ENOMEM, unsupported", failAt, err)
		}
		if n, m := openFDs(t), ringMappings(t); n != fds || m != maps {
			t.Errorf("mapping %d failing: %d descriptors (%d before), %d io_uring mappings (%d before)", failAt, n, fds, m, maps)
		}
		if rings.off.Load() {
			t.Fatalf("mapping %d failing turned io_uring off for good", failAt)
		}
	}
	ringMmap = real

	// io_uring_setup itself failing (out of descriptors): this batch only
	// (the count of failures in a row started again: the two above were
	// failures too).
	rings.mu.Lock()
	rings.failed = 0
	rings.mu.Unlock()
	ringSetupCall = func(uint32, *ringParams) (int, error) { return -1, unix.EMFILE }
	if _, err := NewSyncBatch(temps); !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, unix.EMFILE) || rings.off.Load() {
		t.Fatalf("io_uring_setup failing with EMFILE: %v (io_uring off for good: %v)", err, rings.off.Load())
	}
	// A kernel whose rings lack what this package needs (one mapping for
	// both queues, Linux 5.4; the entries asked for): refused, the ring
	// closed, io_uring off for the process.
	for name, change := range map[string]func(*ringParams){
		"no single mapping":      func(p *ringParams) { p.features &^= ioringFeatSingleMmap },
		"fewer submission slots": func(p *ringParams) { p.sqEntries = ringEntries / 2 },
		"fewer completion slots": func(p *ringParams) { p.cqEntries = ringEntries },
	} {
		rings.off.Store(false)
		ringSetupCall = func(entries uint32, p *ringParams) (int, error) {
			fd, err := setupCall(entries, p)
			change(p)
			return fd, err
		}
		if _, err := NewSyncBatch(temps); !errors.Is(err, errors.ErrUnsupported) || !rings.off.Load() {
			t.Errorf("%s: %v (io_uring off for good: %v), want unsupported, off", name, err, rings.off.Load())
		}
		if n := openFDs(t); n != fds {
			t.Errorf("%s: %d descriptors, %d before: the ring was not closed", name, n, fds)
		}
	}
	rings.off.Store(false)
	ringSetupCall = setupCall
	if errs, err := syncAll(temps, nil); err != nil || errors.Join(errs...) != nil {
		t.Fatalf("after the failures: %v, %v", errs, err)
	}
}

// TestSetupCallReportsErrors: io_uring_setup's refusal is returned (a ring
// of no entries is invalid).
func TestSetupCallReportsErrors(t *testing.T) {
	var p ringParams
	if fd, err := setupCall(0, &p); err == nil || fd != -1 {
		_ = unix.Close(fd)
		t.Fatalf("a ring of no entries: fd %d, %v; want an error", fd, err)
	}
}

// TestSeccompFiltered: a status with a seccomp filter (mode 2), in strict
// mode (1), or saying nothing of seccomp counts as filtered; only mode 0
// does not.
func TestSeccompFiltered(t *testing.T) {
	for status, want := range map[string]bool{
		"Name:\tclaimctl\nSeccomp:\t0\nSeccomp_filters:\t0\n": false,
		"Name:\tclaimctl\nSeccomp:\t2\nSeccomp_filters:\t1\n": true,
		"Seccomp:\t1\n":         true,
		"Name:\tclaimctl\n":     true,
		"":                      true,
		"Seccomp_filters:\t0\n": true,
	} {
		if got := seccompFiltered([]byte(status)); got != want {
			t.Errorf("%q: filtered %v, want %v", status, got, want)
		}
	}
}

// TestNoRingUnderASeccompFilter: under a seccomp filter, or where the
// process's status cannot be read, no ring is ever set up (a filter may
// kill the caller of io_uring_setup): io_uring is off for the process.
func TestNoRingUnderASeccompFilter(t *testing.T) {
	withRings(t)
	temps := written(t, 2)
	for name, status := range map[string]func() ([]byte, error){
		"filtered":   func() ([]byte, error) { return []byte("Seccomp:\t2\n"), nil },
		"unreadable": func() ([]byte, error) { return nil, fs.ErrPermission },
	} {
		rings.mu.Lock()
		rings.vetted = false
		rings.mu.Unlock()
		rings.off.Store(false)
		procStatus = status
		setups := 0
		ringSetup = func() (*ring, error) { setups++; return newRing() }
		if _, err := NewSyncBatch(temps); !errors.Is(err, errors.ErrUnsupported) || setups != 0 || !rings.off.Load() {
			t.Errorf("%s: %v after %d ring setups (off for good: %v)", name, err, setups, rings.off.Load())
		}
		if _, err := NewSyncBatch(temps); !errors.Is(err, errors.ErrUnsupported) || setups != 0 {
			t.Errorf("%s, again: %v after %d ring setups", name, err, setups)
		}
	}
	// Unfiltered, it is looked at once.
	rings.mu.Lock()
	rings.vetted = false
	rings.mu.Unlock()
	rings.off.Store(false)
	reads := 0
	procStatus = func() ([]byte, error) { reads++; return []byte("Seccomp:\t0\n"), nil }
	needKernelRing(t)
	for range 3 {
		sb, err := NewSyncBatch(temps)
		if err != nil {
			t.Fatal(err)
		}
		sb.Sync(temps, nil)
	}
	if reads != 1 {
		t.Errorf("the process's status was read %d times, want once", reads)
	}
}
