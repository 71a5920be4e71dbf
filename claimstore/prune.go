package claimstore

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/hostid"
)

// Retention (ARCHITECTURE.md, "Retention: prune"). A root lives for years;
// prune removes what has long been free, and nothing a decision could
// still rest on:
//
//   - A session key whose head has been free for the retention time is
//     removed whole: (on a backend that needs one) a tombstone published
//     above its head exclusively while its history is archived, then —
//     once the archive is durable and every seat has been read again, so
//     that no acquire that had taken its seat before the tombstone can
//     still be about to link — removed by the backend's guarded removal,
//     which fails if the head moved.
//   - A seat is never removed: its numbers are fencing tokens. Its history
//     below its newest free revision older than the retention time is
//     compacted (storage.Compacter): the key reads as before, from a base.
//   - Never touched: a held key, a key whose pair is held, a key sharing a
//     held key's claim, a key that cannot be read whole (damaged, gapped,
//     unreadable: fsck's to report), anything dated within the retention
//     time or in the future. Exclusion never depends on a date: dates only
//     choose among keys that are free.

// DefaultRetention is how long a key's head must have been free before
// prune removes its history, when PruneOptions.OlderThan is not set.
const DefaultRetention = 30 * 24 * time.Hour

// DefaultArchiveRetention is how long prune keeps archive segments, when
// PruneOptions.ArchiveOlderThan is not set.
const DefaultArchiveRetention = 365 * 24 * time.Hour

// pruneBatch is how many keys one archive segment covers: a segment is
// made durable before the first removal of its batch.
const pruneBatch = 10000

// PruneOptions configure Prune. A nil *PruneOptions means the defaults.
type PruneOptions struct {
	// OlderThan is the retention time: only history whose free head was
	// written longer ago than this is removed. Default DefaultRetention.
	OlderThan time.Duration
	// DryRun reports what would be removed and removes nothing.
	DryRun bool
	// NoArchive removes without archiving: the operator keeps no audit
	// trail of what is removed.
	NoArchive bool
	// ArchiveDir is where archive segments are written: by default the
	// backend's (storage.ArchiveLocator; a directory root's archive/). A
	// backend without one (etcd) needs it, or NoArchive.
	ArchiveDir string
	// ArchiveOlderThan is how long archive segments are kept; older ones
	// are removed. Default DefaultArchiveRetention; negative keeps all.
	ArchiveOlderThan time.Duration
	// Progress, if set, is called as keys are read and as they are pruned.
	Progress func(phase string, done, total int)
	// Each, if set, is called with every action, as it is taken (or, in a
	// dry run, decided). It is called from Prune's goroutine only.
	Each func(PruneAction)
	// Workers is how many tombstones are published at once on a backend
	// that publishes them one by one (without storage.BatchPublisher).
	// Default DefaultPruneWorkers.
	Workers int
}

// DefaultPruneWorkers is how many tombstones prune publishes at once, on a
// backend without storage.BatchPublisher, when PruneOptions.Workers is not
// set: enough concurrent fsyncs that a journal commit covers many of them,
// or, without a journal, that the disk's queue holds many
// (docs/BENCHMARKS.md, "Retention"). A directory root publishes them a
// batch at a time instead, two syncs per batch.
const DefaultPruneWorkers = 32

// PruneActionKind says what prune did to a key.
type PruneActionKind string

const (
	// PruneRemoved: the key's whole history was removed.
	PruneRemoved PruneActionKind = "removed"
	// PruneCompacted: the key's revisions below Base were removed.
	PruneCompacted PruneActionKind = "compacted"
	// PruneKept: the key was eligible by age but is kept (Reason).
	PruneKept PruneActionKind = "kept"
)

// PruneAction is one thing prune did, or would do.
type PruneAction struct {
	Action PruneActionKind `json:"action"`
	Key    Key             `json:"-"`
	Loc    Loc             `json:"-"`
	// From and To are the revisions removed (inclusive); for a compaction
	// the key keeps To+1 and above.
	From uint64 `json:"from,omitempty"`
	To   uint64 `json:"to,omitempty"`
	// Reason says why a key was kept.
	Reason string `json:"reason,omitempty"`
}

// PruneReport is what Prune did.
type PruneReport struct {
	DryRun    bool `json:"dryRun"`
	Keys      int  `json:"keys"`      // keys walked
	Removed   int  `json:"removed"`   // keys removed whole
	Compacted int  `json:"compacted"` // keys compacted
	Revisions int  `json:"revisions"` // revisions removed, by both
	Kept      int  `json:"kept"`      // keys old enough but kept (see Each)
	// Young counts the free keys not yet old enough.
	Young int `json:"young"`
	// Archives are the segments written; ArchivesRemoved counts those
	// removed by their retention.
	Archives        []string `json:"archives"`
	ArchivesRemoved int      `json:"archivesRemoved"`
	// Swept counts what earlier prunes left half removed and this one
	// finished.
	Swept int `json:"swept"`
	// Blocked, when set, says why no session key was removed.
	Blocked string `json:"blocked,omitempty"`
	// FencesCollected counts the fence keys of lost requests removed (in
	// a dry run: that would be) on a backend that writes them
	// (storage.FenceCollector: etcd); FencesKept those left, and
	// FencesKeptWhy why.
	FencesCollected int    `json:"fencesCollected"`
	FencesKept      int    `json:"fencesKept"`
	FencesKeptWhy   string `json:"fencesKeptWhy,omitempty"`
}

// candidate is a key prune may act on.
type candidate struct {
	in *KeyInfo
	// head is a removal's head, read whole again for its batch
	// (rereadHeads) and let go with it.
	head *Head
	base uint64 // compaction: the new base; removal: 0
	from uint64 // the lowest revision it removes
	to   uint64 // the highest
	// tomb is the tombstone this prune published (or found) as the head,
	// and its bytes.
	tombN    uint64
	tombData []byte
	// keptWhy, when set, is why no tombstone could be published (the
	// key is kept, free).
	keptWhy string
	// finish: a compaction to the base the key has, for what an earlier
	// one left below it.
	finish bool
}

// Prune removes the history of keys that have been free for longer than
// the retention time (see the comment at the top of this file), archiving
// it first unless opts.NoArchive. It never races an acquirer: each removal
// is guarded by the backend (storage.KeyRemover), and a key written to
// since it was read is kept. Errors stop it where it is: what was removed
// is archived and durable, and running it again goes on.
func (s *Store) Prune(ctx context.Context, opts *PruneOptions) (*PruneReport, error) {
	if opts == nil {
		opts = &PruneOptions{}
	}
	retention := opts.OlderThan
	if retention <= 0 {
		retention = DefaultRetention
	}
	now := s.now()
	cutoff := now.Add(-retention)
	rep := &PruneReport{DryRun: opts.DryRun}
	workers := opts.Workers
	if workers <= 0 {
		workers = DefaultPruneWorkers
	}
	each := func(a PruneAction) {
		if opts.Each != nil {
			opts.Each(a)
		}
	}
	var arch *archiver
	if !opts.NoArchive {
		dir := opts.ArchiveDir
		if dir == "" {
			if l, ok := s.be.(storage.ArchiveLocator); ok {
				dir = l.ArchiveDir()
			}
		}
		if dir == "" {
			return nil, fmt.Errorf("%w: %s keeps no archive of its own; give an archive directory (--archive-dir) or choose to keep none (--no-archive)", ErrNoArchive, s.Root())
		}
		arch = &archiver{dir: dir, root: s.Root(), now: now}
	}
	remover, canRemove := s.be.(storage.KeyRemover)
	compacter, canCompact := s.be.(storage.Compacter)
	if !opts.DryRun {
		if sw, ok := s.be.(storage.Sweeper); ok {
			n, err := sw.Sweep(ctx)
			rep.Swept += n
			if err != nil {
				return rep, err
			}
		}
	}
	w, plain, err := s.pruneWalk(ctx, cutoff, now, opts.Progress)
	if err != nil {
		return rep, err
	}
	rep.Keys = w.Keys

	// The free keys a walk found: idle keys, and both keys of a pair that
	// is free. A key of a pair with a held key is never a candidate.
	var free []*KeyInfo
	heldClaims := map[string]bool{}
	for _, p := range w.Pairs {
		if p.SeatInfo.Held() || p.SessionInfo.Held() {
			heldClaims[p.SeatInfo.ClaimID] = true
			heldClaims[p.SessionInfo.ClaimID] = true
			continue
		}
		free = append(free, p.SeatInfo, p.SessionInfo)
	}
	for _, o := range w.Orphans {
		if o.Info.ClaimID != "" {
			heldClaims[o.Info.ClaimID] = true
		}
	}
	free = append(free, w.IdleKeys...)

	var seats []*candidate
	kept := func(k Key, why string) {
		rep.Kept++
		each(PruneAction{Action: PruneKept, Key: k, Loc: k.Loc(), Reason: why})
	}
	// removable decides on a free session key from what the walk kept of
	// it.
	removable := func(p *plainSession) bool {
		switch {
		case heldClaims[p.claim]:
			kept(p.key(), "it names claim "+p.claim+", which another key still holds")
		case !p.old && !p.tombstone:
			if p.why != "" {
				kept(p.key(), p.why)
			} else {
				rep.Young++
			}
		case !canRemove:
			kept(p.key(), "the backend cannot remove a key")
		default:
			return true
		}
		return false
	}
	// The sessions to remove: those the walk paired (few), then its plain
	// ones, filtered where they lie: a year's first prune holds hundreds
	// of thousands, and a second list of them would double its memory.
	var sessions []plainSession
	for _, in := range free {
		if in.Key == nil || in.Head == nil || in.Head.Record == nil || in.Top == 0 {
			continue // no history, or nothing readable to judge it by
		}
		if in.Loc.Kind == KindSession {
			if p := plainOf(in, cutoff, now); removable(&p) {
				sessions = append(sessions, p)
			}
			continue
		}
		if heldClaims[in.ClaimID] {
			kept(*in.Key, "it names claim "+in.ClaimID+", which another key still holds")
			continue
		}
		if !canCompact {
			continue
		}
		c, why, err := s.compactionOf(ctx, compacter, in, cutoff, now)
		if err != nil {
			return rep, err
		}
		switch {
		case c != nil:
			seats = append(seats, c)
		case why != "":
			kept(*in.Key, why)
		default:
			rep.Young++
		}
	}
	keep := plain[:0]
	for i := range plain {
		if removable(&plain[i]) {
			keep = append(keep, plain[i])
		}
	}
	clear(plain[len(keep):])
	plain = keep
	nSessions := len(sessions) + len(plain)
	session := func(i int) *plainSession {
		if i < len(sessions) {
			return &sessions[i]
		}
		return &plain[i-len(sessions)]
	}
	if nSessions > 0 {
		if block, err := s.sessionBlock(ctx, w, nil); err != nil {
			return rep, err
		} else if block != "" {
			rep.Blocked = block
			for i := range nSessions {
				kept(session(i).key(), block)
			}
			sessions, plain, nSessions = nil, nil, 0
		}
	}
	if opts.DryRun {
		for i := range nSessions {
			s.reportDone(rep, session(i).candidate(), each)
		}
		for _, c := range seats {
			if !c.finish {
				s.reportDone(rep, c, each)
			}
		}
		return rep, s.collectFences(ctx, true, rep)
	}

	// The sessions, then the seats, a batch at a time: a session's
	// candidate is made whole only for its batch (plainSession).
	total := nSessions + len(seats)
	done := 0
	for start := 0; start < total; start += pruneBatch {
		var chunk []*candidate
		for i := start; i < min(start+pruneBatch, total); i++ {
			if i < nSessions {
				p := session(i)
				chunk = append(chunk, p.candidate())
				*p = plainSession{} // its strings go with the batch
			} else {
				chunk = append(chunk, seats[i-nSessions])
			}
		}
		batch, err := s.rereadHeads(ctx, chunk, rep, each)
		if err != nil {
			return rep, err
		}
		// The batch's segment is written while its tombstones are
		// published: a tombstone is a publish, not a removal, and
		// pruneBatch waits for the segment before its first removal.
		var seg *archiving
		if arch != nil {
			if g := arch.plan(batch); g != nil {
				var err error
				if seg, err = g.start(ctx, s); err != nil {
					return rep, err
				}
			}
		}
		if err := s.pruneBatch(ctx, w, batch, seg, workers, remover, compacter, rep, each); err != nil {
			return rep, err
		}
		// What the batch read whole goes with it: kept to the end, the
		// heads would be the whole root again.
		for _, c := range batch {
			c.head = nil
		}
		done += len(chunk)
		if opts.Progress != nil {
			opts.Progress("prune", done, total)
		}
	}
	if sw, ok := s.be.(storage.Sweeper); ok {
		n, err := sw.Sweep(ctx)
		rep.Swept += n
		if err != nil {
			return rep, err
		}
	}
	if err := s.collectFences(ctx, false, rep); err != nil {
		return rep, err
	}
	if arch != nil && opts.ArchiveOlderThan >= 0 {
		keep := opts.ArchiveOlderThan
		if keep == 0 {
			keep = DefaultArchiveRetention
		}
		n, err := arch.expire(now.Add(-keep))
		rep.ArchivesRemoved = n
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// slimForPrune keeps of a key what Prune decides on: the key, its claim and
// pair member, its numbers and errors, and of its head whether it holds
// (as slimKeyInfo keeps them) and, when free, its date and whether it is a
// tombstone, with the SHA-256 of its bytes in place of the bytes. The
// first prune of a root with a year of history walks some 1.5 million
// keys, nearly all of them to be removed; kept whole, their records and
// bytes were gigabytes. A removal reads its head whole again when its
// batch comes (rereadHeads).
func slimForPrune(in *KeyInfo) {
	h := in.Head
	slimKeyInfo(in)
	if in.Head == nil || in.Head.Record != slimFree {
		return
	}
	in.Head.Record = &Record{State: Stopped, Proof: slimFree.Proof, ClaimID: h.Record.ClaimID, WrittenAt: h.Record.WrittenAt, Tombstone: h.Record.Tombstone}
	sum := sha256.Sum256(h.raw)
	in.Head.digest = &sum
}

// rereadHeads reads again, whole, the head of each key of batch that is to
// be removed: the walk kept of it only what the decision needed
// (slimForPrune), and the archive, the tombstone and the guarded removal
// follow its exact bytes. A head that is not byte for byte the one the
// walk decided on (written to since, or removed and written again) keeps
// its key, as a tombstone that loses its number does; one that cannot be
// read now keeps it with the reason. Compactions need no head.
//
// Only the head is read, not the history under it (Store.head's census):
// the walk found that history whole, revisions are never changed or
// removed under a head but by prune itself, and a head byte for byte the
// one the walk read (every revision names its number, claim and time) is
// that very key, unchanged. Where the backend can (storage.HeadAtReader),
// the head is read at the number the walk found — the next one missing,
// that one read — without searching for it again: any other head is a
// change, and keeps the key. The heads are read rereaders at once, and
// judged in order.
func (s *Store) rereadHeads(ctx context.Context, batch []*candidate, rep *PruneReport, each func(PruneAction)) ([]*candidate, error) {
	heads := make([]*Head, len(batch))
	errs := make([]error, len(batch))
	inParallel(len(batch), rereaders, func(i int) {
		c := batch[i]
		if c.base > 0 {
			return
		}
		if errs[i] = ctx.Err(); errs[i] != nil {
			return
		}
		heads[i], errs[i] = s.headAt(ctx, *c.in.Key, c.in.Head.N)
	})
	out := make([]*candidate, 0, len(batch))
	for i, c := range batch {
		if c.base > 0 {
			out = append(out, c)
			continue
		}
		h, err := heads[i], errs[i]
		var why string
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, storage.ErrHeadMoved):
			why = "written to since it was read"
		case err != nil:
			why = "its head cannot be read again now: " + err.Error()
		case h.Damage != nil:
			why = "its head is damaged now: " + h.Damage.Error() + "; run claimctl fsck"
		case sha256.Sum256(h.raw) != *c.in.Head.digest:
			// Every revision names its number and claim: other bytes are
			// another head, whatever its number.
			why = "written to since it was read"
		}
		if why != "" {
			rep.Kept++
			each(PruneAction{Action: PruneKept, Key: *c.in.Key, Loc: c.in.Loc, Reason: why})
			continue
		}
		c.head = h
		out = append(out, c)
	}
	return out, nil
}

// rereaders is how many heads rereadHeads reads at once.
const rereaders = 8

// collectFences has the backend remove the fence keys no lost request can
// still need (storage.FenceCollector), after the removals: a collection
// that fails then costs none of them.
func (s *Store) collectFences(ctx context.Context, dryRun bool, rep *PruneReport) error {
	fc, ok := s.be.(storage.FenceCollector)
	if !ok {
		return nil
	}
	fr, err := fc.CollectFences(ctx, dryRun)
	rep.FencesCollected, rep.FencesKept, rep.FencesKeptWhy = fr.Collected, fr.Kept, fr.Why
	return err
}

// ErrNoArchive is returned by Prune when it has nowhere to archive what it
// would remove and was not told to keep no archive.
var ErrNoArchive = errors.New("no archive directory")

// oldEnough says whether a free head was written before cutoff: its
// writtenAt, which the writer's clock gave. A head without a readable date
// or dated after now (a clock that jumped) is not old, with why.
func oldEnough(rec *Record, cutoff, now time.Time) (bool, string) {
	t, err := time.Parse(time.RFC3339Nano, rec.WrittenAt)
	switch {
	case err != nil:
		return false, fmt.Sprintf("its head has no date prune can read (writtenAt %q)", rec.WrittenAt)
	case t.After(now):
		return false, fmt.Sprintf("its head is dated %s, in the future (a clock that jumped); it is kept until that date has passed", rec.WrittenAt)
	}
	return t.Before(cutoff), ""
}

// compactionOf finds how far a free seat may be compacted: below its
// newest free revision written before cutoff. The seat's dates rise with
// its revisions (every writer stamps its own clock), so the search is a
// bisection; a clock that jumped only moves where the base falls, and
// every revision above the base is kept whatever its date.
func (s *Store) compactionOf(ctx context.Context, cp storage.Compacter, in *KeyInfo, cutoff, now time.Time) (*candidate, string, error) {
	k := *in.Key
	base, err := cp.Base(ctx, in.Loc)
	if err != nil {
		return nil, "", err
	}
	h := in.Head
	if old, why := oldEnough(h.Record, cutoff, now); why != "" {
		return nil, why, nil
	} else if old {
		if h.N <= base {
			if base > 1 {
				// Compacted already: compacting again removes what a
				// compaction cut short left below the base, and nothing
				// else (finish: not reported, archived before).
				return &candidate{in: in, base: base, finish: true}, "", nil
			}
			return nil, "", nil
		}
		return &candidate{in: in, base: h.N, from: base, to: h.N - 1}, "", nil
	}
	// The newest revision written before cutoff, by bisection over
	// base..h.N-1 (h.N itself is young).
	lo, hi := base, h.N // lo: unknown-or-old; hi: young
	dated := func(n uint64) (time.Time, *Record, bool) {
		data, err := s.be.Read(ctx, in.Loc, n)
		if err != nil {
			return time.Time{}, nil, false
		}
		rec, err := DecodeRecord(data, k, n)
		if err != nil {
			return time.Time{}, nil, false
		}
		t, err := time.Parse(time.RFC3339Nano, rec.WrittenAt)
		return t, rec, err == nil
	}
	if t, _, ok := dated(lo); !ok || !t.Before(cutoff) {
		return nil, "", nil
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		t, _, ok := dated(mid)
		if !ok {
			return nil, fmt.Sprintf("revision %d cannot be read or dated; run claimctl fsck", mid), nil
		}
		if t.Before(cutoff) {
			lo = mid
		} else {
			hi = mid
		}
	}
	// Down from there to a free revision: the base must be one, so that
	// every claim above it is kept whole.
	for n := lo; n > base && n+16 > lo; n-- {
		_, rec, ok := dated(n)
		if ok && !rec.held() {
			return &candidate{in: in, base: n, from: base, to: n - 1}, "", nil
		}
	}
	return nil, "", nil
}

// sessionBlock says why no session may be removed now, or "": an acquire
// that has published its seat revision and not yet its session revision
// may be about to link above any session's head, and a record without a
// pair member (the reference implementation's) does not say which. Such a
// seat blocks every session's removal until its owner is proven gone or
// its acquire completes. A seat whose record names its pair protects that
// session only (protect, when not nil, gets it).
func (s *Store) sessionBlock(ctx context.Context, w *Walk, protect map[Loc]bool) (string, error) {
	heldSessions := map[string]bool{}
	for _, p := range w.Pairs {
		if p.SessionInfo.Held() && p.SessionInfo.ClaimID != "" {
			heldSessions[p.SessionInfo.ClaimID] = true
		}
	}
	locs, err := s.be.Locs(ctx, KindSeat)
	if err != nil {
		return "", err
	}
	for _, loc := range locs {
		n, data, err := s.be.Head(ctx, loc)
		if err != nil || n == 0 {
			continue // damaged or unreadable: not an acquire in flight
		}
		k, ok := keyOf(data, loc)
		if !ok {
			continue
		}
		rec, err := DecodeRecord(data, k, n)
		if err != nil || !rec.held() {
			continue
		}
		if p := pairOf(rec); p != nil {
			if protect != nil {
				protect[p[1].Loc()] = true
			}
			continue
		}
		if heldSessions[rec.ClaimID] {
			continue
		}
		if state, _ := s.JudgeOwner(rec); state == hostid.Gone {
			continue
		}
		return fmt.Sprintf("%s is held by claim %s, whose record names no session (the reference implementation's) and no session holds: an acquire may be between its two keys; no session is removed until it completes or its owner is gone (claimctl classify)", k, rec.ClaimID), nil
	}
	return "", nil
}

// pruneBatch removes and compacts one batch, whose archive segment seg
// (nil when none is written) is being written: the removals' tombstones
// are published meanwhile, and nothing is compacted or removed before the
// segment is durable. pruneBatch returns only once seg's writer is done.
func (s *Store) pruneBatch(ctx context.Context, w *Walk, batch []*candidate, seg *archiving, workers int, remover storage.KeyRemover, compacter storage.Compacter, rep *PruneReport, each func(PruneAction)) error {
	marker, _ := s.be.(storage.RemovalMarker)
	tombs := marker != nil && marker.NeedsTombstone()
	archived := func() error {
		if seg == nil {
			return nil
		}
		name, err := seg.wait()
		seg = nil
		if name != "" {
			rep.Archives = append(rep.Archives, name)
		}
		return err
	}
	defer func() {
		// Stopped before its first removal: the segment is not needed
		// now, but its writer must be done before prune returns.
		if seg != nil {
			seg.cancel()
			_ = archived()
		}
	}()
	var removals, compactions []*candidate
	for _, c := range batch {
		if c.base > 0 {
			compactions = append(compactions, c)
			continue
		}
		removals = append(removals, c)
	}
	if tombs {
		var err error
		if removals, err = s.publishTombstones(ctx, removals, workers, rep, each); err != nil {
			return err
		}
	} else {
		for _, c := range removals {
			c.tombN, c.tombData = c.head.N, c.head.raw
		}
	}
	if err := archived(); err != nil {
		return err
	}
	for _, c := range compactions {
		if err := s.pause(Point{Barrier: BarrierBeforeRemove, Key: *c.in.Key, Revision: c.in.Head.N, ClaimID: c.in.ClaimID}); err != nil {
			return err
		}
	}
	var failed error
	for i, err := range compactAll(ctx, compacter, compactions) {
		c := compactions[i]
		if err != nil {
			if errors.Is(err, ErrSyncFailed) || ctx.Err() != nil {
				// The others compacted at the same time are reported
				// first: each is done, or not, on its own.
				if failed == nil {
					failed = err
				}
				continue
			}
			// A compaction that cannot be done now (an etcd cluster
			// out of space refuses its base pointer's put; a removal
			// has no put) leaves the key as it was: whole and
			// readable. The removals go on; the next prune retries.
			rep.Kept++
			each(PruneAction{Action: PruneKept, Key: *c.in.Key, Loc: c.in.Loc, Reason: "not compacted now: " + err.Error() + "; the next prune tries again"})
			continue
		}
		if !c.finish {
			s.reportDone(rep, c, each)
		}
	}
	if failed != nil {
		return failed
	}
	if len(removals) == 0 {
		return nil
	}
	if err := s.pause(Point{Barrier: BarrierTombstoned}); err != nil {
		return err
	}
	// Every seat read again, after the tombstones: an acquire whose seat
	// revision is not seen here reads its session after its tombstone.
	protect := map[Loc]bool{}
	block, err := s.sessionBlock(ctx, w, protect)
	if err != nil {
		return err
	}
	var remove []*candidate
	for _, c := range removals {
		why := block
		if protect[c.in.Loc] {
			why = "a seat's acquire names it and has not yet published on it"
		}
		if why != "" {
			if block != "" {
				rep.Blocked = block
			}
			rep.Kept++
			each(PruneAction{Action: PruneKept, Key: *c.in.Key, Loc: c.in.Loc, Reason: why})
			continue
		}
		if err := s.pause(Point{Barrier: BarrierBeforeRemove, Key: *c.in.Key, Revision: c.tombN, ClaimID: c.in.ClaimID}); err != nil {
			return err
		}
		remove = append(remove, c)
	}
	if len(remove) == 0 {
		return nil
	}
	errs := make([]error, len(remove))
	if br, ok := remover.(storage.KeyBatchRemover); ok {
		rs := make([]storage.Removal, len(remove))
		for i, c := range remove {
			rs[i] = storage.Removal{Loc: c.in.Loc, N: c.tombN, Head: c.tombData}
		}
		var err error
		if errs, err = br.RemoveKeys(ctx, rs); err != nil {
			return err
		}
	} else {
		for i, c := range remove {
			errs[i] = remover.RemoveKey(ctx, c.in.Loc, c.tombN, c.tombData)
			if errs[i] != nil && !errors.Is(errs[i], storage.ErrHeadMoved) {
				return errs[i]
			}
		}
	}
	for i, c := range remove {
		if errors.Is(errs[i], storage.ErrHeadMoved) {
			rep.Kept++
			each(PruneAction{Action: PruneKept, Key: *c.in.Key, Loc: c.in.Loc, Reason: "written to since it was read"})
			continue
		}
		if errs[i] != nil {
			return errs[i]
		}
		s.mu.Lock()
		delete(s.listed, c.in.Loc)
		delete(s.own, c.in.Loc)
		s.mu.Unlock()
		s.reportDone(rep, c, each)
	}
	return nil
}

// compactWorkers is how many seats are compacted at once: a compaction is
// mostly unlinks in its own directory, and those of different directories
// proceed side by side (docs/BENCHMARKS.md, "Retention"); the base
// pointers are written under the prune lock, one at a time whatever this
// is.
const compactWorkers = 8

// compactAll compacts each of cs below its base, compactWorkers at once,
// and returns each one's error, in the order of cs. Once ctx is done, the
// compactions not yet begun fail with its error.
func compactAll(ctx context.Context, compacter storage.Compacter, cs []*candidate) []error {
	errs := make([]error, len(cs))
	inParallel(len(cs), compactWorkers, func(i int) {
		if err := ctx.Err(); err != nil {
			errs[i] = err
			return
		}
		errs[i] = compacter.Compact(ctx, cs[i].in.Loc, cs[i].base)
	})
	return errs
}

// publishTombstones publishes a tombstone above each removal's free head
// (one already a tombstone is its own). Each is an exclusive, durable
// publish of its own key; on a backend that publishes in batches
// (storage.BatchPublisher) a batch of them shares its syncs, else
// workers are published at once, so that fsyncs issued together share
// the filesystem's journal commits (or the disk's queue) where one at a
// time would pay one each. It returns the removals whose tombstone is the
// head, in order, and reports the others kept (written to since they were
// read). A failed publish (the first, in order) or a cancellation is its
// error; the tombstones published by then stay, free, for the next prune.
func (s *Store) publishTombstones(ctx context.Context, cs []*candidate, workers int, rep *PruneReport, each func(PruneAction)) ([]*candidate, error) {
	won := make([]bool, len(cs))
	errs := make([]error, len(cs))
	if bp, ok := s.be.(storage.BatchPublisher); ok {
		for start := 0; start < len(cs) && ctx.Err() == nil; start += tombstoneBatch {
			end := min(start+tombstoneBatch, len(cs))
			if err := s.publishTombstoneBatch(ctx, bp, cs[start:end], won[start:end], errs[start:end]); err != nil {
				return nil, err
			}
		}
	} else {
		jobs := make(chan int)
		var wg sync.WaitGroup
		for range min(workers, len(cs)) {
			wg.Go(func() {
				for i := range jobs {
					c := cs[i]
					h := c.head
					if h.Record.Tombstone {
						c.tombN, c.tombData, won[i] = h.N, h.raw, true
						continue
					}
					n, data, ok, err := s.publishTombstone(ctx, h)
					if ok {
						c.tombN, c.tombData, c.to = n, data, n
					}
					if errors.Is(err, ErrRecordTooLarge) {
						c.keptWhy, err = tombstoneTooLarge(h), nil
					}
					won[i], errs[i] = ok, err
				}
			})
		}
		for i := range cs {
			if ctx.Err() != nil {
				break
			}
			jobs <- i
		}
		close(jobs)
		wg.Wait()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	var out []*candidate
	for i, c := range cs {
		if !won[i] {
			why := c.keptWhy
			if why == "" {
				why = "written to since it was read"
			}
			rep.Kept++
			each(PruneAction{Action: PruneKept, Key: *c.in.Key, Loc: c.in.Loc, Reason: why})
			continue
		}
		out = append(out, c)
	}
	return out, nil
}

// tombstoneBatch is how many tombstones one PublishBatch publishes: each
// holds its temporary open until its link, and a batch's syncs are paid
// once for all of it.
const tombstoneBatch = 1000

// publishTombstoneBatch publishes the tombstones of cs as one batch of bp,
// setting won and errs as publishTombstones' workers do; its error is the
// batch's own (a failed sync: none of it may be relied on).
func (s *Store) publishTombstoneBatch(ctx context.Context, bp storage.BatchPublisher, cs []*candidate, won []bool, errs []error) error {
	var reqs []storage.PrepareRequest
	var which []int
	for i, c := range cs {
		h := c.head
		if h.Record.Tombstone {
			c.tombN, c.tombData, won[i] = h.N, h.raw, true
			continue
		}
		pr := &preparing{prev: h.raw}
		hook, ok := pr.encodeOne(s, h.Key, h.N+1, tombstoneOf(h, s.now()))
		if !ok {
			if errors.Is(pr.err, ErrRecordTooLarge) {
				c.keptWhy = tombstoneTooLarge(h)
				continue
			}
			return pr.err
		}
		reqs = append(reqs, storage.PrepareRequest{Loc: h.Key.Loc(), N: h.N + 1, Data: pr.data, Prev: h.raw, Hook: hook})
		which = append(which, i)
	}
	if len(reqs) == 0 {
		return nil
	}
	perrs, err := bp.PublishBatch(ctx, reqs)
	if err != nil {
		return err
	}
	for k, i := range which {
		c, r := cs[i], reqs[k]
		switch err := perrs[k]; {
		case err == nil:
			c.tombN, c.tombData, c.to, won[i] = r.N, r.Data, r.N, true
			s.noteOwn(r.Loc, r.N, c.head.Record.ClaimID)
		case errors.Is(err, ErrRevisionExists), errors.Is(err, storage.ErrHeadMoved):
		default:
			errs[i] = err
		}
	}
	return nil
}

// reportDone counts and reports a removal or compaction.
func (s *Store) reportDone(rep *PruneReport, c *candidate, each func(PruneAction)) {
	a := PruneAction{Key: *c.in.Key, Loc: c.in.Loc, From: c.from, To: c.to}
	if c.base > 0 {
		a.Action = PruneCompacted
		rep.Compacted++
	} else {
		a.Action = PruneRemoved
		rep.Removed++
	}
	rep.Revisions += int(c.to - c.from + 1)
	each(a)
}

// publishTombstone publishes a tombstone above h, a free head: its claim
// and members, stopped with a pruned proof (see TombstoneKind). won is
// false when another writer had the number.
func (s *Store) publishTombstone(ctx context.Context, h *Head) (n uint64, data []byte, won bool, err error) {
	pr := &preparing{done: make(chan struct{}), prev: h.raw}
	s.prepareInto(ctx, pr, h.Key, h.N+1, tombstoneOf(h, s.now()))
	close(pr.done)
	won, _, err = pr.commit(ctx)
	return h.N + 1, pr.data, won, err
}

// tombstoneTooLarge is why a key is kept whose tombstone would be larger
// than a revision may be: a free head within a few dozen bytes of the
// bound, whose tombstone (the same record, stopped, with a pruned proof)
// no reader would take. The key stays as it is, free, and every other
// key is pruned; failing the whole prune would strand the root's history
// behind one record.
func tombstoneTooLarge(h *Head) string {
	return fmt.Sprintf("its tombstone, revision %d, would be more than the %d bytes a revision may hold (its head is %d bytes): it is kept, free, with its history", h.N+1, MaxFileSize, len(h.raw))
}

// tombstoneOf is the tombstone to publish above h, a free head, at now.
func tombstoneOf(h *Head, now time.Time) *Record {
	t := h.Record.clone()
	t.Tombstone = true
	t.State = Stopped
	t.Proof = NewProof(ProofPruned, "")
	t.Fields.Set("pruned", prunedJSON(h.N, timestamp(now)))
	return t
}

// prunedJSON is a tombstone's "pruned" member: the free head it was
// published above, and when.
func prunedJSON(above uint64, at string) json.RawMessage {
	b, _ := json.Marshal(struct {
		Above uint64 `json:"above"`
		At    string `json:"at"`
	}{above, at})
	return b
}

// sortCandidates orders candidates by kind and hash, for a stable archive.
func sortCandidates(cs []*candidate) {
	sort.Slice(cs, func(i, j int) bool { return cs[i].in.Loc.String() < cs[j].in.Loc.String() })
}
