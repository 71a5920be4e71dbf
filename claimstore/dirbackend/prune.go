package dirbackend

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
)

// Retention on a directory root (ARCHITECTURE.md, "Retention: prune"; the
// race argued edge by edge in docs/PROTOCOL.md, "Prune against a publish"):
//
//   - A key is compacted by a base pointer, the file "base" in its
//     directory: written beside the revisions, fsynced, renamed into place,
//     the directory fsynced, and only then the revisions below it unlinked.
//     Readers of this backend see the history from the base up (a crash
//     between the two steps leaves revisions below it that no reader sees
//     and the next Compact removes); the reference implementation reads
//     only the highest revision, which compaction never touches.
//   - A key is removed whole by renaming its directory to a trash name in
//     its kind directory (".pruning-<hash>-<random>", which no reader
//     takes for a key), under the prune lock held exclusively and after
//     checking that its head is still the tombstone the store published,
//     and then removing the trash. The rename is atomic across a crash:
//     the key is there whole, or gone.
//   - The prune lock is flock(2) on the root directory. A guarded publish
//     holds it shared from its check of the revision it follows to its
//     link, so that no removal falls between them.

// BaseName is the name of a key directory's base pointer.
const BaseName = "base"

// TrashPrefix begins the name of a key directory being removed.
const TrashPrefix = ".pruning-"

// baseStagePrefix begins the name a base pointer is written under before it
// is renamed into place.
const baseStagePrefix = ".base-"

// BaseKind is the kind member of a base pointer.
const BaseKind = "claimstore-base"

// basePointer is what the base file holds.
type basePointer struct {
	Version   int    `json:"version"`
	Kind      string `json:"kind"`
	Key       string `json:"key"` // the key's location, kind/hash
	Base      uint64 `json:"base"`
	WrittenAt string `json:"writtenAt"`
}

var (
	_ storage.Compacter        = (*Backend)(nil)
	_ storage.KeyRemover       = (*Backend)(nil)
	_ storage.KeyBatchRemover  = (*Backend)(nil)
	_ storage.RemovalMarker    = (*Backend)(nil)
	_ storage.GuardedPublisher = (*Backend)(nil)
	_ storage.Sweeper          = (*Backend)(nil)
)

// readBase returns the base of the key directory dir (1 when it has no
// base pointer). A base pointer that cannot be read or does not check is
// an error naming it: the key then reads as held, since what is below the
// base is unknown.
func (b *Backend) readBase(loc storage.Loc) (uint64, error) {
	path := filepath.Join(b.dir(loc), BaseName)
	data, err := b.readFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	var p basePointer
	if err := json.Unmarshal(data, &p); err != nil || p.Version != 1 || p.Kind != BaseKind || p.Key != loc.String() || p.Base < 1 || p.Base > storage.MaxRevision {
		return 0, &fs.PathError{Op: "read base pointer", Path: path, Err: &storage.DamageError{Reason: fmt.Sprintf("not a base pointer of %s (version 1, kind %q, a base from 1 to %d); the key reads as held; run claimctl fsck", loc, BaseKind, storage.MaxRevision)}}
	}
	return p.Base, nil
}

// Base implements storage.Compacter.
func (b *Backend) Base(ctx context.Context, loc storage.Loc) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if ok, _, err := b.checkKeyDir(b.dir(loc)); err != nil || !ok {
		return 1, err
	}
	return b.readBase(loc)
}

// ListFrom implements storage.Compacter (storage.ListFromBase).
func (b *Backend) ListFrom(ctx context.Context, loc storage.Loc) (uint64, []uint64, []string, error) {
	return storage.ListFromBase(func() (uint64, error) { return b.Base(ctx, loc) },
		func() ([]uint64, []string, error) { return b.List(ctx, loc) }, BaseName)
}

// Census implements storage.Censuser: counting the revisions from the base
// up, with the base read around the scan as ListFrom does.
func (b *Backend) Census(ctx context.Context, loc storage.Loc) (top uint64, count int, base uint64, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, 0, err
	}
	// A key with no directory has no revisions and no base: one look,
	// where the reads around a scan would make three (a new key's census,
	// at every acquire on it).
	if ok, _, err := b.checkKeyDir(b.dir(loc)); err != nil {
		return 0, 0, 0, err
	} else if !ok {
		return 0, 0, 1, nil
	}
	// The first attempt reads the base pointer from the directory just
	// looked at; a retry looks again, as Base does.
	before, err := b.readBase(loc)
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			before, err = b.Base(ctx, loc)
		}
		if err != nil {
			return 0, 0, 0, err
		}
		top, count, err = b.census(ctx, loc, before)
		if err != nil {
			return 0, 0, 0, err
		}
		after, err := b.Base(ctx, loc)
		if err != nil {
			return 0, 0, 0, err
		}
		if before == after || attempt >= 3 {
			return top, count, after, nil
		}
	}
}

// lockPrune takes the prune lock (see the comment at the top of this
// file): flock on the root where the filesystem has it, else a lock of
// this process, which orders this process's removals and publishes only.
func (b *Backend) lockPrune(exclusive bool) (func(), error) {
	if l, ok := b.fs.(vfs.Locker); ok {
		unlock, err := l.Lock(b.root, exclusive)
		if err == nil {
			return func() { _ = unlock() }, nil
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			return nil, err
		}
	}
	l := processLock(b.root)
	if exclusive {
		l.Lock()
		return l.Unlock, nil
	}
	l.RLock()
	return l.RUnlock, nil
}

var (
	processLocksMu sync.Mutex
	processLocks   = map[string]*sync.RWMutex{}
)

func processLock(root string) *sync.RWMutex {
	processLocksMu.Lock()
	defer processLocksMu.Unlock()
	l := processLocks[root]
	if l == nil {
		l = &sync.RWMutex{}
		processLocks[root] = l
	}
	return l
}

// PrepareOver implements storage.GuardedPublisher: Prepare, and a Commit
// that, holding the prune lock shared, links only while revision n-1 is
// still prev.
func (b *Backend) PrepareOver(ctx context.Context, loc storage.Loc, n uint64, data, prev []byte, hook func(storage.Barrier) error) (storage.Prepared, error) {
	p, err := b.Prepare(ctx, loc, n, data, hook)
	if err != nil {
		return nil, err
	}
	if n == 1 {
		return p, nil
	}
	return &guarded{prepared: p.(*prepared), prev: bytes.Clone(prev)}, nil
}

type guarded struct {
	*prepared
	prev []byte
}

func (g *guarded) Commit(ctx context.Context) error {
	if g.done {
		return g.prepared.Commit(ctx)
	}
	// The lock covers the check and the link, nothing more: the barriers
	// and fsyncs after the link need no exclusion from a removal, which
	// checks the head under the lock and now sees this revision.
	unlock, err := g.b.lockPrune(false)
	if err != nil {
		g.Abort()
		return err
	}
	if err := g.checkPrev(g.prev); err != nil {
		unlock()
		g.Abort()
		return err
	}
	err = g.link(ctx)
	unlock()
	if err != nil {
		return err
	}
	return g.finish()
}

// checkPrev is a guarded publish's check, made under the prune lock:
// revision n-1 of p's key still holds exactly prev, else an error wrapping
// ErrHeadMoved.
func (p *prepared) checkPrev(prev []byte) error {
	got, err := p.b.readFile(filepath.Join(p.dir, storage.RevisionName(p.n-1)))
	if err == nil && bytes.Equal(got, prev) {
		return nil
	}
	why := "it holds another revision"
	if err != nil {
		why = err.Error()
	}
	return &fs.PathError{Op: "publish", Path: p.name, Err: fmt.Errorf("%w: revision %d was read as the head, and now %s", storage.ErrHeadMoved, p.n-1, why)}
}

// NeedsTombstone implements storage.RemovalMarker: a directory's removal
// cannot compare the head and remove in one step for the reference
// implementation, which takes no lock.
func (b *Backend) NeedsTombstone() bool { return true }

// Compact implements storage.Compacter.
func (b *Backend) Compact(ctx context.Context, loc storage.Loc, base uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := b.checkFailed(); err != nil {
		return err
	}
	dir := b.dir(loc)
	if ok, distrust, err := b.checkKeyDir(dir); err != nil || distrust != nil || !ok {
		if err == nil && distrust != nil {
			err = distrust
		}
		if err == nil {
			err = &fs.PathError{Op: "compact", Path: dir, Err: fs.ErrNotExist}
		}
		return err
	}
	// The new pointer is written and made durable before the lock is
	// taken: eight compactions at once each pay that fsync side by side,
	// and only its rename and the directory's fsync are made under the
	// lock. (A compaction that finds the base there already drops it.)
	t, err := b.stageBase(loc, base)
	if err != nil {
		return err
	}
	defer t.Close()
	// Under the lock, no other prune moves the base: a base read and then
	// lowered by a second compaction would expose a gap.
	unlock, err := b.lockPrune(true)
	if err != nil {
		return err
	}
	cur, err := b.readBase(loc)
	if err != nil {
		unlock()
		return err
	}
	if base > cur {
		if _, err := b.fs.Lstat(filepath.Join(dir, storage.RevisionName(base))); err != nil {
			unlock()
			return &fs.PathError{Op: "compact", Path: filepath.Join(dir, storage.RevisionName(base)), Err: err}
		}
		if err := b.installBase(loc, t); err != nil {
			unlock()
			return err
		}
		cur = base
	}
	// The base is durable: what is below it is unseen, and removing it
	// races nothing (no writer publishes below a head). The directory is
	// listed before the lock is let go, so that a stage name in it is a
	// crash's leftover: listed after, it could be another compaction's
	// pointer between its link and its rename, which removing would fail.
	names, err := b.fs.ReadDir(dir)
	unlock()
	if err != nil {
		return err
	}
	removed := 0
	for _, name := range names {
		n, ok := storage.ParseRevisionName(name)
		stale := strings.HasPrefix(name, baseStagePrefix)
		if !(ok && n < cur) && !stale {
			continue
		}
		if err := b.fs.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		removed++
	}
	if removed > 0 {
		if err := b.sync(func() error { return b.fs.SyncDir(dir) }); err != nil {
			return &fs.PathError{Op: "fsync", Path: dir, Err: err}
		}
	}
	return nil
}

// stageBase writes base as loc's base pointer to a temporary in its
// directory and makes it durable (installBase gives it its name).
func (b *Backend) stageBase(loc storage.Loc, base uint64) (vfs.TempFile, error) {
	dir := b.dir(loc)
	data, err := json.Marshal(basePointer{Version: 1, Kind: BaseKind, Key: loc.String(), Base: base, WrittenAt: time.Now().UTC().Format("2006-01-02T15:04:05.000Z")})
	if err != nil {
		return nil, err
	}
	data = append(data, '\n')
	t, err := b.fs.CreateTemp(dir, 0o400)
	if err != nil {
		return nil, err
	}
	if n, err := t.Write(data); err != nil || n != len(data) {
		if err == nil {
			err = fmt.Errorf("short write")
		}
		_ = t.Close()
		return nil, &fs.PathError{Op: "write base pointer", Path: filepath.Join(dir, BaseName), Err: err}
	}
	if err := b.sync(t.Sync); err != nil {
		_ = t.Close()
		return nil, &fs.PathError{Op: "fsync base pointer", Path: filepath.Join(dir, BaseName), Err: err}
	}
	return t, nil
}

// installBase makes the staged pointer t loc's base pointer, durably:
// linked under a stage name, renamed over the pointer, the directory
// fsynced.
func (b *Backend) installBase(loc storage.Loc, t vfs.TempFile) error {
	dir := b.dir(loc)
	stage := filepath.Join(dir, baseStagePrefix+randomHex())
	if err := t.Link(stage); err != nil {
		return err
	}
	if err := b.fs.Rename(stage, filepath.Join(dir, BaseName)); err != nil {
		_ = b.fs.Remove(stage)
		return err
	}
	if err := b.sync(func() error { return b.fs.SyncDir(dir) }); err != nil {
		return &fs.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return nil
}

func randomHex() string {
	var r [8]byte
	_, _ = rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

// RemoveKey implements storage.KeyRemover: under the prune lock held
// exclusively, it checks that loc's head is still revision n holding
// exactly head (the store's tombstone), renames the key directory to a
// trash name, fsyncs the kind directory, and then removes the trash.
func (b *Backend) RemoveKey(ctx context.Context, loc storage.Loc, n uint64, head []byte) error {
	errs, err := b.RemoveKeys(ctx, []storage.Removal{{Loc: loc, N: n, Head: head}})
	if err != nil {
		return err
	}
	return errs[0]
}

// removeBatchMax bounds how many keys one hold of the prune lock renames:
// every publish waits for the lock (shared) while it is held exclusively,
// so a long batch would stall acquirers; a short one pays its fsync of
// the kind directory over fewer keys.
const removeBatchMax = 256

// RemoveKeys implements storage.KeyBatchRemover: RemoveKey's checks and
// renames for up to removeBatchMax keys under one hold of the prune lock,
// then one fsync per kind directory renamed in. The renames are made
// durable before the lock is released, so that no publish (which takes the
// lock shared) can rest on a removal a crash would undo. Until that fsync
// a crash keeps any subset of the renames: each key is then either whole
// in place (its tombstone head, free) or trash, which Sweep removes. A
// hold's trash is deleted while the next hold checks and renames; all of
// it is deleted (or left to Sweep) when RemoveKeys returns.
func (b *Backend) RemoveKeys(ctx context.Context, rs []storage.Removal) ([]error, error) {
	errs := make([]error, len(rs))
	// The trash of each hold is deleted while the next hold renames: a
	// deletion is unlinks in the trash, which no check or rename reads.
	trash := make(chan trashDir, len(rs))
	var wg sync.WaitGroup
	for range min(trashWorkers, len(rs)) {
		wg.Go(func() {
			for t := range trash {
				_ = b.deleteTrash(t)
			}
		})
	}
	defer func() {
		close(trash)
		wg.Wait()
	}()
	for start := 0; start < len(rs); start += removeBatchMax {
		part := rs[start:min(start+removeBatchMax, len(rs))]
		t, err := b.removeKeys(ctx, part, errs[start:start+len(part)])
		for _, t := range t {
			trash <- t
		}
		if err != nil {
			return nil, err
		}
	}
	return errs, nil
}

// removeChecks is how many removals' heads are checked at once under one
// hold of the prune lock: each check is reads (the head probed, its bytes
// compared), and reads of different keys overlap.
const removeChecks = 8

// removeKeys renames away what it can of rs and returns the trash it
// made, once the renames are durable: after a failed fsync of a kind
// directory none is returned, since a crash could undo a rename and leave
// the key in place without the files its trash's deletion took; Sweep
// removes that trash once the store is opened again.
func (b *Backend) removeKeys(ctx context.Context, rs []storage.Removal, errs []error) ([]trashDir, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := b.checkFailed(); err != nil {
		return nil, err
	}
	unlock, err := b.lockPrune(true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Every head is checked before the first rename, under the lock held
	// exclusively: no publish of this store falls between a check and its
	// rename, however long the checks take (docs/PROTOCOL.md, "Prune
	// against a publish", step 3).
	checks := make([]error, len(rs))
	workers := removeChecks
	if b.sequential {
		workers = 1
	}
	eachAtOnce(len(rs), workers, func(i int) { checks[i] = b.checkRemoval(rs[i].Loc, rs[i].N, rs[i].Head) })
	var trashes []trashDir
	kinds := map[string]bool{}
	for i, r := range rs {
		err := checks[i]
		if errors.Is(err, storage.ErrHeadMoved) {
			errs[i] = err
			continue
		}
		var trash string
		if err == nil {
			trash, err = b.renameAway(r.Loc)
		}
		if err != nil {
			// A rename that failed for another reason (or a damaged
			// head) stops the batch; what was renamed before it is made
			// durable first, as the others would have been.
			if serr := b.syncKinds(kinds); serr != nil {
				return nil, serr
			}
			return trashes, err
		}
		trashes = append(trashes, trashDir{path: trash, top: r.N})
		kinds[filepath.Dir(trash)] = true
	}
	if err := b.syncKinds(kinds); err != nil {
		return nil, err
	}
	return trashes, nil
}

// trashWorkers is how many trash directories are deleted at once: an
// unlink is a journal update of its own directory, and those of different
// directories proceed side by side.
const trashWorkers = 8

// checkRemoval checks that loc's head is revision n holding exactly head:
// storage.ErrHeadMoved if not. Revision n+1 missing is the head's check,
// without a probe (see headStill). Where n is the very file this backend
// linked with exactly these bytes (this prune's tombstone), its identity
// stands for its bytes, as in IsOwnHead: the same inode, size,
// modification and change times, in a directory only the root's owner
// writes. Anything else is read and compared.
func (b *Backend) checkRemoval(loc storage.Loc, n uint64, head []byte) error {
	distrust, err := b.headStill("remove key", loc, n)
	if err == nil {
		err = distrust
	}
	if err != nil {
		return err
	}
	path := filepath.Join(b.dir(loc), storage.RevisionName(n))
	b.mu.Lock()
	l, own := b.linked[loc]
	b.mu.Unlock()
	if own && l.n == n && l.id != (vfs.FileID{}) && l.sum == maphash.Bytes(linkSeed, head) {
		if fi, err := b.fs.Lstat(path); err == nil && vfs.Identity(fi) == l.id {
			return nil
		}
	}
	got, err := b.readFile(path)
	if err != nil || !bytes.Equal(got, head) {
		return &fs.PathError{Op: "remove key", Path: b.dir(loc), Err: fmt.Errorf("%w: revision %d is not the one read", storage.ErrHeadMoved, n)}
	}
	return nil
}

// headStill checks, for op, that loc's key directory is there and that
// revision n+1 is missing: then n, if it exists, is the key's head. Every
// writer links n+1 over n and none above a number it has not read, so a
// revision above a missing one is damage, which a probe would not see
// past either; what n holds is the caller's to check. The directory's
// distrust is returned apart; a missing directory or a revision n+1 is
// storage.ErrHeadMoved.
func (b *Backend) headStill(op string, loc storage.Loc, n uint64) (distrust, err error) {
	dir := b.dir(loc)
	ok, distrust, err := b.checkKeyDir(dir)
	if err != nil || distrust != nil {
		return distrust, err
	}
	if !ok {
		return nil, &fs.PathError{Op: op, Path: dir, Err: fmt.Errorf("%w: the key directory is gone", storage.ErrHeadMoved)}
	}
	if n >= storage.MaxRevision {
		return nil, nil
	}
	next := filepath.Join(dir, storage.RevisionName(n+1))
	if _, err := b.fs.Lstat(next); err == nil {
		return nil, &fs.PathError{Op: op, Path: dir, Err: fmt.Errorf("%w: revision %d was written above %d", storage.ErrHeadMoved, n+1, n)}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return nil, nil
}

// HeadAt implements storage.HeadAtReader: revision n of loc, read as its
// head once n+1 is found missing (headStill) — without the probe's
// opening of the directory, its size, its base pointer and its look at n,
// for a prune that reads again thousands of heads its walk found. n gone is storage.ErrHeadMoved; n unreadable, or the key's
// directory not trusted, a *storage.ReadError as from Head.
func (b *Backend) HeadAt(ctx context.Context, loc storage.Loc, n uint64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if n == 0 || n > storage.MaxRevision {
		return nil, fmt.Errorf("revision %d is out of range 1..%d", n, storage.MaxRevision)
	}
	distrust, err := b.headStill("read head", loc, n)
	if err != nil {
		return nil, err
	}
	if distrust != nil {
		return nil, &storage.ReadError{N: n, Err: distrust}
	}
	path := filepath.Join(b.dir(loc), storage.RevisionName(n))
	data, err := b.readFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &fs.PathError{Op: "read head", Path: path, Err: fmt.Errorf("%w: revision %d is gone", storage.ErrHeadMoved, n)}
	case err != nil:
		return nil, &storage.ReadError{N: n, Err: err}
	}
	return data, nil
}

// renameAway renames loc's directory, checked, to a trash name in its kind
// directory, and returns that name. Trash deleted (deleteTrash) is not
// made durable: trash is no key's name, and what a crash keeps of it is
// the next Sweep's (so a batch of removals pays one fsync per kind
// directory, for its renames, besides the tombstones'). A failure leaves
// the rest to Sweep.
func (b *Backend) renameAway(loc storage.Loc) (string, error) {
	dir := b.dir(loc)
	trash := filepath.Join(filepath.Dir(dir), TrashPrefix+loc.Hash+"-"+randomHex())
	if err := b.fs.Rename(dir, trash); err != nil {
		return "", err
	}
	b.forget(loc)
	return trash, nil
}

// syncKinds fsyncs the kind directories renamed in, in a fixed order.
func (b *Backend) syncKinds(kinds map[string]bool) error {
	for _, kind := range slices.Sorted(maps.Keys(kinds)) {
		if err := b.sync(func() error { return b.fs.SyncDir(kind) }); err != nil {
			return &fs.PathError{Op: "fsync", Path: kind, Err: err}
		}
	}
	return nil
}

// forget drops what this backend remembers of a key it removed.
func (b *Backend) forget(loc storage.Loc) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.hints, loc)
	delete(b.synced, loc)
	delete(b.linked, loc)
	delete(b.durable, b.dir(loc))
}

// Sweep implements storage.Sweeper: it removes the trash that removals cut
// short left in the kind directories.
func (b *Backend) Sweep(ctx context.Context) (int, error) {
	removed := 0
	for _, kind := range []storage.Kind{storage.KindSeat, storage.KindSession} {
		dir := filepath.Join(b.root, string(kind))
		if ok, distrust, err := b.checkDir(dir); err != nil || !ok || distrust != nil {
			continue
		}
		names, err := b.fs.ReadDir(dir)
		if err != nil {
			return removed, err
		}
		for _, name := range names {
			if !strings.HasPrefix(name, TrashPrefix) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return removed, err
			}
			if err := b.removeTree(filepath.Join(dir, name)); err != nil {
				return removed, err
			}
			removed++
		}
	}
	return removed, nil
}

// ArchiveDir implements storage.ArchiveLocator: the root's archive/.
func (b *Backend) ArchiveDir() string { return filepath.Join(b.root, ArchiveDir) }

// trashDir is a key directory renamed away, and the head it was checked
// to have.
type trashDir struct {
	path string
	top  uint64
}

// deleteTrash removes a trash directory and the files in it, without
// making the removal durable: its revisions by name, from the head it was
// checked to have down to the first that is missing (a key's revisions
// run without a gap from its base), then the directory. Only when
// something else is left in it (a base pointer, a crash's temporary) is it
// listed: a prune deletes thousands, and a listing is four system calls
// where the directory's own removal is one.
func (b *Backend) deleteTrash(t trashDir) error {
	for n := t.top; n >= 1; n-- {
		err := b.fs.Remove(filepath.Join(t.path, storage.RevisionName(n)))
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return err
		}
	}
	if err := b.fs.Remove(t.path); err == nil || !errors.Is(err, syscall.ENOTEMPTY) {
		return err
	}
	return b.deleteTree(t.path)
}

// deleteTree removes a trash directory and the files in it (a key
// directory holds files only), without making the removal durable.
func (b *Backend) deleteTree(dir string) error {
	names, err := b.fs.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := b.fs.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return b.fs.Remove(dir)
}
