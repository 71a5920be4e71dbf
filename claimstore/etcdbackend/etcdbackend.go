package etcdbackend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/claimstore/claimstore/claimstore/storage"
)

// Options configure a Backend. A nil *Options means all defaults.
type Options struct {
	// RequestTimeout bounds each request to the cluster (a range, a
	// transaction). Default: 5s. A transaction that times out is
	// indeterminate and is decided by reading back (see Publish).
	RequestTimeout time.Duration
	// ResolveTimeout bounds how long Publish keeps trying to decide an
	// indeterminate transaction by reading back before it gives up with
	// an *IndeterminateError. Default: 30s.
	ResolveTimeout time.Duration
	// PageSize is how many keys one range returns when listing. Default:
	// 1000.
	PageSize int64
	// Root is the root's name in errors and findings, an etcd:// URL.
	// Default: etcd://ENDPOINTS/PREFIX from the client's endpoints.
	Root string
	// User names the etcd user the client authenticates as, for messages
	// only (the client carries the credentials). Default: none.
	User string
}

// Backend is the etcd backend: a claim root under a key prefix of an etcd
// v3 cluster. It implements storage.Backend (claimstore.Backend). Its
// methods are safe for concurrent use; exclusion comes from etcd's
// transactions, not from locks.
type Backend struct {
	cli      *clientv3.Client
	root     string // the etcd:// URL, for names
	prefix   string // without a trailing "/"
	timeout  time.Duration
	resolve  time.Duration
	pageSize int64
	user     string // the etcd user, for messages

	owned bool // the client was made by Open: Close closes it

	// beforeTxn, when set (by tests), runs before each publishing
	// transaction is sent: where a prune can move the fence epoch under a
	// publish, which no proxy stages reliably.
	beforeTxn func()

	// staging is set on the backend a copy writes with (see Stage): it is
	// not refused for the root's unfinished-copy mark.
	staging bool
	// markRev is, when staging, the CreateRevision of the unfinished-copy
	// mark this copy writes under: a mark removed, or removed and made
	// again by another copy, stops it (checkMark).
	markRev int64

	mu    sync.Mutex
	fence fenceID // this backend's current fence and epoch; see create
	// epochAt is the cluster revision at which fence.epoch was read
	// (learnEpoch): 0 until the backend has read one.
	epochAt int64
	copyOK  bool // no unfinished-copy mark was found (see checkCopy)
}

var _ storage.Backend = (*Backend)(nil)

// New returns the backend for the claim root under prefix on the cluster
// cli talks to. prefix must start with "/" and name something ("/claims",
// "/team/a/claims"); a trailing "/" is dropped. cli stays the caller's to
// close. New makes no request.
func New(cli *clientv3.Client, prefix string, opts *Options) (*Backend, error) {
	if opts == nil {
		opts = &Options{}
	}
	p := strings.TrimRight(prefix, "/")
	if !strings.HasPrefix(p, "/") || p == "" || strings.Contains(p, "//") || strings.ContainsAny(p, "\x00") {
		return nil, fmt.Errorf("etcdbackend: key prefix %q: want a path such as /claims (a leading /, no empty or NUL component); the whole keyspace is never used as a root", prefix)
	}
	b := &Backend{cli: cli, root: opts.Root, prefix: p, timeout: opts.RequestTimeout, resolve: opts.ResolveTimeout, pageSize: opts.PageSize, user: opts.User}
	if b.root == "" {
		var hosts []string
		for _, ep := range cli.Endpoints() {
			hosts = append(hosts, strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://"))
		}
		b.root = Scheme + strings.Join(hosts, ",") + p
	}
	if b.timeout <= 0 {
		b.timeout = 5 * time.Second
	}
	if b.resolve <= 0 {
		b.resolve = 30 * time.Second
	}
	if b.pageSize <= 0 {
		b.pageSize = 1000
	}
	b.fence = fenceID{id: newFenceID()}
	return b, nil
}

// Root implements storage.Backend: the root's etcd:// URL.
func (b *Backend) Root() string { return b.root }

// Path implements storage.Backend: the root's URL and the key path under
// it, joined with "/" (etcd keys are not file paths).
func (b *Backend) Path(elem ...string) string {
	return strings.Join(append([]string{b.root}, elem...), "/")
}

// Prefix returns the key prefix the root lives under.
func (b *Backend) Prefix() string { return b.prefix }

// Client returns the client the backend uses.
func (b *Backend) Client() *clientv3.Client { return b.cli }

// KeyDir returns the key prefix of loc's history, with a trailing "/".
func (b *Backend) KeyDir(loc storage.Loc) string {
	return b.prefix + "/" + string(loc.Kind) + "/" + loc.Hash + "/"
}

// RevisionKey returns the etcd key of revision n of loc.
func (b *Backend) RevisionKey(loc storage.Loc, n uint64) string {
	return b.KeyDir(loc) + storage.RevisionName(n)
}

// ProofKey returns the etcd key of the proof with id.
func (b *Backend) ProofKey(id string) string { return b.prefix + "/" + ProofDir + "/" + id + ".json" }

// ProofDir is the key component under the prefix that holds proofs, as
// the directory backend's proofs/.
const ProofDir = "proofs"

// fenceDir holds the fence keys of indeterminate publishes (see fencePut).
const fenceDir = "fences"

// ctx is one request's context: the caller's, bounded by RequestTimeout,
// so that cancelling the operation cancels what is in flight. Every request
// requires a leader: a member without one refuses it at once (a read is
// tried again by the client, on any member, until the timeout; a
// transaction by txnLeader) rather than holding it, so that a cluster
// without a quorum is found out within the timeout, and a watch is cut
// when its member loses its leader.
func (b *Backend) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(clientv3.WithRequireLeader(parent), b.timeout)
}

func pathErr(op, key string, err error) error { return &fs.PathError{Op: op, Path: key, Err: err} }

// Head reads loc's highest revision. A range over the revision names
// sorted descending, limit 1, is one request, but etcd sorts a sorted range
// whole before it applies the limit (only a range in key order is limited
// as it is read): that request carried every revision's value, ~20 µs a
// revision kept, and a compacted seat keeps its retention window's
// thousands. So a longer history is counted instead (countedHead); a short
// one, a gap, a name put there by hand or a history compacted meanwhile
// take the sorted range, exact at any length. Keys in that range that are
// not revision names make it fall back to a listing.
func (b *Backend) Head(ctx context.Context, loc storage.Loc) (uint64, []byte, error) {
	n, data, _, err := b.CountedHead(ctx, loc)
	return n, data, err
}

var _ storage.CountedHeader = (*Backend)(nil)

// CountedHead implements storage.CountedHeader: Head, and where the head
// was counted (countedHead) the count it rests on, which is the census
// of the same store revision. A free head's confirmation then costs no
// second count: etcd counts a range by walking its index, so on a
// compacted seat the census was most of what an acquire's reads cost.
func (b *Backend) CountedHead(ctx context.Context, loc storage.Loc) (uint64, []byte, *storage.Count, error) {
	if err := b.checkCopy(ctx); err != nil {
		return 0, nil, nil, err
	}
	if n, data, count, ok, err := b.countedHead(ctx, loc); ok || err != nil {
		return n, data, count, err
	}
	n, data, err := b.sortedHead(ctx, loc)
	return n, data, nil, err
}

// sortedHead is Head by the sorted range: exact at any length.
func (b *Backend) sortedHead(ctx context.Context, loc storage.Loc) (uint64, []byte, error) {
	rctx, cancel := b.ctx(ctx)
	defer cancel()
	dir := b.KeyDir(loc)
	resp, err := b.cli.Get(rctx, dir+storage.RevisionName(1), clientv3.WithRange(dir+storage.RevisionName(storage.MaxRevision)+"\x00"),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil {
		return 0, nil, b.reqErr(ctx, "read head", dir, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil, nil
	}
	kv := resp.Kvs[0]
	n, ok := storage.ParseRevisionName(strings.TrimPrefix(string(kv.Key), dir))
	if !ok {
		// A hand-written key such as r0000000009.json.bak sorts among
		// the revisions: find the highest real one by listing.
		revs, _, err := b.List(ctx, loc)
		if err != nil {
			return 0, nil, err
		}
		if len(revs) == 0 {
			return 0, nil, nil
		}
		n = revs[len(revs)-1]
		data, err := b.Read(ctx, loc, n)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return 0, nil, err
			}
			return n, nil, &storage.ReadError{N: n, Err: err}
		}
		return n, data, nil
	}
	if len(kv.Value) > storage.MaxRecordSize {
		return n, nil, &storage.ReadError{N: n, Err: tooLarge(string(kv.Key), len(kv.Value))}
	}
	return n, kv.Value, nil
}

// countedHeadMin is the history from which Head counts: below it the
// sorted range is one request of a few values, cheaper than the two that
// counting takes.
const countedHeadMin = 32

// countedHead is Head for a long history (counted): the counted top, its
// value and the count (a census of the same store revision). ok is false
// where the count cannot say (a short history, a damaged base pointer, a
// top the count does not vouch for): Head then takes the sorted range.
// An empty key's head is answered by the count alone, whatever its base
// pointer; its census only when the base pointer is sound (Census reports
// a damaged one).
func (b *Backend) countedHead(ctx context.Context, loc storage.Loc) (n uint64, data []byte, count *storage.Count, ok bool, err error) {
	c, err := b.counted(ctx, loc, "read head", countedHeadMin, true)
	switch {
	case err != nil:
		return 0, nil, nil, false, err
	case c.count == 0:
		return 0, nil, c.census(), true, nil
	case c.baseErr != nil || c.top == 0:
		return 0, nil, nil, false, nil
	case len(c.value) > storage.MaxRecordSize:
		key := b.RevisionKey(loc, c.top)
		return c.top, nil, nil, true, &storage.ReadError{N: c.top, Err: tooLarge(key, len(c.value))}
	}
	return c.top, c.value, c.census(), true, nil
}

// countedRange is what counted found.
type countedRange struct {
	base    uint64 // the base pointer's base (1 without one)
	baseErr error  // a base pointer that is not one
	count   int64  // keys in the revision range, whatever their names
	top     uint64 // the counted top, when the count vouches for it; else 0
	value   []byte // top's value, when asked for
}

// census is the census the count vouches for (an empty key, or a counted
// top), nil where it vouches for none: a damaged base pointer (which
// Census reports), a top the second request did not confirm.
func (c countedRange) census() *storage.Count {
	switch {
	case c.baseErr != nil:
		return nil
	case c.count == 0:
		return &storage.Count{Base: c.base}
	case c.top != 0:
		return &storage.Count{Top: c.top, Count: int(c.count), Base: c.base}
	}
	return nil
}

// counted is the count Head and Census rest on, in two requests of a few
// keys each whatever the history's length. One transaction reads the base
// pointer and counts the keys in the revision range (count only: etcd
// walks its index and reads no value); then, at that transaction's store
// revision, a range in key order from the name base+count-1, at most two
// keys. That one name there alone vouches for the count: it is the highest
// revision name, and the names from the base to it are as many as the
// count, dense unless a name put there by hand stands in for a missing one
// (fsck, which lists every name, reports both). The second request is left
// out below atLeast keys (a count of 0 is answered by the first), and
// after a damaged base pointer; a failed second request vouches for
// nothing. op names the operation in a failed first request's error.
func (b *Backend) counted(ctx context.Context, loc storage.Loc, op string, atLeast int64, values bool) (countedRange, error) {
	dir := b.KeyDir(loc)
	end := dir + storage.RevisionName(storage.MaxRevision) + "\x00"
	rctx, cancel := b.ctx(ctx)
	defer cancel()
	txn, err := b.cli.Txn(rctx).Then(
		clientv3.OpGet(b.baseKey(loc)),
		clientv3.OpGet(dir+storage.RevisionName(1), clientv3.WithRange(end), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return countedRange{}, b.reqErr(ctx, op, dir, err)
	}
	var c countedRange
	c.count = txn.Responses[1].GetResponseRange().Count
	c.base, _, c.baseErr = b.parseBase(loc, txn.Responses[0].GetResponseRange().Kvs)
	if c.count == 0 || c.count < atLeast || c.baseErr != nil || c.base-1+uint64(c.count) > storage.MaxRevision {
		return c, nil
	}
	top := c.base - 1 + uint64(c.count)
	key := dir + storage.RevisionName(top)
	opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(2), clientv3.WithRev(txn.Header.Revision)}
	if !values {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	resp, err := b.cli.Get(rctx, key, opts...)
	if err == nil && len(resp.Kvs) == 1 && string(resp.Kvs[0].Key) == key {
		c.top, c.value = top, resp.Kvs[0].Value
	}
	return c, nil
}

func tooLarge(key string, size int) error {
	return pathErr("read", key, fmt.Errorf("the value holds %d bytes, more than the %d a revision or proof may have; it is not read, and its key reads as held", size, storage.MaxRecordSize))
}

// Read returns revision n of loc; an absent revision is an error wrapping
// fs.ErrNotExist.
func (b *Backend) Read(ctx context.Context, loc storage.Loc, n uint64) ([]byte, error) {
	if err := b.checkCopy(ctx); err != nil {
		return nil, err
	}
	return b.get(ctx, b.RevisionKey(loc, n))
}

func (b *Backend) get(ctx context.Context, key string) ([]byte, error) {
	rctx, cancel := b.ctx(ctx)
	defer cancel()
	resp, err := b.cli.Get(rctx, key)
	if err != nil {
		return nil, b.reqErr(ctx, "read", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, pathErr("read", key, fs.ErrNotExist)
	}
	if v := resp.Kvs[0].Value; len(v) > storage.MaxRecordSize {
		return nil, tooLarge(key, len(v))
	}
	return resp.Kvs[0].Value, nil
}

// keys lists, keys only and a page at a time, the keys under dir (which
// ends in "/"), calling each with the part after dir. each returns the
// key to resume from (the next page starts at it), or "" to go on after
// the key just seen.
func (b *Backend) keys(ctx context.Context, dir string, each func(rest string) (skipTo string)) error {
	end := clientv3.GetPrefixRangeEnd(dir)
	from := dir
	for {
		rctx, cancel := b.ctx(ctx)
		resp, err := b.cli.Get(rctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithLimit(b.pageSize))
		cancel()
		if err != nil {
			return b.reqErr(ctx, "list", dir, err)
		}
		next := ""
		for _, kv := range resp.Kvs {
			k := string(kv.Key)
			if next != "" && k < next {
				continue
			}
			next = ""
			if skip := each(strings.TrimPrefix(k, dir)); skip != "" {
				next = dir + skip
			} else {
				next = k + "\x00"
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		if next == "" {
			next = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
		from = next
	}
}

// List returns loc's revision numbers in ascending order and the other
// names under its key prefix (the first path component of each), with
// keys-only, paginated ranges.
func (b *Backend) List(ctx context.Context, loc storage.Loc) ([]uint64, []string, error) {
	if err := b.checkCopy(ctx); err != nil {
		return nil, nil, err
	}
	var revs []uint64
	var other []string
	seen := map[string]bool{}
	err := b.keys(ctx, b.KeyDir(loc), func(rest string) string {
		if n, ok := storage.ParseRevisionName(rest); ok {
			revs = append(revs, n)
			return ""
		}
		name, _, sub := strings.Cut(rest, "/")
		if !seen[name] {
			seen[name] = true
			other = append(other, name)
		}
		if sub {
			return name + "0" // "/"+1: past everything below name
		}
		return ""
	})
	if err != nil {
		return nil, nil, err
	}
	sort.Slice(revs, func(i, j int) bool { return revs[i] < revs[j] })
	sort.Strings(other)
	return revs, other, nil
}

// Locs returns every key of kind that has a history: the distinct hashes
// under <prefix>/<kind>/, skipping each key's revisions once its hash is
// seen, so that a page covers many keys whatever their histories.
func (b *Backend) Locs(ctx context.Context, kind storage.Kind) ([]storage.Loc, error) {
	if err := b.checkCopy(ctx); err != nil {
		return nil, err
	}
	var out []storage.Loc
	err := b.keys(ctx, b.prefix+"/"+string(kind)+"/", func(rest string) string {
		name, _, _ := strings.Cut(rest, "/")
		if storage.IsKeyHash(name) {
			out = append(out, storage.Loc{Kind: kind, Hash: name})
		}
		return name + "0"
	})
	return out, err
}

// Sync returns nil: etcd serves reads linearizably from what a quorum has
// committed (and fsynced to its log), so whatever a reader sees is as
// durable as anything the cluster acknowledged.
func (b *Backend) Sync(context.Context, storage.Loc, uint64) error { return nil }

// WriteProof stores a proof under id exclusively, as Publish stores a
// revision; an existing id is an error wrapping fs.ErrExist.
func (b *Backend) WriteProof(ctx context.Context, id string, data []byte) error {
	if err := b.checkCopy(ctx); err != nil {
		return err
	}
	key := b.ProofKey(id)
	err := b.create(ctx, key, data)
	if errors.Is(err, storage.ErrRevisionExists) {
		return pathErr("write proof", key, fs.ErrExist)
	}
	return err
}

// ReadProof returns the proof with id; an absent one is an error wrapping
// fs.ErrNotExist.
func (b *Backend) ReadProof(ctx context.Context, id string) ([]byte, error) {
	if err := b.checkCopy(ctx); err != nil {
		return nil, err
	}
	return b.get(ctx, b.ProofKey(id))
}

// Proofs lists the ids of the proofs under <prefix>/proofs/.
func (b *Backend) Proofs(ctx context.Context) ([]string, error) {
	if err := b.checkCopy(ctx); err != nil {
		return nil, err
	}
	var ids []string
	err := b.keys(ctx, b.prefix+"/"+ProofDir+"/", func(rest string) string {
		if id, ok := strings.CutSuffix(rest, ".json"); ok && !strings.Contains(id, "/") {
			ids = append(ids, id)
		}
		return ""
	})
	return ids, err
}

// Publish makes data revision n of loc: one transaction, If the key was
// never created Then put it. The hook sees temp-written and temp-synced
// before the transaction (nothing is visible yet) and linked and
// dir-synced after it succeeded (it is committed by a quorum at once).
func (b *Backend) Publish(ctx context.Context, loc storage.Loc, n uint64, data []byte, hook func(storage.Barrier) error) error {
	p, err := b.Prepare(ctx, loc, n, data, hook)
	if err != nil {
		return err
	}
	defer p.Abort()
	return p.Commit(ctx)
}

// Prepare checks the revision number and calls the hook's first two
// barriers; there is nothing to write before the transaction.
func (b *Backend) Prepare(ctx context.Context, loc storage.Loc, n uint64, data []byte, hook func(storage.Barrier) error) (storage.Prepared, error) {
	if err := b.checkCopy(ctx); err != nil {
		return nil, err
	}
	if n == 0 || n > storage.MaxRevision {
		return nil, pathErr("publish", b.KeyDir(loc), fmt.Errorf("revision %d is out of range 1..%d", n, storage.MaxRevision))
	}
	if len(data) > storage.MaxRecordSize {
		return nil, pathErr("publish", b.RevisionKey(loc, n), fmt.Errorf("a record of %d bytes is larger than the %d allowed", len(data), storage.MaxRecordSize))
	}
	if hook == nil {
		hook = func(storage.Barrier) error { return nil }
	}
	for _, bar := range []storage.Barrier{storage.BarrierTempWritten, storage.BarrierTempSynced} {
		if err := hook(bar); err != nil {
			return nil, err
		}
	}
	return &prepared{b: b, key: b.RevisionKey(loc, n), data: bytes.Clone(data), hook: hook}, nil
}

type prepared struct {
	b    *Backend
	key  string
	data []byte
	hook func(storage.Barrier) error
	done bool
	// guard, when set, is the revision the publish follows (PrepareOver).
	guard *prevGuard
}

func (p *prepared) Abort() { p.done = true }

func (p *prepared) Commit(ctx context.Context) error {
	if p.done {
		return errors.New("etcdbackend: Commit of a prepared revision already committed or aborted")
	}
	p.done = true
	if err := p.b.createOver(ctx, p.key, p.data, p.guard); err != nil {
		return err
	}
	for _, bar := range []storage.Barrier{storage.BarrierLinked, storage.BarrierDirSynced} {
		if err := p.hook(bar); err != nil {
			return err
		}
	}
	return nil
}

// ErrNotPublished is returned (wrapped, with the key) by Publish when a
// transaction's reply was lost every time it was tried and each time the
// read-back, made after fencing the lost request off, found the revision
// absent: it was not published, and never will be by that request.
var ErrNotPublished = errors.New("not published: the cluster's reply was lost, and the revision reads absent after the lost request was fenced off")

// IndeterminateError is returned by Publish when a transaction's reply was
// lost and the cluster could not be read back before ResolveTimeout: the
// revision may or may not have been published, and this backend does not
// guess. The next read of the key tells; an operation that gets this error
// did not complete and must be re-read and re-decided, as after a crash.
type IndeterminateError struct {
	Key   string
	Cause error // the transaction's error
	Last  error // the last read-back's error
}

func (e *IndeterminateError) Error() string {
	return fmt.Sprintf("publish of %s is indeterminate: the transaction failed with %v and reading it back failed until the deadline (last: %v); whether it was published is unknown; read the key again before deciding anything", e.Key, e.Cause, e.Last)
}

func (e *IndeterminateError) Unwrap() error { return e.Cause }

// The lost-reply rule. A transaction whose reply is lost (a deadline, a
// leader change, a connection reset after the request was sent) may still
// be applied, now or later: it is etcd's version of the NFS link whose
// reply was lost. create decides it by reading the key back: our bytes mean
// published, another's mean a lost race, and absent means not yet. Absent
// alone is not an answer, since the request may still be in flight; so
// every transaction also requires that this backend's fence key was never
// created and that the fence epoch is the one it was sent under (fence.go),
// and an absent read-back is followed by putting the fence and reading
// again. Raft applies in log order, so once the fence's put is acknowledged
// the lost request has either been applied (the second read sees it) or
// will fail its compare whenever it arrives: on the fence while it exists,
// on the epoch once a prune has moved it and collected the fence. Absent is
// then final. The fence is replaced by a new id for later transactions.
//
// Every other error of the transaction is treated as indeterminate:
// resolving a definite failure by reading back costs a read and is never
// wrong. Three answers are decided at once, from what etcd guarantees of
// them: NOSPACE (decideRefusedForSpace: one read), a refusal of access
// control (checked before the transaction is applied: not published), and
// no leader after the request timeout (txnLeader: refused before it was
// proposed, so not published; the cluster has no quorum).
func (b *Backend) create(ctx context.Context, key string, data []byte) error {
	return b.createOver(ctx, key, data, nil)
}

// createOver is create, guarded by g when it is set (see PrepareOver).
func (b *Backend) createOver(ctx context.Context, key string, data []byte, g *prevGuard) error {
	var cause error
	moves := 0
	for attempt := 0; attempt < 3; {
		fence := b.currentFence()
		resp, err := b.txnLeader(ctx, key, data, fence, g)
		switch {
		case err != nil && isNoSpace(err):
			return b.decideRefusedForSpace(ctx, key, data, err)
		case err != nil && isAccess(err):
			return b.accessErr("publish", key, err)
		case errors.Is(err, rpctypes.ErrNoLeader):
			return pathErr("publish", key, fmt.Errorf("%w: not published (refused before it was proposed, for want of a leader, for %v): %s", ErrUnavailable, b.timeout, b.diagnose()))
		}
		if err == nil {
			if resp.Succeeded {
				return nil
			}
			if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
				// A definite answer: this transaction did not apply,
				// and the key is another's.
				return pathErr("publish", key, storage.ErrRevisionExists)
			}
			if g != nil && g.moved(resp) {
				return pathErr("publish", key, fmt.Errorf("%w: %s is no longer the revision read", storage.ErrHeadMoved, g.key))
			}
			if now := epochOf((*clientv3.GetResponse)(resp.Responses[len(resp.Responses)-1].GetResponseRange())); now != fence.epoch {
				// A prune moved the epoch (or this backend never read
				// it): the transaction failed on it and nothing else, so
				// it is sent again under the epoch its Else read, without
				// using up an attempt — it is neither a lost race nor a
				// lost reply.
				if b.staging {
					// Unstage moves the epoch: a copy still writing
					// learns here that its root was removed, and stops.
					// It does not learn the moved epoch, so that every
					// later write of it comes here again.
					if err := b.checkMark(ctx); err != nil {
						return err
					}
				}
				b.learnEpoch(now, resp.Header.Revision)
				if moves++; moves < maxEpochMoves {
					continue
				}
				return pathErr("publish", key, fmt.Errorf("not published: the fence epoch %s moved %d times while this revision was being published (a prune collecting fences in a loop?); nothing was written; try again", b.epochKey(), moves))
			}
			// Fenced off by a concurrent resolve of this backend: the
			// fence was replaced; try again under the new one.
			attempt++
			continue
		}
		attempt++
		cause = err
		published, err := b.resolveLost(ctx, key, data, fence, err)
		if err != nil || published {
			return err
		}
		// Not published, and never will be by that request: try again.
	}
	return pathErr("publish", key, fmt.Errorf("%w (last transaction error: %v)", ErrNotPublished, cause))
}

// createTxn is the publishing transaction: create key with data if it
// was never created, the fence was never put and the epoch is the fence's.
// Its Else reads the key, the guarded revision (when g is set) and, last,
// the epoch, so that a failure says which compare failed.
func (b *Backend) createTxn(ctx context.Context, key string, data []byte, fence fenceID, g *prevGuard) (*clientv3.TxnResponse, error) {
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(b.fenceKey(fence)), "=", 0),
		clientv3.Compare(clientv3.ModRevision(b.epochKey()), "=", fence.epoch),
	}
	orElse := []clientv3.Op{clientv3.OpGet(key, clientv3.WithKeysOnly())}
	if g != nil {
		cmps = append(cmps, clientv3.Compare(clientv3.Value(g.key), "=", string(g.value)))
		orElse = append(orElse, clientv3.OpGet(g.key))
	}
	orElse = append(orElse, clientv3.OpGet(b.epochKey(), clientv3.WithKeysOnly()))
	return b.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(key, string(data))).Else(orElse...).Commit()
}

// resolveLost decides a transaction on key whose reply was lost (cause),
// sent under fence: true when it was published, false when it was not and
// cannot be any more, or an error (ErrRevisionExists for a lost race, an
// *IndeterminateError when the cluster cannot be read back in time).
func (b *Backend) resolveLost(ctx context.Context, key string, data []byte, fence fenceID, cause error) (bool, error) {
	deadline := time.Now().Add(b.resolve)
	last := cause
	fenced := false
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		if time.Now().After(deadline) {
			return false, &IndeterminateError{Key: key, Cause: cause, Last: last}
		}
		if err := ctx.Err(); err != nil {
			// Cancelled: undecided, as after a crash; the next read of
			// the key decides. The fence, if put, stays put.
			return false, &IndeterminateError{Key: key, Cause: cause, Last: err}
		}
		rctx, cancel := b.ctx(ctx)
		resp, err := b.cli.Get(rctx, key)
		cancel()
		switch {
		case err != nil && isAccess(err):
			// Reading back is refused, and will be until an operator
			// changes the roles: undecided, said now.
			return false, &IndeterminateError{Key: key, Cause: cause, Last: b.accessErr("read", key, err)}
		case err != nil && ctx.Err() == nil && isUnavailable(err):
			// The read was tried for a whole request timeout. A cluster
			// none of whose members knows a leader cannot decide it
			// before an operator restores a quorum: undecided, said now
			// rather than at the resolve deadline. One with a leader
			// (an election just ended, a slow member) is read again.
			if lost, words := b.quorumLost(); lost {
				return false, &IndeterminateError{Key: key, Cause: cause, Last: fmt.Errorf("%w: %s (%v)", ErrUnavailable, words, err)}
			}
			last = err
		case err != nil:
			last = err
		case len(resp.Kvs) > 0 && bytes.Equal(resp.Kvs[0].Value, data):
			return true, nil
		case len(resp.Kvs) > 0:
			return false, pathErr("publish", key, fmt.Errorf("%w (decided by reading back after the transaction's reply was lost: %v)", storage.ErrRevisionExists, cause))
		case fenced:
			return false, nil
		default:
			rctx, cancel := b.ctx(ctx)
			_, err := b.cli.Put(rctx, b.fenceKey(fence), "")
			cancel()
			if err == nil {
				fenced = true
				b.rotateFence(fence)
				continue // read once more, now final
			}
			if isNoSpace(err) || isAccess(err) {
				// The fence cannot be put (a full cluster refuses every
				// write; a role may lack the fences' keys), so absent
				// cannot be made final by it: undecided until an
				// operator acts — unless the fence is there after all
				// (a NOSPACE put may still have been applied: see
				// decideRefusedForSpace), or the epoch has moved past
				// the request's, which stops it as surely.
				if fr, ferr := b.fencedOff(ctx, fence); ferr == nil && fr {
					fenced = true
					b.rotateFence(fence)
					continue
				}
				return false, &IndeterminateError{Key: key, Cause: cause, Last: b.reqErr(ctx, "put fence", b.fenceKey(fence), err)}
			}
			last = err
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
	}
}

// fencedOff reports whether a request sent under fence can no longer
// apply: its fence key exists, or the epoch is no longer its epoch.
func (b *Backend) fencedOff(ctx context.Context, fence fenceID) (bool, error) {
	rctx, cancel := b.ctx(ctx)
	defer cancel()
	resp, err := b.cli.Txn(rctx).Then(clientv3.OpGet(b.fenceKey(fence), clientv3.WithKeysOnly()), clientv3.OpGet(b.epochKey(), clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return false, err
	}
	put := len(resp.Responses[0].GetResponseRange().Kvs) > 0
	epoch := epochOf((*clientv3.GetResponse)(resp.Responses[1].GetResponseRange()))
	b.learnEpoch(epoch, resp.Header.Revision)
	return put || epoch != fence.epoch, nil
}
