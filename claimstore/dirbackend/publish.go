package dirbackend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"sync"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
)

// The publish protocol of the directory backend, in two halves so that the
// half before the exclusive link can overlap other work (a step prepares
// its two revisions together, PrepareBatch, before it links either):
//
//	Prepare: make the directories that are missing (no fsync yet), create
//	         a temporary in the key directory, write it, fsync it.
//	Commit:  link the temporary to r<n>.json (exclusive), drop the
//	         temporary's name, then fsync the key directory together with
//	         every parent whose entry of a directory made (or first used)
//	         on the way is not yet durable, and the file itself where the
//	         link gave it its first (vfs.LinkSyncer: an O_TMPFILE's link
//	         count) — concurrently, and only once the link is won, so a
//	         writer that loses the race pays no parent fsync at all.
//	PrepareBatch: Prepare for several revisions, each temporary written
//	         before any is fsynced, then all fsynced at once with the
//	         parents their directories owe (a step's parents are paid before
//	         its links, where a journaling filesystem commits them with the
//	         temporaries), the caller's fences checked while they run
//	         (beside the caller's own fsync, or on the caller while
//	         goroutines fsync), or just before where a parent is owed.
//
// Only the link waits for the temporary's fsync, and nothing is
// acknowledged before every fsync it needs returned. A directory's entry is
// durable only after its parent is fsynced, whoever created it: a writer
// that crashed between mkdir and that fsync leaves a directory that a power
// cut can still take away, with every revision in it. So the first time a
// process uses a directory it syncs the parent, even when the directory
// already existed.
//
// Parent fsyncs are shared: each records when it started (an epoch), and a
// directory made or first used before a completed fsync of its parent
// started needs no other. Two revisions prepared at once in a new root
// (the two keys of an acquire) fsync the root once between them.

// parentSync is the obligation to fsync parent after child was made or
// first used at epoch after.
type parentSync struct {
	child, parent string
	after         uint64
}

// tick returns a new epoch. b.mu is held.
func (b *Backend) tickLocked() uint64 {
	b.epoch++
	return b.epoch
}

// makeDirs makes dir and every missing directory above it up to the root,
// checking each (the root's ancestors and the root itself, as Open does;
// every other directory must be a real directory that only the root's owner
// may write), and returns the parent fsyncs still owed for each directory
// whose entry this process has not yet made durable. It fsyncs nothing.
func (b *Backend) makeDirs(dir string) ([]parentSync, error) {
	return b.makeDirsIn(dir, nil, false)
}

// dirsAbove is what a batch found of the directories above its keys, each
// made and checked once for all of its requests before the first is
// staged (as one publish makes and checks them at its start): for each,
// the parent fsyncs it owes, or why it cannot be written into. It is only
// read while the requests are staged.
type dirsAbove map[string]dirAbove

type dirAbove struct {
	needs []parentSync
	err   error
}

// aboveKeys makes and checks, once each, the root and the directories
// above the keys of reqs (makeDirs).
func (b *Backend) aboveKeys(reqs []storage.PrepareRequest) dirsAbove {
	needs, err := b.makeDirs(b.root)
	above := dirsAbove{b.root: {needs, err}}
	for _, r := range reqs {
		parent := filepath.Dir(b.dir(r.Loc))
		if _, ok := above[parent]; !ok {
			needs, err := b.makeDirsIn(parent, above, false)
			above[parent] = dirAbove{needs, err}
		}
	}
	return above
}

// makeDirsIn is makeDirs, taking what above found of the directories above
// dir as found (nil: nothing). existing says the caller read dir a moment
// ago: it is looked at before it is made, since a key's directory is made
// once and published into many times, and a mkdir that finds it is a
// system call for nothing.
func (b *Backend) makeDirsIn(dir string, above dirsAbove, existing bool) ([]parentSync, error) {
	var chain []string
	var needs []parentSync
	b.mu.Lock()
	for d := dir; ; d = filepath.Dir(d) {
		if b.durable[d] {
			break
		}
		if a, ok := above[d]; ok {
			if a.err != nil {
				b.mu.Unlock()
				return nil, a.err
			}
			needs = slices.Clone(a.needs)
			break
		}
		chain = append(chain, d)
		if d == b.root || d == filepath.Dir(d) {
			break
		}
	}
	b.mu.Unlock()
	for i := len(chain) - 1; i >= 0; i-- {
		d := chain[i]
		if d == b.root {
			if err := b.makeRoot(); err != nil {
				return nil, err
			}
		} else if err := b.makeDir(d, existing && i == 0); err != nil {
			return nil, err
		}
		b.mu.Lock()
		needs = append(needs, parentSync{child: d, parent: filepath.Dir(d), after: b.tickLocked()})
		b.mu.Unlock()
	}
	return needs, nil
}

// makeDir makes d, a directory below the root, unless it exists, and
// checks it. existing: look first, and make it only if it is missing.
//
// A directory this process has just made is looked at only where the
// process is not the root's owner: then what it makes is another user's,
// distrusted, and refused here before anything is published in it. Made by
// the root's owner, with mode 0700 in a parent already checked, it is what
// the look would find: only that owner could have replaced it since.
func (b *Backend) makeDir(d string, existing bool) error {
	if existing {
		ok, distrust, err := b.checkDir(d)
		switch {
		case err != nil:
			return err
		case distrust != nil:
			return distrust
		case ok:
			return nil
		}
	}
	err := b.fs.Mkdir(d, 0o700)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if uid, ok := b.rootUID(); err == nil && ok && uid == b.euid {
		return nil
	}
	if _, distrust, err := b.checkDir(d); err != nil {
		return err
	} else if distrust != nil {
		return distrust
	}
	return nil
}

// makeRoot creates the root if it is missing, checking it and its
// ancestors first and again after: Open checked them some time ago, and a
// root swapped for a symlink, or an ancestor made writable by others since,
// cannot promise exclusion. A refusal creates nothing.
func (b *Backend) makeRoot() error {
	if b.strict {
		if err := checkAncestors(b.root); err != nil {
			return err
		}
	}
	err := b.fs.Mkdir(b.root, 0o700)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	existed := err != nil
	fi, err := b.fs.Lstat(b.root)
	if err != nil {
		return err
	}
	if err := checkRootInfo(b.root, fi); err != nil {
		return err
	}
	if existed {
		// A directory that holds other things (/etc, a home directory, a
		// project's checkout) is not made a claim root by a first write:
		// only an empty directory or a claim root is written into.
		names, err := b.fs.ReadDir(b.root)
		if err != nil {
			return err
		}
		return NotClaimRoot(b.root, names)
	}
	return nil
}

// fsyncDirs fsyncs dirs, and the parents that needs still owe, all at once,
// and records what became durable. A failure is sticky (storage.ErrSyncFailed).
func (b *Backend) fsyncDirs(dirs []string, needs []parentSync) error {
	return b.fsyncOwed(dirs, needs, nil, true)
}

// fsyncOwed is fsyncDirs, with the SyncLink of each of linked (the
// revisions whose links gave their files a first name: see
// prepared.linkSync) beside the directories' fsyncs; children says
// whether the directories needs names are fsynced themselves too, beside
// their parents (owedParents).
func (b *Backend) fsyncOwed(dirs []string, needs []parentSync, linked []*prepared, children bool) error {
	order, childOnly, start := b.owedParents(dirs, needs, children)
	before := b.running()
	errs := make([]error, len(order))
	lerrs := make([]error, len(linked))
	// The link counts first, so that where they run on goroutines the
	// last directory's fsync, the longer call (an open, the fsync, a
	// close), runs on the caller's, with no hand-off before it.
	calls := make([]func() error, 0, len(linked)+len(order))
	for i, p := range linked {
		calls = append(calls, func() error { lerrs[i] = b.sync(p.linkSync.SyncLink); return nil })
	}
	calls = append(calls, b.owedCalls(order, childOnly, errs)...)
	if b.sequential || !b.submittedLinks(linked, lerrs, func() { b.runAtOnce(calls[len(linked):], nil) }) {
		b.runAtOnce(calls, nil)
	}
	for i, err := range errs {
		if err != nil {
			return &fs.PathError{Op: "fsync", Path: order[i], Err: err}
		}
	}
	for i, err := range lerrs {
		if err != nil {
			return &fs.PathError{Op: "fsync", Path: linked[i].name, Err: err}
		}
	}
	if err := b.settle(before); err != nil {
		return err
	}
	b.recordSynced(order, start, needs)
	return nil
}

// submittedLinks makes the link counts of linked durable with one io_uring
// submission (vfs.SyncBatch), where their temporaries are the operating
// system's own, whose SyncLink is the file's fsync that the batch makes,
// and runs during (the directories' fsyncs) on the caller's goroutine
// meanwhile: no goroutine and no hand-off. It reports whether it did; where
// it cannot (none linked, a wrapper's temporaries, no io_uring) it does
// nothing.
func (b *Backend) submittedLinks(linked []*prepared, lerrs []error, during func()) bool {
	if len(linked) == 0 {
		return false
	}
	temps := make([]vfs.TempFile, len(linked))
	for i, p := range linked {
		temps[i] = p.t
	}
	sb, err := vfs.NewSyncBatch(temps)
	if err != nil {
		return false
	}
	copy(lerrs, b.syncEach(func() []error { return sb.Sync(temps, during) }))
	return true
}

// owedParents returns dirs and the parents that needs still owe, each
// once, in that order, then (children) the directories that owe them,
// and the epoch at which fsyncs of them start. childOnly holds those
// fsynced for their own contents alone, none of dirs or the parents.
//
// Why the children: a parent's fsync makes a new directory's entry
// durable, and on a filesystem without a journal nothing but the
// directory's own fsync (or writeback, any time later) writes what the
// entry leads to, its inode and its first block; a crash after the
// parent's fsync alone leaves a directory that reads as corrupt ("bad
// message") until fsck. A directory first used, not made, by this process
// owes its own fsync as it owes its parent's: its maker may have died
// before either.
func (b *Backend) owedParents(dirs []string, needs []parentSync, children bool) (order []string, childOnly map[string]bool, start uint64) {
	set := map[string]bool{}
	add := func(d string) {
		if !set[d] {
			set[d] = true
			order = append(order, d)
		}
	}
	for _, d := range dirs {
		add(d)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var owing []string
	for _, n := range needs {
		// Covered if this process already made the child durable, or a
		// completed fsync of the parent started after the child was made.
		if !b.durable[n.child] && b.syncedAt[n.parent] <= n.after {
			add(n.parent)
			owing = append(owing, n.child)
		}
	}
	if children {
		for _, d := range owing {
			if !set[d] {
				if childOnly == nil {
					childOnly = map[string]bool{}
				}
				childOnly[d] = true
				add(d)
			}
		}
	}
	return order, childOnly, b.tickLocked()
}

// syncOwed fsyncs d, one of owedParents' directories, as an fsync of this
// store (sync). A directory fsynced for its own contents alone (childOnly)
// that is gone has nothing left to make durable, and is no failure: prune
// removed the key since it was made, and what was to be published into it
// fails at its link.
func (b *Backend) syncOwed(d string, childOnly bool) error {
	return b.sync(func() error {
		err := b.fs.SyncDir(d)
		if childOnly && errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	})
}

// owedCalls returns the calls that fsync dirs (owedParents' order, with
// its childOnly), each directory's error set in errs[i] as syncOwed
// returns it: one call for all of them where there are two or more and
// the filesystem submits several at once (vfs.DirsSyncer), so that none
// waits for a goroutine's thread to be started; a call each otherwise.
func (b *Backend) owedCalls(dirs []string, childOnly map[string]bool, errs []error) []func() error {
	ds, ok := b.fs.(vfs.DirsSyncer)
	if !ok || b.sequential || len(dirs) < 2 {
		calls := make([]func() error, len(dirs))
		for i, d := range dirs {
			calls[i] = func() error { errs[i] = b.syncOwed(d, childOnly[d]); return nil }
		}
		return calls
	}
	return []func() error{func() error {
		copy(errs, b.syncEach(func() []error {
			out := ds.SyncDirs(dirs)
			for i, err := range out {
				// As syncOwed: a directory fsynced for its own
				// contents alone that is gone was removed by prune.
				if childOnly[dirs[i]] && errors.Is(err, fs.ErrNotExist) {
					out[i] = nil
				}
			}
			return out
		}))
		return nil
	}}
}

// runAtOnce runs calls at once: all but the last on goroutines of their
// own, the last on the caller's, which saves a hand-off; one after
// another, in order, when there is only one or the backend is sequential.
// during, if set, runs on the caller's goroutine once the others are
// started and before the last (first of all where they run in order):
// work the caller would otherwise do before them, done while they wait
// on the disk. Starting the last call later costs little: the fsyncs of
// one disk are served one after another.
func (b *Backend) runAtOnce(calls []func() error, during func()) {
	if during == nil {
		during = func() {}
	}
	if len(calls) <= 1 || b.sequential {
		during()
		for _, c := range calls {
			_ = c()
		}
		return
	}
	var wg sync.WaitGroup
	for _, c := range calls[:len(calls)-1] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c()
		}()
	}
	during()
	_ = calls[len(calls)-1]()
	wg.Wait()
}

// recordSynced records that fsyncs of dirs, started at epoch start, have
// completed: the children of needs whose parent they covered are durable.
func (b *Backend) recordSynced(dirs []string, start uint64, needs []parentSync) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range dirs {
		if b.syncedAt[d] < start {
			b.syncedAt[d] = start
		}
	}
	for _, n := range needs {
		if b.syncedAt[n.parent] > n.after {
			b.durable[n.child] = true
		}
	}
}

// Publish runs the whole publish protocol on revision n of loc: Prepare,
// then Commit.
func (b *Backend) Publish(ctx context.Context, loc storage.Loc, n uint64, data []byte, hook func(storage.Barrier) error) error {
	p, err := b.Prepare(ctx, loc, n, data, hook)
	if err != nil {
		return err
	}
	defer p.Abort()
	return p.Commit(ctx)
}

// Prepare readies revision n of loc (see storage.Prepared and the protocol above).
func (b *Backend) Prepare(ctx context.Context, loc storage.Loc, n uint64, data []byte, hook func(storage.Barrier) error) (storage.Prepared, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if n == 0 || n > storage.MaxRevision {
		return nil, fmt.Errorf("revision %d is out of range 1..%d", n, storage.MaxRevision)
	}
	p, err := b.prepare(b.dir(loc), storage.RevisionName(n), data, hook)
	if err != nil {
		return nil, err
	}
	p.loc, p.n = loc, n
	return p, nil
}

// prepared is a temporary written and synced in its directory, to be
// linked to its name.
type prepared struct {
	b         *Backend
	dir, name string
	t         vfs.TempFile
	needs     []parentSync
	hook      func(storage.Barrier) error
	loc       storage.Loc // zero for a proof
	n         uint64
	sum       uint64 // of the data written (linkedFile)
	done      bool
	// linkSync is the temporary, kept open after its link until SyncLink
	// has made the link count the link gave it durable (finish), where
	// it has no name of its own (vfs.LinkSyncer); closeLinked closes it.
	linkSync vfs.LinkSyncer
}

// linkSyncs returns p, as fsyncOwed takes it, where its link is still to
// be made durable by SyncLink.
func (p *prepared) linkSyncs() []*prepared {
	if p.linkSync == nil {
		return nil
	}
	return []*prepared{p}
}

// closeLinked closes a linked temporary kept open for its SyncLink.
func (p *prepared) closeLinked() {
	if p.linkSync != nil {
		p.linkSync = nil
		_ = p.t.Close()
	}
}

func (b *Backend) prepare(dir, base string, data []byte, hook func(storage.Barrier) error) (*prepared, error) {
	p, err := b.stage(dir, base, data, hook, nil, false, false)
	if err != nil {
		return nil, err
	}
	if err := p.syncTemp(); err != nil {
		return nil, err
	}
	return p, nil
}

// stage is prepare up to the temporary's fsync: the directories made, the
// temporary created and written (not yet durable), its name checked free.
// The caller syncs it (syncTemp, or syncBatch with others) before Commit.
//
// above and existing are makeDirsIn's: what a batch found above dir, and
// whether the caller read dir a moment ago. fenced says that the caller's
// fence (storage.PrepareRequest.Fence) will say whether the name is free,
// before the link: the name is then not looked at here.
func (b *Backend) stage(dir, base string, data []byte, hook func(storage.Barrier) error, above dirsAbove, existing, fenced bool) (*prepared, error) {
	if err := b.checkFailed(); err != nil {
		return nil, err
	}
	if hook == nil {
		hook = func(storage.Barrier) error { return nil }
	}
	if fenced {
		// The fence looks at the key directory only once the temporary
		// is made in it: look now, so that nothing is made through a
		// symlink or in a directory the store would not publish into,
		// and a key removed since is not made again.
		ok, distrust, err := b.checkKeyDir(dir)
		if err := usable(ok, distrust, err, "publish", dir); err != nil {
			return nil, err
		}
	}
	needs, err := b.makeDirsIn(dir, above, existing)
	if err != nil {
		return nil, err
	}
	name := filepath.Join(dir, base)
	t, err := b.fs.CreateTemp(dir, 0o400)
	if errors.Is(err, fs.ErrNotExist) {
		// A directory this process made durable before is gone: prune
		// removed the key since (another process's, or this one's). Make
		// it again, as for a key never written.
		b.mu.Lock()
		delete(b.durable, dir)
		b.mu.Unlock()
		if needs, err = b.makeDirsIn(dir, above, false); err != nil {
			return nil, err
		}
		t, err = b.fs.CreateTemp(dir, 0o400)
	}
	if err != nil {
		return nil, err
	}
	p := &prepared{b: b, dir: dir, name: name, t: t, needs: needs, hook: hook, sum: maphash.Bytes(linkSeed, data)}
	if n, err := t.Write(data); err != nil || n != len(data) {
		if err == nil {
			err = io.ErrShortWrite
		}
		p.Abort()
		return nil, &fs.PathError{Op: "write temporary for", Path: name, Err: err}
	}
	if err := hook(storage.BarrierTempWritten); err != nil {
		p.Abort()
		return nil, err
	}
	// A writer that has already lost the race (the name is taken) need not
	// pay for the fsync: with many racing for one number, all but the
	// first would wait on the disk for nothing. A fenced step's fence
	// looks at the same name while the fsync runs, where the look costs
	// no time of its own; a claim's next number is taken only when the
	// claim was lost, so its fsync is rarely for nothing.
	if fenced {
		return p, nil
	}
	if _, err := b.fs.Lstat(name); err == nil {
		p.Abort()
		return nil, &fs.PathError{Op: "publish", Path: name, Err: storage.ErrRevisionExists}
	}
	return p, nil
}

// syncTemp makes a staged temporary's contents durable; on failure it
// discards the temporary.
func (p *prepared) syncTemp() error {
	if err := p.b.sync(p.t.Sync); err != nil {
		p.Abort()
		return &fs.PathError{Op: "fsync temporary for", Path: p.name, Err: err}
	}
	if err := p.hook(storage.BarrierTempSynced); err != nil {
		p.Abort()
		return err
	}
	return nil
}

// PrepareBatch implements storage.BatchPreparer: every revision is staged
// (its directories made, its temporary written) in the order given, and
// only then are the temporaries fsynced, all at once, with the parent
// fsyncs the new (or first used) directories owe beside them.
//
// Why this order: on a journaling filesystem (ext4) an fsync commits the
// journal's running transaction; a temporary written while another's
// fsync is committing lands in the next transaction and costs a second
// commit, where two temporaries written first share one. The owed parent
// fsyncs join the same commit (their mkdirs are in it), where issued
// after the link, beside the key directory's, each would be an fsync of
// its own. Nothing is reordered that the protocol orders: every link
// still waits for its own temporary's fsync (Commit is only called on
// what this returns, after it returned), and nothing is linked here.
// A parent fsync's failure fails every revision of the batch.
//
// The requests' fences (storage.PrepareRequest.Fence) are called once
// every temporary is written, while the fsyncs are in flight (syncBatch):
// on a goroutine beside the caller's own fsync where they are submitted at
// once (submitted), on the caller where they run on goroutines; a request
// whose fence fails is discarded with the fence's error.
func (b *Backend) PrepareBatch(ctx context.Context, reqs []storage.PrepareRequest) ([]storage.Prepared, []error) {
	ps := make([]storage.Prepared, len(reqs))
	errs := make([]error, len(reqs))
	staged := make([]*prepared, len(reqs))
	taken := false
	for i, r := range reqs {
		if taken {
			// Linked only after the earlier one, which lost: nothing
			// of it is worth making, let alone making durable.
			errs[i] = &fs.PathError{Op: "publish", Path: b.dir(r.Loc), Err: storage.ErrEarlierTaken}
			continue
		}
		p, err := b.stageRequest(ctx, r, nil)
		if err != nil {
			errs[i] = err
			taken = errors.Is(err, storage.ErrRevisionExists)
			continue
		}
		staged[i] = p
	}
	if err := b.syncBatch(staged, errs, reqs); err != nil {
		for i, p := range staged {
			if p != nil {
				p.Abort()
				staged[i], errs[i] = nil, err
			}
		}
	}
	for i, p := range staged {
		if p == nil {
			continue
		}
		if r := reqs[i]; r.Prev != nil && r.N > 1 {
			ps[i] = &guarded{prepared: p, prev: bytes.Clone(r.Prev)}
		} else {
			ps[i] = p
		}
	}
	return ps, errs
}

// stageRequest stages r as PrepareBatch and PublishBatch stage each of
// theirs: nothing when ctx is done or r's number is out of range. above is
// what PublishBatch found above its keys (nil: nothing); a request over a
// head (Prev) finds its key's directory there.
func (b *Backend) stageRequest(ctx context.Context, r storage.PrepareRequest, above dirsAbove) (*prepared, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.N == 0 || r.N > storage.MaxRevision {
		return nil, fmt.Errorf("revision %d is out of range 1..%d", r.N, storage.MaxRevision)
	}
	p, err := b.stage(b.dir(r.Loc), storage.RevisionName(r.N), r.Data, r.Hook, above, r.Prev != nil && r.N > 1, r.Fence != nil)
	if err != nil {
		return nil, err
	}
	p.loc, p.n = r.Loc, r.N
	return p, nil
}

// callFences calls the fence of every request that has one
// (storage.PrepareRequest.Fence), in order, and returns what each said (nil
// when every fence passed).
func callFences(reqs []storage.PrepareRequest) []error {
	var out []error
	for i, r := range reqs {
		if r.Fence == nil {
			continue
		}
		if err := r.Fence(); err != nil {
			if out == nil {
				out = make([]error, len(reqs))
			}
			out[i] = err
		}
	}
	return out
}

// failFenced fails each request whose fence failed (fenced[i], from
// callFences) with its fence's error, in place of any other, discarding
// what was staged for it.
func failFenced(staged []*prepared, errs, fenced []error) {
	for i, err := range fenced {
		if err == nil {
			continue
		}
		if staged[i] != nil {
			staged[i].Abort()
			staged[i] = nil
		}
		errs[i] = err
	}
}

// syncBatch fsyncs the staged temporaries (nil entries are skipped) and
// the parents their directories owe, all at once, and records the parents
// as fsyncDirs does. A temporary whose fsync (or temp-synced barrier)
// failed is discarded: its entry becomes nil and errs says why. The
// returned error is a parent fsync's, or a failure of an fsync in flight
// before (see settle): then none of the batch may be published.
//
// The fences of fenced (the batch's requests, staged[i] from fenced[i];
// nil: none) are called while the fsyncs are in flight, submitted at once
// (submitted) or on goroutines (runAtOnce), and a request whose fence
// failed is discarded with its fence's error before anything else is
// judged: it meets no temp-synced barrier, and a batch that fails keeps
// that error for it.
func (b *Backend) syncBatch(staged []*prepared, errs []error, fenced []storage.PrepareRequest) error {
	var needs []parentSync
	for _, p := range staged {
		if p != nil {
			needs = append(needs, p.needs...)
		}
	}
	parents, childOnly, start := b.owedParents(nil, needs, true)
	before := b.running()
	perrs := make([]error, len(parents))
	pcalls := b.owedCalls(parents, childOnly, perrs)
	if b.sequential || !b.submitted(staged, errs, fenced, pcalls) {
		var calls []func() error
		for i, p := range staged {
			if p != nil {
				calls = append(calls, func() error { errs[i] = b.sync(p.t.Sync); return nil })
			}
		}
		var fenceErrs []error
		b.runAtOnce(append(calls, pcalls...), func() { fenceErrs = callFences(fenced) })
		failFenced(staged, errs, fenceErrs)
	}
	for i, p := range staged {
		if p == nil {
			continue
		}
		if errs[i] != nil {
			p.Abort()
			staged[i], errs[i] = nil, &fs.PathError{Op: "fsync temporary for", Path: p.name, Err: errs[i]}
		}
	}
	for i, err := range perrs {
		if err != nil {
			return &fs.PathError{Op: "fsync", Path: parents[i], Err: err}
		}
	}
	if len(parents) > 0 {
		if err := b.settle(before); err != nil {
			return err
		}
		b.recordSynced(parents, start, needs)
	}
	tempsSynced(staged, errs)
	return nil
}

// submitted is syncBatch's fsyncs submitted to the kernel at once
// (vfs.SyncBatch), where the filesystem allows, and reports whether they
// were: false, having done nothing, where they cannot be (the caller then
// runs them on goroutines).
//
// Where no parent is owed (a step's), the last temporary's fsync runs on
// the caller instead of in the submission, so that the caller, which
// would only sleep until a kernel worker was woken for it, makes one of
// the fsyncs itself (as fsyncOwed's caller makes the directory's beside
// the link counts); and the fences of fenced run on a goroutine while it
// does, off the step's time. A request whose fence failed is then
// discarded once the fsyncs are done, its temporary fsynced for nothing:
// a fence fails only where the claim was lost, and its looks would
// otherwise come before every step's fsyncs. Where parents are owed (a
// new key's), the fences are called first and the temporaries of those
// that failed are discarded unsynced, and the parents' fsyncs (pcalls)
// run on the caller once the temporaries' are submitted.
func (b *Backend) submitted(staged []*prepared, errs []error, fenced []storage.PrepareRequest, pcalls []func() error) bool {
	live, temps := liveTemps(staged)
	if len(temps)+len(pcalls) < 2 {
		return false
	}
	sb, err := vfs.NewSyncBatch(temps)
	if err != nil {
		return false
	}
	var (
		during = func() { b.runAtOnce(pcalls, nil) }
		own    error        // the caller's fsync of its temporary, if it makes one
		fences chan []error // what the fences said, where they ran beside the fsyncs
	)
	if len(pcalls) > 0 {
		failFenced(staged, errs, callFences(fenced))
		live, temps = liveTemps(staged)
	} else {
		var last vfs.TempFile
		temps, last = temps[:len(temps)-1], temps[len(temps)-1]
		during = func() {
			if hasFence(fenced) {
				fences = make(chan []error, 1)
				go func() { fences <- callFences(fenced) }()
			}
			own = b.sync(last.Sync)
		}
	}
	serrs := b.syncEach(func() []error { return sb.Sync(temps, during) })
	for j, i := range live {
		if j < len(serrs) {
			errs[i] = serrs[j]
		} else {
			errs[i] = own
		}
	}
	if fences != nil {
		failFenced(staged, errs, <-fences)
	}
	return true
}

// hasFence reports whether any of reqs has a fence.
func hasFence(reqs []storage.PrepareRequest) bool {
	for _, r := range reqs {
		if r.Fence != nil {
			return true
		}
	}
	return false
}

// liveTemps returns the indexes of staged's entries that are not nil, and
// their temporaries.
func liveTemps(staged []*prepared) (live []int, temps []vfs.TempFile) {
	for i, p := range staged {
		if p != nil {
			live = append(live, i)
			temps = append(temps, p.t)
		}
	}
	return live, temps
}

// tempsSynced meets the temp-synced barrier of each staged temporary (nil
// entries skipped); one whose barrier fails is discarded, its entry nil
// and errs saying why.
func tempsSynced(staged []*prepared, errs []error) {
	for i, p := range staged {
		if p == nil {
			continue
		}
		if err := p.hook(storage.BarrierTempSynced); err != nil {
			p.Abort()
			staged[i], errs[i] = nil, err
		}
	}
}

func (p *prepared) Abort() {
	if !p.done {
		p.done = true
		_ = p.t.Close()
	}
}

func (p *prepared) Commit(ctx context.Context) error {
	if err := p.link(ctx); err != nil {
		return err
	}
	return p.finish()
}

// link is Commit up to the link: the revision is visible (not yet durable)
// when it returns nil.
func (p *prepared) link(ctx context.Context) error {
	if p.done {
		return errors.New("dirbackend: a prepared revision was committed or aborted already")
	}
	if err := ctx.Err(); err != nil {
		// Cancelled before the link: nothing is published, as a crash
		// before it would leave.
		p.Abort()
		return err
	}
	b := p.b
	// An fsync that failed anywhere in this store since Prepare may have
	// lost data the page cache still shows: publish nothing more.
	if err := b.checkFailed(); err != nil {
		p.Abort()
		return err
	}
	p.done = true
	if err := p.t.Link(p.name); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			_ = p.t.Close()
			return err
		}
		// The name exists. It may be this very file, when a link's reply
		// was lost and the call retried; only another inode is a lost race.
		if mine, serr := p.t.Is(p.name); serr != nil || !mine {
			_ = p.t.Close()
			return &fs.PathError{Op: "publish", Path: p.name, Err: storage.ErrRevisionExists}
		}
	}
	if p.n > 0 {
		// What was linked, to tell it later from a file put in its place
		// (IsOwnHead): from the open file where the filesystem can say,
		// which needs no path lookup.
		var fi fs.FileInfo
		var err error
		if st, ok := p.t.(vfs.FileStater); ok {
			fi, err = st.Stat()
		}
		if fi == nil && (err == nil || errors.Is(err, errors.ErrUnsupported)) {
			fi, err = b.fs.Lstat(p.name)
		}
		if err != nil {
			_ = p.t.Close()
			return err
		}
		b.mu.Lock()
		if b.linked == nil {
			b.linked = map[storage.Loc]linkedFile{}
		}
		b.linked[p.loc] = linkedFile{n: p.n, id: vfs.Identity(fi), sum: p.sum}
		b.mu.Unlock()
	}
	if ls, ok := p.t.(vfs.LinkSyncer); ok {
		// No name of its own to drop: kept open for the SyncLink that
		// makes its link count durable beside the directory's fsync.
		p.linkSync = ls
		return nil
	}
	// Dropping the temporary name before the directory fsync makes the
	// removal durable together with the link. The revision is published
	// and its data synced whatever Close says; a name it failed to drop is
	// a stray temporary for fsck, not a reason to disown the revision.
	_ = p.t.Close()
	return nil
}

// finish is Commit after the link: the barriers and the fsyncs that make
// the revision durable.
func (p *prepared) finish() error {
	defer p.closeLinked()
	b := p.b
	if err := p.hook(storage.BarrierLinked); err != nil {
		return err
	}
	if err := b.fsyncOwed([]string{p.dir}, p.needs, p.linkSyncs(), true); err != nil {
		return err
	}
	if p.n > 0 {
		b.mu.Lock()
		if b.hints[p.loc] < p.n {
			b.hints[p.loc] = p.n
		}
		// The directory fsync after the link made every entry durable,
		// the revisions below n included.
		if b.synced[p.loc] < p.n {
			b.synced[p.loc] = p.n
		}
		b.mu.Unlock()
	}
	return p.hook(storage.BarrierDirSynced)
}

// syncHeadFile fsyncs the revision name that Sync makes durable, where
// the filesystem can (vfs.FileSyncer): its writer, another process, may
// have died between its link and the fsync that makes the file's link
// count durable (vfs.LinkSyncer), and a directory's fsync alone leaves a
// name that reads as corrupt after a crash. A refusal (not a regular
// file, gone, not readable) fsynced nothing and fails this call alone; a
// failed fsync fails the store, as any does.
func (b *Backend) syncHeadFile(name string) error {
	fsy, ok := b.fs.(vfs.FileSyncer)
	if !ok {
		return nil
	}
	err := fsy.SyncFile(name)
	switch {
	case err == nil, errors.Is(err, errors.ErrUnsupported):
		return nil
	case errors.Is(err, vfs.ErrNotRegular), errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		return err
	}
	return b.sync(func() error { return err })
}

// writeExclusive publishes data as dir/base exclusively and durably (the
// whole protocol, for proofs).
func (b *Backend) writeExclusive(dir, base string, data []byte, hook func(storage.Barrier) error) error {
	p, err := b.prepare(dir, base, data, hook)
	if err != nil {
		return err
	}
	return p.Commit(context.Background())
}

// Sync fsyncs loc's directory, and owed parents (first use), unless this
// backend already made revision n durable.
func (b *Backend) Sync(ctx context.Context, loc storage.Loc, n uint64) error {
	if n == 0 {
		return nil
	}
	b.mu.Lock()
	done := b.synced[loc] >= n
	b.mu.Unlock()
	if done {
		return nil
	}
	if err := b.checkFailed(); err != nil {
		return err
	}
	dir := b.dir(loc)
	needs, err := b.makeDirs(dir)
	if err != nil {
		return err
	}
	// The head's file beside its directory, as a publish fsyncs a link
	// count beside its directory (fsyncOwed): two flushes at once, not
	// one after the other.
	var ferr, derr error
	b.runAtOnce([]func() error{
		func() error { ferr = b.syncHeadFile(filepath.Join(dir, storage.RevisionName(n))); return nil },
		func() error { derr = b.fsyncDirs([]string{dir}, needs); return nil },
	}, nil)
	if ferr != nil {
		return ferr
	}
	if derr != nil {
		return derr
	}
	b.mu.Lock()
	if b.synced[loc] < n {
		b.synced[loc] = n
	}
	b.mu.Unlock()
	return nil
}
