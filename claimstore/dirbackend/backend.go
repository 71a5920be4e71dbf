package dirbackend

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/safefile"
)

// Backend is the directory backend: <root>/<kind>/<hash>/r<n>.json on a
// vfs.FS, the format the reference implementation writes. It implements
// storage.Backend and the optional storage.Censuser, CountedHeader,
// OwnHeadChecker, HeadAtReader, WalkSyncer, Stager, LayoutChecker and
// BatchPreparer (and
// prune's capabilities, in prune.go). Its methods are safe for concurrent
// use; exclusion between writers, in this process or any other, comes from
// link(2), not from locks.
type Backend struct {
	fs   vfs.FS
	root string
	// seatDir and sessionDir are the kind directories' paths, each with a
	// separator after it (see dir).
	seatDir, sessionDir string

	mu    sync.Mutex
	hints map[storage.Loc]uint64 // last head seen: where the next probe starts
	// durable records directories whose entry in their parent this
	// process has made durable; see makeDirs and fsyncDirs.
	durable map[string]bool
	// syncedAt is, per directory, the epoch at which the latest completed
	// fsync of it started; epoch counts events (see parentSync).
	syncedAt map[string]uint64
	epoch    uint64
	// kindOK records kind directories checked to be real directories.
	kindOK map[string]bool
	// failed is the sticky fsync failure; see storage.ErrSyncFailed.
	failed error
	// inflight are the fsyncs running now, by sequence number; settled is
	// signalled as each ends (see settle).
	inflight map[uint64]bool
	syncSeq  uint64
	settled  *sync.Cond
	// synced records, per key, the highest revision known durable: made
	// so by this process's directory fsync after reading or publishing it.
	synced map[storage.Loc]uint64
	// strict is set on the operating system's filesystem, where the root's
	// ancestors are checked before the first write (checkAncestors).
	strict bool
	// sequential makes fsyncDirs fsync one directory after another, in a
	// fixed order (Options.Sequential).
	sequential bool
	// linked remembers, per key, the file this backend last linked as a
	// revision, so that IsOwnHead can tell that very file from one put in
	// its place by hand.
	linked map[storage.Loc]linkedFile
	// uid is the root's owner, once read (see rootUID).
	uid             int
	uidOK, uidKnown bool
	// euid is this process's effective uid, read at New (see makeDir).
	euid int
}

var (
	_ storage.Backend        = (*Backend)(nil)
	_ storage.Censuser       = (*Backend)(nil)
	_ storage.OwnHeadChecker = (*Backend)(nil)
	_ storage.HeadAtReader   = (*Backend)(nil)
	_ storage.WalkSyncer     = (*Backend)(nil)
	_ storage.Stager         = (*Backend)(nil)
	_ storage.LayoutChecker  = (*Backend)(nil)
	_ storage.BatchPreparer  = (*Backend)(nil)
	_ storage.CountedHeader  = (*Backend)(nil)
)

// Options configure a Backend. A nil *Options means all defaults.
type Options struct {
	// FS is the filesystem the root is on. Default: vfs.OS, and then the
	// root's ancestors are checked (see Open), which a simulated
	// filesystem has none of.
	FS vfs.FS
	// Sequential makes the fsyncs that the protocol lets run at once (a
	// directory's and its parents') run one after another in a fixed order,
	// so that tests that stop the filesystem after its k-th call meet the
	// same call at the same k every run. The crash states are the same.
	Sequential bool
}

// Open returns the directory backend on the claim root, checking it as a
// root on the operating system's filesystem must be (when opts.FS is not
// set): the root need not exist (the first write creates it, mode 0700),
// but its parent must, and an existing root must be a real directory (not
// a symlink) that no other user can write into; every ancestor must belong
// to root or to this user and not be writable by group or others unless
// sticky, since a user who can write into one can rename the root away
// (checked again before the first write). Otherwise the error wraps
// storage.ErrUnsafeRoot and names the path and the fix. On another
// filesystem (opts.FS, a test's) the root is not checked. Open touches
// nothing on disk.
func Open(root string, opts *Options) (*Backend, error) {
	if root == "" {
		return nil, errors.New("dirbackend: a claim root is required")
	}
	root = filepath.Clean(root)
	if isStagingName(root) {
		return nil, &fs.PathError{Op: "open claim root", Path: root, Err: fmt.Errorf("%w: a directory named .NAME%s is where claimctl copy builds a copy of a root before it renames it into place; it is never a root (remove it with claimctl copy --abort --to NAME)", storage.ErrUnsafeRoot, StagingSuffix)}
	}
	if opts == nil || opts.FS == nil || opts.FS == vfs.OS {
		if err := CheckRoot(root); err != nil {
			return nil, err
		}
	}
	return New(root, opts), nil
}

// New is Open without its checks: the directory backend on root as it is.
// On the operating system's filesystem (opts.FS not set, or vfs.OS) the
// root's ancestors are still checked before the first write.
func New(root string, opts *Options) *Backend {
	if opts == nil {
		opts = &Options{}
	}
	fsys := opts.FS
	if fsys == nil {
		fsys = vfs.OS
	}
	// The ancestors of a root on the operating system's filesystem are
	// checked before its first write; a simulated one has none to check.
	strict := fsys == vfs.OS
	b := &Backend{fs: fsys, root: filepath.Clean(root), hints: map[storage.Loc]uint64{}, durable: map[string]bool{}, syncedAt: map[string]uint64{}, kindOK: map[string]bool{}, synced: map[storage.Loc]uint64{}, strict: strict, sequential: opts.Sequential, inflight: map[uint64]bool{}, euid: geteuid()}
	b.settled = sync.NewCond(&b.mu)
	b.seatDir = filepath.Join(b.root, string(storage.KindSeat)) + string(filepath.Separator)
	b.sessionDir = filepath.Join(b.root, string(storage.KindSession)) + string(filepath.Separator)
	return b
}

// Root implements storage.Backend: the root's path.
func (b *Backend) Root() string { return b.root }

// Path implements storage.Backend: elem joined to the root's path.
func (b *Backend) Path(elem ...string) string {
	return filepath.Join(append([]string{b.root}, elem...)...)
}

// FS returns the filesystem the backend runs on.
func (b *Backend) FS() vfs.FS { return b.fs }

// dir is the directory of loc's key: filepath.Join of the root, the kind
// and the hash. A key's hash is a plain name (no separator, not "." or
// ".."), and joined to its kind directory's clean path it is then that
// path, a separator and the name: every publish and every look names its
// key directory, and cleaning the whole path again was most of Join's
// cost.
func (b *Backend) dir(loc storage.Loc) string {
	var prefix string
	switch loc.Kind {
	case storage.KindSeat:
		prefix = b.seatDir
	case storage.KindSession:
		prefix = b.sessionDir
	}
	if prefix != "" && plainName(loc.Hash) {
		return prefix + loc.Hash
	}
	return filepath.Join(b.root, string(loc.Kind), loc.Hash)
}

// plainName reports whether name is one clean path element: not empty,
// not "." or "..", without a separator.
func plainName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsRune(name, filepath.Separator)
}

// checkKeyDir is checkDir for a key directory, which is checked inside its
// kind directory: in a kind directory that another user could write into,
// distrust is non-nil even when the key directory is missing (they could
// have removed it, history and all): the key reads as held, and nothing is
// published into it. A kind directory found trustworthy is not checked
// again by this backend; a distrusted one is checked every time (an
// operator may fix it).
func (b *Backend) checkKeyDir(dir string) (exists bool, distrust, err error) {
	kind := filepath.Dir(dir)
	b.mu.Lock()
	ok := b.kindOK[kind]
	b.mu.Unlock()
	if !ok {
		exists, distrust, err := b.checkDir(kind)
		if err != nil || !exists {
			return false, nil, err
		}
		if distrust != nil {
			exists, _, err := b.checkDir(dir)
			return exists, distrust, err
		}
		b.mu.Lock()
		b.kindOK[kind] = true
		b.mu.Unlock()
	}
	return b.checkDir(dir)
}

// usable is the outcome of a directory's check (checkDir, checkKeyDir:
// exists, distrust, err) for an operation op on path in it: the check's
// failure, the directory's distrust, or fs.ErrNotExist naming path when
// it is missing; nil when it is there and trusted.
func usable(exists bool, distrust, err error, op, path string) error {
	switch {
	case err != nil:
		return err
	case distrust != nil:
		return distrust
	case !exists:
		return &fs.PathError{Op: op, Path: path, Err: fs.ErrNotExist}
	}
	return nil
}

// checkDir verifies that a directory of the root (a kind directory, a key
// directory, proofs/), if it exists, is a real directory: the store never
// follows a symlink out of the root. distrust is non-nil when the directory
// exists but another user could write into it or owns it (see trustInfo).
func (b *Backend) checkDir(dir string) (exists bool, distrust, err error) {
	fi, err := b.fs.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, err
	}
	if !fi.IsDir() {
		what := safefile.Describe(fi.Mode()) + ", not a directory"
		if fi.Mode()&fs.ModeSymlink != 0 {
			what = "a symlink"
		}
		return false, nil, &fs.PathError{Op: "open directory", Path: dir, Err: fmt.Errorf("%w: it is %s; the store never follows it (move it aside and run claimctl fsck)", storage.ErrUnsafePath, what)}
	}
	return true, b.trustInfo(dir, fi), nil
}

// prober returns an existence check for revisions of dir, the directory's
// size where the filesystem says, and its release.
func (b *Backend) prober(dir string) (func(n uint64) (bool, error), func(name string) (bool, error), int64, func()) {
	if p, ok := b.fs.(vfs.DirProber); ok {
		if exists, size, closeDir, err := p.ProbeDir(dir); err == nil {
			return func(n uint64) (bool, error) { return exists(storage.RevisionName(n)) }, exists, size, func() { _ = closeDir() }
		}
	}
	named := func(name string) (bool, error) {
		_, err := b.fs.Lstat(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return err == nil, err
	}
	return func(n uint64) (bool, error) { return named(storage.RevisionName(n)) }, named, 0, func() {}
}

// Head finds the highest revision by probing names rather than listing the
// directory (probe), then reads it.
func (b *Backend) Head(ctx context.Context, loc storage.Loc) (uint64, []byte, error) {
	n, data, _, err := b.CountedHead(ctx, loc)
	return n, data, err
}

// CountedHead implements storage.CountedHeader: Head, and a census only
// where the probe's first look is one — a key whose directory does not
// exist has no revision at all (the census Census gives it), so a new
// key's free head needs no second look. Anywhere else the probe sees
// names, not the whole directory, and the census is nil.
func (b *Backend) CountedHead(ctx context.Context, loc storage.Loc) (uint64, []byte, *storage.Count, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, nil, err
	}
	lo, missing, distrust, err := b.probe(loc)
	if err != nil {
		return 0, nil, nil, err
	}
	if missing {
		return 0, nil, &storage.Count{Base: 1}, nil
	}
	lo, data, err := b.readHead(loc, lo, distrust)
	return lo, data, nil, err
}

// readHead reads revision lo of loc, the head probe found, as Head returns
// it.
func (b *Backend) readHead(loc storage.Loc, lo uint64, distrust error) (uint64, []byte, error) {
	if distrust != nil {
		// Even with no revision: whoever else can write here could have
		// removed them all.
		return lo, nil, &storage.ReadError{N: lo, Err: distrust}
	}
	if lo == 0 {
		return 0, nil, nil
	}
	data, rerr := b.readFile(filepath.Join(b.dir(loc), storage.RevisionName(lo)))
	if rerr != nil {
		return lo, nil, &storage.ReadError{N: lo, Err: rerr}
	}
	return lo, data, nil
}

// IsOwnHead reports, without reading the revision, whether revision n is
// still loc's highest and the very file this backend linked there: in a
// key directory it can trust, the name r<n> is the file it linked
// (identity from Lstat) and the name r<n+1> is free. Any doubt (an error,
// another file, a directory others can write) is false: the caller then
// reads the head.
//
// It asks exactly what a probe from the hint n asks (n exists, n+1 does
// not), three Lstats in all, rather than running the probe: the probe's
// other calls (opening the directory, its size, the base pointer) cannot
// change the answer here. A base pointer only ever names a revision below
// a key's head (prune compacts below an old free revision, never above a
// held head), and nothing above n+1 can exist without n+1 in a history
// this backend published into (the store's own publish of n read the key
// for writing, which lists it whole: see Store.fencedOwn). What is kept
// is what guards exclusion: the directory's trust, checked every time, so
// that a directory others could write into is never vouched for; the
// name above n, so that a revision another writer linked is never missed;
// and the identity of n, so that a file put in its place is not taken for
// this backend's.
func (b *Backend) IsOwnHead(ctx context.Context, loc storage.Loc, n uint64) bool {
	b.mu.Lock()
	l, ok := b.linked[loc]
	b.mu.Unlock()
	if !ok || l.n != n || l.id == (vfs.FileID{}) {
		return false
	}
	dir := b.dir(loc)
	if ok, distrust, err := b.checkKeyDir(dir); err != nil || distrust != nil || !ok {
		return false
	}
	// The inode alone is not enough: a file put in place of a removed one
	// may get its number back at once.
	fi, err := b.fs.Lstat(filepath.Join(dir, storage.RevisionName(n)))
	if err != nil || vfs.Identity(fi) != l.id {
		return false
	}
	if n >= storage.MaxRevision {
		return true // there is no number above to take
	}
	_, err = b.fs.Lstat(filepath.Join(dir, storage.RevisionName(n+1)))
	return errors.Is(err, fs.ErrNotExist)
}

type linkedFile struct {
	n  uint64
	id vfs.FileID
	// sum is the maphash of the bytes written (linkSeed): what a caller
	// that names the bytes it expects there is told they are.
	sum uint64
}

// linkSeed seeds the sums of linkedFile.
var linkSeed = maphash.MakeSeed()

// probe finds the highest revision by probing names, so that its cost
// does not grow with the key's history: from the last head seen it gallops
// up in doubling steps to a missing name, then bisects. Cold (no head
// seen), it starts from an estimate of the history's length that the key
// directory's size gives, and gallops both ways from there. It relies on
// the format's density (revisions 1..n, no gaps), which the publish
// protocol keeps; a gap can only come from outside the protocol, and fsck
// reports it. distrust is the directory's trust problem (see checkDir).
func (b *Backend) probe(loc storage.Loc) (n uint64, missing bool, distrust, err error) {
	dir := b.dir(loc)
	ok, distrust, err := b.checkKeyDir(dir)
	if err != nil || !ok {
		// A missing directory in a kind directory others can write keeps
		// its distrust: its history may have been removed.
		return 0, err == nil && distrust == nil, distrust, err
	}
	exists, existsName, size, done := b.prober(dir)
	defer done()
	// A compacted key keeps its history from its base up (see prune.go);
	// what a compaction cut short left below the base is not the key's,
	// and a probe must never land on it: the probe starts at the base.
	base := uint64(1)
	if has, err := existsName(BaseName); err != nil {
		return 0, false, nil, err
	} else if has {
		if base, err = b.readBase(loc); err != nil {
			return 0, false, nil, err
		}
	}
	b.mu.Lock()
	lo := b.hints[loc]
	b.mu.Unlock()
	if base > 1 {
		start := max(lo, base)
		lo = 0
		if ok, err := exists(start); err != nil {
			return 0, false, nil, err
		} else if ok {
			if lo, err = climb(exists, start); err != nil {
				return 0, false, nil, err
			}
		} else if start > base {
			// The hint is gone: start over from the base.
			if ok, err := exists(base); err != nil {
				return 0, false, nil, err
			} else if ok {
				if lo, err = climb(exists, base); err != nil {
					return 0, false, nil, err
				}
			}
		}
		if lo == 0 {
			// A base pointer whose revision is missing: the history it
			// names was lost (or the pointer planted). Never "no
			// revisions": the key reads as damaged, at the base.
			return base, false, &fs.PathError{Op: "read base", Path: filepath.Join(dir, storage.RevisionName(base)), Err: &storage.DamageError{Reason: fmt.Sprintf("the key's base pointer names revision %d as its oldest, and it is missing; the key reads as held; run claimctl fsck", base)}}, nil
		}
		b.mu.Lock()
		b.hints[loc] = lo
		b.mu.Unlock()
		return lo, false, distrust, nil
	}
	if lo > 0 {
		if ok, err := exists(lo); err != nil {
			return 0, false, nil, err
		} else if !ok {
			lo = 0 // the history shrank: only tampering does that; start over
		}
	}
	// Invariant: lo exists (or is 0), hi does not (once up is false).
	hi, up := lo+1, true
	if lo == 0 {
		if guess := estimateRevisions(size); guess > 0 {
			ok, err := exists(guess)
			if err != nil {
				return 0, false, nil, err
			}
			if ok {
				lo, hi = guess, guess+1
			} else {
				// Gallop down from the guess to a revision that exists.
				hi, up = guess, false
				for step := uint64(1); ; step *= 2 {
					cand := uint64(0)
					if hi > step {
						cand = hi - step
					}
					if cand == 0 {
						break
					}
					ok, err := exists(cand)
					if err != nil {
						return 0, false, nil, err
					}
					if ok {
						lo = cand
						break
					}
					hi = cand
				}
			}
		}
	}
	if up {
		for step := uint64(1); ; step *= 2 {
			if hi > storage.MaxRevision {
				hi = storage.MaxRevision + 1
				break
			}
			ok, err := exists(hi)
			if err != nil {
				return 0, false, nil, err
			}
			if !ok {
				break
			}
			lo, hi = hi, hi+step
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := exists(mid)
		if err != nil {
			return 0, false, nil, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	// The hint only decides where the next probe starts, never its answer
	// (the probe checks the hint exists before building on it), so even a
	// directory others can write may leave one.
	b.mu.Lock()
	b.hints[loc] = lo
	b.mu.Unlock()
	return lo, false, distrust, nil
}

// estimateRevisions guesses how many revisions a key directory of the
// given size (st_size) holds, for a cold probe to start near its head: on
// ext4 an entry of a revision's 16-character name takes 24 bytes, and an
// indexed directory's blocks end up about two-thirds full (measured: 10,000
// revisions in 356,352 bytes), so the guess is two-thirds of what the size
// could hold. 0 means no guess. Only the number of probes depends on it,
// never the answer.
func estimateRevisions(size int64) uint64 {
	if size <= 4096 {
		return 0
	}
	return uint64(size) / 24 * 2 / 3
}

func (b *Backend) Read(ctx context.Context, loc storage.Loc, n uint64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return b.readFile(filepath.Join(b.dir(loc), storage.RevisionName(n)))
}

func (b *Backend) List(ctx context.Context, loc storage.Loc) ([]uint64, []string, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	dir := b.dir(loc)
	// A distrusted directory is still listed: Head reports it, and fsck
	// needs to see what is in it.
	if ok, _, err := b.checkKeyDir(dir); err != nil || !ok {
		return nil, nil, err
	}
	names, err := b.fs.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	var revs []uint64
	var other []string
	for _, name := range names {
		if n, ok := storage.ParseRevisionName(name); ok {
			revs = append(revs, n)
		} else {
			other = append(other, name)
		}
	}
	slices.Sort(revs)
	sort.Strings(other)
	return revs, other, nil
}

// census counts loc's revisions from base up and finds the highest,
// without keeping their names: a cold free head's listing, whose cost
// grows with the history, is mostly this.
func (b *Backend) census(ctx context.Context, loc storage.Loc, base uint64) (top uint64, count int, err error) {
	dir := b.dir(loc)
	if ok, _, err := b.checkKeyDir(dir); err != nil || !ok {
		return 0, 0, err
	}
	sc, ok := b.fs.(vfs.DirScanner)
	if !ok {
		revs, _, err := b.List(ctx, loc)
		revs = storage.DropBelow(revs, base)
		if err != nil || len(revs) == 0 {
			return 0, 0, err
		}
		return revs[len(revs)-1], len(revs), nil
	}
	err = sc.ScanDir(dir, func(name []byte) {
		if n, ok := storage.ParseRevisionNameBytes(name); ok && n >= base {
			count++
			top = max(top, n)
		}
	})
	return top, count, err
}

func (b *Backend) Locs(ctx context.Context, kind storage.Kind) ([]storage.Loc, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir := filepath.Join(b.root, string(kind))
	// A kind directory that is a symlink is not listed: its keys would be
	// another directory's. One others can write is (fsck reports it, and
	// each of its keys reads held).
	if ok, _, err := b.checkDir(dir); err != nil || !ok {
		return nil, err
	}
	names, err := b.fs.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []storage.Loc
	for _, name := range names {
		if storage.IsKeyHash(name) {
			out = append(out, storage.Loc{Kind: kind, Hash: name})
		}
	}
	return out, nil
}

// sync runs an fsync and makes a failure sticky.
func (b *Backend) sync(f func() error) error {
	b.mu.Lock()
	b.syncSeq++
	id := b.syncSeq
	b.inflight[id] = true
	b.mu.Unlock()
	err := f()
	b.mu.Lock()
	if err != nil && b.failed == nil {
		b.failed = err
	}
	delete(b.inflight, id)
	b.settled.Broadcast()
	b.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: %w", storage.ErrSyncFailed, err)
	}
	return nil
}

// syncEach runs fsyncs that report an error each, as sync runs one: the
// first failure is sticky, and each failure wraps storage.ErrSyncFailed.
func (b *Backend) syncEach(f func() []error) []error {
	var errs []error
	_ = b.sync(func() error {
		errs = f()
		return errors.Join(errs...)
	})
	for i, err := range errs {
		if err != nil {
			errs[i] = fmt.Errorf("%w: %w", storage.ErrSyncFailed, err)
		}
	}
	return errs
}

// running returns the fsyncs in flight now.
func (b *Backend) running() []uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]uint64, 0, len(b.inflight))
	for id := range b.inflight {
		ids = append(ids, id)
	}
	return ids
}

// settle waits for the fsyncs that were in flight when a caller's own
// began (before) to end, then fails if any fsync of this store has failed.
// A failed directory fsync may have lost entries that another goroutine's
// later, successful fsync of the same directory never writes (the kernel
// reports the loss once): nothing is acknowledged after such a failure,
// including by an operation that was already under way.
func (b *Backend) settle(before []uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range before {
		for b.inflight[id] && b.failed == nil {
			b.settled.Wait()
		}
	}
	if b.failed != nil {
		return fmt.Errorf("%w (first failure: %v)", storage.ErrSyncFailed, b.failed)
	}
	return nil
}

func (b *Backend) checkFailed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed != nil {
		return fmt.Errorf("%w (first failure: %v)", storage.ErrSyncFailed, b.failed)
	}
	return nil
}

func (b *Backend) proofDir() string { return filepath.Join(b.root, "proofs") }

func (b *Backend) WriteProof(ctx context.Context, id string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := b.writeExclusive(b.proofDir(), id+".json", data, nil)
	if errors.Is(err, storage.ErrRevisionExists) {
		// Another issuer's proof: it may be linked and not yet durable
		// (its writer may have died before the directory fsync, or before
		// the fsync of the root that makes proofs/ itself durable), and
		// the caller is about to rely on it.
		needs, merr := b.makeDirs(b.proofDir())
		if merr != nil {
			return merr
		}
		if serr := b.fsyncDirs([]string{b.proofDir()}, needs); serr != nil {
			return serr
		}
		return &fs.PathError{Op: "write proof", Path: filepath.Join(b.proofDir(), id+".json"), Err: fs.ErrExist}
	}
	return err
}

// ReadProof reads a proof as revisions are read: proofs/ must be a real
// directory that only the root's owner can write, and the file a regular,
// trusted file of bounded size. A proof reached through a symlink would
// free a live claim on evidence from anywhere.
func (b *Backend) ReadProof(ctx context.Context, id string) ([]byte, error) {
	path := filepath.Join(b.proofDir(), id+".json")
	ok, distrust, err := b.checkDir(b.proofDir())
	if err := usable(ok, distrust, err, "read proof", path); err != nil {
		return nil, err
	}
	return b.readFile(path)
}

func (b *Backend) Proofs(ctx context.Context) ([]string, error) {
	if _, _, err := b.checkDir(b.proofDir()); err != nil {
		return nil, err
	}
	names, err := b.fs.ReadDir(b.proofDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var ids []string
	for _, name := range names {
		if id, ok := strings.CutSuffix(name, ".json"); ok && !strings.HasPrefix(name, vfs.TempPrefix) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids, err
}

// SyncWalk implements storage.WalkSyncer: it makes durable, at once, every key a walk has read up to the
// revision it read (heads: loc -> highest revision seen), with the
// directories holding them: one syncfs(2) of the root's filesystem instead
// of a directory fsync per key, which a walk that reports thousands of
// free pairs would otherwise pay (see Store.syncHeads). The root is one
// filesystem: the store never crosses a mount point below it. Where the
// platform has no syncfs it does nothing, and each key is synced when a
// decision rests on it (Sync).
func (b *Backend) SyncWalk(ctx context.Context, heads map[storage.Loc]uint64) error {
	if err := b.checkFailed(); err != nil {
		return err
	}
	// The root's entry in its parent, which may be on another filesystem
	// than the root (a mount point).
	needs, err := b.makeDirs(b.root)
	if err != nil {
		return err
	}
	// The root's own contents are on its filesystem: the syncfs below
	// makes them durable, or without it each key's Sync, which fsyncs the
	// root as the parent of the kind directories.
	if err := b.fsyncOwed(nil, needs, nil, false); err != nil {
		return err
	}
	err = b.fs.SyncFS(b.root)
	if errors.Is(err, errors.ErrUnsupported) {
		// Each decision syncs its own key (Sync) instead: a directory
		// fsync per key, and nothing is marked durable here.
		return nil
	}
	// A walk syncs before it classifies, so no other fsync of this store
	// is in flight: the syncfs's own error is all there is to settle.
	if err := b.sync(func() error { return err }); err != nil {
		return &fs.PathError{Op: "syncfs", Path: b.root, Err: err}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for l, n := range heads {
		b.durable[filepath.Dir(b.dir(l))] = true
		b.durable[b.dir(l)] = true
		if b.synced[l] < n {
			b.synced[l] = n
		}
	}
	return nil
}

// climb returns the highest revision of a run that starts at lo (which
// exists): galloping up in doubling steps to a missing name, then
// bisecting, as probe does.
func climb(exists func(uint64) (bool, error), lo uint64) (uint64, error) {
	hi := lo + 1
	for step := uint64(1); ; step *= 2 {
		if hi > storage.MaxRevision {
			hi = storage.MaxRevision + 1
			break
		}
		ok, err := exists(hi)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		lo, hi = hi, hi+step
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := exists(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}
