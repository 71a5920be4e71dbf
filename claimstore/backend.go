package claimstore

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/internal/safefile"
)

// The seam's types live in package storage, so that a backend on another
// engine (claimstore/etcdbackend) implements it without importing this
// package, and this package's tests can run their suite over it. They are
// aliased here so that the store's API is unchanged.
type (
	Loc      = storage.Loc
	Barrier  = storage.Barrier
	Backend  = storage.Backend
	Prepared = storage.Prepared
)

const (
	BarrierTempWritten = storage.BarrierTempWritten
	BarrierTempSynced  = storage.BarrierTempSynced
	BarrierLinked      = storage.BarrierLinked
	BarrierDirSynced   = storage.BarrierDirSynced
	BarrierBetweenKeys = storage.BarrierBetweenKeys
	// MaxRevision is the highest revision number the file name can carry.
	MaxRevision = storage.MaxRevision
)

// Barriers lists the barrier points in the order an operation meets them.
var Barriers = storage.Barriers

// Loc returns where k's history lives.
func (k Key) Loc() Loc { return Loc{Kind: k.Kind, Hash: k.Hash()} }

// Point is where a barrier hook is called: the barrier, the key and the
// revision being published (for between-keys, the seat key and its new
// revision), and the claim.
type Point struct {
	Barrier  Barrier
	Key      Key
	Revision uint64
	ClaimID  string
}

// BarrierFunc is called at every barrier point. An error stops the
// operation right there and is returned from it, leaving the disk as a
// crash at that point would. A store that overlaps a step's work (see
// Options.Sequential) calls it from more than one goroutine at once, in an
// order that varies within the protocol's constraints: seat linked and
// dir-synced, between-keys, then session linked.
type BarrierFunc func(Point) error

// RevisionName returns the file name of revision n: "r" and ten digits.
func RevisionName(n uint64) string { return storage.RevisionName(n) }

// parseRevisionName is ParseRevisionName on bytes, allocating nothing.
func parseRevisionName(name []byte) (uint64, bool) { return storage.ParseRevisionNameBytes(name) }

// ParseRevisionName returns the number in a revision file name.
func ParseRevisionName(name string) (uint64, bool) { return storage.ParseRevisionName(name) }

// dirBackend is the directory backend: <root>/<kind>/<hash>/r<n>.json on an FS.
type dirBackend struct {
	fs   FS
	root string

	mu    sync.Mutex
	hints map[Loc]uint64 // last head seen: where the next probe starts
	// durable records directories whose entry in their parent this
	// process has made durable; see makeDirs and fsyncDirs.
	durable map[string]bool
	// syncedAt is, per directory, the epoch at which the latest completed
	// fsync of it started; epoch counts events (see parentSync).
	syncedAt map[string]uint64
	epoch    uint64
	// kindOK records kind directories checked to be real directories.
	kindOK map[string]bool
	// failed is the sticky fsync failure; see ErrSyncFailed.
	failed error
	// inflight are the fsyncs running now, by sequence number; settled is
	// signalled as each ends (see settle).
	inflight map[uint64]bool
	syncSeq  uint64
	settled  *sync.Cond
	// synced records, per key, the highest revision known durable: made
	// so by this process's directory fsync after reading or publishing it.
	synced map[Loc]uint64
	// strict is set on the operating system's filesystem, where the root's
	// ancestors are checked before the first write (checkAncestors).
	strict bool
	// sequential makes fsyncDirs fsync one directory after another, in a
	// fixed order (Options.Sequential).
	sequential bool
	// linked remembers, per key, the file this backend last linked as a
	// revision, so that IsOwnHead can tell that very file from one put in
	// its place by hand.
	linked map[Loc]linkedFile
	// uid is the root's owner, once read (see rootUID).
	uid             int
	uidOK, uidKnown bool
}

var _ Backend = (*dirBackend)(nil)

// NewDirBackend returns the directory backend for the claim root on fsys:
// the format the reference implementation writes.
func NewDirBackend(fsys FS, root string) Backend {
	_, strict := fsys.(osFS)
	b := &dirBackend{fs: fsys, root: root, hints: map[Loc]uint64{}, durable: map[string]bool{}, syncedAt: map[string]uint64{}, kindOK: map[string]bool{}, synced: map[Loc]uint64{}, strict: strict, inflight: map[uint64]bool{}}
	b.settled = sync.NewCond(&b.mu)
	return b
}

func (b *dirBackend) dir(loc Loc) string { return filepath.Join(b.root, string(loc.Kind), loc.Hash) }

// checkKeyDir is checkDir for a key directory, which is checked inside its
// kind directory: in a kind directory that another user could write into,
// distrust is non-nil even when the key directory is missing (they could
// have removed it, history and all): the key reads as held, and nothing is
// published into it. A kind directory found trustworthy is not checked
// again by this backend; a distrusted one is checked every time (an
// operator may fix it).
func (b *dirBackend) checkKeyDir(dir string) (exists bool, distrust, err error) {
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

// checkDir verifies that a directory of the root (a kind directory, a key
// directory, proofs/), if it exists, is a real directory: the store never
// follows a symlink out of the root. distrust is non-nil when the directory
// exists but another user could write into it or owns it (see trustInfo).
func (b *dirBackend) checkDir(dir string) (exists bool, distrust, err error) {
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
		return false, nil, &fs.PathError{Op: "open directory", Path: dir, Err: fmt.Errorf("%w: it is %s; the store never follows it (move it aside and run claimctl fsck)", ErrUnsafePath, what)}
	}
	return true, b.trustInfo(dir, fi), nil
}

// probeFS is implemented by filesystems that can check many names of one
// directory more cheaply than one Lstat each (OSFS can). size is the
// directory's st_size, or 0.
type probeFS interface {
	ProbeDir(dir string) (exists func(base string) (bool, error), size int64, closeDir func() error, err error)
}

// prober returns an existence check for revisions of dir, the directory's
// size where the filesystem says, and its release.
func (b *dirBackend) prober(dir string) (func(n uint64) (bool, error), int64, func()) {
	if p, ok := b.fs.(probeFS); ok {
		if exists, size, closeDir, err := p.ProbeDir(dir); err == nil {
			return func(n uint64) (bool, error) { return exists(RevisionName(n)) }, size, func() { _ = closeDir() }
		}
	}
	return func(n uint64) (bool, error) {
		_, err := b.fs.Lstat(filepath.Join(dir, RevisionName(n)))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return err == nil, err
	}, 0, func() {}
}

// Head finds the highest revision by probing names rather than listing the
// directory (probe), then reads it.
func (b *dirBackend) Head(loc Loc) (uint64, []byte, error, error) {
	lo, distrust, err := b.probe(loc)
	if err != nil {
		return 0, nil, nil, err
	}
	if distrust != nil {
		// Even with no revision: whoever else can write here could have
		// removed them all.
		return lo, nil, distrust, nil
	}
	if lo == 0 {
		return 0, nil, nil, nil
	}
	data, rerr := b.readFile(filepath.Join(b.dir(loc), RevisionName(lo)))
	if rerr != nil {
		return lo, nil, rerr, nil
	}
	return lo, data, nil, nil
}

// IsOwnHead reports, without reading the revision, whether revision n is
// still loc's highest and the very file this backend linked there: found by
// probing names in a directory it can trust, and identified by fstat
// identity. Any doubt (an error, another file, a directory others can
// write) is false: the caller then reads the head.
func (b *dirBackend) IsOwnHead(loc Loc, n uint64) bool {
	head, distrust, err := b.probe(loc)
	if err != nil || distrust != nil || head != n {
		return false
	}
	b.mu.Lock()
	l, ok := b.linked[loc]
	b.mu.Unlock()
	if !ok || l.n != n || l.id == (fileID{}) {
		return false
	}
	// The inode alone is not enough: a file put in place of a removed one
	// may get its number back at once.
	fi, err := b.fs.Lstat(filepath.Join(b.dir(loc), RevisionName(n)))
	return err == nil && identityOf(fi) == l.id
}

type linkedFile struct {
	n  uint64
	id fileID
}

// fileID is what tells one file from another put in its place: device and
// inode (a removed file's number may be given to the next one at once), and
// size and modification time. Zero when the filesystem does not say.
type fileID struct {
	dev, ino, size uint64
	mtime, ctime   int64 // ctime cannot be set from user space: a copy with -p keeps mtime, not ctime
}

// probe finds the highest revision by probing names, so that its cost
// does not grow with the key's history: from the last head seen it gallops
// up in doubling steps to a missing name, then bisects. Cold (no head
// seen), it starts from an estimate of the history's length that the key
// directory's size gives, and gallops both ways from there. It relies on
// the format's density (revisions 1..n, no gaps), which the publish
// protocol keeps; a gap can only come from outside the protocol, and fsck
// reports it. distrust is the directory's trust problem (see checkDir).
func (b *dirBackend) probe(loc Loc) (uint64, error, error) {
	dir := b.dir(loc)
	ok, distrust, err := b.checkKeyDir(dir)
	if err != nil || !ok {
		// A missing directory in a kind directory others can write keeps
		// its distrust: its history may have been removed.
		return 0, distrust, err
	}
	exists, size, done := b.prober(dir)
	defer done()
	b.mu.Lock()
	lo := b.hints[loc]
	b.mu.Unlock()
	if lo > 0 {
		if ok, err := exists(lo); err != nil {
			return 0, nil, err
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
				return 0, nil, err
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
						return 0, nil, err
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
			if hi > MaxRevision {
				hi = MaxRevision + 1
				break
			}
			ok, err := exists(hi)
			if err != nil {
				return 0, nil, err
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
			return 0, nil, err
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
	return lo, distrust, nil
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

func (b *dirBackend) Read(loc Loc, n uint64) ([]byte, error) {
	return b.readFile(filepath.Join(b.dir(loc), RevisionName(n)))
}

func (b *dirBackend) List(loc Loc) ([]uint64, []string, error) {
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
		if n, ok := ParseRevisionName(name); ok {
			revs = append(revs, n)
		} else {
			other = append(other, name)
		}
	}
	slices.Sort(revs)
	sort.Strings(other)
	return revs, other, nil
}

// scanFS is implemented by filesystems that can stream a directory's
// names without allocating them (OSFS can, with getdents).
type scanFS interface {
	ScanDir(dir string, each func(name []byte)) error
}

// Census counts loc's revisions and finds the highest, without keeping
// their names: a cold free head's listing, whose cost grows with the
// history, is mostly this.
func (b *dirBackend) Census(loc Loc) (top uint64, count int, err error) {
	dir := b.dir(loc)
	if ok, _, err := b.checkKeyDir(dir); err != nil || !ok {
		return 0, 0, err
	}
	sc, ok := b.fs.(scanFS)
	if !ok {
		revs, _, err := b.List(loc)
		if err != nil || len(revs) == 0 {
			return 0, 0, err
		}
		return revs[len(revs)-1], len(revs), nil
	}
	err = sc.ScanDir(dir, func(name []byte) {
		if n, ok := parseRevisionName(name); ok {
			count++
			top = max(top, n)
		}
	})
	return top, count, err
}

func (b *dirBackend) Locs(kind Kind) ([]Loc, error) {
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
	var out []Loc
	for _, name := range names {
		if isKeyHash(name) {
			out = append(out, Loc{Kind: kind, Hash: name})
		}
	}
	return out, nil
}

func isKeyHash(name string) bool { return storage.IsKeyHash(name) }

// sync runs an fsync and makes a failure sticky.
func (b *dirBackend) sync(f func() error) error {
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
		return fmt.Errorf("%w: %w", ErrSyncFailed, err)
	}
	return nil
}

// running returns the fsyncs in flight now.
func (b *dirBackend) running() []uint64 {
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
func (b *dirBackend) settle(before []uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range before {
		for b.inflight[id] && b.failed == nil {
			b.settled.Wait()
		}
	}
	if b.failed != nil {
		return fmt.Errorf("%w (first failure: %v)", ErrSyncFailed, b.failed)
	}
	return nil
}

func (b *dirBackend) checkFailed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed != nil {
		return fmt.Errorf("%w (first failure: %v)", ErrSyncFailed, b.failed)
	}
	return nil
}

func (b *dirBackend) proofDir() string { return filepath.Join(b.root, "proofs") }

func (b *dirBackend) WriteProof(id string, data []byte) error {
	err := b.writeExclusive(b.proofDir(), id+".json", data, nil)
	if errors.Is(err, ErrRevisionExists) {
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
func (b *dirBackend) ReadProof(id string) ([]byte, error) {
	path := filepath.Join(b.proofDir(), id+".json")
	ok, distrust, err := b.checkDir(b.proofDir())
	switch {
	case err != nil:
		return nil, err
	case distrust != nil:
		return nil, distrust
	case !ok:
		return nil, &fs.PathError{Op: "read proof", Path: path, Err: fs.ErrNotExist}
	}
	return b.readFile(path)
}

func (b *dirBackend) Proofs() ([]string, error) {
	if _, _, err := b.checkDir(b.proofDir()); err != nil {
		return nil, err
	}
	names, err := b.fs.ReadDir(b.proofDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var ids []string
	for _, name := range names {
		if id, ok := strings.CutSuffix(name, ".json"); ok && !strings.HasPrefix(name, TempPrefix) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids, err
}

// syncWalk makes durable, at once, every key a walk has read up to the
// revision it read (heads: loc -> highest revision seen), with the
// directories holding them: one syncfs(2) of the root's filesystem instead
// of a directory fsync per key, which a walk that reports thousands of
// free pairs would otherwise pay (see Store.syncHeads). The root is one
// filesystem: the store never crosses a mount point below it. Where the
// platform has no syncfs it does nothing, and each key is synced when a
// decision rests on it (Sync).
func (b *dirBackend) syncWalk(heads map[Loc]uint64) error {
	if err := b.checkFailed(); err != nil {
		return err
	}
	// The root's entry in its parent, which may be on another filesystem
	// than the root (a mount point).
	needs, err := b.makeDirs(b.root)
	if err != nil {
		return err
	}
	if err := b.fsyncDirs(nil, needs); err != nil {
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
