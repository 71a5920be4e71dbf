package vfs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/claimstore/claimstore/hostid"
	"github.com/claimstore/claimstore/internal/safefile"
)

// FS is the store's whole view of the filesystem: the seam that tests
// replace with a crash-simulating or fault-injecting filesystem. Each method
// states what is durable when it returns. Nothing is durable that a method
// does not say is.
type FS interface {
	// Lstat is like os.Lstat: it does not follow a final symlink.
	Lstat(name string) (fs.FileInfo, error)

	// ReadFile is like os.ReadFile, but refuses to follow a final symlink
	// and reads only regular files (either refusal an error wrapping
	// ErrNotRegular), never blocks (a FIFO is refused, not opened for
	// reading), and need not read past MaxFileSize+1 bytes: callers treat a
	// longer result as too large, and an implementation may fail with a
	// *TooLargeError naming the size instead of reading it at all.
	//
	// With the bytes it returns, when it can, the fs.FileInfo of the very
	// file it read: the fstat of the descriptor read through (Sys a
	// *syscall.Stat_t where the platform has one). A caller that judges a
	// file by its owner and mode then judges the file it read, not whatever
	// the name holds a moment later, and pays no Lstat of the name (a prune
	// reads tens of thousands of revisions). An FS that cannot say returns
	// a nil info, and its callers Lstat the name after reading.
	ReadFile(name string) ([]byte, fs.FileInfo, error)

	// ReadDir returns the names in directory name, in no particular order.
	// Like ReadFile, it refuses to follow a final symlink.
	ReadDir(name string) ([]string, error)

	// Mkdir is like os.Mkdir. The new entry is not durable until SyncDir
	// of the parent returns.
	Mkdir(name string, perm fs.FileMode) error

	// Remove is like os.Remove. The removal is not durable until SyncDir
	// of the parent returns.
	Remove(name string) error

	// Rename is like os.Rename: it moves oldpath to newpath, replacing
	// newpath if it is an empty directory (or, for a file, a file). Within
	// one directory the rename is atomic, also across a crash: either name
	// is there, never both nor neither. The change is not durable until
	// SyncDir of the directory (of both directories when they differ, and
	// then a crash may keep either half of it).
	Rename(oldpath, newpath string) error

	// SyncDir makes every entry of directory name durable: created,
	// linked and removed names alike.
	SyncDir(name string) error

	// SyncFS makes everything on the filesystem holding name durable:
	// every directory's entries and every file's contents (syncfs(2)). Its
	// cost is that of all dirty data on the filesystem, whoever wrote it.
	// It fails with an error wrapping errors.ErrUnsupported where the
	// platform has no such call; callers then sync directory by directory.
	SyncFS(name string) error

	// CreateTemp creates a new file in dir, for writing, with mode perm.
	// The file may have no name at all (Linux O_TMPFILE) or a temporary
	// name beginning with TempPrefix. Nothing of it is durable.
	CreateTemp(dir string, perm fs.FileMode) (TempFile, error)
}

// TempFile is a file being prepared for publication.
type TempFile interface {
	// Write appends to the file. The data is not durable until Sync.
	Write(p []byte) (int, error)

	// Sync makes the file's contents durable (fsync). A failed Sync may
	// have lost data that later reads still show: the caller must not
	// publish the file.
	Sync() error

	// Link gives the file the name newname, exclusively: if newname exists
	// it fails with an error wrapping fs.ErrExist and changes nothing. The
	// new name is not durable until SyncDir of its directory returns, and,
	// for a temporary that had no name (LinkSyncer), its SyncLink.
	Link(newname string) error

	// Is reports whether name refers to this very file (the same inode). A
	// writer whose Link reply was lost (a retried link, NFS) finds its own
	// file under the name and must not conclude that another writer won.
	Is(name string) (bool, error)

	// Close releases the file and removes its temporary name, if it has
	// one. The removal is not durable until SyncDir of the directory.
	Close() error
}

// ErrNotRegular is returned, wrapped with the path and what it is, by
// ReadFile for a symlink (never followed) or anything but a regular file.
var ErrNotRegular = errors.New("not a regular file")

// MaxFileSize bounds what ReadFile reads: one byte more than a revision or
// proof may hold (the store's MaxRecordSize, which is the same), so that a
// longer file is known to be too large without reading it all.
const MaxFileSize = 1 << 20

// TooLargeError says a file is larger than MaxFileSize: it was not read.
type TooLargeError struct{ Size int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the file holds %d bytes, more than the %d allowed", e.Size, MaxFileSize)
}

// DirsSyncer is an optional capability of an FS: SyncDir of several
// directories at once, cheaper than SyncDir of each on a goroutine of its
// own. OS has it: on Linux, one io_uring submission and one wait, where a
// goroutine per directory keeps a thread, and on a machine of few CPUs a
// P, blocked in the kernel while the next waits to be started (an
// acquire's four directories went to the disk two at a time). Without it,
// the directory backend calls SyncDir of each on goroutines, so a test's
// wrapper, which need not have it, sees every SyncDir. A wrapper that
// embeds OSFS and replaces SyncDir must replace SyncDirs too (with
// SyncDirsEach), or the OS's, promoted, would fsync without its SyncDir.
type DirsSyncer interface {
	// SyncDirs is SyncDir of each of names, with SyncDir's contract and
	// refusals, all at once. It returns each one's error, nil where its
	// fsync succeeded; where the outcome of an fsync cannot be known (the
	// wait for it failed), its error says so.
	SyncDirs(names []string) []error
}

// SyncDirsEach is SyncDirs made of fsys's own SyncDir: each on a goroutine
// of its own. It is the SyncDirs of a wrapper whose SyncDir must see every
// directory (see DirsSyncer).
func SyncDirsEach(fsys FS, names []string) []error {
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { errs[i] = fsys.SyncDir(name) })
	}
	wg.Wait()
	return errs
}

// DirProber is an optional capability of an FS: checking whether many names
// of one directory exist more cheaply than one Lstat each. OS has it
// (fstatat on one open directory). Without it, the directory backend calls
// Lstat for each name.
type DirProber interface {
	// ProbeDir opens dir for existence checks of names in it; size is the
	// directory's st_size, or 0. closeDir releases it.
	ProbeDir(dir string) (exists func(base string) (bool, error), size int64, closeDir func() error, err error)
}

// DirScanner is an optional capability of an FS: streaming a directory's
// names without allocating them. OS has it (getdents into one buffer).
// Without it, the directory backend uses ReadDir.
type DirScanner interface {
	// ScanDir calls each with every name in dir but . and ..; name is valid
	// only during the call.
	ScanDir(dir string, each func(name []byte)) error
}

// FileStater is an optional capability of a TempFile: the open file's
// identity, with no lookup of its name. Without it, the directory backend
// Lstats the name it linked.
type FileStater interface {
	Stat() (fs.FileInfo, error)
}

// LinkSyncer is an optional capability of a TempFile that has no name
// until Link gives it its first (an O_TMPFILE). The link count is the
// file's own metadata, which SyncDir of the directory does not make
// durable: on an ext4 without a journal nothing but the file's own fsync
// (or writeback, any time later) writes it, and a crash after SyncDir
// alone leaves the name on an inode that the disk counts no link to,
// which reads as corrupt ("structure needs cleaning") until fsck repairs
// it. SyncLink is that fsync, called after Link: the name is durable, and
// the file readable through it, once SyncLink and SyncDir of the
// directory have both returned. A failed SyncLink is a failed fsync, as
// for Sync. A temporary without the capability had a name of its own
// when Sync made its contents durable, and its link count with them. For
// this package's own temporaries SyncLink is the file's fsync, as Sync
// is, and a SyncBatch of them makes it.
type LinkSyncer interface {
	SyncLink() error
}

// FileSyncer is an optional capability of an FS: the fsync of a file by
// its name, for a revision another process published. Its writer may have
// died between Link and SyncLink (LinkSyncer): the name is then durable
// after SyncDir, but the disk may count no link to the file until the
// file's own fsync, and a crash leaves a revision that reads as corrupt.
// A reader that decides on such a revision makes it durable with
// SyncFile beside SyncDir. OS has it. Without it, callers make the
// directory durable alone.
type FileSyncer interface {
	// SyncFile makes the regular file name durable, contents and metadata
	// (its link count among them): fsync of it, opened read-only without
	// following a final symlink and without blocking. Anything but a
	// regular file is refused, with an error wrapping ErrNotRegular, and
	// not fsynced. A failed SyncFile is a failed fsync: what the file
	// holds may not be on the disk.
	SyncFile(name string) error
}

// Locker is an optional capability of an FS: an advisory lock on a
// directory, shared or exclusive, that holds across processes (flock(2)
// on Linux) and is released when the holder dies. Lock waits until the
// lock is granted. OS has it. Without it, the directory backend's prune
// lock holds within its process only (documented where it is used).
type Locker interface {
	Lock(dir string, exclusive bool) (unlock func() error, err error)
}

// TempPrefix begins the name of every named temporary file in a key
// directory, this implementation's and the reference implementation's.
const TempPrefix = ".tmp-"

// OS is the FS of the operating system.
var OS FS = OSFS{}

// OSFS is the type of OS, for a test's wrapper to embed with its optional
// methods.
type OSFS struct{}

// OSFS is a DirProber and a DirScanner on Linux only (vfs_linux.go says
// so); elsewhere callers find it is not one and list and probe plainly.
var (
	_ FS         = OSFS{}
	_ Locker     = OSFS{}
	_ FileSyncer = OSFS{}
)

func (OSFS) Lstat(name string) (fs.FileInfo, error) {
	fi, err := os.Lstat(name)
	return fi, explainCorrupt(err)
}

// readOpts is how OSFS opens what it reads: never following a final
// symlink, and without updating access times where the kernel allows
// (safefile.Options.NoAtime): a walk or an archive reads what it finds and
// writes nothing, not even an inode's atime into the journal.
var readOpts = &safefile.Options{NoAtime: true}

// ReadFile reads a revision or a proof through a bare descriptor
// (safefile.ReadChecked: no *os.File, whose open costs another fstat and a
// poller registration attempt per file), never following a symlink,
// never blocking on a FIFO, never updating its access time where the
// kernel allows (readOpts), and refusing anything but a regular file and
// anything larger than MaxFileSize before reading it.
func (OSFS) ReadFile(name string) ([]byte, fs.FileInfo, error) {
	var info fs.FileInfo
	data, err := safefile.ReadChecked(name, MaxFileSize, readOpts, func(mode fs.FileMode, st *syscall.Stat_t) error {
		if !mode.IsRegular() {
			return &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: it is %s", ErrNotRegular, safefile.Describe(mode))}
		}
		if st.Size > MaxFileSize {
			return &fs.PathError{Op: "read", Path: name, Err: &TooLargeError{Size: st.Size}}
		}
		info = statInfo(name, st)
		return nil
	})
	if errors.Is(err, syscall.ELOOP) {
		return nil, nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: it is a symlink, which is never followed", ErrNotRegular)}
	}
	if err != nil {
		return nil, nil, explainCorrupt(err)
	}
	// The size may grow while it is read: ReadChecked never reads more
	// than one byte past the bound, so memory stays bounded whatever the
	// file does.
	return data, info, nil
}

// ReadDir lists the names in name (not . and ..), never following a
// symlink; on Linux through getdents on a bare descriptor (readDirNames).
func (OSFS) ReadDir(name string) ([]string, error) { return readDirNames(name) }

// Mkdir is os.Mkdir, its failure explained where the errno alone does not
// say what to do: the directory that refused is name's parent (an
// immutable kind directory fails every new key's mkdir with EPERM).
func (OSFS) Mkdir(name string, perm fs.FileMode) error {
	err := os.Mkdir(name, perm)
	var pe *fs.PathError
	if err != nil && !errors.Is(err, fs.ErrExist) && errors.As(err, &pe) {
		pe.Err = explainCreate(filepath.Dir(name), pe.Err)
	}
	return err
}

func (OSFS) Remove(name string) error { return os.Remove(name) }

// Rename is rename(2) itself: os.Rename refuses to replace an existing
// directory, which rename(2) does when it is empty (a copy's staging put in
// place of an empty destination).
func (OSFS) Rename(oldpath, newpath string) error {
	if err := syscall.Rename(oldpath, newpath); err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	return nil
}

// SyncDir fsyncs the directory name, never through a final symlink, and
// never opening anything but a directory (a FIFO planted there is refused
// without blocking): safefile.SyncDir, open, fsync and close on a bare
// descriptor.
func (OSFS) SyncDir(name string) error { return safefile.SyncDir(name) }

func (OSFS) SyncFS(name string) error { return syncFS(name) }

// SyncFile implements FileSyncer (safefile.SyncFile).
func (OSFS) SyncFile(name string) error {
	err := safefile.SyncFile(name)
	var te *safefile.TypeError
	if errors.As(err, &te) {
		return &fs.PathError{Op: "sync", Path: name, Err: fmt.Errorf("%w: it is %s", ErrNotRegular, safefile.Describe(te.Mode))}
	}
	return explainCorrupt(err)
}

func (OSFS) CreateTemp(dir string, perm fs.FileMode) (TempFile, error) {
	if f, err := CreateUnnamed(dir, perm); err == nil {
		return f, nil
	} else if !errors.Is(err, errors.ErrUnsupported) {
		return nil, err
	}
	return CreateNamed(dir, perm)
}

// CreateNamed is CreateTemp's fallback for filesystems without unnamed
// temporary files (exported, with CreateUnnamed, for tests and benchmarks
// that choose one). The name records who made it (pid, process start, boot), so that
// a reaper can prove the writer gone before removing it.
func CreateNamed(dir string, perm fs.FileMode) (TempFile, error) {
	owner := selfTag()
	for range 10 {
		var r [8]byte
		_, _ = rand.Read(r[:])
		name := filepath.Join(dir, TempPrefix+owner+"."+hex.EncodeToString(r[:]))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "create a file in", Path: dir, Err: explainCreate(dir, err)}
		}
		return &namedTemp{f: f, name: name}, nil
	}
	return nil, &fs.PathError{Op: "create temporary", Path: dir, Err: fs.ErrExist}
}

type namedTemp struct {
	f    *os.File
	name string
}

func (t *namedTemp) Write(p []byte) (int, error) { return t.f.Write(p) }
func (t *namedTemp) Sync() error                 { return t.f.Sync() }
func (t *namedTemp) Link(newname string) error   { return os.Link(t.name, newname) }
func (t *namedTemp) Stat() (fs.FileInfo, error)  { return t.f.Stat() }
func (t *namedTemp) Is(name string) (bool, error) {
	return sameFile(t.f, name)
}
func (t *namedTemp) Close() error {
	err := t.f.Close()
	if rerr := os.Remove(t.name); err == nil && !errors.Is(rerr, fs.ErrNotExist) {
		err = rerr
	}
	return err
}

// FileID is what tells one file from another put in its place: device and
// inode (a removed file's number may be given to the next one at once), and
// size and modification time. Zero when the filesystem does not say.
type FileID struct {
	Dev, Ino, Size uint64
	MTime, CTime   int64 // ctime cannot be set from user space: a copy with -p keeps mtime, not ctime
}

func sameFile(f *os.File, name string) (bool, error) {
	mine, err := f.Stat()
	if err != nil {
		return false, err
	}
	other, err := os.Lstat(name)
	if err != nil {
		return false, err
	}
	return os.SameFile(mine, other), nil
}

// TempOwner parses the writer identity out of a temporary's name made by
// CreateTemp's named fallback: ".tmp-<pid>.<start>.<boot>.<pidns>.<random>", or, from
// versions that did not record the PID namespace,
// ".tmp-<pid>.<start>.<boot>.<random>" (judged as an owner recorded
// without one). ok is false for any other name, a reference
// implementation's among them.
func TempOwner(name string) (o hostid.Owner, ok bool) {
	rest, found := strings.CutPrefix(name, TempPrefix)
	if !found {
		return hostid.Owner{}, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 4 && len(parts) != 5 {
		return hostid.Owner{}, false
	}
	pid, err := strconv.Atoi(parts[0])
	if err != nil || pid <= 0 || parts[1] == "" || parts[2] == "" {
		return hostid.Owner{}, false
	}
	o = hostid.Owner{PID: pid, Start: parts[1], Boot: parts[2]}
	if len(parts) == 5 {
		if parts[3] == "" {
			return hostid.Owner{}, false
		}
		o.PIDNS = parts[3]
	}
	return o, true
}

// selfTag identifies this process in a temporary's name: pid, start,
// boot and PID namespace, so that a reaper in another namespace never
// judges it by a pid that names another process there.
func selfTag() string {
	o, err := hostid.Self(hostid.System)
	if err != nil {
		// Unidentifiable: a reaper will never prove this writer gone, which
		// is the safe direction.
		return "0.unknown.unknown.unknown"
	}
	return strconv.Itoa(o.PID) + "." + o.Start + "." + o.Boot + "." + o.PIDNS
}
