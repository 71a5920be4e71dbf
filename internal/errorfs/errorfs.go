package errorfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"

	"github.com/claimstore/claimstore/claimstore/vfs"
)

// Op is the kind of call a rule applies to.
type Op string

const (
	OpAny      Op = ""
	OpLstat    Op = "lstat"
	OpReadFile Op = "readfile"
	OpReadDir  Op = "readdir"
	OpMkdir    Op = "mkdir"
	OpRemove   Op = "remove"
	OpRename   Op = "rename"
	// A probe of a name (vfs.DirProber's exists) is judged by the rules of
	// OpLstat on that name, and a scan (vfs.DirScanner) by those of
	// OpReadDir: they are the same questions asked more cheaply.
	OpProbeDir Op = "probedir"
	OpLock     Op = "lock"
	OpSyncDir  Op = "syncdir"
	OpSyncFS   Op = "syncfs"
	// OpSyncFile is vfs.FileSyncer's SyncFile, where the inner filesystem
	// has it.
	OpSyncFile   Op = "syncfile"
	OpCreateTemp Op = "createtemp"
	OpWrite      Op = "write"
	OpSync       Op = "sync"
	// OpSyncLink is vfs.LinkSyncer's SyncLink, on a temporary whose inner
	// one has it.
	OpSyncLink Op = "synclink"
	OpLink     Op = "link"
	OpIs       Op = "is"
	OpClose    Op = "close"
)

// Kind is what an injected fault does.
type Kind int

const (
	Fail Kind = iota
	FailAfter
	Torn
	Hide
	ShortWrite
	// Lose is a failed fsync as Linux may do it (fsyncgate): on a file's
	// Sync, a SyncDir or a SyncFS it fails with Err (default EIO) and drops what was
	// not yet durable from the way to the disk, while reads still show it;
	// with Times 1 the next fsync succeeds, having written nothing of it.
	// The inner filesystem must be able to lose data (crashfs can:
	// LoseUnsynced, LoseUnsyncedDir, and for a SyncFS LoseUnsyncedAll); on
	// one that cannot, Lose only fails.
	Lose
)

func (k Kind) String() string {
	return [...]string{"fail", "fail-after", "torn", "hide", "short-write", "lose"}[k]
}

// Rule is one fault.
type Rule struct {
	Op   Op                // OpAny matches every call
	Path func(string) bool // nil matches every path
	Kind Kind
	Err  error // for Fail, FailAfter and Torn; default EIO
	// Nth is the first matching call hit, from 1 (0 means 1); Times is how
	// many matching calls from there on are hit (0: all of them).
	Nth, Times int
	// OnInject is called after the fault was injected.
	OnInject func(op Op, path string)

	matched int
}

// Suffix matches paths ending in s.
func Suffix(s string) func(string) bool {
	return func(p string) bool { return strings.HasSuffix(p, s) }
}

// Contains matches paths containing s.
func Contains(s string) func(string) bool {
	return func(p string) bool { return strings.Contains(p, s) }
}

// Injection records one injected fault.
type Injection struct {
	Op   Op
	Path string
	Kind Kind
}

func (i Injection) String() string { return fmt.Sprintf("%s %s %s", i.Kind, i.Op, i.Path) }

// FS is the fault-injecting wrapper.
type FS struct {
	inner vfs.FS

	mu    sync.Mutex
	rules []*Rule
	log   []Injection
}

var (
	_ vfs.FS         = (*FS)(nil)
	_ vfs.DirProber  = (*FS)(nil)
	_ vfs.DirScanner = (*FS)(nil)
	_ vfs.Locker     = (*FS)(nil)
	_ vfs.FileSyncer = (*FS)(nil)
)

// Wrap returns inner with the rules applied.
func Wrap(inner vfs.FS, rules ...*Rule) *FS {
	return &FS{inner: inner, rules: rules}
}

// Add adds a rule.
func (f *FS) Add(r *Rule) {
	f.mu.Lock()
	f.rules = append(f.rules, r)
	f.mu.Unlock()
}

// Injected returns the faults injected so far.
func (f *FS) Injected() []Injection {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Injection(nil), f.log...)
}

// match returns the rule that hits this call, if any, counting matches.
func (f *FS) match(op Op, p string, kinds ...Kind) *Rule {
	f.mu.Lock()
	defer f.mu.Unlock()
	// Every matching rule counts the call, whether or not an earlier rule
	// hits it, so that Nth means the same whatever other rules there are.
	var hit *Rule
	for _, r := range f.rules {
		if r.Op != OpAny && r.Op != op {
			continue
		}
		if !kindIn(r.Kind, kinds) {
			continue
		}
		if r.Path != nil && !r.Path(p) {
			continue
		}
		r.matched++
		first := max(r.Nth, 1)
		if r.matched < first || (r.Times > 0 && r.matched >= first+r.Times) || hit != nil {
			continue
		}
		hit = r
	}
	if hit != nil {
		f.log = append(f.log, Injection{Op: op, Path: p, Kind: hit.Kind})
	}
	return hit
}

func kindIn(k Kind, ks []Kind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

func (r *Rule) err() error {
	if r.Err == nil {
		return syscall.EIO
	}
	return r.Err
}

func (r *Rule) done(op Op, p string) {
	if r.OnInject != nil {
		r.OnInject(op, p)
	}
}

// plain handles the kinds every call supports: Fail before, FailAfter
// after, Hide as ENOENT where hiding makes sense.
func (f *FS) plain(op Op, p string, hide bool, call func() error) error {
	kinds := []Kind{Fail, FailAfter}
	if hide {
		kinds = append(kinds, Hide)
	}
	r := f.match(op, p, kinds...)
	if r == nil {
		return call()
	}
	defer r.done(op, p)
	switch r.Kind {
	case Hide:
		return &fs.PathError{Op: string(op), Path: p, Err: syscall.ENOENT}
	case FailAfter:
		if err := call(); err != nil {
			return err
		}
	}
	return wrapErr(op, p, r.err())
}

func wrapErr(op Op, p string, err error) error {
	if op == OpLink {
		return &os.LinkError{Op: "link", Old: "(temp)", New: p, Err: err}
	}
	return &fs.PathError{Op: string(op), Path: p, Err: err}
}

func (f *FS) Lstat(name string) (fi fs.FileInfo, err error) {
	err = f.plain(OpLstat, name, true, func() error { fi, err = f.inner.Lstat(name); return err })
	return fi, err
}

func (f *FS) ReadFile(name string) (b []byte, fi fs.FileInfo, err error) {
	err = f.plain(OpReadFile, name, true, func() error { b, fi, err = f.inner.ReadFile(name); return err })
	if err != nil {
		return nil, nil, err
	}
	return b, fi, nil
}

func (f *FS) ReadDir(name string) ([]string, error) {
	var names []string
	err := f.plain(OpReadDir, name, false, func() error {
		var err error
		names, err = f.inner.ReadDir(name)
		return err
	})
	if err != nil {
		return names, err
	}
	out := names[:0:0]
	for _, n := range names {
		p := path.Join(name, n)
		if r := f.match(OpReadDir, p, Hide); r != nil {
			r.done(OpReadDir, p)
			continue
		}
		out = append(out, n)
	}
	return out, nil
}

// ProbeDir passes through to the inner filesystem's vfs.DirProber (an
// error wrapping errors.ErrUnsupported when it has none, on which the
// directory backend probes with Lstat): faults on opening the directory by
// OpProbeDir rules, and on each name by the OpLstat rules that an Lstat of
// it would meet, Hide included.
func (f *FS) ProbeDir(dir string) (func(base string) (bool, error), int64, func() error, error) {
	p, ok := f.inner.(vfs.DirProber)
	if !ok {
		return nil, 0, nil, &fs.PathError{Op: string(OpProbeDir), Path: dir, Err: errors.ErrUnsupported}
	}
	var exists func(string) (bool, error)
	var size int64
	var closeDir func() error
	err := f.plain(OpProbeDir, dir, true, func() error {
		var err error
		exists, size, closeDir, err = p.ProbeDir(dir)
		return err
	})
	if err != nil {
		return nil, 0, nil, err
	}
	return func(base string) (bool, error) {
		var ok bool
		name := path.Join(dir, base)
		err := f.plain(OpLstat, name, true, func() error {
			var err error
			ok, err = exists(base)
			return err
		})
		if errors.Is(err, syscall.ENOENT) {
			return false, nil // hidden: a name that does not exist
		}
		return ok, err
	}, size, closeDir, nil
}

// ScanDir passes through to the inner filesystem's vfs.DirScanner (an
// error wrapping errors.ErrUnsupported when it has none), with the faults
// of ReadDir: OpReadDir rules on the directory, and Hide rules on each
// name.
func (f *FS) ScanDir(dir string, each func(name []byte)) error {
	sc, ok := f.inner.(vfs.DirScanner)
	if !ok {
		return &fs.PathError{Op: string(OpReadDir), Path: dir, Err: errors.ErrUnsupported}
	}
	return f.plain(OpReadDir, dir, false, func() error {
		return sc.ScanDir(dir, func(name []byte) {
			p := path.Join(dir, string(name))
			if r := f.match(OpReadDir, p, Hide); r != nil {
				r.done(OpReadDir, p)
				return
			}
			each(name)
		})
	})
}

// Lock passes through to the inner filesystem's vfs.Locker (an error
// wrapping errors.ErrUnsupported when it has none), failing where an
// OpLock rule says.
func (f *FS) Lock(dir string, exclusive bool) (func() error, error) {
	l, ok := f.inner.(vfs.Locker)
	if !ok {
		return nil, &fs.PathError{Op: string(OpLock), Path: dir, Err: errors.ErrUnsupported}
	}
	var unlock func() error
	err := f.plain(OpLock, dir, false, func() error {
		var err error
		unlock, err = l.Lock(dir, exclusive)
		return err
	})
	return unlock, err
}

func (f *FS) Mkdir(name string, perm fs.FileMode) error {
	return f.plain(OpMkdir, name, false, func() error { return f.inner.Mkdir(name, perm) })
}

func (f *FS) Remove(name string) error {
	return f.plain(OpRemove, name, false, func() error { return f.inner.Remove(name) })
}

// Rename passes through, failing where a rule says (matched on oldpath).
func (f *FS) Rename(oldpath, newpath string) error {
	return f.plain(OpRename, oldpath, false, func() error { return f.inner.Rename(oldpath, newpath) })
}

func (f *FS) SyncDir(name string) error {
	if r := f.match(OpSyncDir, name, Lose); r != nil {
		defer r.done(OpSyncDir, name)
		if l, ok := f.inner.(interface{ LoseUnsyncedDir(string) error }); ok {
			if err := l.LoseUnsyncedDir(name); err != nil {
				return err
			}
		}
		return wrapErr(OpSyncDir, name, r.err())
	}
	return f.plain(OpSyncDir, name, false, func() error { return f.inner.SyncDir(name) })
}

func (f *FS) SyncFS(name string) error {
	if r := f.match(OpSyncFS, name, Lose); r != nil {
		defer r.done(OpSyncFS, name)
		if l, ok := f.inner.(interface{ LoseUnsyncedAll() }); ok {
			l.LoseUnsyncedAll()
		}
		return wrapErr(OpSyncFS, name, r.err())
	}
	return f.plain(OpSyncFS, name, false, func() error { return f.inner.SyncFS(name) })
}

// SyncFile passes through to the inner filesystem's vfs.FileSyncer (an
// error wrapping errors.ErrUnsupported when it has none, on which the
// directory backend fsyncs the directory alone), failing where an
// OpSyncFile rule says.
func (f *FS) SyncFile(name string) error {
	fsy, ok := f.inner.(vfs.FileSyncer)
	if !ok {
		return &fs.PathError{Op: string(OpSyncFile), Path: name, Err: errors.ErrUnsupported}
	}
	return f.plain(OpSyncFile, name, false, func() error { return fsy.SyncFile(name) })
}

func (f *FS) CreateTemp(dir string, perm fs.FileMode) (vfs.TempFile, error) {
	var t vfs.TempFile
	err := f.plain(OpCreateTemp, dir, false, func() error {
		var err error
		t, err = f.inner.CreateTemp(dir, perm)
		return err
	})
	if err != nil {
		if t != nil {
			_ = t.Close()
		}
		return nil, err
	}
	tf := &tempFile{f: f, inner: t, label: path.Join(dir, "(temp)")}
	if _, ok := t.(vfs.LinkSyncer); ok {
		return linkSyncTemp{tf}, nil
	}
	return tf, nil
}

// linkSyncTemp is a temporary whose inner one is a vfs.LinkSyncer, which
// it passes through, judged by the OpSyncLink rules.
type linkSyncTemp struct{ *tempFile }

func (t linkSyncTemp) SyncLink() error {
	return t.f.plain(OpSyncLink, t.label, false, t.inner.(vfs.LinkSyncer).SyncLink)
}

type tempFile struct {
	f     *FS
	inner vfs.TempFile
	label string
}

func (t *tempFile) Write(p []byte) (int, error) {
	r := t.f.match(OpWrite, t.label, Fail, FailAfter, Torn, ShortWrite)
	if r == nil {
		return t.inner.Write(p)
	}
	defer r.done(OpWrite, t.label)
	switch r.Kind {
	case Fail:
		return 0, wrapErr(OpWrite, t.label, r.err())
	case FailAfter:
		n, err := t.inner.Write(p)
		if err != nil {
			return n, err
		}
		return n, wrapErr(OpWrite, t.label, r.err())
	}
	n, err := t.inner.Write(p[:len(p)/2])
	if err != nil || r.Kind == ShortWrite {
		return n, err
	}
	return n, wrapErr(OpWrite, t.label, r.err())
}

func (t *tempFile) Sync() error {
	if r := t.f.match(OpSync, t.label, Lose); r != nil {
		defer r.done(OpSync, t.label)
		if l, ok := t.inner.(interface{ LoseUnsynced() }); ok {
			l.LoseUnsynced()
		}
		return wrapErr(OpSync, t.label, r.err())
	}
	return t.f.plain(OpSync, t.label, false, t.inner.Sync)
}

// Stat passes through to the inner temporary's vfs.FileStater.
func (t *tempFile) Stat() (fs.FileInfo, error) {
	st, ok := t.inner.(vfs.FileStater)
	if !ok {
		return nil, &fs.PathError{Op: "stat", Path: t.label, Err: errors.ErrUnsupported}
	}
	return st.Stat()
}

func (t *tempFile) Link(newname string) error {
	return t.f.plain(OpLink, newname, false, func() error { return t.inner.Link(newname) })
}

func (t *tempFile) Is(name string) (ok bool, err error) {
	err = t.f.plain(OpIs, name, true, func() error { ok, err = t.inner.Is(name); return err })
	return ok, err
}

func (t *tempFile) Close() error {
	return t.f.plain(OpClose, t.label, false, t.inner.Close)
}
