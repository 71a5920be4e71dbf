package safefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"
	"syscall"
)

// ErrWrongType is returned, wrapped in an *fs.PathError naming the path,
// when a path is not the type of file asked for: a FIFO, a socket, a
// device or a directory where a regular file belongs, or anything but a
// directory where a directory belongs.
var ErrWrongType = errors.New("not the expected type of file")

// TypeError says what a path is when it is not what it should be.
type TypeError struct {
	Want string      // "a regular file", "a directory"
	Mode fs.FileMode // what it is
}

func (e *TypeError) Error() string {
	return fmt.Sprintf("it is %s, not %s", Describe(e.Mode), e.Want)
}

func (e *TypeError) Unwrap() error { return ErrWrongType }

// Describe names the type of a file mode for a message: "a FIFO", "a
// socket", "a symlink", "a character device", "a block device", "a
// directory" or "a regular file".
func Describe(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO (named pipe)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a directory"
	case m.IsRegular():
		return "a regular file"
	}
	return "a file of unknown type"
}

// Options say how to open a path.
type Options struct {
	// Follow lets a final symlink be followed (a certificate installed as
	// a link); by default a symlink is refused (ELOOP), as the claim root
	// never follows one.
	Follow bool
	// NoAtime reads without updating the file's access time (O_NOATIME)
	// where the kernel grants it: to the file's owner, or with
	// CAP_FOWNER. A claim root's revisions are written once and read by
	// every walk, and on a relatime mount the first read after a link (or
	// after a day) is otherwise a journaled inode update: a prune
	// archiving tens of thousands of revisions wrote as many inodes, and
	// a boot's walk one per key. Where the kernel refuses (EPERM: a root
	// of another user's files), the open is made without it, and so is
	// every later one in the process (see openRead).
	NoAtime bool
}

func flags(base int, opts *Options) int {
	f := base | syscall.O_NONBLOCK | syscall.O_CLOEXEC
	if opts == nil || !opts.Follow {
		f |= syscall.O_NOFOLLOW
	}
	return f
}

// ReadFile is like os.ReadFile, but opens name without blocking, reads
// only a regular file (anything else is an *fs.PathError wrapping a
// *TypeError), and reads at most limit+1 bytes: a caller that gets more
// than limit knows the file is too large, and memory stays bounded whatever
// the file does while it is read.
func ReadFile(name string, limit int64, opts *Options) ([]byte, error) {
	return ReadChecked(name, limit, opts, func(mode fs.FileMode, _ *syscall.Stat_t) error {
		if !mode.IsRegular() {
			return &fs.PathError{Op: "read", Path: name, Err: &TypeError{Want: "a regular file", Mode: mode}}
		}
		return nil
	})
}

// ReadChecked opens name as ReadFile does, asks check about the file that
// was opened (its type, and the fstat of the open descriptor: size, owner,
// mode; a non-nil answer is returned as it is), and reads at most limit+1
// bytes.
//
// It works on a bare file descriptor (open, fstat, read, close) rather
// than an *os.File: os.OpenFile costs a second fstat and an attempt to
// register the descriptor with the runtime's poller (epoll_ctl, refused
// for a regular file, and for a /proc file a registration and a removal)
// on every open, and a walk of a root opens a revision or two per key. A
// read of a regular file never waits for the poller anyway.
func ReadChecked(name string, limit int64, opts *Options, check func(mode fs.FileMode, st *syscall.Stat_t) error) ([]byte, error) {
	fd, err := openRead(name, flags(syscall.O_RDONLY, opts), opts)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := ignoringEINTR(func() error { return syscall.Fstat(fd, &st) }); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	if err := check(FileMode(uint32(st.Mode)), &st); err != nil {
		return nil, err
	}
	return readFD(fd, name, st.Size, limit)
}

// OpenRead opens name for reading as ReadChecked does (never blocking,
// never following a final symlink unless opts.Follow, without touching
// its access time where opts.NoAtime and the kernel allow), with extra
// added to the flags (O_DIRECTORY for a directory to list), and returns
// the bare descriptor, which the caller closes. Its error is an
// *fs.PathError naming name.
func OpenRead(name string, extra int, opts *Options) (int, error) {
	return openRead(name, flags(syscall.O_RDONLY|extra, opts), opts)
}

// noAtimeRefused is set once the kernel refused O_NOATIME in this process
// (EPERM: the file is not this user's, and it lacks CAP_FOWNER). From then
// on no open asks for it: a root whose files belong to another user costs
// one refused open per process, not one per read. Whether a read updates
// an access time never decides anything.
var noAtimeRefused atomic.Bool

// openRead is openFD of name with flags, adding O_NOATIME where opts ask
// for it and it has not been refused: on EPERM the open is made again
// without it (an EPERM that was not about O_NOATIME comes back from that
// open too).
func openRead(name string, flags int, opts *Options) (int, error) {
	if opts == nil || !opts.NoAtime || oNoAtime == 0 || noAtimeRefused.Load() {
		return openFile(name, flags)
	}
	fd, err := openFile(name, flags|oNoAtime)
	if !errors.Is(err, syscall.EPERM) {
		return fd, err
	}
	noAtimeRefused.Store(true)
	return openFile(name, flags)
}

// openFile is openRead's open: openFD, or a test's, which refuses
// O_NOATIME as the kernel does to another user's file, in the test's own
// process.
var openFile = openFD

// openFD is open(2) of name, retried on EINTR, its error as os.OpenFile
// words it.
func openFD(name string, flags int) (int, error) {
	for {
		fd, err := syscall.Open(name, flags, 0)
		if err == nil {
			return fd, nil
		}
		if err != syscall.EINTR {
			return -1, &fs.PathError{Op: "open", Path: name, Err: err}
		}
	}
}

func ignoringEINTR(f func() error) error {
	for {
		if err := f(); err != syscall.EINTR {
			return err
		}
	}
}

// readFD reads fd to its end, at most limit+1 bytes, into a buffer sized
// from the size fstat gave (a /proc file says 0, so it grows as
// io.ReadAll's does).
func readFD(fd int, name string, size, limit int64) ([]byte, error) {
	want := min(size, limit) + 1
	if want < 512 {
		want = 512
	}
	buf := make([]byte, 0, min(want, limit+1))
	for int64(len(buf)) <= limit {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		room := buf[len(buf):min(cap(buf), int(limit+1))]
		n, err := syscall.Read(fd, room)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: name, Err: err}
		}
		if n <= 0 {
			break
		}
		buf = buf[:len(buf)+n]
		if size > 0 && int64(len(buf)) == size && n < len(room) {
			// Exactly the size fstat gave, and less than was asked for:
			// a regular file's end (a read of one returns less only
			// there). A file that grew since returns more and is read on;
			// a /proc file's size is 0 and never ends a read here. The
			// read that would return 0 is saved: a prune reads every
			// revision it archives.
			break
		}
	}
	return buf, nil
}

// FileMode is the fs.FileMode of a stat(2) mode, as os.Lstat gives it:
// the type, the permission bits, setuid, setgid and sticky.
func FileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & syscall.S_IFMT {
	case syscall.S_IFBLK:
		mode |= fs.ModeDevice
	case syscall.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFDIR:
		mode |= fs.ModeDir
	case syscall.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case syscall.S_IFLNK:
		mode |= fs.ModeSymlink
	case syscall.S_IFSOCK:
		mode |= fs.ModeSocket
	case syscall.S_IFREG:
	default:
		mode |= fs.ModeIrregular
	}
	if m&syscall.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// OpenDir opens a directory for reading its names or fsyncing it, without
// blocking and without following a final symlink: anything that is not a
// directory is an *fs.PathError wrapping a *TypeError (or ELOOP for a
// symlink), found without ever opening it for reading.
func OpenDir(name string) (*os.File, error) {
	fi, err := os.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, &fs.PathError{Op: "open", Path: name, Err: &TypeError{Want: "a directory", Mode: fi.Mode()}}
	}
	// O_DIRECTORY makes the open fail rather than open whatever was put
	// at name since the Lstat.
	return os.OpenFile(name, flags(os.O_RDONLY|syscall.O_DIRECTORY, nil), 0)
}

// SyncDir fsyncs the directory name, opened as OpenDir opens it (never a
// symlink, never anything but a directory, without blocking), through a
// bare descriptor: open, fsync, close. A classification fsyncs a directory
// per revision and proof it publishes and a step two, and an *os.File
// would add a poller registration attempt to each. O_NOFOLLOW|O_DIRECTORY
// refuse a symlink and anything else in the open itself, so OpenDir's
// Lstat is made only when the open failed, to word the refusal as
// OpenDir's (a *TypeError naming what is there).
func SyncDir(name string) error {
	fd, err := OpenDirFD(name)
	if err != nil {
		return err
	}
	err = ignoringEINTR(func() error { return syscall.Fsync(fd) })
	if cerr := syscall.Close(fd); err == nil && cerr != nil {
		return &fs.PathError{Op: "close", Path: name, Err: cerr}
	}
	if err != nil {
		return &fs.PathError{Op: "sync", Path: name, Err: err}
	}
	return nil
}

// OpenDirFD opens the directory name as SyncDir does (never a symlink,
// never anything but a directory, without blocking) and returns the bare
// descriptor, for a caller that fsyncs it in its own way (vfs submits
// several directories' fsyncs at once). The caller closes it. A refusal is
// SyncDir's: an *fs.PathError, wrapping a *TypeError naming what is there
// where the name holds something else.
func OpenDirFD(name string) (int, error) {
	fd, err := openFD(name, flags(syscall.O_RDONLY|syscall.O_DIRECTORY, nil))
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP) {
			if fi, lerr := os.Lstat(name); lerr == nil && !fi.IsDir() {
				return -1, &fs.PathError{Op: "open", Path: name, Err: &TypeError{Want: "a directory", Mode: fi.Mode()}}
			}
		}
		return -1, err
	}
	return fd, nil
}

// SyncFile fsyncs the regular file name, opened read-only as ReadChecked
// opens it (never following a final symlink, never blocking): open, fstat,
// fsync, close. Anything but a regular file is refused with a *TypeError
// and not fsynced: a FIFO or a device planted under a revision's name is
// never waited on. An fsync through a read-only descriptor makes the
// whole inode durable, its contents and its metadata (the link count
// among them), as one through the writer's descriptor would.
func SyncFile(name string) error {
	fd, err := openRead(name, flags(syscall.O_RDONLY, nil), nil)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return &fs.PathError{Op: "open", Path: name, Err: &TypeError{Want: "a regular file", Mode: fs.ModeSymlink}}
		}
		return err
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := ignoringEINTR(func() error { return syscall.Fstat(fd, &st) }); err != nil {
		return &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	if mode := FileMode(uint32(st.Mode)); !mode.IsRegular() {
		return &fs.PathError{Op: "open", Path: name, Err: &TypeError{Want: "a regular file", Mode: mode}}
	}
	if err := ignoringEINTR(func() error { return syscall.Fsync(fd) }); err != nil {
		return &fs.PathError{Op: "sync", Path: name, Err: err}
	}
	return nil
}
