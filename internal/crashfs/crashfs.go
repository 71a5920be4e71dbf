package crashfs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/claimstore/claimstore/claimstore/vfs"
)

// ErrStopped is returned by every call after the hook stopped the filesystem.
var ErrStopped = errors.New("crashfs: stopped (simulated crash point)")

// ErrTooManyStates is returned by CrashStates when the pending operations
// allow more states than the limit.
var ErrTooManyStates = errors.New("crashfs: too many crash states")

// Model chooses which not-yet-durable operations a crash may keep.
type Model int

const (
	// ModelSubset keeps any subset of pending entry operations and, per
	// file, a prefix of its pending writes. See the package doc.
	ModelSubset Model = iota
	// ModelPrefix keeps a prefix of all pending operations in order.
	ModelPrefix
)

func (m Model) String() string {
	if m == ModelPrefix {
		return "prefix"
	}
	return "subset"
}

// Call describes one call into the filesystem, for Options.Hook.
type Call struct {
	N    int    // ordinal, from 1, counted over the filesystem's life
	Op   string // "lstat", "readfile", "readdir", "mkdir", "remove", "syncdir", "syncfs", "createtemp", "write", "sync", "link", "is", "close", "rename", "probedir", "fstatat", "scandir", "fstat"
	Path string
}

func (c Call) String() string { return fmt.Sprintf("#%d %s %s", c.N, c.Op, c.Path) }

// Options configure a FS.
type Options struct {
	// Hook is called before every call; an error fails the call and stops
	// the filesystem.
	Hook func(Call) error
	// NamedTemps makes CreateTemp give each temporary a ".tmp-" name in
	// its directory, instead of none.
	NamedTemps bool
	// TornWrites lets a crash keep the first half of a file's first
	// dropped write.
	TornWrites bool
}

type ino uint64

type kind uint8

const (
	kFile kind = iota
	kDir
	kSymlink
)

// meta is what never changes about an inode.
type meta struct {
	kind   kind
	perm   fs.FileMode
	target string // symlinks
}

type inode struct {
	data    []byte
	entries map[string]ino
}

// tree is a set of inodes; root is always inode 1.
type tree map[ino]*inode

const rootIno ino = 1

func (t tree) clone() tree {
	out := make(tree, len(t))
	for i, n := range t {
		c := &inode{data: append([]byte(nil), n.data...)}
		if n.entries != nil {
			c.entries = make(map[string]ino, len(n.entries))
			for k, v := range n.entries {
				c.entries[k] = v
			}
		}
		out[i] = c
	}
	return out
}

type opKind uint8

const (
	opWrite  opKind = iota // append data to ino
	opEntry                // dir gains name -> ino
	opUnlink               // dir loses name
	opRename               // dir's name becomes to, atomically (one directory)
)

type op struct {
	kind    opKind
	dir     ino
	name    string
	to      string // opRename: the new name in dir
	ino     ino
	data    []byte
	durable bool
	// lost marks an operation that a failed fsync dropped from the way to
	// the disk: reads (the live tree) still show it, but no crash state
	// keeps it and no later fsync makes it durable. Linux may do exactly
	// this: a failed fsync can drop the dirty pages and clear the error,
	// so that a retried fsync succeeds with nothing written (Rebello et
	// al., ATC '20; PostgreSQL's "fsyncgate").
	lost bool
}

func (o *op) String() string {
	switch o.kind {
	case opWrite:
		return fmt.Sprintf("write(ino %d, %d bytes)", o.ino, len(o.data))
	case opEntry:
		return fmt.Sprintf("entry(dir %d, %q -> ino %d)", o.dir, o.name, o.ino)
	case opRename:
		return fmt.Sprintf("rename(dir %d, %q -> %q, ino %d)", o.dir, o.name, o.to, o.ino)
	}
	return fmt.Sprintf("unlink(dir %d, %q)", o.dir, o.name)
}

// shared is what all filesystems descended from one New have in common:
// inode numbering and the unchanging facts of each inode.
type shared struct {
	mu   sync.Mutex
	next ino
	meta map[ino]meta
}

func (s *shared) alloc(m meta) ino {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	s.meta[s.next] = m
	return s.next
}

func (s *shared) get(i ino) meta {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.meta[i]
}

// FS is the crash-simulating filesystem. Its methods are safe for
// concurrent use.
type FS struct {
	sh   *shared
	opts Options

	mu      sync.Mutex
	base    tree // durable state at New or at the crash that made this FS
	live    tree // what reads see
	log     []*op
	calls   int
	stopped error
	temps   int

	lockMu sync.Mutex
	locks  map[string]*sync.RWMutex
}

var (
	_ vfs.FS         = (*FS)(nil)
	_ vfs.DirProber  = (*FS)(nil)
	_ vfs.DirScanner = (*FS)(nil)
	_ vfs.Locker     = (*FS)(nil)
	_ vfs.FileSyncer = (*FS)(nil)
)

// New returns an empty filesystem: just "/", durable. opts may be nil.
func New(opts *Options) *FS {
	sh := &shared{next: rootIno, meta: map[ino]meta{rootIno: {kind: kDir, perm: 0o755}}}
	t := tree{rootIno: {entries: map[string]ino{}}}
	f := &FS{sh: sh, base: t, live: t.clone()}
	if opts != nil {
		f.opts = *opts
	}
	return f
}

// SetHook replaces the hook (nil: none).
func (f *FS) SetHook(h func(Call) error) {
	f.mu.Lock()
	f.opts.Hook = h
	f.mu.Unlock()
}

// StopAfter makes the filesystem stop after k more calls: calls up to the
// k-th from now run, the next one fails with ErrStopped, and so does every
// call after it. k = 0 stops before the next call.
func (f *FS) StopAfter(k int) {
	f.mu.Lock()
	limit := f.calls + k
	f.mu.Unlock()
	f.SetHook(func(c Call) error {
		if c.N > limit {
			return ErrStopped
		}
		return nil
	})
}

// Resume ends a stop as a process crash does, and no more: the process
// that met the stop is gone (its hook with it), and a new process goes on
// with the same page cache. Nothing becomes durable: every operation still
// pending stays pending, and a later power cut (CrashStates) may drop it,
// unless a later fsync of the new process makes it durable.
func (f *FS) Resume() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = nil
	f.opts.Hook = nil
}

// Fork returns a copy of this filesystem as a process crash leaves it, for
// a new process to go on with: the same page cache (live tree), and every
// operation that was pending still pending, so that a power cut after the
// new process ran (CrashStates of the copy) may still drop it unless the
// new process's fsyncs made it durable. The copy has no hook and is not
// stopped; this filesystem is unchanged.
func (f *FS) Fork() *FS {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := &FS{sh: f.sh, base: f.base.clone(), live: f.live.clone(), calls: f.calls, temps: f.temps}
	g.opts = Options{NamedTemps: f.opts.NamedTemps, TornWrites: f.opts.TornWrites}
	g.log = make([]*op, len(f.log))
	for k, o := range f.log {
		c := *o
		g.log[k] = &c
	}
	return g
}

// LoseUnsyncedDir is what a failed fsync of directory name does to it on
// Linux at worst: every entry change of the directory not yet durable is
// lost for good (still visible to reads, never kept by a crash, never made
// durable by a later fsync). It is not a call (no hook, not counted): the
// fault injector calls it beside failing the fsync.
func (f *FS) LoseUnsyncedDir(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, _, _, err := f.resolve(f.live, name, true)
	if err != nil {
		return pathErr("open", name, err)
	}
	for _, o := range f.log {
		if o.kind != opWrite && o.dir == i && !o.durable {
			o.lost = true
		}
	}
	return nil
}

// LoseUnsyncedAll is what a failed syncfs(2) does at worst: every change
// of the filesystem not yet durable, entries and file contents alike, is
// lost for good. Like LoseUnsyncedDir, it is not a call.
func (f *FS) LoseUnsyncedAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range f.log {
		if !o.durable {
			o.lost = true
		}
	}
}

// Lost reports how many operations a failed fsync lost (LoseUnsynced,
// LoseUnsyncedDir, LoseUnsyncedAll).
func (f *FS) Lost() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, o := range f.log {
		if o.lost {
			n++
		}
	}
	return n
}

// Calls returns how many calls the filesystem has received.
func (f *FS) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Stopped reports whether the hook stopped the filesystem.
func (f *FS) Stopped() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopped != nil
}

// Pending returns the operations not yet durable, for messages.
func (f *FS) Pending() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, o := range f.log {
		switch {
		case o.lost:
			out = append(out, o.String()+" (lost)")
		case !o.durable:
			out = append(out, o.String())
		}
	}
	return out
}

// enter counts a call and runs the hook. It returns with f.mu held when
// the call may proceed.
func (f *FS) enter(opName, p string) error {
	f.mu.Lock()
	if f.stopped != nil {
		f.mu.Unlock()
		return &fs.PathError{Op: opName, Path: p, Err: ErrStopped}
	}
	f.calls++
	c := Call{N: f.calls, Op: opName, Path: p}
	hook := f.opts.Hook
	if hook != nil {
		// The hook may call back into tests that read the filesystem
		// through another FS value; never hold the lock across it.
		f.mu.Unlock()
		err := hook(c)
		f.mu.Lock()
		if err != nil {
			if f.stopped == nil {
				f.stopped = err
			}
			f.mu.Unlock()
			return &fs.PathError{Op: opName, Path: p, Err: err}
		}
		if f.stopped != nil {
			err := f.stopped
			f.mu.Unlock()
			return &fs.PathError{Op: opName, Path: p, Err: err}
		}
	}
	return nil
}

func pathErr(opName, p string, err error) error { return &fs.PathError{Op: opName, Path: p, Err: err} }

// split returns the components of an absolute path.
func split(p string) ([]string, error) {
	if !path.IsAbs(p) {
		return nil, syscall.EINVAL
	}
	p = path.Clean(p)
	if p == "/" {
		return nil, nil
	}
	return strings.Split(p[1:], "/"), nil
}

// resolve walks p in t. It follows symlinks in the middle of the path, and
// at the end only when follow is set. It returns the inode and, for the
// last component, its parent directory and name.
func (f *FS) resolve(t tree, p string, follow bool) (i ino, parent ino, name string, err error) {
	return f.resolveDepth(t, p, follow, 0)
}

func (f *FS) resolveDepth(t tree, p string, follow bool, depth int) (ino, ino, string, error) {
	if depth > 8 {
		return 0, 0, "", syscall.ELOOP
	}
	parts, err := split(p)
	if err != nil {
		return 0, 0, "", err
	}
	cur := rootIno
	parent, name := rootIno, ""
	for idx, part := range parts {
		m := f.sh.get(cur)
		if m.kind != kDir {
			return 0, 0, "", syscall.ENOTDIR
		}
		n := t[cur]
		next, ok := n.entries[part]
		parent, name = cur, part
		if !ok {
			if idx == len(parts)-1 {
				return 0, parent, name, syscall.ENOENT
			}
			return 0, 0, "", syscall.ENOENT
		}
		nm := f.sh.get(next)
		last := idx == len(parts)-1
		if nm.kind == kSymlink && (!last || follow) {
			if !path.IsAbs(nm.target) {
				return 0, 0, "", syscall.EINVAL // relative targets are not modelled
			}
			rest := nm.target
			if !last {
				rest = path.Join(nm.target, path.Join(parts[idx+1:]...))
			}
			return f.resolveDepth(t, rest, follow, depth+1)
		}
		cur = next
	}
	return cur, parent, name, nil
}

// resolveParent returns the directory that would hold p's last component.
func (f *FS) resolveParent(t tree, p string) (ino, string, error) {
	parts, err := split(p)
	if err != nil {
		return 0, "", err
	}
	if len(parts) == 0 {
		return 0, "", syscall.EEXIST // "/" itself
	}
	dir, _, _, err := f.resolve(t, "/"+path.Join(parts[:len(parts)-1]...), true)
	if err != nil {
		return 0, "", err
	}
	if f.sh.get(dir).kind != kDir {
		return 0, "", syscall.ENOTDIR
	}
	return dir, parts[len(parts)-1], nil
}

// record applies o to the live tree and logs it. f.mu is held.
func (f *FS) record(o *op) {
	f.log = append(f.log, o)
	f.apply(f.live, o, false)
}

// apply applies o to t. Inodes that t lacks (their creation was dropped or
// they were never named) are made empty.
func (f *FS) apply(t tree, o *op, torn bool) {
	get := func(i ino) *inode {
		n := t[i]
		if n == nil {
			n = &inode{}
			if f.sh.get(i).kind == kDir {
				n.entries = map[string]ino{}
			}
			t[i] = n
		}
		return n
	}
	switch o.kind {
	case opWrite:
		d := o.data
		if torn {
			d = d[:len(d)/2]
		}
		n := get(o.ino)
		n.data = append(n.data, d...)
	case opEntry:
		get(o.ino)
		get(o.dir).entries[o.name] = o.ino
	case opUnlink:
		delete(get(o.dir).entries, o.name)
	case opRename:
		get(o.ino)
		d := get(o.dir)
		delete(d.entries, o.name)
		d.entries[o.to] = o.ino
	}
}

// fileInfo is the FileInfo of an inode.
type fileInfo struct {
	name string
	size int64
	mode fs.FileMode
}

func (i fileInfo) Name() string       { return i.name }
func (i fileInfo) Size() int64        { return i.size }
func (i fileInfo) Mode() fs.FileMode  { return i.mode }
func (i fileInfo) ModTime() time.Time { return time.Time{} }
func (i fileInfo) IsDir() bool        { return i.mode.IsDir() }
func (i fileInfo) Sys() any           { return nil }

func (f *FS) info(i ino, name string) fileInfo {
	m := f.sh.get(i)
	fi := fileInfo{name: name, mode: m.perm}
	switch m.kind {
	case kDir:
		fi.mode |= fs.ModeDir
	case kSymlink:
		fi.mode = fs.ModeSymlink | 0o777
		fi.size = int64(len(m.target))
	default:
		fi.size = int64(len(f.live[i].data))
	}
	return fi
}

// Lstat implements vfs.FS.
func (f *FS) Lstat(name string) (fs.FileInfo, error) {
	if err := f.enter("lstat", name); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	i, _, base, err := f.resolve(f.live, name, false)
	if err != nil {
		return nil, pathErr("lstat", name, err)
	}
	if base == "" {
		base = "/"
	}
	return f.info(i, base), nil
}

// ReadFile implements vfs.FS: it refuses a final symlink and
// anything but a regular file, with an error wrapping vfs.ErrNotRegular,
// and gives the info of the file it read, as Lstat would have.
func (f *FS) ReadFile(name string) ([]byte, fs.FileInfo, error) {
	if err := f.enter("readfile", name); err != nil {
		return nil, nil, err
	}
	defer f.mu.Unlock()
	i, _, base, err := f.resolve(f.live, name, false)
	if err != nil {
		return nil, nil, pathErr("read", name, err)
	}
	if f.sh.get(i).kind != kFile {
		return nil, nil, pathErr("read", name, vfs.ErrNotRegular)
	}
	return append([]byte(nil), f.live[i].data...), f.info(i, base), nil
}

// ReadDir implements vfs.FS. The names come sorted, which the
// interface does not promise; callers that rely on an order are wrong
// elsewhere, so tests should not rely on it either.
func (f *FS) ReadDir(name string) ([]string, error) {
	if err := f.enter("readdir", name); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	i, _, _, err := f.resolve(f.live, name, true)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if f.sh.get(i).kind != kDir {
		return nil, pathErr("readdirent", name, syscall.ENOTDIR)
	}
	return sortedNames(f.live[i].entries), nil
}

// ProbeDir implements vfs.DirProber, as the operating system's does: one
// call to open the directory (never through a final symlink), then one
// call per name checked, each seen by the hook and StopAfter as a call of
// its own (an fstatat). Its size is an estimate the directory backend's cold
// probe starts from, as st_size is on ext4: enough bytes for the entries.
func (f *FS) ProbeDir(dir string) (func(base string) (bool, error), int64, func() error, error) {
	if err := f.enter("probedir", dir); err != nil {
		return nil, 0, nil, err
	}
	i, _, _, err := f.resolve(f.live, dir, false)
	if err == nil && f.sh.get(i).kind != kDir {
		err = syscall.ENOTDIR
	}
	var size int64
	if err == nil {
		size = int64(len(f.live[i].entries)) * 36
	}
	f.mu.Unlock()
	if err != nil {
		return nil, 0, nil, pathErr("open", dir, err)
	}
	exists := func(base string) (bool, error) {
		p := path.Join(dir, base)
		if err := f.enter("fstatat", p); err != nil {
			return false, err
		}
		defer f.mu.Unlock()
		n := f.live[i]
		if n == nil {
			return false, pathErr("fstatat", p, syscall.ENOENT)
		}
		_, ok := n.entries[base]
		return ok, nil
	}
	return exists, size, func() error { return nil }, nil
}

// ScanDir implements vfs.DirScanner: the names of ReadDir, each handed to
// each in a buffer that is reused.
func (f *FS) ScanDir(dir string, each func(name []byte)) error {
	if err := f.enter("scandir", dir); err != nil {
		return err
	}
	i, _, _, err := f.resolve(f.live, dir, false)
	if err == nil && f.sh.get(i).kind != kDir {
		err = syscall.ENOTDIR
	}
	var names []string
	if err == nil {
		names = sortedNames(f.live[i].entries)
	}
	f.mu.Unlock()
	if err != nil {
		return pathErr("open", dir, err)
	}
	var buf []byte
	for _, n := range names {
		buf = append(buf[:0], n...)
		each(buf)
	}
	return nil
}

func sortedNames(m map[string]ino) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Mkdir implements vfs.FS.
func (f *FS) Mkdir(name string, perm fs.FileMode) error {
	if err := f.enter("mkdir", name); err != nil {
		return err
	}
	defer f.mu.Unlock()
	return f.mkdirLocked(name, perm, false)
}

func (f *FS) mkdirLocked(name string, perm fs.FileMode, durable bool) error {
	dir, base, err := f.resolveParent(f.live, name)
	if err != nil {
		return pathErr("mkdir", name, err)
	}
	if _, ok := f.live[dir].entries[base]; ok {
		return pathErr("mkdir", name, syscall.EEXIST)
	}
	i := f.sh.alloc(meta{kind: kDir, perm: perm.Perm()})
	f.record(&op{kind: opEntry, dir: dir, name: base, ino: i, durable: durable})
	return nil
}

// Remove implements vfs.FS.
func (f *FS) Remove(name string) error {
	if err := f.enter("remove", name); err != nil {
		return err
	}
	defer f.mu.Unlock()
	i, dir, base, err := f.resolve(f.live, name, false)
	if err != nil {
		return pathErr("remove", name, err)
	}
	if i == rootIno {
		return pathErr("remove", name, syscall.EBUSY)
	}
	if f.sh.get(i).kind == kDir && len(f.live[i].entries) > 0 {
		return pathErr("remove", name, syscall.ENOTEMPTY)
	}
	f.record(&op{kind: opUnlink, dir: dir, name: base})
	return nil
}

// Rename implements vfs.FS. Within one directory it is one
// operation, kept or dropped whole by a crash; across two directories it
// is an entry in the new one and an unlink in the old, each durable with
// its own directory's fsync, as the crash model allows.
func (f *FS) Rename(oldpath, newpath string) error {
	if err := f.enter("rename", oldpath); err != nil {
		return err
	}
	defer f.mu.Unlock()
	i, odir, obase, err := f.resolve(f.live, oldpath, false)
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	if i == rootIno {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: syscall.EBUSY}
	}
	ndir, nbase, err := f.resolveParent(f.live, newpath)
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	if odir == ndir && obase == nbase {
		return nil
	}
	if t, ok := f.live[ndir].entries[nbase]; ok {
		tk, ik := f.sh.get(t).kind, f.sh.get(i).kind
		switch {
		case tk == kDir && ik != kDir:
			return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: syscall.EISDIR}
		case tk != kDir && ik == kDir:
			return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: syscall.ENOTDIR}
		case tk == kDir && len(f.live[t].entries) > 0:
			return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: syscall.ENOTEMPTY}
		}
	}
	if ik := f.sh.get(i).kind; ik == kDir {
		// A directory cannot move below itself.
		for d := ndir; d != rootIno; {
			if d == i {
				return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: syscall.EINVAL}
			}
			d = f.parentOf(d)
			if d == 0 {
				break
			}
		}
	}
	if odir == ndir {
		f.record(&op{kind: opRename, dir: odir, name: obase, to: nbase, ino: i})
		return nil
	}
	f.record(&op{kind: opEntry, dir: ndir, name: nbase, ino: i})
	f.record(&op{kind: opUnlink, dir: odir, name: obase})
	return nil
}

// parentOf finds the directory holding d in the live tree, or 0.
func (f *FS) parentOf(d ino) ino {
	for p, n := range f.live {
		for _, c := range n.entries {
			if c == d {
				return p
			}
		}
	}
	return 0
}

// SyncDir implements vfs.FS: every entry change of the directory
// made so far becomes durable.
func (f *FS) SyncDir(name string) error {
	if err := f.enter("syncdir", name); err != nil {
		return err
	}
	defer f.mu.Unlock()
	i, _, _, err := f.resolve(f.live, name, true)
	if err != nil {
		return pathErr("open", name, err)
	}
	if f.sh.get(i).kind != kDir {
		return pathErr("fsync", name, syscall.ENOTDIR)
	}
	for _, o := range f.log {
		if o.kind != opWrite && o.dir == i && !o.lost {
			o.durable = true
		}
	}
	return nil
}

// SyncFS implements vfs.FS: every operation made so far becomes
// durable, entries and file contents alike (the whole tree is one
// filesystem).
func (f *FS) SyncFS(name string) error {
	if err := f.enter("syncfs", name); err != nil {
		return err
	}
	defer f.mu.Unlock()
	if _, _, _, err := f.resolve(f.live, name, true); err != nil {
		return pathErr("open", name, err)
	}
	for _, o := range f.log {
		if !o.lost {
			o.durable = true
		}
	}
	return nil
}

// SyncFile implements vfs.FileSyncer: the contents written to the
// regular file name so far become durable, as its temporary's Sync made
// them (the model keeps no link counts: a name is durable by its
// directory's fsync alone).
func (f *FS) SyncFile(name string) error {
	if err := f.enter("syncfile", name); err != nil {
		return err
	}
	defer f.mu.Unlock()
	i, _, _, err := f.resolve(f.live, name, false)
	if err != nil {
		return pathErr("open", name, err)
	}
	if f.sh.get(i).kind != kFile {
		return pathErr("sync", name, fmt.Errorf("%w: it is not a regular file", vfs.ErrNotRegular))
	}
	for _, o := range f.log {
		if o.kind == opWrite && o.ino == i && !o.lost {
			o.durable = true
		}
	}
	return nil
}

// CreateTemp implements vfs.FS.
func (f *FS) CreateTemp(dir string, perm fs.FileMode) (vfs.TempFile, error) {
	if err := f.enter("createtemp", dir); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	d, _, _, err := f.resolve(f.live, dir, true)
	if err != nil {
		return nil, pathErr("open", dir, err)
	}
	if f.sh.get(d).kind != kDir {
		return nil, pathErr("open", dir, syscall.ENOTDIR)
	}
	i := f.sh.alloc(meta{kind: kFile, perm: perm.Perm()})
	t := &tempFile{f: f, ino: i, dir: d, dirPath: dir}
	if f.opts.NamedTemps {
		// Like a real writer's random names, never collide with a
		// temporary an earlier (crashed) writer left behind.
		for {
			f.temps++
			t.name = vfs.TempPrefix + "crashfs." + strconv.Itoa(f.temps)
			if _, ok := f.live[d].entries[t.name]; !ok {
				break
			}
		}
		f.record(&op{kind: opEntry, dir: d, name: t.name, ino: i})
	} else {
		f.live[i] = &inode{}
	}
	return t, nil
}

type tempFile struct {
	f       *FS
	ino     ino
	dir     ino
	dirPath string
	name    string // "" when unnamed
	closed  bool
}

func (t *tempFile) label() string {
	if t.name != "" {
		return path.Join(t.dirPath, t.name)
	}
	return t.dirPath + "/(unnamed)"
}

func (t *tempFile) Write(p []byte) (int, error) {
	if err := t.f.enter("write", t.label()); err != nil {
		return 0, err
	}
	defer t.f.mu.Unlock()
	if t.closed {
		return 0, pathErr("write", t.label(), fs.ErrClosed)
	}
	t.f.record(&op{kind: opWrite, ino: t.ino, data: append([]byte(nil), p...)})
	return len(p), nil
}

func (t *tempFile) Sync() error {
	if err := t.f.enter("sync", t.label()); err != nil {
		return err
	}
	defer t.f.mu.Unlock()
	if t.closed {
		return pathErr("sync", t.label(), fs.ErrClosed)
	}
	for _, o := range t.f.log {
		if o.kind == opWrite && o.ino == t.ino && !o.lost {
			o.durable = true
		}
	}
	return nil
}

// LoseUnsynced is what a failed fsync of the file does on Linux at worst:
// its writes not yet durable are lost for good (reads still show them; no
// crash keeps them; a later successful Sync does not make them durable).
// Not a call: the fault injector calls it beside failing the fsync.
func (t *tempFile) LoseUnsynced() {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	for _, o := range t.f.log {
		if o.kind == opWrite && o.ino == t.ino && !o.durable {
			o.lost = true
		}
	}
}

func (t *tempFile) Link(newname string) error {
	if err := t.f.enter("link", newname); err != nil {
		return err
	}
	defer t.f.mu.Unlock()
	lerr := func(err error) error { return &os.LinkError{Op: "link", Old: t.label(), New: newname, Err: err} }
	if t.closed {
		return lerr(fs.ErrClosed)
	}
	dir, base, err := t.f.resolveParent(t.f.live, newname)
	if err != nil {
		return lerr(err)
	}
	if _, ok := t.f.live[dir].entries[base]; ok {
		return lerr(syscall.EEXIST)
	}
	t.f.record(&op{kind: opEntry, dir: dir, name: base, ino: t.ino})
	return nil
}

func (t *tempFile) Is(name string) (bool, error) {
	if err := t.f.enter("is", name); err != nil {
		return false, err
	}
	defer t.f.mu.Unlock()
	i, _, _, err := t.f.resolve(t.f.live, name, false)
	if err != nil {
		return false, pathErr("lstat", name, err)
	}
	return i == t.ino, nil
}

// Stat implements vfs.FileStater: the open file's identity, as fstat
// gives it (crashfs has no device or inode numbers to give).
func (t *tempFile) Stat() (fs.FileInfo, error) {
	if err := t.f.enter("fstat", t.label()); err != nil {
		return nil, err
	}
	defer t.f.mu.Unlock()
	return t.f.info(t.ino, path.Base(t.label())), nil
}

func (t *tempFile) Close() error {
	if err := t.f.enter("close", t.label()); err != nil {
		return err
	}
	defer t.f.mu.Unlock()
	if t.closed {
		return pathErr("close", t.label(), fs.ErrClosed)
	}
	t.closed = true
	if t.name != "" {
		if cur, ok := t.f.live[t.dir].entries[t.name]; ok && cur == t.ino {
			t.f.record(&op{kind: opUnlink, dir: t.dir, name: t.name})
		}
	}
	return nil
}

// Setup helpers: they change the filesystem durably, as if the state had
// been there before the test began, and do not count as calls.

// MkdirAll creates p and its parents, durably.
func (f *FS) MkdirAll(p string, perm fs.FileMode) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	parts, err := split(p)
	if err != nil {
		return pathErr("mkdir", p, err)
	}
	for k := range parts {
		sub := "/" + path.Join(parts[:k+1]...)
		i, _, _, err := f.resolve(f.live, sub, true)
		if err == nil {
			if f.sh.get(i).kind != kDir {
				return pathErr("mkdir", sub, syscall.ENOTDIR)
			}
			continue
		}
		if err := f.mkdirLocked(sub, perm, true); err != nil {
			return err
		}
	}
	return nil
}

// WriteFile creates the regular file p with data, durably. p must not exist.
func (f *FS) WriteFile(p string, data []byte, perm fs.FileMode) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	dir, base, err := f.resolveParent(f.live, p)
	if err != nil {
		return pathErr("create", p, err)
	}
	if _, ok := f.live[dir].entries[base]; ok {
		return pathErr("create", p, syscall.EEXIST)
	}
	i := f.sh.alloc(meta{kind: kFile, perm: perm.Perm()})
	f.record(&op{kind: opWrite, ino: i, data: append([]byte(nil), data...), durable: true})
	f.record(&op{kind: opEntry, dir: dir, name: base, ino: i, durable: true})
	return nil
}

// Symlink creates the symlink p pointing at target, durably.
func (f *FS) Symlink(target, p string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	dir, base, err := f.resolveParent(f.live, p)
	if err != nil {
		return pathErr("symlink", p, err)
	}
	if _, ok := f.live[dir].entries[base]; ok {
		return pathErr("symlink", p, syscall.EEXIST)
	}
	i := f.sh.alloc(meta{kind: kSymlink, target: target})
	f.record(&op{kind: opEntry, dir: dir, name: base, ino: i, durable: true})
	return nil
}

// DropPending forgets every not-yet-durable write to files whose data is
// reachable at path p, in the live tree too: what a failed fsync may do
// (the kernel drops the dirty pages and marks them clean). It reports how
// many writes it dropped.
func (f *FS) DropPending(p string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, _, _, err := f.resolve(f.live, p, false)
	if err != nil {
		return 0
	}
	return f.dropLocked(i)
}

func (f *FS) dropLocked(i ino) int {
	n := 0
	keep := f.log[:0]
	for _, o := range f.log {
		if o.kind == opWrite && o.ino == i && !o.durable {
			n++
			continue
		}
		keep = append(keep, o)
	}
	f.log = keep
	// Rebuild the live file from its durable writes.
	t := f.base.clone()
	for _, o := range f.log {
		f.apply(t, o, false)
	}
	if n := t[i]; n != nil {
		f.live[i].data = n.data
	} else {
		f.live[i].data = nil
	}
	return n
}

// Snapshot returns a new filesystem whose durable state is this one's live
// tree: what a process crash (not a power cut) leaves, or a copy to read
// without going through the hook.
func (f *FS) Snapshot() *FS {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.live.clone()
	g := &FS{sh: f.sh, base: t, live: t.clone()}
	g.opts = Options{NamedTemps: f.opts.NamedTemps, TornWrites: f.opts.TornWrites}
	return g
}

// CrashStats counts the crash states of one CrashStates call.
type CrashStats struct {
	Pending  int // operations not yet durable
	Raw      int // subsets enumerated
	Distinct int // distinct reachable trees among them
}

// CrashStates returns every filesystem a power cut now can leave under the
// model, each distinct reachable tree once, the durable-only state first.
// Each is a fresh FS (no hook, everything durable) with this one's
// options. It fails with ErrTooManyStates when the subsets would number
// more than limit (limit <= 0: 1<<16).
func (f *FS) CrashStates(model Model, limit int) ([]*FS, CrashStats, error) {
	if limit <= 0 {
		limit = 1 << 16
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var pending []int
	for k, o := range f.log {
		// A lost operation is never kept: it is not pending, and the
		// loop below, which applies durable and chosen pending ones, skips
		// it.
		if !o.durable && !o.lost {
			pending = append(pending, k)
		}
	}
	st := CrashStats{Pending: len(pending)}
	var choices [][]choice
	switch model {
	case ModelPrefix:
		for n := 0; n <= len(pending); n++ {
			c := make([]choice, len(pending))
			for k := range c {
				if k < n {
					c[k] = keep
				}
			}
			choices = append(choices, c)
			if f.opts.TornWrites && n < len(pending) && f.log[pending[n]].kind == opWrite {
				t := append([]choice(nil), c...)
				t[n] = tear
				choices = append(choices, t)
			}
		}
	default:
		var err error
		choices, err = f.subsets(pending, limit)
		if err != nil {
			return nil, st, err
		}
	}
	if len(choices) > limit {
		return nil, st, fmt.Errorf("%w: %d > %d", ErrTooManyStates, len(choices), limit)
	}
	st.Raw = len(choices)
	seen := map[string]bool{}
	var out []*FS
	for _, c := range choices {
		t := f.base.clone()
		pi := 0
		for k, o := range f.log {
			if o.durable {
				f.apply(t, o, false)
				continue
			}
			if pi < len(pending) && pending[pi] == k {
				switch c[pi] {
				case keep:
					f.apply(t, o, false)
				case tear:
					f.apply(t, o, true)
				}
				pi++
			}
		}
		t = f.reachable(t)
		fp := f.fingerprint(t)
		if seen[fp] {
			continue
		}
		seen[fp] = true
		g := &FS{sh: f.sh, base: t, live: t.clone()}
		g.opts = Options{NamedTemps: f.opts.NamedTemps, TornWrites: f.opts.TornWrites}
		out = append(out, g)
	}
	st.Distinct = len(out)
	return out, st, nil
}

type choice uint8

const (
	drop choice = iota
	keep
	tear
)

// subsets enumerates the ModelSubset choices: any subset of entry
// operations; for each file, its pending writes kept as a prefix, the first
// dropped one optionally torn.
func (f *FS) subsets(pending []int, limit int) ([][]choice, error) {
	var out [][]choice
	cur := make([]choice, len(pending))
	closed := map[ino]bool{} // files whose prefix has ended
	var rec func(k int) error
	rec = func(k int) error {
		if len(out) > limit {
			return fmt.Errorf("%w: more than %d", ErrTooManyStates, limit)
		}
		if k == len(pending) {
			out = append(out, append([]choice(nil), cur...))
			return nil
		}
		o := f.log[pending[k]]
		if o.kind != opWrite {
			for _, c := range []choice{drop, keep} {
				cur[k] = c
				if err := rec(k + 1); err != nil {
					return err
				}
			}
			return nil
		}
		if closed[o.ino] {
			cur[k] = drop
			return rec(k + 1)
		}
		opts := []choice{keep, drop}
		if f.opts.TornWrites && len(o.data) > 1 {
			opts = append(opts, tear)
		}
		for _, c := range opts {
			cur[k] = c
			if c != keep {
				closed[o.ino] = true
			}
			if err := rec(k + 1); err != nil {
				return err
			}
			delete(closed, o.ino)
		}
		return nil
	}
	if err := rec(0); err != nil {
		return nil, err
	}
	return out, nil
}

// reachable returns the part of t reachable from the root: after a crash
// nothing else exists (fsck would reclaim orphans).
func (f *FS) reachable(t tree) tree {
	out := tree{}
	var walk func(i ino)
	walk = func(i ino) {
		if _, ok := out[i]; ok {
			return
		}
		n := t[i]
		if n == nil {
			n = &inode{}
			if f.sh.get(i).kind == kDir {
				n.entries = map[string]ino{}
			}
		}
		out[i] = n
		for _, c := range n.entries {
			walk(c)
		}
	}
	walk(rootIno)
	return out
}

// fingerprint is a canonical description of the reachable tree: paths,
// kinds, modes and content hashes, and which paths share an inode.
func (f *FS) fingerprint(t tree) string {
	var b strings.Builder
	ids := map[ino]int{}
	var walk func(i ino, p string)
	walk = func(i ino, p string) {
		m := f.sh.get(i)
		id, ok := ids[i]
		if !ok {
			id = len(ids)
			ids[i] = id
		}
		fmt.Fprintf(&b, "%s\x00%d\x00%d\x00%o\x00", p, id, m.kind, m.perm)
		switch m.kind {
		case kFile:
			sum := sha256.Sum256(t[i].data)
			b.WriteString(hex.EncodeToString(sum[:8]))
		case kSymlink:
			b.WriteString(m.target)
		case kDir:
			if ok {
				break
			}
			for _, name := range sortedNames(t[i].entries) {
				walk(t[i].entries[name], p+"/"+name)
			}
		}
		b.WriteByte('\n')
	}
	walk(rootIno, "")
	return b.String()
}

// Tree returns every path of the live tree with a short description, for
// messages and tests: "d 700" for directories, "f 400 <len> <sha8>" for
// files, "l <target>" for symlinks.
func (f *FS) Tree() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	var walk func(i ino, p string)
	walk = func(i ino, p string) {
		m := f.sh.get(i)
		switch m.kind {
		case kDir:
			out[p+"/"] = fmt.Sprintf("d %o", m.perm)
			for _, name := range sortedNames(f.live[i].entries) {
				walk(f.live[i].entries[name], p+"/"+name)
			}
		case kSymlink:
			out[p] = "l " + m.target
		default:
			sum := sha256.Sum256(f.live[i].data)
			out[p] = fmt.Sprintf("f %o %d %x", m.perm, len(f.live[i].data), sum[:4])
		}
	}
	walk(rootIno, "")
	return out
}

// Files returns the contents of every regular file in the live tree under
// dir, by path. It does not go through the hook.
func (f *FS) Files(dir string) map[string][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]byte{}
	i, _, _, err := f.resolve(f.live, dir, true)
	if err != nil {
		return out
	}
	var walk func(i ino, p string)
	walk = func(i ino, p string) {
		m := f.sh.get(i)
		switch m.kind {
		case kDir:
			for name, c := range f.live[i].entries {
				walk(c, path.Join(p, name))
			}
		case kFile:
			out[p] = append([]byte(nil), f.live[i].data...)
		}
	}
	walk(i, path.Clean(dir))
	return out
}

// Lock implements vfs.Locker as flock does between the processes that
// share this filesystem: a reader-writer lock per directory name, held by
// whoever called Lock until unlock. A crash does not carry locks over: the
// filesystem a crash returns starts with none held, as a reboot does.
func (f *FS) Lock(dir string, exclusive bool) (func() error, error) {
	if err := f.enter("flock", dir); err != nil {
		return nil, err
	}
	i, _, _, err := f.resolve(f.live, dir, false)
	if err == nil && f.sh.get(i).kind != kDir {
		err = syscall.ENOTDIR
	}
	f.mu.Unlock()
	if err != nil {
		return nil, pathErr("open", dir, err)
	}
	f.lockMu.Lock()
	if f.locks == nil {
		f.locks = map[string]*sync.RWMutex{}
	}
	l := f.locks[dir]
	if l == nil {
		l = &sync.RWMutex{}
		f.locks[dir] = l
	}
	f.lockMu.Unlock()
	if exclusive {
		l.Lock()
		return func() error { l.Unlock(); return nil }, nil
	}
	l.RLock()
	return func() error { l.RUnlock(); return nil }, nil
}
