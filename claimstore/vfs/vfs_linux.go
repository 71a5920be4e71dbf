package vfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claimstore/claimstore/internal/safefile"
)

var (
	_ DirProber  = OSFS{}
	_ DirScanner = OSFS{}
	_ LinkSyncer = (*unnamedTemp)(nil)
)

// CreateUnnamed is CreateTemp's first choice: an O_TMPFILE in dir, a file with no name at all until
// Link gives it one, so a writer that crashes leaves nothing behind to reap.
func CreateUnnamed(dir string, perm fs.FileMode) (TempFile, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, uint32(perm.Perm()))
	switch {
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EISDIR), errors.Is(err, unix.EINVAL):
		return nil, errors.ErrUnsupported
	case err != nil:
		return nil, &fs.PathError{Op: "create a file in", Path: dir, Err: explainCreate(dir, err)}
	}
	return &unnamedTemp{fd: fd, dir: dir}, nil
}

// explainCorrupt adds what an operator can do to a read's error in which
// the filesystem says its own structures are corrupt: EUCLEAN ("structure
// needs cleaning") and EBADMSG ("bad message", a checksum that fails), as
// a crash leaves an ext4 without a journal where something was not made
// durable by its own fsync (see LinkSyncer). Only fsck repairs it; the
// store holds what it cannot read. Other errors pass unchanged.
func explainCorrupt(err error) error {
	if err == nil || !(errors.Is(err, unix.EUCLEAN) || errors.Is(err, unix.EBADMSG)) {
		return err
	}
	const what = "the filesystem reports its own structures corrupt here, as a crash can leave an ext4 without a journal; nothing was changed; unmount the filesystem and repair it with fsck (e2fsck -f) before relying on what it holds"
	if pe, ok := err.(*fs.PathError); ok {
		return &fs.PathError{Op: pe.Op, Path: pe.Path, Err: fmt.Errorf("%w: %s", pe.Err, what)}
	}
	return fmt.Errorf("%w: %s", err, what)
}

// explainCreate says what an operator can do about a directory no file can
// be created in, where the errno alone does not: EPERM on a directory this
// user owns is an immutable or append-only directory (chattr +i, +a), or a
// security module's refusal.
func explainCreate(dir string, err error) error {
	switch {
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w: the directory %s does not let anything be created in it: it is immutable or append-only (chattr +i or +a: see lsattr -d %s), or a security module forbids it; nothing was written; an operator who knows why can lift it (chattr -i %s)", err, dir, dir, dir)
	case errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: this user (uid %d) may not write into the directory %s; nothing was written; run claimctl as the root's owner", err, os.Geteuid(), dir)
	case errors.Is(err, unix.EROFS):
		return fmt.Errorf("%w: the filesystem is mounted read-only; nothing was written; remount it read-write, or use a root elsewhere", err)
	}
	return err
}

// unnamedTemp is an O_TMPFILE held by its bare descriptor: an os.File
// would ask the kernel whether it is non-blocking (fcntl) at every
// publish, to learn what an O_TMPFILE never is.
type unnamedTemp struct {
	fd  int
	dir string
}

func (t *unnamedTemp) name() string { return t.dir + "/(unnamed)" }

func (t *unnamedTemp) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Write(t.fd, p[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, &fs.PathError{Op: "write", Path: t.name(), Err: err}
		}
		if m == 0 {
			return n, &fs.PathError{Op: "write", Path: t.name(), Err: io.ErrShortWrite}
		}
		n += m
	}
	return n, nil
}

func (t *unnamedTemp) Sync() error {
	for {
		err := unix.Fsync(t.fd)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "sync", Path: t.name(), Err: err}
		}
		return nil
	}
}

// SyncLink implements LinkSyncer: the fsync that writes the link count
// Link gave the file.
func (t *unnamedTemp) SyncLink() error { return t.Sync() }

func (t *unnamedTemp) Link(newname string) error {
	// linkat through /proc/self/fd needs no privilege, unlike AT_EMPTY_PATH.
	src := "/proc/self/fd/" + strconv.Itoa(t.fd)
	err := unix.Linkat(unix.AT_FDCWD, src, unix.AT_FDCWD, newname, unix.AT_SYMLINK_FOLLOW)
	if errors.Is(err, unix.ENOENT) {
		// No /proc: try the privileged form before giving up.
		err = unix.Linkat(t.fd, "", unix.AT_FDCWD, newname, unix.AT_EMPTY_PATH)
	}
	if err != nil {
		return &os.LinkError{Op: "link", Old: t.name(), New: newname, Err: err}
	}
	return nil
}

func (t *unnamedTemp) Is(name string) (bool, error) {
	var mine, other syscall.Stat_t
	if err := syscall.Fstat(t.fd, &mine); err != nil {
		return false, &fs.PathError{Op: "stat", Path: t.name(), Err: err}
	}
	if err := syscall.Lstat(name, &other); err != nil {
		return false, &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	return mine.Dev == other.Dev && mine.Ino == other.Ino, nil
}

// Stat is fstat of the temporary: once linked, the revision's identity.
func (t *unnamedTemp) Stat() (fs.FileInfo, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(t.fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: t.name(), Err: err}
	}
	return statInfo(t.name(), &st), nil
}

func (t *unnamedTemp) Close() error {
	if t.fd < 0 {
		return &fs.PathError{Op: "close", Path: t.name(), Err: os.ErrClosed}
	}
	err := unix.Close(t.fd)
	t.fd = -1
	if err != nil {
		return &fs.PathError{Op: "close", Path: t.name(), Err: err}
	}
	return nil
}

// syncFS is syncfs(2) on the filesystem holding name. Since Linux 5.8 it
// reports writeback errors of that filesystem, as fsync does for a file.
func syncFS(name string) error {
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return &fs.PathError{Op: "syncfs", Path: name, Err: err}
	}
	return nil
}

// ScanDir calls each with every name in dir (not . and ..), reading the
// directory with getdents into one buffer: no name is allocated, so a
// history of 10,000 revisions is counted in the time the kernel takes to
// hand its entries over. name is valid only during the call. The directory
// is opened as ReadFile opens a file (readOpts): listing it does not
// update its access time where the kernel allows.
func (OSFS) ScanDir(dir string, each func(name []byte)) error {
	fd, err := safefile.OpenRead(dir, unix.O_DIRECTORY, readOpts)
	if err != nil {
		return explainCorrupt(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.ReadDirent(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return explainCorrupt(&fs.PathError{Op: "getdents", Path: dir, Err: err})
		}
		if n <= 0 {
			return nil
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8,
		// name NUL-terminated.
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return &fs.PathError{Op: "getdents", Path: dir, Err: errors.New("malformed directory entry")}
			}
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if !(len(name) == 1 && name[0] == '.' || len(name) == 2 && name[0] == '.' && name[1] == '.') {
				each(name)
			}
			b = b[reclen:]
		}
	}
}

// readDirNames is ReadDir on Linux: ScanDir's getdents on a bare
// descriptor, each name copied. os.File's Readdirnames cost four fcntl
// calls and a poller registration attempt per directory listed, and a
// walk lists every key's directory.
func readDirNames(dir string) ([]string, error) {
	var names []string
	err := OSFS{}.ScanDir(dir, func(name []byte) { names = append(names, string(name)) })
	if err != nil {
		return nil, err
	}
	return names, nil
}

// ProbeDir opens dir once for many existence checks of names in it:
// fstatat relative to the open directory resolves one component instead of
// the whole path, which is most of a probe's cost. Head's probes on a cold
// long history make dozens of them.
func (OSFS) ProbeDir(dir string) (exists func(base string) (bool, error), size int64, closeDir func() error, err error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, nil, explainCorrupt(&fs.PathError{Op: "open", Path: dir, Err: err})
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil {
		size = st.Size
	}
	exists = func(base string) (bool, error) {
		var st unix.Stat_t
		for {
			err := unix.Fstatat(fd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
			switch {
			case err == nil:
				return true, nil
			case errors.Is(err, unix.ENOENT):
				return false, nil
			case errors.Is(err, unix.EINTR):
				continue
			}
			return false, explainCorrupt(&fs.PathError{Op: "fstatat", Path: dir + "/" + base, Err: err})
		}
	}
	return exists, size, func() error { return unix.Close(fd) }, nil
}

// Identity is what tells one file from another put in its place, from
// what Lstat said; zero when the platform says nothing (see FileID).
func Identity(fi fs.FileInfo) FileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return FileID{}
	}
	return FileID{Dev: uint64(st.Dev), Ino: st.Ino, Size: uint64(fi.Size()), MTime: fi.ModTime().UnixNano(), CTime: st.Ctim.Nano()}
}

// Lock implements Locker with flock(2) on the directory, opened without
// following a final symlink. The lock belongs to the open file: a second
// Lock in the same process waits for the first as another process would.
func (OSFS) Lock(dir string, exclusive bool) (func() error, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open for lock", Path: dir, Err: err}
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	for {
		err = unix.Flock(fd, how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		_ = unix.Close(fd)
		return nil, &fs.PathError{Op: "flock", Path: dir, Err: err}
	}
	return func() error { return unix.Close(fd) }, nil
}

// statInfo is the fs.FileInfo of a stat(2) result, as os.Lstat gives it:
// its Sys is the *syscall.Stat_t.
func statInfo(name string, st *syscall.Stat_t) fs.FileInfo {
	return &fileInfo{name: filepath.Base(name), st: *st}
}

type fileInfo struct {
	name string
	st   syscall.Stat_t
}

func (i *fileInfo) Name() string       { return i.name }
func (i *fileInfo) Size() int64        { return i.st.Size }
func (i *fileInfo) Mode() fs.FileMode  { return safefile.FileMode(i.st.Mode) }
func (i *fileInfo) ModTime() time.Time { return time.Unix(i.st.Mtim.Unix()) }
func (i *fileInfo) IsDir() bool        { return i.Mode().IsDir() }
func (i *fileInfo) Sys() any           { return &i.st }
