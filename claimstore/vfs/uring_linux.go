package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/claimstore/claimstore/internal/safefile"
)

// The io_uring ABI this file uses (include/uapi/linux/io_uring.h): fsync
// requests only, on rings whose submission and completion queues share one
// mapping (IORING_FEAT_SINGLE_MMAP, Linux 5.4).
const (
	ioringOpFsync         = 3
	ioringEnterGetevents  = 1
	ioringFeatSingleMmap  = 1
	ioringOffSQEs         = 0x10000000
	ringEntries           = 32 // fsyncs in flight on one ring
	maxIdleRings          = 16 // more than classify's workers, each with a batch in flight
	ringCompletionsFactor = 2  // the kernel's default: a completion queue twice the submission queue
)

type ringSQE struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	opFlags     uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	spliceFdIn  int32
	addr3       uint64
	_           uint64
}

type ringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

type sqOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type ringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sq                                                                     sqOffsets
	cq                                                                     cqOffsets
}

// ring is one io_uring instance, used by one caller at a time (rings).
type ring struct {
	fd             int
	mem, sqeMem    []byte
	sqTail, sqMask *uint32
	sqArray        []uint32
	sqes           []ringSQE
	cqHead, cqTail *uint32
	cqMask         uint32
	cqes           []ringCQE
}

// rings keeps the process's idle rings: setting one up costs three system
// calls, more than the hand-offs it saves, so a ring is reused by every
// later batch. off is set for good once the kernel refuses io_uring
// itself (too old, kernel.io_uring_disabled, no permission), rings could
// not be set up maxSetupFailures times in a row, or the process runs
// under a seccomp filter (seccompFiltered).
var rings struct {
	mu   sync.Mutex
	idle []*ring
	off  atomic.Bool
	// vetted says the seccomp check was made (before the first ring).
	vetted bool
	// failed counts the ring setups that failed in a row for a reason
	// that may pass (ENOMEM, EMFILE): after maxSetupFailures, io_uring is
	// off, so that a kernel that charges rings to RLIMIT_MEMLOCK (before
	// 5.12) does not cost a failed setup on every batch for good.
	failed int
}

// maxSetupFailures is how many ring setups may fail in a row, for a
// reason that may pass, before io_uring is turned off for the process.
const maxSetupFailures = 3

// IOURingEnv names the environment variable that, set to "off", keeps
// this process from using io_uring at all (NewSyncBatch then refuses
// every batch, and callers fsync on goroutines): for an operator whose
// kernel misbehaves with it.
const IOURingEnv = "CLAIMSTORE_IO_URING"

func init() { ringsFromEnv(os.Getenv(IOURingEnv)) }

// ringsFromEnv applies IOURingEnv's value.
func ringsFromEnv(v string) {
	if v == "off" {
		rings.off.Store(true)
	}
}

// seccompFiltered reports whether a process status (/proc/self/status)
// says a seccomp filter is installed, or says nothing of it. Under a
// filter io_uring is not used at all: a filter may kill the process that
// calls io_uring_setup rather than refuse it (systemd's SystemCallFilter=
// without SystemCallErrorNumber=, whose @system-service set leaves
// io_uring out), and a process killed cannot fall back.
func seccompFiltered(status []byte) bool {
	for line := range bytes.Lines(status) {
		if v, ok := bytes.CutPrefix(line, []byte("Seccomp:")); ok {
			return string(bytes.TrimSpace(v)) != "0"
		}
	}
	return true
}

// procStatus reads this process's status, for seccompFiltered.
var procStatus = func() ([]byte, error) { return os.ReadFile("/proc/self/status") }

func getRing() (*ring, error) {
	rings.mu.Lock()
	if !rings.vetted {
		rings.vetted = true
		if status, err := procStatus(); err != nil || seccompFiltered(status) {
			rings.off.Store(true)
		}
	}
	if rings.off.Load() {
		rings.mu.Unlock()
		return nil, fmt.Errorf("%w: io_uring is off in this process (%s=off, a seccomp filter or an unreadable /proc/self/status, the kernel refused it, or %d ring setups failed in a row)", errors.ErrUnsupported, IOURingEnv, maxSetupFailures)
	}
	if n := len(rings.idle); n > 0 {
		r := rings.idle[n-1]
		rings.idle = rings.idle[:n-1]
		rings.mu.Unlock()
		return r, nil
	}
	rings.mu.Unlock()
	r, err := ringSetup()
	rings.mu.Lock()
	defer rings.mu.Unlock()
	if err != nil {
		rings.failed++
		if rings.failed >= maxSetupFailures || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EINVAL) || errors.Is(err, errors.ErrUnsupported) {
			rings.off.Store(true)
		}
		return nil, fmt.Errorf("%w: io_uring: %w", errors.ErrUnsupported, err)
	}
	rings.failed = 0
	return r, nil
}

func putRing(r *ring) {
	rings.mu.Lock()
	if len(rings.idle) < maxIdleRings {
		rings.idle = append(rings.idle, r)
		r = nil
	}
	rings.mu.Unlock()
	if r != nil {
		r.close()
	}
}

// ringSetup, ringSetupCall, ringEnter and ringMmap are newRing,
// io_uring_setup(2), (*ring).enter and unix.Mmap, replaced by tests that
// make the kernel refuse or answer as an older one would.
var (
	ringSetup     = newRing
	ringSetupCall = setupCall
	ringEnter     = (*ring).enter
	ringMmap      = unix.Mmap
)

// setupCall is io_uring_setup(2): a ring of entries, its layout in p.
func setupCall(entries uint32, p *ringParams) (int, error) {
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(p)), 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

func newRing() (*ring, error) {
	var p ringParams
	fd, err := ringSetupCall(ringEntries, &p)
	if err != nil {
		return nil, err
	}
	r := &ring{fd: fd}
	if p.features&ioringFeatSingleMmap == 0 || p.sqEntries < ringEntries || p.cqEntries < ringCompletionsFactor*ringEntries {
		r.close()
		return nil, errors.ErrUnsupported
	}
	size := max(p.sq.array+4*p.sqEntries, p.cq.cqes+p.cqEntries*uint32(unsafe.Sizeof(ringCQE{})))
	mem, err := ringMmap(r.fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		r.close()
		return nil, err
	}
	r.mem = mem
	sqeMem, err := ringMmap(r.fd, ioringOffSQEs, int(p.sqEntries)*int(unsafe.Sizeof(ringSQE{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		r.close()
		return nil, err
	}
	r.sqeMem = sqeMem
	at := func(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }
	r.sqTail, r.sqMask = at(p.sq.tail), at(p.sq.ringMask)
	r.sqArray = unsafe.Slice(at(p.sq.array), p.sqEntries)
	r.sqes = unsafe.Slice((*ringSQE)(unsafe.Pointer(&sqeMem[0])), p.sqEntries)
	r.cqHead, r.cqTail, r.cqMask = at(p.cq.head), at(p.cq.tail), *at(p.cq.ringMask)
	r.cqes = unsafe.Slice((*ringCQE)(unsafe.Pointer(&mem[p.cq.cqes])), p.cqEntries)
	return r, nil
}

func (r *ring) close() {
	if r.sqeMem != nil {
		_ = unix.Munmap(r.sqeMem)
	}
	if r.mem != nil {
		_ = unix.Munmap(r.mem)
	}
	_ = unix.Close(r.fd)
}

// enter is io_uring_enter(2), a blocking system call for the scheduler.
func (r *ring) enter(submit, wait uint32) (int, error) {
	flags := uintptr(0)
	if wait > 0 {
		flags = ioringEnterGetevents
	}
	n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(submit), uintptr(wait), flags, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// errNotSubmitted is ring.fsync's failure before the kernel took any of
// the fsyncs.
var errNotSubmitted = errors.New("nothing was submitted")

// fsync fsyncs fds (at most ringEntries) at once and sets res[i] to the
// result of fds[i]'s fsync (0 or a negative errno). during, if set, runs
// once the fsyncs are submitted and before they are waited for, unless the
// kernel refused the submission whole: then the error wraps
// errNotSubmitted. Any other error leaves the outcome of the fsyncs
// unknown. After an error the ring is not to be used again.
func (r *ring) fsync(fds []int32, res []int32, during func()) error {
	tail := atomic.LoadUint32(r.sqTail)
	mask := atomic.LoadUint32(r.sqMask)
	for i, fd := range fds {
		idx := (tail + uint32(i)) & mask
		r.sqes[idx] = ringSQE{opcode: ioringOpFsync, fd: fd, userData: uint64(i)}
		r.sqArray[idx] = idx
	}
	// The store publishes the entries: the kernel reads none beyond the tail.
	atomic.StoreUint32(r.sqTail, tail+uint32(len(fds)))
	wait := uint32(0)
	if during == nil {
		// Nothing to do between: submit and wait in one call.
		wait = uint32(len(fds))
	}
	submitted := 0
	var failed error
	for submitted < len(fds) {
		n, err := ringEnter(r, uint32(len(fds)-submitted), wait)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			failed = err
			break
		}
		submitted += n
	}
	if submitted == 0 && failed != nil {
		return fmt.Errorf("%w: %w", errNotSubmitted, failed)
	}
	batches.Add(1)
	submittedSyncs.Add(uint64(submitted))
	if during != nil {
		during()
	}
	// Those in flight are waited for, whatever happened to the rest.
	if err := r.reap(fds[:submitted], res); err != nil {
		return err
	}
	return failed
}

// reap waits for the completions of fds, in any order.
func (r *ring) reap(fds []int32, res []int32) error {
	for done := 0; ; {
		head, tail := atomic.LoadUint32(r.cqHead), atomic.LoadUint32(r.cqTail)
		for ; head != tail; head++ {
			c := r.cqes[head&r.cqMask]
			res[c.userData] = c.res
			done++
		}
		atomic.StoreUint32(r.cqHead, head)
		if done == len(fds) {
			return nil
		}
		if _, err := ringEnter(r, 0, uint32(len(fds)-done)); err != nil && err != unix.EINTR {
			return err
		}
	}
}

// batches counts the batches submitted to the kernel at once, and
// submittedSyncs the fsyncs in them.
var batches, submittedSyncs atomic.Uint64

// SyncBatches returns how many batches of fsyncs this process has
// submitted to the kernel at once (SyncBatch.Sync), for tests and for an
// operator asking whether io_uring is in use.
func SyncBatches() uint64 { return batches.Load() }

// SyncsSubmitted returns how many fsyncs those batches held: with
// SyncBatches, which fsyncs went to the kernel's workers and which ran on
// their caller's thread.
func SyncsSubmitted() uint64 { return submittedSyncs.Load() }

// ringFD is what a SyncBatch needs of a temporary: its descriptor. Only
// the temporaries this package makes have it, so that a test's wrapper,
// whose Sync must run, is never bypassed.
type ringFD interface {
	fdForSync() int
	name() string
}

func (t *unnamedTemp) fdForSync() int { return t.fd }

// SyncBatch is the fsyncs of a batch of temporaries submitted to the
// kernel at once from the calling goroutine: one io_uring submission for
// all of them, then one wait, where fsyncs on goroutines of their own
// would each keep a thread, and on a machine of few CPUs a P, blocked in
// the kernel while the next waits to be started.
type SyncBatch struct{ r *ring }

// NewSyncBatch reserves what submitting the fsyncs of temps at once
// needs. It returns an error wrapping errors.ErrUnsupported, having done
// nothing, where that cannot be done: a temp this package did not make (a
// test's wrapper, whose Sync must run: the caller then calls Sync of
// each), more temps than one submission holds, no io_uring (an old
// kernel, kernel.io_uring_disabled, a seccomp filter on the process,
// IOURingEnv).
func NewSyncBatch(temps []TempFile) (*SyncBatch, error) {
	if len(temps) > ringEntries {
		return nil, fmt.Errorf("%w: %d fsyncs, more than the %d of one submission", errors.ErrUnsupported, len(temps), ringEntries)
	}
	for _, t := range temps {
		if _, ok := t.(ringFD); !ok {
			return nil, fmt.Errorf("%w: %T is not a temporary of this package", errors.ErrUnsupported, t)
		}
	}
	r, err := getRing()
	if err != nil {
		return nil, err
	}
	return &SyncBatch{r: r}, nil
}

// Sync is Sync of each of temps (those the batch was made for, or some of
// them), with Sync's contract, all at once; it is called once, and ends
// the batch. during, if set, runs once, after the fsyncs are submitted and
// before they are waited for. It returns each temp's error, nil where its
// fsync succeeded; where the kernel could not say how the fsyncs went (a
// failed wait), each temp's error says so. Where the kernel refuses the
// submission whole, each temp's Sync runs on a goroutine of its own
// instead, beside during.
func (sb *SyncBatch) Sync(temps []TempFile, during func()) []error {
	r := sb.r
	sb.r = nil
	errs := make([]error, len(temps))
	fds := make([]int32, len(temps))
	for i, t := range temps {
		fds[i] = int32(t.(ringFD).fdForSync())
	}
	results, refused := r.fsyncAll(fds, during)
	if refused {
		var wg sync.WaitGroup
		for i, t := range temps {
			wg.Go(func() { errs[i] = t.Sync() })
		}
		if during != nil {
			during()
		}
		wg.Wait()
		return errs
	}
	for i, err := range results {
		if err != nil {
			errs[i] = &fs.PathError{Op: "sync", Path: temps[i].(ringFD).name(), Err: err}
		}
	}
	return errs
}

// fsyncAll fsyncs fds at once on r (fsync, with during) and returns each
// one's outcome: nil, the errno its fsync returned, or, where the wait
// failed, why it is unknown (naming io_uring). r is put back after a
// success and closed after any failure. The second result reports a
// submission the kernel refused whole: nothing was fsynced and during did
// not run (the first result is nil), and the caller fsyncs each itself.
func (r *ring) fsyncAll(fds []int32, during func()) ([]error, bool) {
	res, errs := make([]int32, len(fds)), make([]error, len(fds))
	err := r.fsync(fds, res, during)
	if err != nil {
		r.close()
		if errors.Is(err, errNotSubmitted) {
			return nil, true
		}
		for i := range errs {
			errs[i] = fmt.Errorf("io_uring: %w", err)
		}
		return errs, false
	}
	putRing(r)
	for i, v := range res {
		if v < 0 {
			errs[i] = unix.Errno(-v)
		}
	}
	return errs, false
}

// SyncDirs implements DirsSyncer: each directory is opened as SyncDir
// opens it, the fsyncs of those opened are submitted to the kernel at once
// (fsyncFDs), and each is closed. A directory that cannot be opened has
// SyncDir's refusal and is not waited for.
func (OSFS) SyncDirs(names []string) []error {
	type opened struct {
		at int // in names
		fd int32
	}
	errs, dirs := make([]error, len(names)), make([]opened, 0, len(names))
	for i, name := range names {
		fd, err := safefile.OpenDirFD(name)
		if err != nil {
			errs[i] = err
			continue
		}
		dirs = append(dirs, opened{i, int32(fd)})
	}
	fds := make([]int32, len(dirs))
	for j, d := range dirs {
		fds[j] = d.fd
	}
	for j, err := range fsyncFDs(fds) {
		d := dirs[j]
		switch cerr := unix.Close(int(d.fd)); {
		case err != nil:
			errs[d.at] = &fs.PathError{Op: "sync", Path: names[d.at], Err: err}
		case cerr != nil:
			errs[d.at] = &fs.PathError{Op: "close", Path: names[d.at], Err: cerr}
		}
	}
	return errs
}

// fsyncFDs fsyncs fds at once and returns each one's error: the errno its
// fsync returned, or why its outcome is unknown. Two or more go to the
// kernel in one io_uring submission, waited for with one call; where no
// ring can be had (io_uring off, more than a ring holds) or the kernel
// refuses the submission whole, each is fsynced on a goroutine of its own,
// the last on the caller's. A lone fsync is made on the caller's: a
// submission would only add a kernel worker's wake-up to it.
func fsyncFDs(fds []int32) []error {
	errs := make([]error, len(fds))
	if len(fds) == 0 {
		return errs
	}
	if len(fds) > 1 && len(fds) <= ringEntries {
		if r, err := getRing(); err == nil {
			if results, refused := r.fsyncAll(fds, nil); !refused {
				return results
			}
		}
	}
	last := len(fds) - 1
	var wg sync.WaitGroup
	for i, fd := range fds[:last] {
		wg.Go(func() { errs[i] = fsyncFD(fd) })
	}
	errs[last] = fsyncFD(fds[last])
	wg.Wait()
	return errs
}

// fsyncFD is fsync(2) of fd, retried where a signal interrupted it.
func fsyncFD(fd int32) error {
	for {
		if err := unix.Fsync(int(fd)); err != unix.EINTR {
			return err
		}
	}
}
