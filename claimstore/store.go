package claimstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/claimstore/claimstore/hostid"
	"github.com/claimstore/claimstore/internal/safefile"
)

// Options configure a Store. A nil *Options means all defaults.
type Options struct {
	// FS is the filesystem the directory backend uses. Default: OSFS.
	FS FS
	// Backend replaces the directory backend altogether. Default: the
	// directory backend on FS at the root.
	Backend Backend
	// Host presents the machine: its machine id and boot id, and process
	// identities. Default: hostid.System.
	Host hostid.Host
	// Barrier, when set, is called at every barrier point.
	Barrier BarrierFunc
	// Now is the clock for writtenAt. Default: time.Now. The store never
	// decides anything by it.
	Now func() time.Time
	// Retries bounds how often an operation that lost a link race
	// re-reads and re-decides. Default: 4.
	Retries int
	// Sequential runs, one after the other in a fixed order, the work a
	// step otherwise overlaps (its session revision is prepared first,
	// then its seat revision published, then the session revision
	// committed), so that tests that stop a store after its k-th
	// filesystem call meet the same call at the same k every run. The
	// crash states are the same as the overlapped protocol's: only the
	// order of calls that make nothing durable differs.
	Sequential bool
}

// Store is a claim store on one root. Its methods are safe for concurrent
// use by multiple goroutines; exclusion between writers, in this process or
// any other, comes from the publish protocol, not from locks.
type Store struct {
	mu     sync.Mutex
	listed map[Loc]uint64 // see head: keys a listing showed dense, and up to where
	// own remembers, per key, the last revision this store published: a
	// step fenced on it need not read it back (see fenced).
	own map[Loc]ownRev
	// machine is the machine id once read: a store never outlives it.
	machine string

	root       string
	url        bool // root is a URL (a backend's, e.g. etcd://host/prefix), not a path
	be         Backend
	host       hostid.Host
	barrier    BarrierFunc
	now        func() time.Time
	retries    int
	sequential bool
}

// Open returns a store on the claim root. The root need not exist (the
// first write creates it, mode 0700), but its parent must, and an existing
// root must be a real directory (not a symlink) that no other user can
// write into. Every ancestor of the root must belong to root or to this
// user and not be writable by group or others unless sticky, since a user
// who can write into one can rename the root away (checked again before
// the first write). Otherwise the error wraps ErrUnsafeRoot and names the
// path and the fix. Open touches nothing on disk.
func Open(root string, opts *Options) (*Store, error) {
	if opts == nil {
		opts = &Options{}
	}
	if root == "" {
		return nil, errors.New("claimstore: a claim root is required")
	}
	url := opts.Backend != nil && strings.Contains(root, "://")
	if !url {
		root = filepath.Clean(root)
		if isStagingName(root) {
			return nil, &fs.PathError{Op: "open claim root", Path: root, Err: fmt.Errorf("%w: a directory named .NAME%s is where claimctl copy builds a copy of a root before it renames it into place; it is never a root (remove it with claimctl copy --abort --to NAME)", ErrUnsafeRoot, StagingSuffix)}
		}
	}
	fsys := opts.FS
	if fsys == nil {
		fsys = OSFS
	}
	if _, isOS := fsys.(osFS); isOS && opts.Backend == nil {
		if err := checkRoot(root); err != nil {
			return nil, err
		}
	}
	s := &Store{listed: map[Loc]uint64{}, root: root, url: url, be: opts.Backend, host: opts.Host, barrier: opts.Barrier, now: opts.Now, retries: opts.Retries, sequential: opts.Sequential}
	if s.be == nil {
		be := NewDirBackend(fsys, root)
		be.(*dirBackend).sequential = opts.Sequential
		s.be = be
	}
	if s.host == nil {
		s.host = hostid.System
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.retries <= 0 {
		s.retries = 4
	}
	return s, nil
}

type ownRev struct {
	n       uint64
	claimID string
}

// machineID returns this machine's id, read once per store.
func (s *Store) machineID() (string, error) {
	s.mu.Lock()
	m := s.machine
	s.mu.Unlock()
	if m != "" {
		return m, nil
	}
	m, err := s.host.MachineID()
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.machine = m
	s.mu.Unlock()
	return m, nil
}

// Root returns the store's claim root.
func (s *Store) Root() string { return s.root }

// Backend returns the store's backend.
func (s *Store) Backend() Backend { return s.be }

// Host returns the host the store judges owners and boots on.
func (s *Store) Host() hostid.Host { return s.host }

// KeyDir returns the directory of k's history under the root.
func (s *Store) KeyDir(k Key) string { return s.path(string(k.Kind), k.Hash()) }

// Path names something under the root, as errors, findings and claimctl
// show it: a file path for a directory root, the root's URL and the key's
// path under it for a backend whose root is a URL (etcd://host/prefix).
func (s *Store) Path(elem ...string) string { return s.path(elem...) }

// RevisionPath names revision n of k, as Path does.
func (s *Store) RevisionPath(k Key, n uint64) string { return s.join(s.KeyDir(k), RevisionName(n)) }

// path names something under the root in errors and findings: a file path
// for a directory root, or the root's URL and key path for a backend
// whose root is a URL (etcd://host/prefix), whose "//" a file path would
// collapse.
func (s *Store) path(elem ...string) string { return s.join(s.root, elem...) }

func (s *Store) join(base string, elem ...string) string {
	if s.url {
		return strings.Join(append([]string{base}, elem...), "/")
	}
	return filepath.Join(append([]string{base}, elem...)...)
}

// Self returns an owner for the calling process with the given incarnation
// (any JSON-encodable value, or nil), to pass to Acquire.
func (s *Store) Self(incarnation any) (Owner, error) {
	id, err := hostid.Self(s.host)
	if err != nil {
		return Owner{}, err
	}
	o := Owner{PID: id.PID, Start: id.Start, Boot: id.Boot, PIDNS: id.PIDNS}
	if incarnation != nil {
		if o.Incarnation, err = jsJSON(incarnation); err != nil {
			return Owner{}, err
		}
	}
	return o, nil
}

// Head is a key's highest revision as read.
type Head struct {
	Key    Key
	N      uint64  // the highest revision number; 0: the key has none
	Record *Record // nil when N is 0 or the revision is damaged
	// Damage says why revision N is damaged (invalid, unreadable, not a
	// regular file), or is nil. A damaged head holds the key as Uncertain.
	Damage error
}

// Held reports whether the head holds its key: it does unless it is
// absent or stopped with a proof, and always when it is damaged (a key
// directory another user can write holds its key even when empty).
func (h *Head) Held() bool {
	if h.Damage != nil {
		return true
	}
	if h.N == 0 {
		return false
	}
	return h.Record == nil || h.Record.held()
}

// State returns the state the key reads as: Stopped when free, Uncertain
// when damaged or stopped without a proof, else the head's state.
func (h *Head) State() State {
	switch {
	case h.Damage != nil:
		return Uncertain
	case h.N == 0:
		return Stopped
	case h.Record == nil:
		return Uncertain
	case h.Record.State == Stopped && h.Record.Proof == nil:
		return Uncertain
	}
	return h.Record.State
}

// Head reads key k's highest revision. A head that cannot be determined at
// all (an I/O error, a key directory that is a symlink) is an error; a
// highest revision that does not validate or cannot be read is returned as
// damaged.
func (s *Store) Head(k Key) (*Head, error) { return s.head(k, false) }

// head reads k's head. The probe assumes a dense history, so a head that
// reads free is confirmed by a listing: a revision beyond a gap (a lost r1,
// a file restored by hand) would otherwise read as free, and a free key is
// the one answer the store must never give on a guess. Held keys, the hot
// path, skip the listing, unless the head is read to publish on (forWrite):
// a revision above it would mean the next number is a gap being filled, a
// lost number published again, and a gap below it would make the write
// build on a history that lost revisions (a backend whose head is one
// descending range, etcd, sees a head above a gap that the directory
// backend's cold probe stops below; both read such a key as damaged before
// a write). That listing is made once per key per store; after it the
// protocol only appends, which the probe follows.
func (s *Store) head(k Key, forWrite bool) (*Head, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	loc := k.Loc()
	for attempt := 0; ; attempt++ {
		h, err := s.probeHead(k)
		if err != nil {
			return nil, err
		}
		if h.Held() && !forWrite {
			return h, nil
		}
		if s.listedUpTo(loc, h.N) {
			// This store listed the key whole and dense at or below this
			// head; since then the protocol has only appended.
			return h, nil
		}
		c, err := s.census(loc)
		if err != nil {
			return nil, err
		}
		if c.count == 0 {
			s.noteListing(loc, 0, true)
			return h, nil
		}
		top := c.top
		// Both a free head and a head to publish on need the whole history
		// intact: a gap anywhere means revisions were lost or planted, and
		// neither a free answer nor a new revision may rest on that.
		if top <= h.N && c.dense() {
			s.noteListing(loc, h.N, true)
			return h, nil
		}
		var reason string
		if !c.dense() {
			missing := uint64(0)
			if revs, _, err := s.be.List(loc); err == nil {
				missing = firstMissing(revs)
			}
			reason = fmt.Sprintf("revision %d exists, but revision %d is missing: the history is not dense (run claimctl fsck)", top, missing)
		}
		switch {
		case c.dense() && attempt < 3:
			// No gap: a writer published after the probe. Read again.
			continue
		case c.dense():
			reason = fmt.Sprintf("the head moved during every one of %d reads; try again", attempt+1)
		case attempt == 0:
			// A listing is not atomic: one taken while revisions are
			// being linked can show N+2 without N+1. Look once more
			// before calling it a gap.
			continue
		}
		h.Damage = &fs.PathError{Op: "read head", Path: s.join(s.KeyDir(k), RevisionName(top)), Err: &DamageError{Reason: reason}}
		h.N, h.Record = top, nil
		return h, nil
	}
}

// census is what a listing of a key says: its highest revision and how many
// revisions it holds. Names in a directory are unique, so the history is
// dense (1..top, no gap) exactly when there are top of them.
type census struct {
	top   uint64
	count int
}

func (c census) dense() bool { return c.count > 0 && uint64(c.count) == c.top }

// census lists loc, as cheaply as the backend can: a free head is
// confirmed by one, so its cost is most of a cold free head's.
func (s *Store) census(loc Loc) (census, error) {
	if b, ok := s.be.(interface {
		Census(Loc) (uint64, int, error)
	}); ok {
		top, n, err := b.Census(loc)
		return census{top: top, count: n}, err
	}
	revs, _, err := s.be.List(loc)
	if err != nil || len(revs) == 0 {
		return census{}, err
	}
	return census{top: revs[len(revs)-1], count: len(revs)}, nil
}

// listedUpTo reports whether a listing of loc this store took showed its
// history dense and nothing above n: since then the protocol has only
// appended, which the probe follows.
func (s *Store) listedUpTo(loc Loc, n uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	top, ok := s.listed[loc]
	return ok && n >= top
}

// noteListing records what a listing of loc showed: dense up to top, or a
// gap. A gap forgets any earlier listing, so that the next head read to
// publish on, or to answer free, lists the key again and reads it damaged:
// a store that has seen revisions lost must not go on trusting what it
// listed before.
func (s *Store) noteListing(loc Loc, top uint64, dense bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !dense {
		delete(s.listed, loc)
		return
	}
	s.listed[loc] = max(top, s.listed[loc])
}

// Gap is a run of revisions missing from a key's history, From to To
// inclusive: lost in a crash of the disk, deleted or planted by hand. The
// protocol never leaves one.
type Gap struct{ From, To uint64 }

// Count is how many revisions the gap is missing.
func (g Gap) Count() uint64 { return g.To - g.From + 1 }

// Gaps lists k's history and returns its highest revision and every run of
// revisions missing below it (none for a dense history, or an empty one).
// Its cost is one listing of the key; its memory, one entry per gap.
func (s *Store) Gaps(k Key) (top uint64, gaps []Gap, err error) {
	if err := k.Validate(); err != nil {
		return 0, nil, err
	}
	revs, _, err := s.be.List(k.Loc())
	if err != nil || len(revs) == 0 {
		return 0, nil, err
	}
	return revs[len(revs)-1], gapsOf(revs), nil
}

// gapsOf returns the runs missing from revs (ascending) below its last.
func gapsOf(revs []uint64) []Gap {
	var out []Gap
	want := uint64(1)
	for _, n := range revs {
		if n > want {
			out = append(out, Gap{From: want, To: n - 1})
		}
		want = n + 1
	}
	return out
}

// firstMissing returns the lowest revision number missing from revs
// (ascending), which are not dense.
func firstMissing(revs []uint64) uint64 {
	for i, n := range revs {
		if n != uint64(i+1) {
			return uint64(i + 1)
		}
	}
	return uint64(len(revs) + 1)
}

// dense reports whether revs (ascending) are exactly 1..len(revs).
func dense(revs []uint64) bool {
	return len(revs) > 0 && revs[0] == 1 && revs[len(revs)-1] == uint64(len(revs))
}

// probeHead reads the head the backend's probing finds.
func (s *Store) probeHead(k Key) (*Head, error) {
	n, data, rerr, err := s.be.Head(k.Loc())
	if err != nil {
		return nil, err
	}
	h := &Head{Key: k, N: n}
	switch {
	case rerr != nil:
		h.Damage = rerr
	case n == 0:
	default:
		h.Record, h.Damage = DecodeRecord(data, k, n)
		if h.Damage != nil {
			h.Damage = &fs.PathError{Op: "decode", Path: s.join(s.KeyDir(k), RevisionName(n)), Err: h.Damage}
		} else if err := s.verifyHeadProof(h.Record); err != nil {
			h.Record = nil
			h.Damage = &fs.PathError{Op: "verify proof", Path: s.join(s.KeyDir(k), RevisionName(n)), Err: &DamageError{Reason: err.Error(), Err: err}}
		}
	}
	return h, nil
}

// verifyHeadProof checks the boot proof of a head that would read free.
// Free is the one answer never given on a guess: a stopped head naming one
// of this store's boot proofs (boot-<24 hex>) that is missing (a root
// restored without proofs/), unreadable or not matching the claim is
// damaged, not free. A ref in another issuer's format (the reference
// implementation's verifier, a custom BootProofIssuer) names evidence
// outside the store and is taken as written, like a cohortProof.
//
// The proof is read at every head read, never remembered: a decision rests
// on the proof as it is when the decision is taken, and a proof removed
// under a long-lived store (a root restored from a backup, an operator
// moving files) must read the same in it as in a fresh one. It costs one
// read of a small file per free head that names a boot proof.
func (s *Store) verifyHeadProof(rec *Record) error {
	if rec.State != Stopped || rec.Proof == nil || rec.Proof.Kind != ProofBoot || !isProofID(rec.Proof.Ref) {
		return nil
	}
	if err := s.VerifyProof(rec); err != nil {
		return fmt.Errorf("stopped on boot proof %s, which does not prove the claim over: %w; the key reads as held (run claimctl fsck)", rec.Proof.Ref, err)
	}
	return nil
}

// Revision is one revision of a key's history.
type Revision struct {
	N      uint64
	Record *Record // nil when damaged
	Data   []byte  // the file's contents as read
	Damage error
}

// Revisions returns k's whole history, oldest first. Its cost grows with
// the history; Head's does not.
func (s *Store) Revisions(k Key) ([]Revision, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	nums, _, err := s.be.List(k.Loc())
	if err != nil {
		return nil, err
	}
	out := make([]Revision, 0, len(nums))
	for _, n := range nums {
		r := Revision{N: n}
		r.Data, err = s.be.Read(k.Loc(), n)
		if err != nil {
			r.Damage = err
		} else if r.Record, err = DecodeRecord(r.Data, k, n); err != nil {
			r.Damage = err
		}
		out = append(out, r)
	}
	return out, nil
}

// Pair is the view of a claim's two keys.
type Pair struct {
	Seat, Session *Head
}

// State returns the pair state: the more conservative of the two keys.
func (p *Pair) State() State { return Conservative(p.Seat.State(), p.Session.State()) }

// Held reports whether either key is held.
func (p *Pair) Held() bool { return p.Seat.Held() || p.Session.Held() }

// Pair reads both keys' heads.
func (s *Store) Pair(seat, session Key) (*Pair, error) { return s.pair(seat, session, false) }

func (s *Store) pair(seat, session Key, forWrite bool) (*Pair, error) {
	if err := checkKinds(seat, session); err != nil {
		return nil, err
	}
	sh, err := s.head(seat, forWrite)
	if err != nil {
		return nil, err
	}
	ss, err := s.head(session, forWrite)
	if err != nil {
		return nil, err
	}
	return &Pair{Seat: sh, Session: ss}, nil
}

func checkKinds(seat, session Key) error {
	if err := seat.Validate(); err != nil {
		return err
	}
	if err := session.Validate(); err != nil {
		return err
	}
	if seat.Kind != KindSeat {
		return &KeyError{Field: "kind", Value: string(seat.Kind), Reason: "the first key of a pair must be a seat key"}
	}
	if session.Kind != KindSession {
		return &KeyError{Field: "kind", Value: string(session.Kind), Reason: "the second key of a pair must be a session key"}
	}
	return nil
}

// Refusal explains why a held pair refuses a new claim. It returns nil
// when neither key is held.
func (s *Store) Refusal(p *Pair) *Refusal {
	var heads []*Head
	for _, h := range []*Head{p.Seat, p.Session} {
		if h.Held() {
			heads = append(heads, h)
		}
	}
	if len(heads) == 0 {
		return nil
	}
	keys := []Key{p.Seat.Key, p.Session.Key}
	mine, merr := s.machineID()
	for _, h := range heads {
		if h.Record != nil && (merr != nil || h.Record.Host.MachineID != mine) {
			if merr != nil {
				return refuse(ForeignHost, h.Record.ClaimID, fmt.Sprintf("%s is held by claim %s and this machine's id cannot be read", h.Key, h.Record.ClaimID), merr, keys...)
			}
			return refuse(ForeignHost, h.Record.ClaimID, fmt.Sprintf("%s is held by claim %s taken on machine %q; this is machine %s", h.Key, h.Record.ClaimID, h.Record.Host.MachineID, mine), nil, keys...)
		}
	}
	for _, h := range heads {
		if h.Record == nil {
			return refuse(UnsafeReplacement, "", fmt.Sprintf("%s has a damaged head revision %d", h.Key, h.N), h.Damage, keys...)
		}
	}
	if len(heads) == 2 && heads[0].Record.ClaimID != heads[1].Record.ClaimID {
		return refuse(UnsafeReplacement, "", fmt.Sprintf("%s is held by claim %s but %s by claim %s", heads[0].Key, heads[0].Record.ClaimID, heads[1].Key, heads[1].Record.ClaimID), nil, keys...)
	}
	state := Stopped
	for _, h := range heads {
		state = Conservative(state, h.State())
	}
	id := heads[0].Record.ClaimID
	reason := fmt.Sprintf("%s is held by claim %s in state %s", heads[0].Key, id, state)
	if state == Reserved || state == Active {
		if o, err := heads[0].Record.Owner(); err == nil {
			reason += fmt.Sprintf(" (owner pid %d)", o.PID)
		}
		return refuse(AlreadyActive, id, reason, nil, keys...)
	}
	return refuse(UnsafeReplacement, id, reason, nil, keys...)
}

// Claim is a writer claim this store published. It records the revisions
// the claim last published on each key: every later step is fenced on them.
// A Claim is not safe for concurrent use.
type Claim struct {
	ID         string
	Seat       Key
	Session    Key
	SeatRev    uint64
	SessionRev uint64
	Record     *Record // the claim's latest record
}

// AcquireFields are the fields of a new claim.
type AcquireFields struct {
	// ClaimID is the new claim's id; "" means a fresh random one.
	ClaimID string
	// Owner is the supervisor process that owns the claim (see Store.Self).
	Owner Owner
	// UnitName is the systemd unit the writer will run in; "" means the
	// reference's default, "mosaic-chat-<claim id>".
	UnitName string
	// Fields are further members to record (bindingId, harness,
	// conversation, branch, leaf, pins, generation, prior, execution,
	// cohortRef, or anything else), each JSON-encoded as given.
	Fields map[string]any
}

// UnitNameFor returns the reference implementation's unit name for a claim.
func UnitNameFor(claimID string) string { return "mosaic-chat-" + claimID }

func (s *Store) newRecord(f AcquireFields) (*Record, error) {
	id := f.ClaimID
	if id == "" {
		id = NewClaimID()
	} else if !ValidClaimID(id) {
		return nil, fmt.Errorf("claim id %q is not \"c\" and 24 lowercase hex digits", id)
	}
	if f.Owner.PID <= 0 {
		return nil, fmt.Errorf("owner pid %d is not a process id (use Store.Self)", f.Owner.PID)
	}
	machine, err := s.machineID()
	if err != nil {
		return nil, fmt.Errorf("cannot record the host: %w", err)
	}
	boot, err := s.host.BootID()
	if err != nil {
		return nil, fmt.Errorf("cannot record the host: %w", err)
	}
	unit := f.UnitName
	if unit == "" {
		unit = UnitNameFor(id)
	}
	owner, err := jsJSON(f.Owner)
	if err != nil {
		return nil, err
	}
	r := &Record{ClaimID: id, State: Reserved, Host: Host{MachineID: machine, BootID: boot}}
	null := json.RawMessage("null")
	r.Fields.Set(fieldOwner, owner)
	r.Fields.Set(fieldUnitName, appendJSString(nil, unit))
	r.Fields.Set(fieldSpawnMarker, json.RawMessage("false"))
	r.Fields.Set("invocationId", null)
	r.Fields.Set("engine", null)
	r.Fields.Set("shim", null)
	for _, name := range []string{"stop", "prior", "execution", "cohortRef"} {
		r.Fields.Set(name, null)
	}
	if err := applyFields(&r.Fields, f.Fields); err != nil {
		return nil, err
	}
	return r, nil
}

func deleteField(fs Fields, name string) Fields {
	out := fs[:0]
	for _, f := range fs {
		if f.Name != name {
			out = append(out, f)
		}
	}
	return out
}

func applyFields(dst *Fields, m map[string]any) error {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if reserved[name] || name == "state" || name == "proof" {
			return fmt.Errorf("%w: member %q is the store's own", ErrBadPatch, name)
		}
		raw, err := jsJSON(m[name])
		if err != nil {
			return fmt.Errorf("%w: member %q: %v", ErrBadPatch, name, err)
		}
		dst.Set(name, raw)
	}
	return nil
}

func (s *Store) pause(p Point) error {
	if s.barrier == nil {
		return nil
	}
	return s.barrier(p)
}

// publish publishes rec as revision n of k. It reports false, nil when
// another writer won revision n.
func (s *Store) publish(k Key, n uint64, rec *Record) (bool, error) {
	won, _, err := s.publishLinked(k, n, rec)
	return won, err
}

// publishLinked is publish that also reports whether the revision was
// linked, which it may be even when a later barrier returned an error.
func (s *Store) publishLinked(k Key, n uint64, rec *Record) (won, linked bool, err error) {
	p := s.prepare(k, n, rec)
	return p.commit()
}

// preparing is a revision being prepared (Backend.Prepare), perhaps in
// another goroutine: commit and abort wait for it.
type preparing struct {
	done   chan struct{}
	p      Prepared
	err    error
	linked bool

	s   *Store
	loc Loc
	n   uint64
	id  string
}

// prepare prepares rec as revision n of k.
func (s *Store) prepare(k Key, n uint64, rec *Record) *preparing {
	pr := &preparing{done: make(chan struct{})}
	s.prepareInto(pr, k, n, rec)
	close(pr.done)
	return pr
}

func (s *Store) prepareInto(pr *preparing, k Key, n uint64, rec *Record) {
	pr.s, pr.loc, pr.n, pr.id = s, k.Loc(), n, rec.ClaimID
	r := rec.clone()
	r.Key = k
	r.Revision = n
	r.WrittenAt = timestamp(s.now())
	data, err := r.Marshal()
	if err != nil {
		pr.err = err
		return
	}
	if err := sizeOK(k, n, len(data)); err != nil {
		pr.err = err
		return
	}
	hook := func(b Barrier) error {
		if b == BarrierLinked {
			pr.linked = true
		}
		return s.pause(Point{Barrier: b, Key: k, Revision: n, ClaimID: rec.ClaimID})
	}
	pr.p, pr.err = s.be.Prepare(k.Loc(), n, data, hook)
}

// sizeOK refuses a revision larger than the read side accepts: the bound a
// reader applies (MaxFileSize) is the bound a writer applies, so that the
// store never publishes what it will then refuse to read.
func sizeOK(k Key, n uint64, size int) error {
	if size <= MaxFileSize {
		return nil
	}
	return fmt.Errorf("%w: revision %d of %s would be %d bytes, more than the %d bytes a revision may hold (every reader refuses a larger one as damaged); nothing was published: record less (the members given are the likely cause)", ErrRecordTooLarge, n, k, size, MaxFileSize)
}

// checkSize refuses, before anything is read or published, a record that
// would be too large as a revision of any of keys: a step publishes on both
// keys, and one that failed only on the second would be cut between them.
// The revision number is taken at its widest, so that the answer does not
// depend on which number the step publishes.
func (s *Store) checkSize(rec *Record, keys ...Key) error {
	for _, k := range keys {
		r := rec.clone()
		r.Key, r.Revision, r.WrittenAt = k, MaxRevision, timestamp(s.now())
		data, err := r.Marshal()
		if err != nil {
			return err
		}
		if err := sizeOK(k, MaxRevision, len(data)); err != nil {
			return err
		}
	}
	return nil
}

// prepareAsync is prepare overlapping the caller's work, unless the store
// is sequential.
func (s *Store) prepareAsync(k Key, n uint64, rec *Record) *preparing {
	if s.sequential {
		return s.prepare(k, n, rec)
	}
	pr := &preparing{done: make(chan struct{})}
	go func() {
		defer close(pr.done)
		s.prepareInto(pr, k, n, rec)
	}()
	return pr
}

// publishAfter publishes rec as revision n of k once other, the other
// key's revision of the same step, is prepared: the two temporaries are
// written and synced at once, and a step whose second revision cannot even
// be prepared (ENOSPC, a failed fsync, a barrier's stop) publishes neither,
// rather than being cut between its keys. On such a failure other is
// aborted and its error returned.
func (s *Store) publishAfter(other *preparing, k Key, n uint64, rec *Record) (won, linked bool, err error) {
	p := s.prepare(k, n, rec)
	<-other.done
	// A number already taken is no failure to prepare: the link would
	// lose, and commit says so.
	if other.err != nil && !errors.Is(other.err, ErrRevisionExists) {
		p.abort()
		return false, false, other.err
	}
	if p.err != nil && !errors.Is(p.err, ErrRevisionExists) {
		other.abort()
		return false, false, p.err
	}
	return p.commit()
}

// commit publishes a prepared revision: won is false when another writer
// had the number; linked says whether the revision was linked, which it
// may be even when a later barrier returned an error.
func (pr *preparing) commit() (won, linked bool, err error) {
	<-pr.done
	if errors.Is(pr.err, ErrRevisionExists) {
		return false, false, nil
	}
	if pr.err != nil {
		return false, false, pr.err
	}
	err = pr.p.Commit()
	if errors.Is(err, ErrRevisionExists) {
		return false, false, nil
	}
	if err == nil {
		pr.s.mu.Lock()
		if pr.s.own == nil {
			pr.s.own = map[Loc]ownRev{}
		}
		pr.s.own[pr.loc] = ownRev{n: pr.n, claimID: pr.id}
		pr.s.mu.Unlock()
	}
	return err == nil, pr.linked, err
}

// abort discards a prepared revision, once it is prepared.
func (pr *preparing) abort() {
	<-pr.done
	if pr.p != nil {
		pr.p.Abort()
	}
}

// Acquire takes a new writer claim on both keys: it publishes the claim,
// reserved, on the seat key and then on the session key. It refuses (a
// *Refusal) when either key is held. If the session key is taken between
// the two steps, it closes its own seat revision as stopped with a no-unit
// proof (nothing was spawned) and refuses. A lost link race re-reads and
// re-decides, a bounded number of times.
//
// An error other than a refusal leaves the claim's state unknown to the
// caller: at worst the seat key is held by a reserved claim with nothing
// spawned, which classify frees with a no-unit proof.
func (s *Store) Acquire(seat, session Key, f AcquireFields) (*Claim, error) {
	if err := checkKinds(seat, session); err != nil {
		return nil, err
	}
	rec, err := s.newRecord(f)
	if err != nil {
		return nil, err
	}
	rec.Fields.Set(pairMember, pairJSON(seat, session))
	if err := s.checkSize(rec, seat, session); err != nil {
		return nil, err
	}
	for range s.retries + 1 {
		p, err := s.Pair(seat, session)
		if err != nil {
			return nil, err
		}
		if r := s.Refusal(p); r != nil {
			return nil, r
		}
		// The session revision is written and synced while the seat's is
		// published; it is linked only once the seat's is durable.
		sessionRev := p.Session.N + 1
		prep := s.prepareAsync(session, sessionRev, rec)
		won, _, err := s.publishAfter(prep, seat, p.Seat.N+1, rec)
		if err != nil || !won {
			prep.abort()
			if err != nil {
				return nil, err
			}
			continue
		}
		seatRev := p.Seat.N + 1
		if err := s.pause(Point{Barrier: BarrierBetweenKeys, Key: seat, Revision: seatRev, ClaimID: rec.ClaimID}); err != nil {
			prep.abort()
			return nil, err
		}
		if won, _, err = prep.commit(); err != nil {
			return nil, err
		}
		if !won {
			// Another writer published that session revision since the
			// pair was read: if the key is free still, publish above it.
			now, err := s.Head(session)
			if err != nil {
				return nil, err
			}
			if !now.Held() {
				sessionRev = now.N + 1
				if won, err = s.publish(session, sessionRev, rec); err != nil {
					return nil, err
				}
			}
		}
		if !won {
			// Nothing was spawned under this claim: close the seat revision
			// with a no-unit proof so that it does not hold the seat.
			closed := rec.clone()
			closed.State = Stopped
			closed.Proof = NewProof(ProofNoUnit, "")
			if _, err := s.publish(seat, seatRev+1, closed); err != nil {
				return nil, err
			}
			p, err := s.Pair(seat, session)
			if err != nil {
				return nil, err
			}
			if r := s.Refusal(p); r != nil {
				return nil, r
			}
			return nil, refuse(UnsafeReplacement, rec.ClaimID, fmt.Sprintf("%s changed while it was being claimed", session), nil, seat, session)
		}
		return &Claim{ID: rec.ClaimID, Seat: seat, Session: session, SeatRev: seatRev, SessionRev: sessionRev, Record: rec}, nil
	}
	return nil, refuse(UnsafeReplacement, "", fmt.Sprintf("%s changed during every one of %d attempts", seat, s.retries+1), nil, seat, session)
}

// Patch is a change to a claim's record.
type Patch struct {
	// State is the new state; "" keeps the current one.
	State State
	// Proof is the proof to record; nil keeps the current one.
	Proof *Proof
	// Fields are members to set, each JSON-encoded as given. They may not
	// name the members the store owns (ErrBadPatch).
	Fields map[string]any
}

func (c *Claim) check() error {
	if c == nil || c.Record == nil || c.Seat.Kind != KindSeat || c.Session.Kind != KindSession {
		return ErrNotOwned
	}
	return nil
}

// Advance publishes the patched record on the seat key and then on the
// session key. Each key's head must still be the revision this claim last
// published there; otherwise it refuses with unsafe-replacement and
// publishes nothing more. c is updated as each key's revision lands, so a
// call cut between the keys can be retried with the same claim.
func (s *Store) Advance(c *Claim, p Patch) error {
	if err := c.check(); err != nil {
		return err
	}
	if !c.Record.held() {
		return fmt.Errorf("%w: claim %s is stopped with a %s proof; take a new claim", ErrReleased, c.ID, c.Record.Proof.Kind)
	}
	if p.State != "" && !p.State.Valid() {
		return fmt.Errorf("%w: state %q", ErrBadPatch, p.State)
	}
	if p.Proof != nil && !p.Proof.Kind.valid() {
		return fmt.Errorf("%w: proof kind %q", ErrBadPatch, p.Proof.Kind)
	}
	next := c.Record.clone()
	if p.State != "" {
		next.State = p.State
	}
	if p.Proof != nil {
		next.Proof = p.Proof
	}
	if err := applyFields(&next.Fields, p.Fields); err != nil {
		return err
	}
	if !next.held() {
		// This step frees the claim: whichever call makes it, Release or
		// Advance, the proof must be one that can free it.
		if err := s.checkReleaseProof(c, next); err != nil {
			return err
		}
	}
	if c.Record.SpawnMarker() && !next.SpawnMarker() {
		// A marker says a writer may have been spawned; only a proof,
		// never a patch, ends that possibility.
		return fmt.Errorf("%w: the spawn marker of claim %s is set and cannot be cleared", ErrBadPatch, c.ID)
	}
	// A claim is only ever stepped on the machine that took it: another
	// machine cannot judge its owner, and its boot proofs mean nothing here.
	if mine, err := s.machineID(); err != nil || c.Record.Host.MachineID != mine {
		reason := fmt.Sprintf("claim %s was taken on machine %q", c.ID, c.Record.Host.MachineID)
		if err == nil {
			reason += ", not on this machine " + mine
		}
		return refuse(ForeignHost, c.ID, reason, err, c.Seat, c.Session)
	}
	return s.step(c, next)
}

// step publishes next on both keys of c, seat first, fenced on c's
// revisions. Both heads are checked before anything is published, so a
// key that moved under the claim stops the step before it starts; a writer
// that moves the session key after that check still wins its number, and
// the step then refuses between the keys, as a crash there would.
func (s *Store) step(c *Claim, next *Record) error {
	if err := s.checkSize(next, c.Seat, c.Session); err != nil {
		return err
	}
	for _, k := range []Key{c.Seat, c.Session} {
		if err := s.fenced(c, k); err != nil {
			return err
		}
	}
	// Only this order matters: seat link, seat directory fsync, session
	// link, session directory fsync (a claim's seat head is never older
	// than its session head, even after a power cut). The session
	// revision's temporary is written and synced meanwhile. A writer that
	// moved the session key since the check above wins its number, and
	// the session link then fails: the link is the arbiter.
	prep := s.prepareAsync(c.Session, c.SessionRev+1, next)
	won, linked, err := s.publishAfter(prep, c.Seat, c.SeatRev+1, next)
	if linked {
		// The revision exists even if a barrier stopped the rest: the
		// claim must know it as its own, or a retry refuses against it.
		c.SeatRev++
		c.Record = next
	}
	if err == nil && !won {
		err = refuse(UnsafeReplacement, c.ID, fmt.Sprintf("another writer published revision %d of %s under claim %s", c.SeatRev+1, c.Seat, c.ID), nil, c.Seat, c.Session)
	}
	if err == nil {
		err = s.pause(Point{Barrier: BarrierBetweenKeys, Key: c.Seat, Revision: c.SeatRev, ClaimID: c.ID})
	}
	if err != nil {
		prep.abort()
		return err
	}
	won, linked, err = prep.commit()
	if linked {
		c.SessionRev++
		c.Record = next
	}
	if err != nil {
		return err
	}
	if !won {
		return refuse(UnsafeReplacement, c.ID, fmt.Sprintf("another writer published revision %d of %s under claim %s", c.SessionRev+1, c.Session, c.ID), nil, c.Seat, c.Session)
	}
	return nil
}

func (c *Claim) rev(k Key) *uint64 {
	if k.Kind == KindSession {
		return &c.SessionRev
	}
	return &c.SeatRev
}

// fenced checks that k's head is still the revision c last published there.
func (s *Store) fenced(c *Claim, k Key) error {
	rev := *c.rev(k)
	if s.fencedOwn(k.Loc(), rev, c.ID) {
		return nil
	}
	h, err := s.head(k, true)
	if err != nil {
		return err
	}
	if h.Record == nil || h.N != rev || h.Record.ClaimID != c.ID {
		what := fmt.Sprintf("its head is revision %d, not this claim's revision %d", h.N, rev)
		if h.N == rev && h.Damage != nil {
			what = fmt.Sprintf("its head revision %d is damaged", h.N)
		}
		return refuse(UnsafeReplacement, c.ID, fmt.Sprintf("%s moved under claim %s: %s", k, c.ID, what), h.Damage, c.Seat, c.Session)
	}
	return nil
}

// fencedOwn is fenced's fast path: when this store itself published
// revision rev of loc for claim id, and a probe finds rev still the head
// (in a directory it can trust, the very file it linked), the revision
// needs no reading: a revision name never refers to anything but what was
// linked to it.
func (s *Store) fencedOwn(loc Loc, rev uint64, id string) bool {
	s.mu.Lock()
	o, ok := s.own[loc]
	s.mu.Unlock()
	// The number is IsOwnHead's to check (what this store linked last);
	// the claim id is this check's: the same number under another claim is
	// not this claim's revision.
	if !ok || o.claimID != id {
		return false
	}
	// Nothing above rev that a listing would see and a probe would not (a
	// gap above): this store's own publish of rev read the key for writing,
	// which lists it whole.
	pb, ok := s.be.(interface{ IsOwnHead(Loc, uint64) bool })
	return ok && pb.IsOwnHead(loc, rev)
}

// Release publishes stopped with the proof on both keys, seat first. The
// proof says why nothing still runs; a release cut between the keys is
// completed by Classify.
func (s *Store) Release(c *Claim, proof *Proof) error {
	if proof == nil {
		return fmt.Errorf("%w: a release needs a proof", ErrBadPatch)
	}
	if err := c.check(); err != nil {
		return err
	}
	return s.Advance(c, Patch{State: Stopped, Proof: proof})
}

// checkReleaseProof refuses a step of claim c to next, which frees it,
// when next's proof cannot end the claim.
func (s *Store) checkReleaseProof(c *Claim, next *Record) error {
	proof := next.Proof
	if proof.Kind == ProofNoUnit && (c.Record.SpawnMarker() || next.SpawnMarker()) {
		// A no-unit proof says nothing was ever spawned; the marker says
		// something may have been. Only a supervisor's cohort proof (or a
		// boot proof) can end a claim that may have spawned.
		return fmt.Errorf("%w: claim %s has a spawn marker, so a no-unit proof cannot release it; release it with a cohortProof once its writers are stopped", ErrBadPatch, c.ID)
	}
	if proof.Kind == ProofBoot {
		// A boot proof is this store's own evidence: it must exist and
		// match the claim before anything is freed on it.
		r := c.Record.clone()
		r.State, r.Proof = Stopped, proof
		if err := s.VerifyProof(r); err != nil {
			return fmt.Errorf("%w: boot proof %q does not prove claim %s over: %w", ErrBadPatch, proof.Ref, c.ID, err)
		}
	}
	return nil
}

// CheckRoot is what Open checks of a root on the operating system's
// filesystem: the root, if it exists, and its every ancestor (see Open). A
// caller that reads a root some other way (a command that finds the root
// missing and reads it as empty) checks it with this, so that a root
// renamed away by another user is not read as "nothing claimed".
func CheckRoot(root string) error { return checkRoot(filepath.Clean(root)) }

// checkRoot refuses a root that cannot promise exclusion.
func checkRoot(root string) error {
	fi, err := os.Lstat(root)
	if errors.Is(err, fs.ErrNotExist) {
		parent := filepath.Dir(root)
		pfi, perr := os.Stat(parent)
		if perr != nil {
			return &fs.PathError{Op: "open claim root", Path: root, Err: fmt.Errorf("its parent cannot be used: %w; create %s first", perr, parent)}
		}
		if !pfi.IsDir() {
			return &fs.PathError{Op: "open claim root", Path: root, Err: fmt.Errorf("%w: parent %s is not a directory", ErrUnsafeRoot, parent)}
		}
		return checkAncestors(root)
	}
	if err != nil {
		return &fs.PathError{Op: "open claim root", Path: root, Err: err}
	}
	if err := checkRootInfo(root, fi); err != nil {
		return err
	}
	return checkAncestors(root)
}

// checkRootInfo refuses an existing root that is a symlink, not a
// directory, writable by others, or owned by another user.
func checkRootInfo(root string, fi fs.FileInfo) error {
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, _ := filepath.EvalSymlinks(root)
		return &fs.PathError{Op: "open claim root", Path: root, Err: fmt.Errorf("%w: it is a symlink (to %q); use the real directory as the root", ErrUnsafeRoot, target)}
	}
	if !fi.IsDir() {
		return &fs.PathError{Op: "open claim root", Path: root, Err: fmt.Errorf("%w: it is %s, not a directory; a claim root is a directory (move it aside, or pass another root)", ErrUnsafeRoot, safefile.Describe(fi.Mode()))}
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return &fs.PathError{Op: "open claim root", Path: root, Err: fmt.Errorf("%w: mode %v lets other users write into it; run chmod go-w %s", ErrUnsafeRoot, fi.Mode().Perm(), root)}
	}
	if uid, ok := ownerUID(fi); ok && uid != os.Geteuid() && uid != 0 {
		return &fs.PathError{Op: "open claim root", Path: root, Err: fmt.Errorf("%w: it belongs to uid %d, not to this user (uid %d); use a root of your own", ErrUnsafeRoot, uid, os.Geteuid())}
	}
	return nil
}

// ownerUID returns the uid owning fi, where the platform says.
func ownerUID(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
